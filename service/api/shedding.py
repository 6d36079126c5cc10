"""Load shedding: a replica that is already busy answers 503 at once instead of queueing.

Under overload a queue only makes every request slow; shedding the excess keeps the accepted
requests fast and tells clients (and the load balancer) to retry elsewhere. The limit counts
requests in flight in this process. Probes and metrics are never shed, so an orchestrator can
still see a busy replica is alive.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections import deque
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.problems import send_problem

EXEMPT_PATHS = frozenset({"/livez", "/readyz", "/metrics"})
RETRY_AFTER_S = 1
GRACE_S = 0.02

_holding = contextvars.ContextVar("cq_holding_slot", default=False)
"""True inside a request that holds a slot. The portal calls the API in process, in the same
task (httpx's ASGITransport), so its inner request sees this and does not take a second slot
(issue 14: each portal request held two). A client cannot set it: it lives in the task."""


class LoadSheddingMiddleware:
    """Pure ASGI: at most ``max_in_flight`` requests run; the rest get a 503 problem."""

    def __init__(self, app: ASGIApp, *, max_in_flight: int,
                 on_shed: Callable[[], object] | None = None) -> None:
        self.app = app
        self.max_in_flight = max_in_flight
        self.in_flight = 0
        self.on_shed = on_shed
        self._waiters: deque[asyncio.Future[None]] = deque()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or scope.get("path", "") in EXEMPT_PATHS
                or _holding.get()):
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.max_in_flight and not await self._slot_frees():
            if self.on_shed is not None:
                self.on_shed()
            await self._reject(scope, send)
            return
        self.in_flight += 1  # one event loop per process: no lock needed
        done = False

        def finish() -> None:
            nonlocal done
            if done:
                return
            done = True
            self.in_flight -= 1
            while self._waiters:  # hand the slot to the oldest waiter still waiting
                waiter = self._waiters.popleft()
                if not waiter.done():
                    waiter.set_result(None)
                    break

        async def counted_send(message: Message) -> None:
            await send(message)
            # The slot frees with the last byte of the answer, not when clean-up after it
            # (closing the session in the thread pool, the log line) is done: otherwise N
            # clients could hold up to 2N slots on a busy replica.
            if message["type"] == "http.response.body" and not message.get("more_body"):
                finish()

        token = _holding.set(True)
        try:
            await self.app(scope, receive, counted_send)
        finally:
            _holding.reset(token)
            finish()

    async def _slot_frees(self) -> bool:
        """Waits up to GRACE_S for a slot: a client's next request can arrive a moment
        before the event loop has run the end of its previous one, so N clients would now
        and then be N + 1 requests. Waiters are woken one at a time, oldest first."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + GRACE_S
        while self.in_flight >= self.max_in_flight:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter, remaining)
            except TimeoutError:
                return False
        return True

    async def _reject(self, scope: Scope, send: Send) -> None:
        # Shed before RequestContextMiddleware runs, so there is no request id to add.
        await send_problem(
            scope, send, status=503, kind="overloaded", title="Service overloaded",
            detail=f"this replica already has {self.max_in_flight} requests in flight "
                   f"(CQ_MAX_IN_FLIGHT); retry after {RETRY_AFTER_S} s",
            headers=[(b"retry-after", str(RETRY_AFTER_S).encode())])
