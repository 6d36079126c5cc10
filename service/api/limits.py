"""Request body limits, enforced before anything else sees the request (pure ASGI middleware,
the outermost layer).

- Size: per path (catalogue imports get a larger limit than compute requests). Bodies with a
  Content-Length over the limit are refused at once; chunked bodies are counted as they
  stream and refused as soon as they pass it. Either way the answer is a 413 problem.
- Time: the whole body must arrive within ``body_timeout_s`` or the answer is a 408 problem
  and the connection closes. The body is read here, before the load shedder, so a client
  trickling a body holds no in-flight slot (issue 14: 32 clients sending 1 byte/s took every
  slot of a replica). The head is not bounded here (uvicorn reads it before the app runs):
  the server protocol bounds it (``CQ_HEAD_TIMEOUT_S``, service/api/connections.py).
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.problems import send_problem
from service.api.work import CLIENT_GONE_KEY, CLIENT_WATCH_KEY


class _DuplicateKeyError(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen = dict(pairs)
    if len(seen) != len(pairs):
        raise _DuplicateKeyError
    return seen


_DUPLICATE_CHECKER = json.JSONDecoder(object_pairs_hook=_no_duplicates)
"""Built once: ``json.loads`` with a hook builds a new decoder and scanner for every body,
which cost more than the parse itself (issue 38)."""


def _repeats_a_key(scope: Scope, body: bytes) -> bool:
    """Whether a JSON body repeats a key within one object. RFC 8259 leaves such bodies'
    meaning to the parser (Python keeps the last value): refusing them is the only answer no
    client can misread. Bodies that are not JSON are left to the route."""
    if not body:
        return False
    for name, value in scope.get("headers", []):
        if name == b"content-type":
            media = value.decode("latin-1").split(";")[0].strip().lower()
            if media != "application/json" and not media.endswith("+json"):
                return False
            break
    else:
        return False
    try:
        # What json.loads does with bytes: the encoding from the first bytes (RFC 8259).
        _DUPLICATE_CHECKER.decode(body.decode(json.detect_encoding(body), "surrogatepass"))
    except _DuplicateKeyError:
        return True
    except (ValueError, RecursionError):
        return False  # malformed: the route's parser names the problem
    return False


class BodySizeLimitMiddleware:
    def __init__(
        self, app: ASGIApp, *, max_body_bytes: int, body_timeout_s: float,
        path_limits: dict[str, int] | None = None,
    ) -> None:
        """``path_limits``: a larger limit for an exact path, or for every path under a key
        that ends with ``/``."""
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.path_limits = {k: v for k, v in (path_limits or {}).items()
                            if not k.endswith("/")}
        self.prefix_limits = [(k, v) for k, v in (path_limits or {}).items() if k.endswith("/")]
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        limit = self.path_limits.get(path) or next(
            (v for k, v in self.prefix_limits if path.startswith(k)), self.max_body_bytes)
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared > limit:
                    await self._reject(scope, send, limit)
                    return
        await self._buffered(scope, receive, send, limit)

    async def _buffered(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        """Read the whole body within the time limit, then run the app on it."""
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.body_timeout_s):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return
                    body = message.get("body", b"")
                    size += len(body)
                    if size > limit:
                        await self._reject(scope, send, limit)
                        return
                    chunks.append(body)
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            await send_problem(
                scope, send, status=408, kind="request-timeout", title="Request timeout",
                detail=f"the request body did not arrive within {self.body_timeout_s:g} s "
                       "(CQ_BODY_TIMEOUT_S)", headers=[(b"connection", b"close")])
            return
        body = b"".join(chunks)
        if _repeats_a_key(scope, body):
            await send_problem(
                scope, send, status=422, kind="validation-error",
                title="Request validation failed",
                detail="body: a key appears twice in one object (RFC 8259 leaves its "
                       "meaning open, so it is refused)",
                errors=[{"field": "body", "message": "a key appears twice in one object",
                         "code": "duplicate_key"}])
            return
        # With the body read, the next message from the server is the disconnect: watch for
        # it, so that work for a client that has gone can stop (a search polls the event in
        # CLIENT_GONE_KEY from its thread; issue 14). The watcher and its events are made
        # only when something asks (the client_gone dependency, or the app waiting for the
        # disconnect): a task per request cost every estimate (issue 16), and two events per
        # request were a tenth of this layer's cost (issue 38).
        state = scope.setdefault("state", {})
        watcher: asyncio.Task[None] | None = None
        disconnected: asyncio.Event | None = None

        def start_watching() -> asyncio.Event:
            nonlocal watcher, disconnected
            if disconnected is None:
                gone = state[CLIENT_GONE_KEY] = threading.Event()
                seen = disconnected = asyncio.Event()

                async def watch() -> None:
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    gone.set()
                    seen.set()

                watcher = asyncio.get_running_loop().create_task(watch())
            return disconnected

        state[CLIENT_WATCH_KEY] = start_watching
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            await start_watching().wait()
            return {"type": "http.disconnect"}

        try:
            await self.app(scope, replay, send)
        finally:
            if watcher is not None:
                watcher.cancel()

    @staticmethod
    async def _reject(scope: Scope, send: Send, limit: int) -> None:
        await send_problem(scope, send, status=413, kind="payload-too-large",
                           title="Request body too large",
                           detail=f"request body exceeds the limit of {limit} bytes",
                           headers=[(b"connection", b"close")], limit_bytes=limit)
