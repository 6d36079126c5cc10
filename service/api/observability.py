"""Request ids, one structured JSON log line per request, and Prometheus metrics.

- ``X-Request-ID`` is accepted when it is well formed (1-64 of ``[A-Za-z0-9._-]``), otherwise
  a new id is made; it is echoed in the response header, in every problem body and in the log
  line. Request bodies, headers and query strings are never logged (they may hold keys).
- ``GET /metrics``: ``http_requests_total`` and ``http_request_duration_seconds`` by method,
  route template and status; ``quotes_created_total``; ``budget_rejections_total``;
  ``optimiser_candidates_evaluated_total``. Each app has its own registry.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import re
import sys
import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
access_logger = logging.getLogger("service.access")


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("http_requests_total", "HTTP requests.",
                                ["method", "route", "status"], registry=self.registry)
        self.latency = Histogram(
            "http_request_duration_seconds", "HTTP request latency.", ["method", "route"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry)
        self.quotes_created = Counter("quotes_created_total", "Quotes stored (not replays).",
                                      registry=self.registry)
        self.budget_rejections = Counter("budget_rejections_total",
                                         "Stored quotes whose verdict is reject.",
                                         registry=self.registry)
        self.shed = Counter("requests_shed_total",
                            "Requests answered 503 at once because the replica was full.",
                            registry=self.registry)
        self.candidates = Counter("optimiser_candidates_evaluated_total",
                                  "Parallel layouts the optimiser evaluated.",
                                  registry=self.registry)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and the record's extras."""

    FIELDS = ("request_id", "method", "route", "path", "status", "duration_ms", "client")

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
                  + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(), "logger": record.name,
            "message": record.getMessage(),
        }
        for name in self.FIELDS:
            if hasattr(record, name):
                entry[name] = getattr(record, name)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(level: str) -> None:
    """JSON lines on stdout for the ``service`` loggers (idempotent)."""
    root = logging.getLogger("service")
    root.setLevel(level.upper())
    if not any(getattr(h, "_computequote", False) for h in root.handlers):
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(JsonFormatter())
        handler._computequote = True  # type: ignore[attr-defined]
        root.addHandler(handler)
        root.propagate = False


PAGE_HEADERS = (
    (b"content-security-policy",
     b"default-src 'self'; frame-ancestors 'none'; form-action 'self'"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
)
"""Extra headers on the portal's pages (OWASP Secure Headers): they hold quotes and keys are
typed into them, so no framing, no referrer, no caching, and scripts only from this origin."""


def security_headers(path: str, headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """``nosniff`` on every answer; the page headers on ``/ui``; no ``server`` header."""
    names = {name.lower() for name, _ in headers}
    out = [(n, v) for n, v in headers if n.lower() != b"server"]
    if b"x-content-type-options" not in names:
        out.append((b"x-content-type-options", b"nosniff"))
    if path == "/ui" or path.startswith("/ui/"):
        out.extend((n, v) for n, v in PAGE_HEADERS if n not in names or n == b"cache-control")
        out = [(n, v) for n, v in out if not (n.lower() == b"cache-control" and v != b"no-store")]
    return out


_ID_PREFIX = os.urandom(8).hex()
_id_counter = itertools.count(1)


def _new_request_id() -> str:
    """32 hex digits, like a UUID's: 64 random bits per process, then a counter. Unique
    across replicas without a system call per request (uuid4 read /dev/urandom each time,
    16 us). Request ids name requests in logs; they are not secrets."""
    return f"{_ID_PREFIX}{next(_id_counter):016x}"


WARM_UP_HEADER = "x-computequote-warm-up"
"""Requests the process sends itself at start-up carry its random token here: they are not
counted in the metrics nor logged (a client cannot know the token)."""


class RequestContextMiddleware:
    """Sets ``request.state.request_id``, echoes ``X-Request-ID``, adds the security headers,
    logs and measures."""

    def __init__(self, app: ASGIApp, *, metrics: Metrics, internal_token: str = "") -> None:
        self.app = app
        self.metrics = metrics
        self.internal = internal_token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", []))
        given = headers.get(b"x-request-id", b"").decode("latin-1")
        internal = bool(self.internal) and headers.get(WARM_UP_HEADER.encode()) == self.internal
        request_id = given if REQUEST_ID.match(given) else _new_request_id()
        scope.setdefault("state", {})["request_id"] = request_id
        started = time.perf_counter()
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = security_headers(scope.get("path", ""),
                                           list(message.get("headers", [])))
                headers.append((b"x-request-id", request_id.encode()))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            if not internal:
                self._record(scope, request_id, status, time.perf_counter() - started)

    def _record(self, scope: Scope, request_id: str, status: int, elapsed: float) -> None:
        """The request's metrics and its access-log line."""
        path = scope.get("path", "")
        route = getattr(scope.get("route"), "path", None) or (
            "/static" if path.startswith("/static/") else "unmatched")
        method = scope.get("method", "")
        self.metrics.requests.labels(method, route, str(status)).inc()
        self.metrics.latency.labels(method, route).observe(elapsed)
        client = scope.get("client")
        access_logger.info("request", extra={
            "request_id": request_id, "method": method, "route": route,
            "path": path, "status": status,
            "duration_ms": round(elapsed * 1000, 2),
            "client": client[0] if client else None,
        })
