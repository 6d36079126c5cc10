"""``POST /v1/parallelism-plans``: the plan search."""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Annotated

from fastapi import APIRouter, Body, Request
from fastapi.responses import JSONResponse

from service.api.calibrating import resolve_in_thread
from service.api.deps import AcceleratorsDep, SettingsDep
from service.api.observability import search_attributes, timed_search
from service.api.plan_search import plan_search
from service.api.problems import (
    SEARCH_UNAVAILABLE,
    problem_responses,
)
from service.api.schemas.estimate import training_defaults
from service.api.schemas.plans import (
    MAX_SEARCH_CANDIDATES,
    PLAN_SEARCH_EXAMPLE,
    SWEEP_EXAMPLE,
    PlanSearchRequest,
    PlanSearchResponse,
)
from service.api.work import ClientGoneDep, SearchDeadlineError
from service.core.calibration import DEFAULT_CALIBRATION
from service.core.errors import NoLayoutError
from service.core.search import SearchRequest, no_layout_problem
from service.core.specs import ClusterSpec
from service.core.units import SECONDS_PER_DAY

router = APIRouter(tags=["plans"])


@router.post(
    "/v1/parallelism-plans", summary="Find the best parallel layouts",
    response_model=PlanSearchResponse, status_code=200,
    responses={**problem_responses(413, 422), **SEARCH_UNAVAILABLE},
)
def optimise_parallelism(
    http_request: Request,
    request: Annotated[
        PlanSearchRequest,
        Body(openapi_examples={
            "gpt3-175b on 1024 A100": {"summary": "GPT-3 175B, 1,024 A100-80GB, every "
                                                  "dimension free", "value": PLAN_SEARCH_EXAMPLE},
            "405B sweep": {"summary": "Llama 3.1 405B over 512-16,384 GPUs of two kinds, "
                                      "time against cost", "value": SWEEP_EXAMPLE},
        }),
    ],
    accelerators: AcceleratorsDep,
    settings: SettingsDep,
    gone: ClientGoneDep,
) -> PlanSearchResponse | JSONResponse:
    """Enumerate every valid tp/pp/dp/cp/ep/vp, micro-batch, ZeRO stage, recomputation and
    sequence-parallel layout, evaluate them in bulk with the estimate's model, drop those that
    do not fit in memory (or miss the deadline or budget), and rank the rest. 422 with the
    closest candidates when nothing fits; 422 naming the GPU count, with the nearest counts
    that have one, when no layout multiplies to the count asked; 422 before any work when the
    space holds more candidates than the cap (search.max_candidates in every answer; the work
    is counted in candidates, so the same request gets the same answer however busy the
    server is, and the groups of a sweep are spread across the search workers); 503 with
    Retry-After when the search did not finish within the deadline, a safety net (never a
    partial answer), or no search worker was free before it."""
    # One deadline for the wait for a worker and the search: a search not started by then
    # is dropped (503 search-queue-timeout, Retry-After); one started late gets what is left.
    ends_at = time.monotonic() + settings.search_deadline_s
    stored = resolve_in_thread(http_request, request.calibration_id)
    model = request.model.to_core()
    clusters: list[ClusterSpec] = []
    count_fields: list[str] = []
    """The request field that gave each cluster's GPU count."""
    for index, candidate in enumerate(request.candidate_clusters()):
        field = "cluster" if request.cluster is not None else f"clusters.{index}"
        expanded = candidate.to_core(
            accelerators.require(candidate.accelerator, f"{field}.accelerator"))
        clusters += expanded
        count = "num_gpus" if candidate.num_gpus is not None else "num_gpus_range"
        count_fields += [f"{field}.{count}"] * len(expanded)
    constraints = request.constraints
    prices = constraints.price_per_gpu_hour_usd
    if isinstance(prices, str):
        price_map = {c.accelerator.id: Decimal(prices) for c in clusters}
    else:
        price_map = {k: Decimal(v) for k, v in (prices or {}).items()}
    batches = request.training.batches()
    core_training = request.training.to_core(batches[0])
    energy = request.energy.to_core()
    with timed_search("plans") as current:
        if current is not None:
            current.set_attributes({"computequote.model": model.name,
                                    "computequote.search.clusters": len(clusters),
                                    "computequote.search.objective": str(request.objective)})
        search_request = SearchRequest(
            model=model, clusters=tuple(clusters), training=core_training,
            global_batches=tuple(batches),
            space=constraints.to_space(),
            objective=request.objective, top_k=request.top_k,
            max_train_s=constraints.max_train_s,
            budget_usd=Decimal(constraints.budget_usd) if constraints.budget_usd else None,
            price_per_gpu_hour_usd=price_map, energy=energy,
            reliability=request.reliability.to_core(),
            max_candidates=min(settings.search_max_candidates, MAX_SEARCH_CANDIDATES),
            deadline_s=settings.search_deadline_s,
            calibration=DEFAULT_CALIBRATION if stored is None else stored.calibration(),
        )
        try:
            result = plan_search(search_request, workers=settings.search_workers,
                                 ends_at=ends_at, stop=gone)
        except TimeoutError as exc:
            # The safety net, not a limit a request within the cap meets: never a partial plan.
            raise SearchDeadlineError(settings.search_deadline_s, detail=(
                f"the search did not finish within {settings.search_deadline_s:g} s "
                "(CQ_SEARCH_DEADLINE_S), the server being too busy; it never answers from part "
                "of the space: retry after Retry-After seconds")) from exc
        except NoLayoutError as exc:
            # Nothing was evaluated: say so, with the nearest counts that have a layout (a
            # bounded scan, run only on this refusal), not "nothing fits in memory".
            raise no_layout_problem(exc, search_request,
                                    count_fields[exc.cluster_index]) from None
        if current is not None:
            current.set_attributes(search_attributes(result))
    http_request.app.state.metrics.candidates.inc(result.stats.candidates_evaluated)
    answer = PlanSearchResponse.from_core(
        result, request.objective, model, DEFAULT_CALIBRATION.version,
        max_reasonable_train_s=settings.max_reasonable_train_days * SECONDS_PER_DAY,
        defaulted=training_defaults(request.training))
    if stored is not None:
        answer.assumptions = [stored.note()]
    return answer
