"""The app factory: ``uvicorn --factory service.main:create_app``. Nothing connects at import."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import logging
import secrets
import threading
import time
from collections.abc import AsyncIterator
from concurrent.futures import Future
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import httpx
from fastapi import FastAPI

from service import __version__
from service.api.deps import AcceleratorCache
from service.api.limits import BodySizeLimitMiddleware
from service.api.observability import (
    WARM_UP_HEADER,
    Metrics,
    RequestContextMiddleware,
    configure_logging,
)
from service.api.openapi import build_openapi, operation_id
from service.api.page_cache import PageCache
from service.api.pagination import use_secret as use_page_secret
from service.api.problems import install_problem_handlers
from service.api.routes import (
    calibrations,
    catalog,
    discounts,
    docs,
    estimates,
    fx,
    health,
    plans,
    policies,
    portfolios,
    prices,
    quotes,
    refreshes,
    serving,
    whatifs,
)
from service.api.schemas.estimate import ESTIMATE_EXAMPLE
from service.api.schemas.plans import PLAN_SEARCH_EXAMPLE
from service.api.shedding import LoadSheddingMiddleware
from service.api.tracing import install as install_tracing
from service.api.tracing import uninstall as uninstall_tracing
from service.api.ui import router as ui_router
from service.api.workers import prestart, set_memory_limit, stop_with_app
from service.catalog.changes import ChangeFeed, GenerationCache, bump_on_commit
from service.catalog.db import make_engine, make_session_factory
from service.core.quote import PriceOffer
from service.settings import Settings

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

logger = logging.getLogger(__name__)

DESCRIPTION = """\
ComputeQuote answers: what will it take to train this large language model? How many GPUs,
how much memory per GPU, how long, how to parallelise it, and at what energy and price.

Writes need `Authorization: Bearer <API key>` (keys come from `cq keys create`).

Errors are `application/problem+json` (RFC 9457). Lists answer
`{"items": [...], "next_page_token": ...}`.
"""

TAGS = [
    {"name": "estimates", "description": "Training-run estimates."},
    {"name": "serving", "description": "Serving estimates and plans: memory, latency, "
                                       "throughput and sizing of a deployment at a load."},
    {"name": "plans", "description": "Parallelism search: the best layouts for a model, "
                                     "GPUs and batch."},
    {"name": "quotes", "description": "Priced, stored, reproducible quotes with budget "
                                      "gating; budget plans."},
    {"name": "calibrations", "description": "Calibrations fitted on a user's own measured "
                                            "runs, for estimates, plans and quotes."},
    {"name": "policies", "description": "Procurement policies that judge quotes: named, "
                                        "with immutable revisions and If-Match edits."},
    {"name": "accelerators", "description": "Accelerator datasheet catalogue."},
    {"name": "catalog", "description": "Versioned cloud price catalogue: offers, versions, "
                                       "imports, exports and edits."},
    {"name": "models", "description": "Published model architectures."},
    {"name": "health", "description": "Probes for orchestrators."},
]


def dispose(app: FastAPI) -> None:
    """Close both connection pools and flush the app's spans (tests and shutdown)."""
    uninstall_tracing(app)
    app.state.engine.dispose()
    app.state.cache_engine.dispose()


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    """At start-up, bring the search workers up in the background (issue 16: the first search
    after start-up waited for them); not at construction, so building an app has no side
    effect on processes. At shutdown, end them and every other child process before the
    server exits (issue 18: after a SIGTERM they kept running)."""
    futures = prestart(app.state.settings.search_workers)
    app.state.changes.start()
    # Everything built at start-up (the app, the catalogue and calibration tables, imported
    # modules) lives as long as the process: move it out of the collector's sight, so a full
    # collection under load walks only what requests allocate (issue 16: p99 latency).
    gc.freeze()
    # Read the accelerator catalogue once in the background (the first request otherwise
    # pays the first query's compilation); a database that is not up yet is not an error
    # here: the first request reads it then.
    if app.state.settings.warm_up:
        app.state.warmed = threading.Event()
        warm = asyncio.create_task(_warm_up(app, futures))
    else:
        warm = asyncio.create_task(asyncio.to_thread(_warm_accelerators, app))
    try:
        yield
    finally:
        warm.cancel()
        app.state.changes.stop()
        await asyncio.to_thread(stop_with_app)
        await asyncio.to_thread(uninstall_tracing, app)  # the last batch of spans goes out


WARM_UP_TIMEOUT_S = 60.0
"""Readiness waits at most this long for the warm-up; a failed or slow one is logged and the
replica becomes ready anyway (a cold first request is slower, not wrong)."""


async def _warm_up(app: FastAPI, futures: list[Future[None]]) -> None:
    """The search workers' own warm-up, then one plan search and one estimate through the
    whole app in process (routing, validation, the parent's side of the search, the
    response), so the first real request runs warm code (issue 16: it took 1.8 x a warm
    one). The requests carry the process's warm-up token: no metrics, no log line."""
    headers = {WARM_UP_HEADER: app.state.warm_up_token}
    started = time.monotonic()
    try:
        async with asyncio.timeout(WARM_UP_TIMEOUT_S):
            await asyncio.to_thread(concurrent.futures.wait, futures)
            await asyncio.to_thread(_warm_accelerators, app)
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport,
                                         base_url="http://warm-up") as client:
                # One search per worker, at once, so each worker has run the example.
                searches = max(1, app.state.settings.search_workers)
                answers = await asyncio.gather(*(
                    client.post("/v1/parallelism-plans", json=PLAN_SEARCH_EXAMPLE,
                                headers=headers) for _ in range(searches)),
                    client.post("/v1/estimates", json=ESTIMATE_EXAMPLE, headers=headers))
                for answer in answers:
                    if answer.status_code != 200:
                        logger.warning("warm-up %s answered %s", answer.request.url.path,
                                       answer.status_code)
        logger.info("warm-up done in %.2f s", time.monotonic() - started)
    except Exception as exc:
        logger.warning("warm-up did not finish: %s", type(exc).__name__)
    finally:
        app.state.warmed.set()


def _warm_accelerators(app: FastAPI) -> None:
    with contextlib.suppress(Exception):
        app.state.accelerators.all()


def create_app(settings: Settings | None = None, *,
               span_exporter: SpanExporter | None = None) -> FastAPI:
    """Build the application. The engine is created lazily: it connects on first use.
    Tracing follows the ``OTEL_*`` settings, or goes to ``span_exporter`` when given (tests)."""
    settings = settings or Settings()
    configure_logging(settings.log_level)
    app = FastAPI(
        title="ComputeQuote",
        version=__version__,
        description=DESCRIPTION,
        openapi_tags=TAGS,
        generate_unique_id_function=operation_id,
        docs_url=None,
        redoc_url=None,
        lifespan=_lifespan,
        # FastAPI's own OpenTelemetry support stays off: tracing has one switch, the OTEL_*
        # settings (service/api/tracing.py), and its per-request check of the global
        # providers cost about 8 us a request even with nothing configured.
        telemetry={"tracing": False, "metrics": False, "logs": False, "auto_configure": False},
    )
    engine = make_engine(settings.resolved_database_url, pool_size=settings.db_pool_size,
                         max_overflow=settings.db_pool_overflow)
    factory = make_session_factory(engine)
    # The accelerator cache refreshes on its own one-connection pool, so a refresh never
    # waits for a connection held by a request that is itself waiting for the cache.
    cache_engine = make_engine(settings.resolved_database_url, pool_size=1, max_overflow=0)
    app.state.settings = settings
    use_page_secret(settings.api_key_pepper.get_secret_value())
    set_memory_limit(settings.search_memory_bytes)
    app.state.engine = engine
    app.state.cache_engine = cache_engine
    app.state.session_factory = factory
    app.state.accelerators = AcceleratorCache(
        make_session_factory(cache_engine), settings.catalog_cache_ttl_s
    )

    app.state.warmed = None  # an Event while a lifespan's warm-up runs (/readyz waits on it)
    app.state.warm_up_token = secrets.token_hex(16)
    app.state.offer_pages = PageCache[bytes]()
    app.state.quote_offers = PageCache[list[PriceOffer]](max_entries=64)
    # The current catalogue version and verified API keys, held while no writer anywhere has
    # changed them (service/catalog/changes.py); nothing is held until the lifespan starts
    # the feed.
    app.state.changes = ChangeFeed(settings.resolved_database_url)
    bump_on_commit(factory, app.state.changes)
    app.state.state_cache = GenerationCache(app.state.changes)
    app.state.metrics = Metrics()
    app.state.metrics.watch_caches({
        "accelerators": app.state.accelerators, "offer_pages": app.state.offer_pages,
        "quote_offers": app.state.quote_offers, "catalog_state": app.state.state_cache})
    tracer = install_tracing(app, settings, (engine, cache_engine), exporter=span_exporter)
    install_problem_handlers(app)
    app.add_middleware(RequestContextMiddleware, metrics=app.state.metrics,
                       internal_token=app.state.warm_up_token, tracer=tracer)
    # Outside the request context, so a shed request costs as little as possible: no log
    # line, no latency histogram; it is counted in computequote_requests_shed_total.
    app.add_middleware(LoadSheddingMiddleware, max_in_flight=settings.max_in_flight,
                       on_shed=app.state.metrics.shed.inc)
    # Outermost: the body arrives (within CQ_BODY_TIMEOUT_S and the size limits) before the
    # request may take an in-flight slot, so slow clients cannot hold every slot.
    app.add_middleware(
        BodySizeLimitMiddleware, max_body_bytes=settings.max_body_bytes,
        path_limits={"/v1/catalog/imports": settings.max_import_bytes,
                     "/v1/fx-rates/imports": settings.max_import_bytes,
                     "/v1/catalog/refreshes": settings.max_import_bytes,
                     # A discount book of up to 2,000 entries (about 0.8 MB at most).
                     "/v1/discount-books": settings.max_import_bytes,
                     "/v1/discount-books/": settings.max_import_bytes,
                     # Up to 10,000 measured runs, each an estimate body (issue 37).
                     "/v1/calibrations": settings.max_import_bytes},
        body_timeout_s=settings.body_timeout_s,
    )
    for module in (estimates, plans, quotes, policies, catalog, prices, fx, discounts, refreshes,
                   serving, calibrations, health, docs, whatifs, portfolios):
        app.include_router(module.router)
    app.include_router(ui_router)
    app.mount("/static", docs.static_files(), name="static")

    def custom_openapi() -> dict[str, Any]:
        return build_openapi(app)

    app.openapi = custom_openapi  # type: ignore[method-assign]
    return app
