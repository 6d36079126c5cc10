"""What-if sweeps (issue 42): one estimate body and up to 64 variations of it, answered side by
side, with each variation's deltas against the base and a ranking by the change in time.

Every estimate of the sweep takes POST /v1/estimates's path (``estimates.estimate_answer``):
each variation's body is validated as an ``EstimateRequest``, as that route validates its
body, so a variation answers exactly what POST /v1/estimates would for it, and one that it
would refuse gets that problem as its own coded error while the others answer. The sweep runs
in the thread pool within ``CQ_SEARCH_DEADLINE_S``; past it the request is refused with 503 and
``Retry-After``, never answered in part.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from decimal import ROUND_HALF_EVEN, Context, Decimal
from typing import Annotated, Any

from fastapi import APIRouter, Body, Request
from fastapi.responses import Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from service.api.calibrating import StoredCalibration, resolve
from service.api.deps import AcceleratorCache, settings_of
from service.api.problems import (
    DOMAIN_ERRORS,
    PROBLEM_MEDIA_TYPE,
    FieldError,
    problem_responses,
)
from service.api.routes.estimates import estimate_answer
from service.api.schemas.estimate import EstimateRequest, EstimateResponse
from service.api.schemas.whatifs import (
    COMM_PARTS,
    WHAT_IF_EXAMPLE,
    DeltaOut,
    RankOut,
    SummaryOut,
    VariationErrorOut,
    VariationIn,
    VariationOut,
    WhatIfRequest,
    WhatIfResponse,
)
from service.api.work import SearchDeadlineError
from service.core.errors import CoreError
from service.core.units import SECONDS_PER_DAY

router = APIRouter(tags=["estimates"])

MAX_NAME_CHARS = 120
"""A variation's default name (its paths and values) is cut to this many characters."""
_CENT = Decimal("0.01")
_MONEY = Context(prec=60)
"""Cost arithmetic: enough digits for any GPU-hours (a float up to 1e308 has 309 integer
digits, but the estimate's bounds keep GPU-hours under 1e24) times a price under 1e6."""

WHAT_IF_UNAVAILABLE: dict[int | str, dict[str, Any]] = {
    503: {
        "description": "The sweep's estimates did not finish within CQ_SEARCH_DEADLINE_S "
                       "(type search-deadline): nothing is answered in part; retry after "
                       "Retry-After seconds. Also: the database is unavailable (the "
                       "accelerator catalogue could not be read) or the replica is "
                       "overloaded.",
        "headers": {"Retry-After": {
            "description": "Seconds to wait before retrying.",
            "schema": {"type": "integer", "minimum": 1}}},
        "content": {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
    },
}


class SweepDeadlineError(Exception):
    """The sweep's estimates did not all finish within the deadline (HTTP 503)."""


clock: Callable[[], float] = time.monotonic
"""The deadline's clock (a test replaces it with one that jumps)."""


@router.post(
    "/v1/what-ifs", summary="Compare variations of one training estimate",
    response_model=WhatIfResponse, status_code=200,
    responses={**problem_responses(413, 422), **WHAT_IF_UNAVAILABLE},
)
async def create_what_if(
    request: Annotated[
        WhatIfRequest,
        Body(openapi_examples={"llama3.1-70b on 1024 H100, four changes": {
            "summary": "Llama 3.1 70B on 1,024 H100: network, GPUs, batch and layout",
            "value": WHAT_IF_EXAMPLE,
        }}),
    ],
    http_request: Request,
) -> Response:
    """The base estimate and each variation's (the base body with the variation's dotted
    paths set, validated and estimated as POST /v1/estimates would), each with its deltas in
    tokens/s, time, communication share and cost at ``price_per_gpu_hour_usd``, and the
    variations ranked by the change in training time. A path that names no field of the
    estimate request is a 422 naming the variation and the path; a value the estimate
    request refuses is that variation's coded error, and the others still answer."""
    accelerators: AcceleratorCache = http_request.app.state.accelerators
    settings = settings_of(http_request)
    stored = await resolve(http_request, request.base.calibration_id)
    # The wait for a thread counts against the deadline, as a search's wait for a worker.
    ends_at = clock() + settings.search_deadline_s
    try:
        answer = await run_in_threadpool(
            sweep, request, accelerators, settings.max_reasonable_train_days * SECONDS_PER_DAY,
            stored, ends_at)
    except SweepDeadlineError as exc:
        raise SearchDeadlineError(settings.search_deadline_s, detail=(
            f"the sweep's {len(request.variations) + 1} estimates did not finish within "
            f"{settings.search_deadline_s:g} s (CQ_SEARCH_DEADLINE_S), the server being too "
            "busy; a sweep is never answered in part: retry after Retry-After seconds")) from exc
    return Response(content=answer.model_dump_json(), media_type="application/json")


def sweep(request: WhatIfRequest, accelerators: AcceleratorCache, max_reasonable_train_s: float,
          stored: StoredCalibration | None, ends_at: float) -> WhatIfResponse:
    """The base's and every variation's estimate, checked against ``ends_at`` (a ``clock``
    instant) before each. A problem of the base's is the request's."""

    def estimate_of(body: EstimateRequest) -> EstimateResponse:
        if clock() >= ends_at:
            raise SweepDeadlineError
        return estimate_answer(body, accelerators, max_reasonable_train_s, stored)

    price = None if request.price_per_gpu_hour_usd is None else Decimal(
        request.price_per_gpu_hour_usd)
    base_answer = estimate_of(request.base)
    base = summary(base_answer, price)
    body = request.base_body()
    variations = [_variation(index, variation, body, base, price, estimate_of)
                  for index, variation in enumerate(request.variations)]
    answered = [v for v in variations if v.delta is not None]
    ranking = sorted(answered, key=lambda v: (-abs(v.delta.train_s if v.delta else 0.0),
                                              v.index))
    return WhatIfResponse(
        base=base, variations=variations,
        ranking=[RankOut(index=v.index, name=v.name,
                         train_s_delta=v.delta.train_s if v.delta else 0.0) for v in ranking],
        price_per_gpu_hour_usd=request.price_per_gpu_hour_usd,
        calibration_version=base_answer.calibration_version)


def varied_body(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """``base`` with each dotted path of ``changes`` set (intermediate objects created where
    absent or null); ``base`` is not changed."""
    body = copy.deepcopy(base)
    for path, value in changes.items():
        *parents, leaf = path.split(".")
        node = body
        for part in parents:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node[leaf] = copy.deepcopy(value)
    return body


def default_name(changes: dict[str, Any]) -> str:
    """'cluster.num_gpus = 2048, parallelism.dp = 64', cut to ``MAX_NAME_CHARS`` (spaced, so
    that a table or a chart label wraps between a path and its value, never inside a number)."""
    def shown(value: Any) -> str:
        text = json.dumps(value, separators=(",", ":"), default=str)
        return text if len(text) <= 40 else text[:39] + "…"
    name = ", ".join(f"{path} = {shown(value)}" for path, value in changes.items())
    return name if len(name) <= MAX_NAME_CHARS else name[:MAX_NAME_CHARS - 1] + "…"


def _variation(index: int, variation: VariationIn, base_body: dict[str, Any], base: SummaryOut,
               price: Decimal | None,
               estimate_of: Callable[[EstimateRequest], EstimateResponse]) -> VariationOut:
    name = variation.name or default_name(variation.set)
    out = {"index": index, "name": name, "paths": list(variation.set)}
    error = None
    try:
        parsed = EstimateRequest.model_validate(varied_body(base_body, variation.set))
    except ValidationError as exc:
        errors = [FieldError(field=".".join(str(p) for p in e["loc"]) or "body",
                             message=str(e["msg"]), code=str(e["type"]))
                  for e in exc.errors(include_url=False, include_input=False)]
        error = VariationErrorOut(
            code="validation-error", title="Request validation failed",
            detail="; ".join(f"{e.field}: {e.message}" for e in errors[:5]), errors=errors)
    else:
        autos = sorted(parsed.parallelism.auto_dimensions())
        if autos:
            error = VariationErrorOut(
                code="auto-not-allowed", title="A what-if compares fixed layouts",
                detail=", ".join(f"parallelism.{a}" for a in autos) + " \"auto\": give "
                       "a value (POST /v1/estimates with \"auto\" names the one it chose)",
                field=f"parallelism.{autos[0]}")
        else:
            try:
                answer = estimate_of(parsed)
            except CoreError as exc:
                error = _domain_error(exc)
    if error is not None:
        return VariationOut(**out, summary=None, delta=None, error=error)
    figures = summary(answer, price)
    return VariationOut(**out, summary=figures, delta=delta(figures, base), error=None)


def _domain_error(exc: CoreError) -> VariationErrorOut:
    """The problem POST /v1/estimates would answer for ``exc``, as a variation's error."""
    entry = next(DOMAIN_ERRORS[kind] for kind in type(exc).__mro__ if kind in DOMAIN_ERRORS)
    _, slug, title, _ = entry
    field = getattr(exc, "field", None)
    return VariationErrorOut(code=slug, title=title, detail=str(exc),
                             field=field if isinstance(field, str) else None)


def summary(answer: EstimateResponse, price: Decimal | None) -> SummaryOut:
    """The figures a sweep compares, from one estimate's answer."""
    time_ = answer.time
    comm_s = sum(getattr(time_.breakdown_s, part) for part in COMM_PARTS)
    return SummaryOut(
        tokens_per_s=time_.tokens_per_s, step_s=time_.step_s, train_s=time_.train_s,
        gpu_hours=time_.gpu_hours, mfu_fraction=time_.mfu_fraction,
        comm_fraction=comm_s / time_.step_s if time_.step_s > 0 else 0.0,
        fits=answer.memory.fits, cost_usd=cost(time_.gpu_hours, price),
        warnings=answer.warnings)


def cost(gpu_hours: float, price: Decimal | None) -> str | None:
    """GPU-hours × price in cents, from the float's exact decimal value (never float money)."""
    if price is None:
        return None
    hours = Decimal(repr(gpu_hours))
    if not hours.is_finite():
        return None
    return str(_MONEY.multiply(hours, price).quantize(_CENT, rounding=ROUND_HALF_EVEN,
                                                      context=_MONEY))


def _fraction(change: float, base: float) -> float | None:
    return change / base if base != 0 else None


def delta(varied: SummaryOut, base: SummaryOut) -> DeltaOut:
    """``varied`` minus ``base``, absolute and as a fraction of the base."""
    tokens = varied.tokens_per_s - base.tokens_per_s
    train = varied.train_s - base.train_s
    step = varied.step_s - base.step_s
    comm = varied.comm_fraction - base.comm_fraction
    cost_change = cost_fraction = None
    if varied.cost_usd is not None and base.cost_usd is not None:
        change = _MONEY.subtract(Decimal(varied.cost_usd), Decimal(base.cost_usd))
        cost_change = str(change)
        base_cost = Decimal(base.cost_usd)
        cost_fraction = float(_MONEY.divide(change, base_cost)) if base_cost else None
    return DeltaOut(
        tokens_per_s=tokens, tokens_per_s_fraction=_fraction(tokens, base.tokens_per_s),
        train_s=train, train_s_fraction=_fraction(train, base.train_s),
        step_s=step, step_s_fraction=_fraction(step, base.step_s),
        comm_fraction=comm, comm_fraction_fraction=_fraction(comm, base.comm_fraction),
        cost_usd=cost_change, cost_fraction=cost_fraction)
