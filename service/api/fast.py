"""Hot paths without the framework's per-request machinery (issue 16).

An estimate's model takes about 40 µs of CPU and a cached offers page none, while FastAPI's
request object, routing, dependency injection and exception layers took several times that.
This pure ASGI layer sits inside every service middleware (body limits, load shedding, the
request context with its log line, metrics and security headers all still apply) and answers
two requests itself, with the very bytes the routes answer:

- a *valid* ``POST /v1/estimates``: the body is parsed the way FastAPI does (``json.loads``,
  then the request model's Python validation), so it accepts exactly what the route accepts,
  and answered by the route's own ``_estimate_response``;
- ``GET /v1/offers`` whose page is already in the page cache, whose caller is already known
  (no key, on an open read; or a key held in the state cache) and whose catalogue version is
  held: the route's cache key, from query parameters checked against the route's own rules.

Anything else goes to the application unchanged, with the body replayed: another path or
method, a body that is not JSON or does not validate, a query the rules above do not accept
as written (FastAPI then writes the documented 4xx problem), "auto" fields (a search, which
belongs in the worker pool), any cache miss (a database read, in the pool), an error in the
model, any dependency override (tests, ``cq --local``), and every request while tracing is
on (the FastAPI instrumentation makes the server span). The fast path therefore never writes
an error of its own; ``tests/api/test_fast_path.py`` holds its answers equal to the routes',
byte for byte, with the layer on and off.

An estimate is a pure function of the body, the accelerator specs and the wall-clock horizon
setting, so the answers to the last valid bodies are kept by their exact bytes
(``EstimateMemo``, decision 148): a body sent again (a portal reloading a page, a procurement
check run each morning, a load test) is answered without being parsed, validated, modelled or
serialised again. A body that differs by one byte is a new body.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any
from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.limits import JSON_BODY_KEY
from service.api.pagination import decode_token
from service.api.routes.estimates import _estimate_response
from service.api.schemas.estimate import EstimateRequest
from service.catalog.keys import grants, key_digest
from service.catalog.offers import Term
from service.core.units import SECONDS_PER_DAY

ESTIMATES = "/v1/estimates"
OFFERS = "/v1/offers"
JSON_TYPES = (b"application/json", b"application/json; charset=utf-8")
SLUG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""``Slug`` of routes/prices.py: the pattern, at most 64 characters."""
VERSION = re.compile(r"cv_\d{6}")
PAGE_SIZE = re.compile(r"[1-9]\d{0,2}")
OFFER_PARAMS = frozenset({"accelerator", "provider", "region", "term", "version", "page_size",
                          "page_token"})
PAGE_TOKEN_MAX = 256


class _RouteName:
    """What the request context reads from ``scope["route"]``: the route template."""

    __slots__ = ("path",)

    def __init__(self, path: str) -> None:
        self.path = path


ROUTES = {ESTIMATES: _RouteName(ESTIMATES), OFFERS: _RouteName(OFFERS)}


class EstimateMemo:
    """The answers to the most recent valid ``POST /v1/estimates`` bodies, keyed by the
    body's exact bytes (module docstring; decision 148).

    An entry holds the accelerator cache's ``generation`` and the horizon (seconds) it was
    computed with, and is used only while both are unchanged: the estimate reads nothing else
    (the core reads no clock, no environment and no database). Bounded in entries and in
    bytes (keys plus answers); the oldest entry goes first. Bodies longer than
    ``max_body_bytes`` are not kept. Only bodies the fast path answered are kept, so a body
    in the memo has passed the body-limit layer's duplicate-key check: that layer asks
    ``known`` and skips parsing such a body again. Runs on the event loop only."""

    __slots__ = (
        "_bytes",
        "_entries",
        "hits",
        "max_body_bytes",
        "max_bytes",
        "max_entries",
        "misses",
    )

    def __init__(self, max_entries: int = 4096, max_bytes: int = 32 * 1024 * 1024,
                 max_body_bytes: int = 16 * 1024) -> None:
        self._entries: dict[bytes, tuple[int, float, bytes]] = {}
        self._bytes = 0
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.max_body_bytes = max_body_bytes
        self.hits = 0
        self.misses = 0
        """Counts read by the cache metrics (``computequote_cache_hits_total``)."""

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def known(self, body: bytes) -> bool:
        """Whether ``body``, byte for byte, was answered before (and so repeats no key)."""
        return body in self._entries

    def get(self, body: bytes, generation: int, horizon_s: float) -> bytes | None:
        entry = self._entries.get(body)
        if entry is None or entry[0] != generation or entry[1] != horizon_s:
            self.misses += 1
            return None
        self.hits += 1
        return entry[2]

    def put(self, body: bytes, generation: int, horizon_s: float, answer: bytes) -> None:
        if self.max_entries <= 0 or len(body) > self.max_body_bytes:
            return
        size = len(body) + len(answer)
        if size > self.max_bytes:
            return
        entries = self._entries
        old = entries.pop(body, None)
        if old is not None:
            self._bytes -= len(body) + len(old[2])
        while entries and (len(entries) >= self.max_entries
                           or self._bytes + size > self.max_bytes):
            oldest = next(iter(entries))
            self._bytes -= len(oldest) + len(entries.pop(oldest)[2])
        entries[body] = (generation, horizon_s, answer)
        self._bytes += size


class FastPaths:
    """Answers valid estimates and cached offers pages (module docstring)."""

    def __init__(self, app: ASGIApp, *, fastapi_app: Any, enabled: bool = True,
                 memo: EstimateMemo | None = None) -> None:
        self.app = app
        self.fastapi = fastapi_app
        """The FastAPI application: its ``state`` (settings, caches) and its overrides."""
        self.enabled = enabled
        self.memo = memo if memo is not None else EstimateMemo(max_entries=0)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not (self.enabled and scope["type"] == "http"
                and scope["path"] in ROUTES and not self.fastapi.dependency_overrides
                and getattr(self.fastapi.state, "tracer_provider", None) is None):
            await self.app(scope, receive, send)
            return
        path, method = scope["path"], scope["method"]
        if path == OFFERS and method == "GET":
            page = self._offers(scope)
            if page is None:
                await self.app(scope, receive, send)
            else:
                await _answer(scope, send, path, page)
            return
        if not (path == ESTIMATES and method == "POST" and _header(scope, b"content-type")
                in JSON_TYPES):
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        chunks: list[bytes] = []
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = (self._estimate(b"".join(chunks), scope.get("state", {}).get(JSON_BODY_KEY))
                if messages[-1]["type"] == "http.request" else None)
        if body is None:
            await self.app(scope, _replay(messages, receive), send)
        else:
            await _answer(scope, send, path, body)

    def _estimate(self, raw: bytes, parsed: Any = None) -> bytes | None:
        """The route's answer to a valid request; None for everything the route must see.
        ``parsed``: the body as the body-limit layer already parsed it (``json.loads``'s
        object), else it is parsed here."""
        state = self.fastapi.state
        accelerators = state.accelerators
        if not accelerators.fresh():
            return None  # the route reads the catalogue, in the pool
        generation = accelerators.generation
        horizon_s = state.settings.max_reasonable_train_days * SECONDS_PER_DAY
        answer = self.memo.get(raw, generation, horizon_s)
        if answer is not None:
            return answer
        try:
            request = EstimateRequest.model_validate(json.loads(raw) if parsed is None
                                                     else parsed)
            if request.parallelism.auto_dimensions() or request.calibration_id is not None:
                return None  # a search, or a stored calibration and the caller's key
            response = _estimate_response(request, accelerators, horizon_s)
        except Exception:  # the route answers every failure, as documented
            return None
        answer = bytes(response.body)
        if accelerators.generation == generation:
            self.memo.put(raw, generation, horizon_s, answer)
        return answer

    def _offers(self, scope: Scope) -> bytes | None:
        """The cached page ``list_offers`` would answer, or None (module docstring)."""
        state = self.fastapi.state
        try:
            pairs = parse_qsl(scope.get("query_string", b"").decode("latin-1"),
                              keep_blank_values=True)
        except ValueError:
            return None
        query = dict(pairs)
        if len(query) != len(pairs) or not set(query) <= OFFER_PARAMS:
            return None
        for name in ("accelerator", "provider", "region"):
            if name in query and not SLUG.fullmatch(query[name]):
                return None
        version = query.get("version")
        if version is not None and not VERSION.fullmatch(version):
            return None
        term = query.get("term")
        if term is not None and term not in Term._value2member_map_:
            return None
        size = query.get("page_size", "50")
        if not PAGE_SIZE.fullmatch(size) or int(size) > 200:
            return None
        token = query.get("page_token")
        if token is not None:
            if len(token) > PAGE_TOKEN_MAX:
                return None
            try:
                decoded = decode_token(token)
            except Exception:  # a 400 the route writes
                return None
            price, _sep, offer_id = (decoded or "").partition(":")
            if not price.isdigit() or not offer_id:
                return None
        cache = state.state_cache
        settings = state.settings
        header = _header(scope, b"authorization")
        if header:
            scheme, _, key = header.decode("latin-1").partition(" ")
            key = key.strip()
            if scheme.lower() != "bearer" or not key:
                return None
            pepper = settings.api_key_pepper.get_secret_value()
            found, principal, _ = cache.get(("api-key", key_digest(key, pepper)))
            if not found or principal is None:
                return None
            if settings.require_read_auth and not grants(principal.scopes, "catalog:read"):
                return None
        elif settings.require_read_auth:
            return None
        found, version_id, _ = cache.get(("catalog-version", version))
        if not found:
            return None
        today = dt.datetime.now(dt.UTC).date()
        key_ = (version_id, query.get("accelerator"), query.get("provider"),
                query.get("region"), Term(term) if term is not None else None, int(size),
                token, today)
        page: bytes | None = state.offer_pages.get(key_)
        return page


async def _answer(scope: Scope, send: Send, path: str, body: bytes) -> None:
    scope["route"] = ROUTES[path]  # the route template for the metrics and the access log
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(len(body)).encode()),
                            (b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


def _header(scope: Scope, name: bytes) -> bytes:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value).lower() if name == b"content-type" else bytes(value)
    return b""


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """``receive`` that gives back the messages already read, then the real ones."""
    pending = list(messages)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay
