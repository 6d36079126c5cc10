"""Liveness and readiness probes, and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel

from service.api.problems import problem_response, problem_responses
from service.catalog.migrate import readiness

router = APIRouter(tags=["health"])


class Health(BaseModel):
    status: str
    schema_revision: str | None = None


@router.get("/livez", summary="Process is up", response_model=Health, status_code=200)
async def get_liveness() -> Health:
    """Answers 200 while the process runs; touches nothing else."""
    return Health(status="ok")


@router.get(
    "/readyz", summary="Ready to serve", response_model=Health, status_code=200,
    responses=problem_responses(503),
)
def get_readiness(request: Request) -> Health | JSONResponse:
    """200 when the start-up warm-up is done (``CQ_WARM_UP``), the database answers and its
    schema is at the revision this code expects, or at a later one whose every step declares
    this code compatible (a rolling release: ``deploy/README.md``, expand then contract)."""
    warmed = getattr(request.app.state, "warmed", None)
    if warmed is not None and not warmed.is_set():
        return problem_response(
            request, status=503, slug="warming-up", title="Warming up",
            detail="the search workers and the first requests are being warmed up "
                   "(CQ_WARM_UP); ready within a minute", headers={"Retry-After": "1"},
        )
    try:
        state = readiness(request.app.state.engine)
    except Exception:
        return problem_response(
            request, status=503, slug="unavailable", title="Service unavailable",
            detail="the database cannot be reached", headers={"Retry-After": "5"},
        )
    if not state.ready:
        return problem_response(
            request, status=503, slug="schema-not-ready", title="Database schema not ready",
            detail=state.detail, headers={"Retry-After": "30"},
        )
    return Health(status="ready", schema_revision=state.revision)


@router.get(
    "/metrics", summary="Prometheus metrics", response_class=Response,
    responses={200: {"description": "Prometheus text format.",
                     "content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}}}},
)
def get_metrics(request: Request) -> Response:
    """``computequote_*`` metrics (request counts and latency by method, route template and
    status; quotes created; budget rejections; requests shed; optimiser candidates; search
    and quote-pricing durations; cache hits and misses), and the ``process_*``,
    ``python_gc_*`` and ``python_info`` collectors."""
    return Response(generate_latest(request.app.state.metrics.registry),
                    media_type=CONTENT_TYPE_LATEST)
