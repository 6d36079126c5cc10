"""Request body size limit, enforced before the body is parsed (pure ASGI middleware).

The limit is per path (catalogue imports get a larger one than compute requests). Bodies with
a Content-Length over the limit are refused at once; chunked bodies are counted
as they stream and refused as soon as they pass it. Either way the answer is a 413 problem.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.problems import send_problem


class BodySizeLimitMiddleware:
    def __init__(
        self, app: ASGIApp, *, max_body_bytes: int, path_limits: dict[str, int] | None = None
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.path_limits = path_limits or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.path_limits.get(scope.get("path", ""), self.max_body_bytes)
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared > limit:
                    await self._reject(scope, send, limit)
                    return
        received = 0
        rejected = False

        async def limited_receive() -> Message:
            # Answer 413 ourselves, then tell the app the client went away: frameworks turn
            # exceptions raised while reading the body into their own 400s.
            nonlocal received, rejected
            if rejected:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    rejected = True
                    await self._reject(scope, send, limit)
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            if not rejected:
                await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except Exception:
            if not rejected:
                raise

    @staticmethod
    async def _reject(scope: Scope, send: Send, limit: int) -> None:
        await send_problem(scope, send, status=413, kind="payload-too-large",
                           title="Request body too large",
                           detail=f"request body exceeds the limit of {limit} bytes",
                           headers=[(b"connection", b"close")], limit_bytes=limit)
