"""The hot path of ``POST /v1/estimates`` without the framework's per-request machinery.

Issue 16: an estimate's model takes about 40 µs of CPU, and FastAPI's request object,
routing, dependency injection and exception layers took several times that. This pure ASGI
layer sits inside every service middleware (body limits, load shedding, the request context
with its log line, metrics and security headers all still apply) and answers a *valid*
estimate request itself, with the same bytes the route answers (``_estimate_response``, the
same function). It parses the body the way FastAPI does (``json.loads``, then the request
model's Python validation), so it accepts exactly what the route accepts.

Anything else goes to the application unchanged, with the body replayed: another path or
method, a body that is not JSON or does not validate (FastAPI then writes the documented 422
problem), "auto" fields (a search, which belongs in the worker pool), a stale accelerator
cache (a database read), an error in the model, and every request while tracing is on (the
FastAPI instrumentation makes the server span). The fast path therefore never writes an error
of its own; ``tests/api/test_fast_path.py`` holds its answers equal to the route's, byte for
byte, with the layer on and off.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.core.units import SECONDS_PER_DAY

PATH = "/v1/estimates"
JSON_TYPES = (b"application/json", b"application/json; charset=utf-8")


class FastEstimates:
    """Answers valid ``POST /v1/estimates`` requests (module docstring)."""

    def __init__(self, app: ASGIApp, *, state: Any, enabled: bool = True) -> None:
        self.app = app
        self.state = state
        """The FastAPI app's ``state``: its settings and accelerator cache."""
        self.enabled = enabled
        self._route: Any = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not (self.enabled and scope["type"] == "http" and scope["path"] == PATH
                and scope["method"] == "POST"
                and getattr(self.state, "tracer_provider", None) is None
                and _content_type(scope) in JSON_TYPES):
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
        body = self._answer(b"".join(chunks)) if messages[-1]["type"] == "http.request" else None
        if body is None:
            await self.app(scope, _replay(messages, receive), send)
            return
        scope["route"] = self._route  # the route template for the metrics and the access log
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(body)).encode()),
                                (b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})

    def _answer(self, raw: bytes) -> bytes | None:
        """The route's answer to a valid request; None for everything the route must see."""
        # Imported here: the routes import the app's dependencies, which import this module's
        # importer; the cost is paid once.
        from service.api.routes.estimates import _estimate_response
        from service.api.schemas.estimate import EstimateRequest

        accelerators = self.state.accelerators
        try:
            request = EstimateRequest.model_validate(json.loads(raw))
            if request.parallelism.auto_dimensions() or not accelerators.fresh():
                return None
            response = _estimate_response(
                request, accelerators,
                self.state.settings.max_reasonable_train_days * SECONDS_PER_DAY)
        except Exception:  # the route answers every failure, as documented
            return None
        if self._route is None:
            self._route = _RouteName(PATH)
        return bytes(response.body)


class _RouteName:
    """What the request context reads from ``scope["route"]``: the route template."""

    __slots__ = ("path",)

    def __init__(self, path: str) -> None:
        self.path = path


def _content_type(scope: Scope) -> bytes:
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            return bytes(value).lower()
    return b""


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """``receive`` that gives back the messages already read, then the real ones."""
    pending = list(messages)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay
