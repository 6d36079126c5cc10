"""OpenTelemetry tracing: off unless the standard ``OTEL_*`` variables ask for it.

The switch (``Settings.traces_exporter``) follows the specification's variables:

- ``OTEL_SDK_DISABLED=true`` keeps it off, whatever else is set;
- ``OTEL_TRACES_EXPORTER=none`` keeps it off; ``otlp`` or ``console`` turns it on;
- otherwise it is on, with OTLP, once ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or
  ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set; with neither it stays off. (The specification's
  default exporter is OTLP to localhost; a service that exported to a collector nobody runs
  would log export failures for ever, so here naming an exporter or an endpoint is the opt-in.)

Off, nothing of the SDK is imported: no middleware, no SQL event listeners, no patched httpx,
and ``observability.span()`` answers a shared no-op.

On, the app gets its own ``TracerProvider`` (the process-global one is left alone, so apps in
one process, as in the tests, do not share one): resource ``service.name`` from
``OTEL_SERVICE_NAME`` (default ``computequote``), ``service.version``, and
``OTEL_RESOURCE_ATTRIBUTES``; the sampler from ``OTEL_TRACES_SAMPLER``; a batch processor
(``OTEL_BSP_*``). The OTLP exporter speaks http/protobuf and reads its endpoint, headers,
timeout, certificate and compression from the ``OTEL_EXPORTER_OTLP_*`` variables itself;
``console`` writes one JSON object per span on stdout. Instrumented:

- FastAPI: a server span per request (W3C ``traceparent`` honoured), except the probes,
  ``/metrics`` and ``/static``;
- SQLAlchemy: a span per statement on both of the app's engines;
- httpx: a client span per outgoing call, and per call of the portal to the API in process
  (``traced_client``: the in-process transport is not one the global instrumentation sees),
  whose ``traceparent`` makes the API's server span its child;
- ours: ``computequote.estimate``, ``computequote.search`` and ``computequote.quote.price``
  with their key attributes (``service/api/observability.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
from fastapi import FastAPI
from sqlalchemy import Engine

from service import __version__
from service.settings import Settings

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Tracer

Client = TypeVar("Client", httpx.Client, httpx.AsyncClient)

EXCLUDED_URLS = "/livez,/readyz,/metrics,/static/"
"""Not traced: probes every few seconds and scrapes would drown the requests."""


def install(app: FastAPI, settings: Settings, engines: Sequence[Engine],
            exporter: SpanExporter | None = None) -> Tracer | None:
    """Trace ``app`` and ``engines`` when the settings say so, or always to ``exporter`` (the
    tests' in-memory one, spans exported as they end). Returns the tracer for our own spans,
    or None when tracing is off. ``uninstall`` undoes it."""
    kind = "given" if exporter is not None else settings.traces_exporter
    if kind is None:
        return None
    # Imported here: the SDK and the OTLP exporter take about 0.3 s to import, which a
    # service with tracing off (and the cq command) should not pay.
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
    from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SimpleSpanProcessor,
    )

    provider = TracerProvider(resource=Resource.create(
        {"service.name": settings.otel_service_name, "service.version": __version__}))
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    elif kind == "console":
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(
            formatter=lambda span: span.to_json(indent=None) + "\n")))
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    FastAPIInstrumentor.instrument_app(app, tracer_provider=provider,
                                       excluded_urls=EXCLUDED_URLS,
                                       exclude_spans=["receive", "send"])
    # The instrumentation declares sqlalchemy < 2.1 and would refuse 2.1 without trying; the
    # event API it uses is unchanged in 2.1 (tests/api/test_tracing.py sees its spans).
    SQLAlchemyInstrumentor().instrument(engines=list(engines), tracer_provider=provider,
                                        skip_dep_check=True)
    HTTPXClientInstrumentor().instrument(tracer_provider=provider)
    app.state.tracer_provider = provider
    return provider.get_tracer("computequote", __version__)


def traced_client(app: FastAPI, client: Client) -> Client:
    """``client`` with a span per request while ``app`` is traced (its transport may be any,
    the in-process ``ASGITransport`` included); as it is otherwise."""
    provider = getattr(app.state, "tracer_provider", None)
    if provider is not None:
        from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

        HTTPXClientInstrumentor.instrument_client(client, tracer_provider=provider)
    return client


def uninstall(app: FastAPI) -> None:
    """Flush and end the app's tracing (shutdown, and tests that build several apps; the
    SQLAlchemy and httpx instrumentation is process-wide). Idempotent; nothing when off."""
    provider: Any = getattr(app.state, "tracer_provider", None)
    if provider is None:
        return
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
    from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor

    app.state.tracer_provider = None
    provider.shutdown()
    FastAPIInstrumentor.uninstrument_app(app)
    SQLAlchemyInstrumentor().uninstrument()
    HTTPXClientInstrumentor().uninstrument()
