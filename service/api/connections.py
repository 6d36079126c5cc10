"""The server's own bounds on connections, below the application (issue 36, medium 3).

uvicorn reads a request's head (the request line and headers) before the application runs,
and bounds neither how long it may take nor how many connections one address may hold: 3,000
connections that trickled headers were held for 25 s, bounded only by the file-descriptor
limit. These protocol classes are uvicorn's own (httptools, or h11) with two bounds added:

- **head time** (``CQ_HEAD_TIMEOUT_S``): a request head must be complete within this many
  seconds of the connection opening, or of the first byte of the next request on a
  kept-alive connection (an idle kept-alive connection is uvicorn's ``--timeout-keep-alive``
  to close). Past it the answer is a 408 problem and the connection closes; a connection
  that has sent nothing at all is closed without an answer. The body is bounded by the
  application once the head is in (``CQ_BODY_TIMEOUT_S``, ``service/api/limits.py``);
- **connections per client address** (``CQ_MAX_CONNECTIONS_PER_CLIENT``): counted by the
  socket's peer address; one connection more is answered 503 with ``Retry-After`` at once
  and closed. Behind a proxy every connection comes from the proxy, so the proxy must hold
  the per-client limit (``deploy/README.md``).

Run the server with ``uvicorn --http service.api.connections:HttpProtocol`` (``make run``
and the image do; ``tests/faults/test_slow_headers.py`` checks both). The settings are read
from the environment once, at the first connection. Without ``--http`` uvicorn's own
protocol runs, unbounded.
"""

from __future__ import annotations

import asyncio
import functools
import json
import weakref
from collections import Counter
from collections.abc import Callable
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from service.api.problems import PROBLEM_MEDIA_TYPE, TYPE_PREFIX
from service.settings import Settings

RETRY_AFTER_S = 1

_clients: weakref.WeakKeyDictionary[ServerState, Counter[str]] = weakref.WeakKeyDictionary()
"""Open connections per peer address, per server (a test process runs several servers)."""


@functools.cache
def _environment_settings() -> Settings:
    return Settings()


def _problem(status: int, reason: str, kind: str, title: str, detail: str,
             headers: tuple[tuple[str, str], ...] = ()) -> bytes:
    """A whole HTTP/1.1 answer with a problem+json body, written straight to the socket."""
    body = json.dumps({"type": TYPE_PREFIX + kind, "title": title, "status": status,
                       "detail": detail}).encode()
    lines = [f"HTTP/1.1 {status} {reason}", f"content-type: {PROBLEM_MEDIA_TYPE}",
             f"content-length: {len(body)}", "x-content-type-options: nosniff",
             "connection: close", *(f"{name}: {value}" for name, value in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class ConnectionGuard:
    """One connection's share of the bounds: its place in the per-address count and the
    timer on the head it is waiting for."""

    def __init__(self, settings: Settings, loop: asyncio.AbstractEventLoop,
                 server_state: ServerState, busy: Callable[[], bool]) -> None:
        self.head_timeout_s = settings.head_timeout_s
        self.max_per_client = settings.max_connections_per_client
        self.loop = loop
        self.counts = _clients.setdefault(server_state, Counter())
        self.busy = busy
        self.transport: asyncio.Transport | None = None
        self.address: str | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.head_started = False

    def opened(self, transport: asyncio.Transport, client: tuple[str, int] | None) -> bool:
        """Count the connection and start its first head's timer; False (answered 503 and
        closing) when its address already holds ``max_per_client`` connections."""
        self.transport = transport
        if client is not None and self.max_per_client > 0:
            address = client[0]
            if self.counts[address] >= self.max_per_client:
                transport.write(_problem(
                    503, "Service Unavailable", "too-many-connections",
                    "Too many connections",
                    f"this address already holds {self.max_per_client} open connections "
                    f"(CQ_MAX_CONNECTIONS_PER_CLIENT); retry after {RETRY_AFTER_S} s",
                    (("retry-after", str(RETRY_AFTER_S)),)))
                transport.close()
                return False
            self.counts[address] += 1
            self.address = address
        self.arm()
        return True

    def arm(self) -> None:
        """Start the head timer unless it runs already (a head's time counts from the
        connection opening, or from its first byte)."""
        if self.timer is None:
            self.timer = self.loop.call_later(self.head_timeout_s, self._expire)

    def disarm(self) -> None:
        self.head_started = False
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def closed(self) -> None:
        self.disarm()
        if self.address is not None:
            self.counts[self.address] -= 1
            if self.counts[self.address] <= 0:
                del self.counts[self.address]
            self.address = None

    def _expire(self) -> None:
        self.timer = None
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if self.busy():
            # A pipelined head arriving while the previous answer is being made: wait for
            # that answer, then give the head another period.
            self.arm()
            return
        if self.head_started:
            transport.write(_problem(
                408, "Request Timeout", "request-timeout", "Request timeout",
                f"the request head did not arrive within {self.head_timeout_s:g} s "
                "(CQ_HEAD_TIMEOUT_S)"))
        transport.close()


class _Guarded:
    """What both protocol classes share: the settings they read."""

    settings: ClassVar[Settings | None] = None
    """The bounds' settings; None: from the environment (``Settings()``), once."""

    @classmethod
    def bound_settings(cls) -> Settings:
        return cls.settings if cls.settings is not None else _environment_settings()


def _busy(protocol: Any) -> Callable[[], bool]:
    def busy() -> bool:
        cycle = protocol.cycle
        return cycle is not None and not cycle.response_complete

    return busy


class GuardedH11Protocol(_Guarded, H11Protocol):
    """uvicorn's h11 protocol with the head-time and per-address bounds."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.guard = ConnectionGuard(self.bound_settings(), self.loop, self.server_state,
                                     _busy(self))

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.guard.opened(transport, self.client)

    def connection_lost(self, exc: Exception | None) -> None:
        self.guard.closed()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        waiting_for_head = self.conn.their_state is h11.IDLE
        if waiting_for_head and data:
            self.guard.head_started = True
            self.guard.arm()
        super().data_received(data)
        if waiting_for_head and self.conn.their_state is not h11.IDLE:
            self.guard.disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # A pipelined head already buffered but not yet complete is waited for from now.
        if self.conn.their_state is h11.IDLE and self.conn.trailing_data[0]:
            self.guard.head_started = True
            self.guard.arm()


try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # pragma: no cover - httptools is in the lock file
    HttpProtocol: type[asyncio.Protocol] = GuardedH11Protocol
else:
    class GuardedHttpToolsProtocol(_Guarded, HttpToolsProtocol):
        """uvicorn's httptools protocol with the head-time and per-address bounds."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.guard = ConnectionGuard(self.bound_settings(), self.loop,
                                         self.server_state, _busy(self))

        def connection_made(  # type: ignore[override]
                self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            self.guard.opened(transport, self.client)

        def connection_lost(self, exc: Exception | None) -> None:
            self.guard.closed()
            super().connection_lost(exc)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self.guard.head_started = True
            self.guard.arm()

        def on_headers_complete(self) -> None:
            self.guard.disarm()
            super().on_headers_complete()

    HttpProtocol = GuardedHttpToolsProtocol

HTTP_PROTOCOL = "service.api.connections:HttpProtocol"
"""What ``uvicorn --http`` names: the httptools protocol when httptools is installed (as
uvicorn's ``auto`` picks), else the h11 one."""


def protocol_for(settings: Settings,
                 base: type[asyncio.Protocol] | None = None) -> type[asyncio.Protocol]:
    """The protocol class bounded by ``settings`` instead of the environment (tests, and a
    server built in process with ``uvicorn.Config(http=...)``)."""
    chosen = base or HttpProtocol
    return type(chosen.__name__, (chosen,), {"settings": settings})
