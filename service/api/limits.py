"""Request body limits, enforced before anything else sees the request (pure ASGI middleware,
the outermost layer).

- Size: per path (catalogue imports get a larger limit than compute requests). Bodies with a
  Content-Length over the limit are refused at once; chunked bodies are counted as they
  stream and refused as soon as they pass it. Either way the answer is a 413 problem.
- Time: the whole body must arrive within ``body_timeout_s`` or the answer is a 408 problem
  and the connection closes. The body is read here, before the load shedder, so a client
  trickling a body holds no in-flight slot (issue 14: 32 clients sending 1 byte/s took every
  slot of a replica). Headers are not bounded here (uvicorn reads them before the app runs):
  the ingress must bound them (deploy/README.md).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.problems import send_problem


class _DuplicateKeyError(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _DuplicateKeyError(key)
        seen[key] = value
    return seen


def _duplicate_key(scope: Scope, body: bytes) -> str | None:
    """The first key a JSON body repeats within one object, or None. RFC 8259 leaves such
    bodies' meaning to the parser (Python keeps the last value): refusing them is the only
    answer no client can misread. Bodies that are not JSON are left to the route."""
    if not body:
        return None
    for name, value in scope.get("headers", []):
        if name == b"content-type":
            media = value.decode("latin-1").split(";")[0].strip().lower()
            if media != "application/json" and not media.endswith("+json"):
                return None
            break
    else:
        return None
    try:
        json.loads(body, object_pairs_hook=_no_duplicates)
    except _DuplicateKeyError as exc:
        return exc.key[:64]
    except (ValueError, RecursionError):
        return None  # malformed: the route's parser names the problem
    return None


class BodySizeLimitMiddleware:
    def __init__(
        self, app: ASGIApp, *, max_body_bytes: int, path_limits: dict[str, int] | None = None,
        body_timeout_s: float | None = None,
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.path_limits = path_limits or {}
        self.body_timeout_s = body_timeout_s

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
        if self.body_timeout_s is not None:
            await self._buffered(scope, receive, send, limit)
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
        duplicate = _duplicate_key(scope, body)
        if duplicate is not None:
            await send_problem(
                scope, send, status=422, kind="validation-error",
                title="Request validation failed",
                detail="body: a key appears twice in one object (RFC 8259 leaves its "
                       "meaning open, so it is refused)",
                errors=[{"field": "body", "message": "a key appears twice in one object",
                         "code": "duplicate_key"}])
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    @staticmethod
    async def _reject(scope: Scope, send: Send, limit: int) -> None:
        await send_problem(scope, send, status=413, kind="payload-too-large",
                           title="Request body too large",
                           detail=f"request body exceeds the limit of {limit} bytes",
                           headers=[(b"connection", b"close")], limit_bytes=limit)
