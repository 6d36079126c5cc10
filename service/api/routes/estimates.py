"""Training estimates."""

from __future__ import annotations

import dataclasses
from typing import Annotated

from fastapi import APIRouter, Body, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from service.api.auto import resolve_plan
from service.api.calibrating import StoredCalibration, resolve
from service.api.deps import AcceleratorCache, settings_of
from service.api.observability import estimate_attributes, span
from service.api.problems import problem_responses
from service.api.schemas.estimate import (
    ESTIMATE_EXAMPLE,
    EstimateRequest,
    EstimateResponse,
    estimate_defaults,
)
from service.core.calibration import DEFAULT_CALIBRATION
from service.core.estimate import estimate
from service.core.plausibility import long_run_warning
from service.core.units import SECONDS_PER_DAY

router = APIRouter(tags=["estimates"])


@router.post(
    "/v1/estimates", summary="Estimate a training run", response_model=EstimateResponse,
    status_code=200, responses=problem_responses(413, 422),
)
async def create_estimate(
    request: Annotated[
        EstimateRequest,
        Body(openapi_examples={"llama3.1-70b on 64 H100": {
            "summary": "Llama 3.1 70B, 64 H100, TP4 PP4 CP2, 15T tokens",
            "value": ESTIMATE_EXAMPLE,
        }}),
    ],
    http_request: Request,
) -> Response:
    """FLOPs, memory per GPU, step time with its breakdown, throughput, MFU, energy.
    ``vp``, ``micro_batch`` and ``recompute`` may be ``"auto"``: the optimiser picks the
    fastest value that fits, named in ``assumptions`` and in ``resolved``. With
    ``calibration_id`` (and a key that may read it) the user's calibration applies."""
    # The estimate itself takes about 0.1 ms of CPU: it runs on the event loop, which saves
    # the thread-pool hand-offs that cost more than the model (issue 16). A request with
    # "auto" fields runs a search, and a stale accelerator cache reads the database: those
    # go to the pool, as blocking work must. The accelerator cache and the settings are read
    # here, not declared as dependencies: FastAPI's solving of each declared one cost more
    # than the answer's serialisation (issue 38).
    accelerators: AcceleratorCache = http_request.app.state.accelerators
    settings = settings_of(http_request)
    stored = await resolve(http_request, request.calibration_id)
    if request.parallelism.auto_dimensions() or not accelerators.fresh():
        return await run_in_threadpool(_estimate_response, request, accelerators,
                                       settings.max_reasonable_train_days * SECONDS_PER_DAY,
                                       stored)
    return _estimate_response(request, accelerators,
                              settings.max_reasonable_train_days * SECONDS_PER_DAY, stored)


def _estimate_response(request: EstimateRequest, accelerators: AcceleratorCache,
                       max_reasonable_train_s: float,
                       stored: StoredCalibration | None = None) -> Response:
    """The estimate as JSON bytes, serialised once by the schema that documents it (the
    declared ``response_model`` still documents the contract; nothing validates it twice).
    ``stored``: the user calibration the request names (``calibrating.resolve``)."""
    body = estimate_answer(request, accelerators, max_reasonable_train_s, stored)
    # ``rl`` is left out unless method rl, so every other answer keeps its bytes.
    return Response(content=body.model_dump_json(exclude=None if body.rl is not None
                                                 else {"rl"}),
                    media_type="application/json")


def estimate_answer(request: EstimateRequest, accelerators: AcceleratorCache,
                    max_reasonable_train_s: float,
                    stored: StoredCalibration | None = None) -> EstimateResponse:
    """The estimate of one validated request: the core specs, the plan ("auto" fields
    chosen), the core estimate and what the service adds to it. POST /v1/estimates and each
    estimate of a what-if sweep (``whatifs.py``) take this one path."""
    calibration = DEFAULT_CALIBRATION if stored is None else stored.calibration()
    model = request.model.to_core()
    accelerator = accelerators.require(request.cluster.accelerator, "cluster.accelerator")
    cluster = request.cluster.to_core(accelerator)
    training = request.training.to_core()
    energy = request.energy.to_core()
    with span("computequote.estimate") as current:
        plan, chosen = resolve_plan(model, cluster, request.parallelism, training, energy,
                                    calibration=calibration)
        result = estimate(model, cluster, plan, training, energy=energy,
                          calibration=calibration)
        if current is not None:
            current.set_attributes(estimate_attributes(model, cluster, plan, result))
    # What the service adds to the core's answer, in one copy of it: the optimiser's
    # choices and the user calibration (assumptions), the defaulted inputs (coded warnings),
    # the wall-clock limit (a warning).
    notes = (*chosen, stored.note()) if stored is not None else chosen
    warning = long_run_warning(result.throughput.train_s, max_reasonable_train_s)
    result = dataclasses.replace(
        result, assumptions=(*result.assumptions, *notes),
        warnings=(*result.warnings, warning) if warning else result.warnings,
        warning_details=(*result.warning_details, *estimate_defaults(request, plan)))
    return EstimateResponse.from_core(result, model=model, cluster=cluster, plan=plan,
                                      energy=energy)
