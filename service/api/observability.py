"""Request ids, JSON logs, Prometheus metrics, and the spans of our own operations.

- ``X-Request-ID`` is accepted when it is well formed (1-64 of ``[A-Za-z0-9._-]``), otherwise
  a new id is made; it is echoed in the response header, in every problem body and in the log
  line. Request bodies, headers and query strings are never logged (they may hold keys).
- Every log line of the process is one JSON object (``configure_logging``): ours on stdout
  (one ``request`` line per request), uvicorn's own and other libraries' on stderr. A line
  logged while a request is in flight carries its ``request_id``; while a span is recording
  (tracing on, ``service/api/tracing.py``), its ``trace_id`` and ``span_id``.
- ``GET /metrics``, one registry per app, named after Prometheus' conventions (the
  ``computequote_`` prefix, the base unit in the name, ``_total`` on counters):
  ``computequote_http_requests_total`` and ``computequote_http_request_duration_seconds`` by
  method, route template and status; ``computequote_quotes_created_total``;
  ``computequote_budget_rejections_total``; ``computequote_requests_shed_total``;
  ``computequote_optimiser_candidates_evaluated_total``;
  ``computequote_search_duration_seconds`` by purpose and outcome;
  ``computequote_quote_pricing_duration_seconds``; ``computequote_cache_hits_total`` and
  ``computequote_cache_misses_total`` by cache; and the client library's standard
  ``process_*``, ``python_gc_*`` and ``python_info`` (unprefixed, as every exporter names
  them, so stock dashboards work).
- ``span()``, ``timed_search()`` and ``timed_pricing()``: spans around the estimate, each plan
  search and quote pricing; with tracing off they cost one context-variable read.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import re
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import (
    GC_COLLECTOR,
    CollectorRegistry,
    Counter,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.core.errors import NoFeasiblePlanError

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

    from service.core.estimate import Estimate
    from service.core.quote import QuoteResult
    from service.core.search import SearchResult
    from service.core.specs import ClusterSpec, ModelSpec, ParallelismPlan

Attributes = dict[str, str | bool | int | float]

REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
access_logger = logging.getLogger("service.access")

PREFIX = "computequote_"
"""Every metric of the service's own (Prometheus: a single-word application prefix)."""

SEARCH_BUCKETS_S = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
"""From an inline ``"auto"`` search (about 1 ms) to a 405B sweep that runs to the 10 s default
deadline, with room for a raised ``CQ_SEARCH_DEADLINE_S`` (600 s at most)."""
PRICING_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
"""Pricing one quote: milliseconds from cached offers, longer on a first read of a version."""


class CountedCache(Protocol):
    """What the cache collector reads: running totals kept by the cache itself."""

    hits: int
    misses: int


class CacheCollector(Collector):
    """``computequote_cache_hits_total`` and ``_misses_total`` by cache, read from the
    caches' own counts at scrape time, so a lookup pays nothing for being counted."""

    def __init__(self, caches: Mapping[str, CountedCache]) -> None:
        self.caches = dict(caches)

    def collect(self) -> Iterator[Metric]:
        hits = CounterMetricFamily(f"{PREFIX}cache_hits",
                                   "Lookups answered from an in-process cache.", labels=["cache"])
        misses = CounterMetricFamily(f"{PREFIX}cache_misses",
                                     "Lookups an in-process cache could not answer (the value "
                                     "was read or built).", labels=["cache"])
        for name, cache in self.caches.items():
            hits.add_metric([name], cache.hits)
            misses.add_metric([name], cache.misses)
        yield hits
        yield misses


class Metrics:
    def __init__(self) -> None:
        # No ``*_created`` gauge beside every counter and histogram: in the text format they
        # double the series and say only when the process started (process-wide switch).
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry()
        # The standard collectors, on this app's registry (the default registry is the
        # process's; each app keeps its own so tests read their own counts).
        ProcessCollector(registry=self.registry)
        if GC_COLLECTOR is not None:  # None where the interpreter has no gc.get_stats
            GCCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self.requests = Counter(f"{PREFIX}http_requests_total", "HTTP requests.",
                                ["method", "route", "status"], registry=self.registry)
        self.latency = Histogram(
            f"{PREFIX}http_request_duration_seconds", "HTTP request latency.",
            ["method", "route"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry)
        self.quotes_created = Counter(f"{PREFIX}quotes_created_total",
                                      "Quotes stored (not replays).", registry=self.registry)
        self.budget_rejections = Counter(f"{PREFIX}budget_rejections_total",
                                         "Stored quotes whose verdict is reject.",
                                         registry=self.registry)
        self.shed = Counter(f"{PREFIX}requests_shed_total",
                            "Requests answered 503 at once because the replica was full.",
                            registry=self.registry)
        self.candidates = Counter(f"{PREFIX}optimiser_candidates_evaluated_total",
                                  "Parallel layouts the optimiser evaluated.",
                                  registry=self.registry)
        self.search_duration = Histogram(
            f"{PREFIX}search_duration_seconds",
            "Wall-clock time of one plan search, queueing for a worker included. purpose: "
            "plans (POST /v1/parallelism-plans), sizing (a quote's or budget plan's "
            "optimise workload, one search per cluster), auto (an estimate's \"auto\" "
            "fields); outcome: ok, no_plan (nothing fits), error.",
            ["purpose", "outcome"], buckets=SEARCH_BUCKETS_S, registry=self.registry)
        self.pricing_duration = Histogram(
            f"{PREFIX}quote_pricing_duration_seconds",
            "Wall-clock time of pricing one quote or budget plan: load the offers, time the "
            "jobs on each fabric, price every line and judge it (sizing searches excluded).",
            buckets=PRICING_BUCKETS_S, registry=self.registry)

    def watch_caches(self, caches: Mapping[str, CountedCache]) -> None:
        """Expose the hit and miss counts of ``caches`` (name -> cache)."""
        self.registry.register(CacheCollector(caches))


@dataclass(slots=True)
class RequestContext:
    """What code deep in a request needs of the edge without being handed it. (Not frozen: a
    frozen dataclass's constructor costs about 2 us, per request.)"""

    request_id: str
    metrics: Metrics | None
    """None for the app's own warm-up requests: they are not counted."""
    tracer: Tracer | None
    """None while tracing is off."""
    trace_ids: tuple[str, str] | None = None
    """The server span's (trace id, span id), for log lines written after it has ended."""


_request: ContextVar[RequestContext | None] = ContextVar("computequote_request", default=None)
_NO_SPAN: AbstractContextManager[None] = contextlib.nullcontext()


def current_request() -> RequestContext | None:
    return _request.get()


def span(name: str) -> AbstractContextManager[Span | None]:
    """``with span("computequote.x") as current:`` makes a span the current one, a child of the
    request's, while tracing is on; off, ``current`` is None and nothing is allocated. Set
    attributes only ``if current is not None`` so they are not even computed when off."""
    context = _request.get()
    if context is None or context.tracer is None:
        return _NO_SPAN
    return context.tracer.start_as_current_span(name)


@contextmanager
def timed_search(purpose: str) -> Iterator[Span | None]:
    """A ``computequote.search`` span around one plan search, and its duration in
    ``computequote_search_duration_seconds`` (purpose: plans, sizing or auto)."""
    context = _request.get()
    started = time.perf_counter()
    outcome = "error"
    with span("computequote.search") as current:
        if current is not None:
            current.set_attribute("computequote.search.purpose", purpose)
        try:
            yield current
            outcome = "ok"
        except NoFeasiblePlanError:
            outcome = "no_plan"
            raise
        finally:
            if context is not None and context.metrics is not None:
                context.metrics.search_duration.labels(purpose, outcome).observe(
                    time.perf_counter() - started)


@contextmanager
def timed_pricing() -> Iterator[Span | None]:
    """A ``computequote.quote.price`` span around pricing one quote (or budget plan), and its
    duration in ``computequote_quote_pricing_duration_seconds``."""
    context = _request.get()
    started = time.perf_counter()
    with span("computequote.quote.price") as current:
        try:
            yield current
        finally:
            if context is not None and context.metrics is not None:
                context.metrics.pricing_duration.observe(time.perf_counter() - started)


def estimate_attributes(model: ModelSpec, cluster: ClusterSpec, plan: ParallelismPlan,
                        result: Estimate) -> Attributes:
    """The ``computequote.estimate`` span's attributes (SI units, as in the API)."""
    return {
        "computequote.model": model.name,
        "computequote.accelerator": cluster.accelerator.id,
        "computequote.num_gpus": cluster.num_gpus,
        "computequote.plan": (f"tp{plan.tp} pp{plan.pp} dp{plan.dp} cp{plan.cp} ep{plan.ep} "
                              f"vp{plan.vp} mb{plan.micro_batch}"),
        "computequote.estimate.fits": bool(result.memory.fits),
        "computequote.estimate.peak_bytes_per_gpu": float(result.memory.peak_bytes),
        "computequote.estimate.train_s": float(result.throughput.train_s),
        "computequote.estimate.mfu_fraction": float(result.throughput.mfu_fraction),
    }


def search_attributes(result: SearchResult) -> Attributes:
    """A finished search's figures for its ``computequote.search`` span."""
    stats = result.stats
    return {
        "computequote.search.candidates_total": stats.candidates_total,
        "computequote.search.candidates_evaluated": stats.candidates_evaluated,
        "computequote.search.feasible": stats.feasible,
        "computequote.search.truncated": stats.truncated,
        "computequote.search.plans": len(result.plans),
        "computequote.search.elapsed_s": stats.elapsed_s,
    }


def pricing_attributes(result: QuoteResult, version_id: str, num_offers: int) -> Attributes:
    """A priced quote's figures for its ``computequote.quote.price`` span."""
    attributes: Attributes = {
        "computequote.catalog_version": version_id,
        "computequote.quote.offers": num_offers,
        "computequote.quote.lines": len(result.lines),
        "computequote.quote.rejected_offers": len(result.rejected),
        "computequote.quote.verdict": str(result.verdict) if result.verdict else "none",
    }
    if result.recommended is not None:
        attributes["computequote.quote.currency"] = result.recommended.currency
    return attributes


def recording_span_ids() -> tuple[str, str] | None:
    """The current span's (trace id, span id) as 32 and 16 hex digits (W3C Trace Context),
    or None when no span is recording. Only called while tracing is on."""
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the record's extras, the
    request id of the request in flight and, while tracing, the trace and span ids."""

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
        context = _request.get()
        if context is not None:
            entry.setdefault("request_id", context.request_id)
            if context.tracer is not None:
                ids = recording_span_ids() or context.trace_ids
                if ids is not None:
                    entry["trace_id"], entry["span_id"] = ids
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


class _StandardStreamHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A handler on the process's own standard output or error (``sys.__stdout__`` /
    ``sys.__stderr__``, looked up when a line is written), not on whatever ``sys.stdout`` was
    when logging was configured. ``configure_logging`` runs once per process: when its first
    call came from an in-process ``cq --local`` command under a captured stream (typer's
    CliRunner), a handler bound to that stream kept writing to it after it was closed, and
    every later line was a "Logging error" traceback; bound to the stream of the moment
    instead, a server thread's lines landed in another command's captured ``--json`` output.
    The process's own streams are neither (a server process's are the same ones)."""

    def __init__(self, name: str) -> None:
        logging.Handler.__init__(self)
        self._stream_name = name

    @property
    def stream(self) -> Any:
        own = getattr(sys, f"__{self._stream_name}__", None)
        return own if own is not None else getattr(sys, self._stream_name)


def _json_handler(name: str) -> logging.Handler:
    handler = _StandardStreamHandler(name)
    handler.setFormatter(JsonFormatter())
    handler._computequote = True  # type: ignore[attr-defined]
    return handler


def _ours(logger: logging.Logger) -> bool:
    return any(getattr(h, "_computequote", False) for h in logger.handlers)


UVICORN_LOG_CONFIG = Path(__file__).with_name("uvicorn-logging.json")
"""uvicorn's ``--log-config`` for every way the server starts (``make run``, the image's CMD,
``cq serve``): uvicorn's loggers write JSON from its first line, before the application
factory runs, so a factory that fails (a bad ``CQ_DATABASE_URL``) or a ``--workers``
supervisor logs JSON too. ``configure_logging`` covers a server started without it."""

UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")


def configure_logging(level: str) -> None:
    """Every log line as one JSON object (idempotent; ``create_app`` calls it, so it covers
    every way the server starts: ``make run``, the image's CMD, ``cq serve``):

    - the ``service`` loggers on stdout, at ``level`` (``CQ_LOG_LEVEL``);
    - uvicorn's own loggers keep the handlers and streams uvicorn gave them (stderr; stdout
      for its access log, which the service turns off for its own) with this formatter in
      place of uvicorn's plain-text ones. uvicorn configures them before it calls the factory
      and logs nothing before it, in a single-process server;
    - anything else that reaches the root logger (SQLAlchemy, httpx, asyncio, warnings, and
      uvicorn's when started with ``log_config=None``) goes to a JSON handler on stderr
      instead of Python's last-resort plain text. Levels other than ``service``'s are left
      as they are."""
    service = logging.getLogger("service")
    service.setLevel(level.upper())
    if not _ours(service):
        service.addHandler(_json_handler("stdout"))
        service.propagate = False
    for name in UVICORN_LOGGERS:
        for handler in logging.getLogger(name).handlers:
            # Only uvicorn's own formatters: a test harness's capture handlers keep theirs.
            if type(handler.formatter).__module__.startswith("uvicorn."):
                handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    if not _ours(root):
        root.addHandler(_json_handler("stderr"))


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
    if path == "/ui" or path.startswith("/ui/"):
        names = {name.lower() for name, _ in headers}
        out = [(n, v) for n, v in headers if n.lower() != b"server"]
        if b"x-content-type-options" not in names:
            out.append((b"x-content-type-options", b"nosniff"))
        out.extend((n, v) for n, v in PAGE_HEADERS if n not in names or n == b"cache-control")
        return [(n, v) for n, v in out if not (n.lower() == b"cache-control" and v != b"no-store")]
    # Every other answer (one pass: this runs on every request).
    out = []
    nosniff = False
    for name, value in headers:
        lower = name.lower()
        if lower == b"server":
            continue
        if lower == b"x-content-type-options":
            nosniff = True
        out.append((name, value))
    if not nosniff:
        out.append((b"x-content-type-options", b"nosniff"))
    return out


_ID_PREFIX = os.urandom(8).hex()
_id_counter = itertools.count(1)


def _new_request_id() -> str:
    """32 hex digits, like a UUID's: 64 random bits per process, then a counter. Unique
    across replicas without a system call per request (uuid4 read /dev/urandom each time,
    16 us). Request ids name requests in logs; they are not secrets."""
    return f"{_ID_PREFIX}{next(_id_counter):016x}"


MAX_LABEL_SETS = 1024
"""Labelled metric children kept by the request middleware; past it the cache starts again
(the children themselves stay registered: only the shortcut to them is dropped)."""

WARM_UP_HEADER = "x-computequote-warm-up"
"""Requests the process sends itself at start-up carry its random token here: they are not
counted in the metrics nor logged (a client cannot know the token)."""
_WARM_UP_NAME = WARM_UP_HEADER.encode()


class RequestContextMiddleware:
    """Sets ``request.state.request_id`` and the request context (``current_request()``),
    echoes ``X-Request-ID``, adds the security headers, logs and measures."""

    def __init__(self, app: ASGIApp, *, metrics: Metrics, internal_token: str = "",
                 tracer: Tracer | None = None) -> None:
        self.app = app
        self.metrics = metrics
        self.internal = internal_token.encode()
        self.tracer = tracer
        self._children: dict[tuple[str, str, int], tuple[Any, Any]] = {}
        """The labelled counter and histogram of each (method, route, status) seen: looking
        them up by their labels took two of the middleware's microseconds per request."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw_id = token_given = None
        for name, value in scope.get("headers", ()):  # the last of a repeated header counts
            if name == b"x-request-id":
                raw_id = value
            elif name == _WARM_UP_NAME:
                token_given = value
        given = raw_id.decode("latin-1") if raw_id else ""
        internal = bool(self.internal) and token_given == self.internal
        request_id = given if given and REQUEST_ID.match(given) else _new_request_id()
        scope.setdefault("state", {})["request_id"] = request_id
        started = time.perf_counter()
        status = 500
        token = _request.set(RequestContext(
            request_id, None if internal else self.metrics, self.tracer,
            recording_span_ids() if self.tracer is not None else None))

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = security_headers(scope.get("path", ""),
                                           message.get("headers", []))
                headers.append((b"x-request-id", request_id.encode()))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except BaseException:
            # The context stays set: the 500 handler's line and the server's own "Exception in
            # ASGI application" line come after this, and then name the request too (each
            # request runs in its own task's copy of the context).
            if not internal:
                self._record(scope, request_id, status, time.perf_counter() - started)
            raise
        if not internal:
            self._record(scope, request_id, status, time.perf_counter() - started)
        _request.reset(token)

    def _record(self, scope: Scope, request_id: str, status: int, elapsed: float) -> None:
        """The request's metrics and its access-log line."""
        path = scope.get("path", "")
        route = getattr(scope.get("route"), "path", None) or (
            "/static" if path.startswith("/static/") else "unmatched")
        method = scope.get("method", "")
        key = (method, route, status)
        children = self._children.get(key)
        if children is None:
            if len(self._children) >= MAX_LABEL_SETS:
                self._children.clear()
            children = self._children[key] = (
                self.metrics.requests.labels(method, route, str(status)),
                self.metrics.latency.labels(method, route))
        children[0].inc()
        children[1].observe(elapsed)
        if not access_logger.isEnabledFor(logging.INFO):
            return
        client = scope.get("client")
        access_logger.info("request", extra={
            "request_id": request_id, "method": method, "route": route,
            "path": path, "status": status,
            "duration_ms": round(elapsed * 1000, 2),
            "client": client[0] if client else None,
        })
