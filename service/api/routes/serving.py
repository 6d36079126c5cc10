"""Serving estimates (issue 19): what it takes to serve a model at a load and latency."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Request, Response
from starlette.concurrency import run_in_threadpool

from service.api.deps import AcceleratorCache, AcceleratorsDep
from service.api.problems import problem_responses
from service.api.schemas.serving import (
    SERVING_EXAMPLE,
    SERVING_PLAN_EXAMPLE,
    ServingPlanRequest,
    ServingPlansResponse,
    ServingRequest,
    ServingResponse,
)
from service.core import serving

router = APIRouter(tags=["serving"])


@router.post(
    "/v1/serving-estimates", summary="Estimate serving a model at a load and latency",
    response_model=ServingResponse, status_code=200, responses=problem_responses(413, 422),
)
async def estimate_serving(
    request: Annotated[ServingRequest, Body(openapi_examples={
        "llama3.1-70b on 4 H100, 10 requests/s": {
            "summary": "Llama 3.1 70B, FP8 on 4 H100 (TP4), TensorRT-LLM, 10 requests/s",
            "value": SERVING_EXAMPLE}})],
    http_request: Request,
) -> Response:
    """Memory per GPU (weights, KV cache per token and per sequence, workspace, the largest
    concurrency that fits), prefill and decode times with the decode roofline's crossover
    batch, throughput per replica, TTFT/TPOT/end-to-end latency at p50 and p99 under the
    load, the replicas and GPUs the load needs under the SLOs, and cost, energy and CO2e
    per million tokens (docs/serving.md)."""
    # The same path as POST /v1/estimates (issue 38, "serving estimates take the same
    # path"): the model takes about 0.25 ms of CPU, so it runs on the event loop, which saves
    # the thread-pool hand-off; a stale accelerator cache reads the database, so that goes
    # to the pool. The cache is read here, not declared as a dependency, and the answer is
    # serialised once by the schema that documents it.
    accelerators: AcceleratorCache = http_request.app.state.accelerators
    if not accelerators.fresh():
        return await run_in_threadpool(_serving_response, request, accelerators)
    return _serving_response(request, accelerators)


def _serving_response(request: ServingRequest, accelerators: AcceleratorCache) -> Response:
    model = request.model.to_core()
    d = request.deployment
    accelerator = accelerators.require(d.accelerator, "deployment.accelerator")
    deployment = d.to_core(accelerator)
    energy = request.energy.to_core()
    result = serving.serve(model, deployment, request.traffic.to_core())
    body = ServingResponse.from_core(result, d, energy, accelerator.tdp_w)
    return Response(content=body.model_dump_json(), media_type="application/json")


@router.post(
    "/v1/serving-plans", summary="Find the cheapest deployment that meets serving SLOs",
    response_model=ServingPlansResponse, status_code=200,
    responses=problem_responses(413, 422),
)
def plan_serving(
    request: Annotated[ServingPlanRequest, Body(openapi_examples={
        "llama3.1-70b at 20 requests/s": {
            "summary": "Llama 3.1 70B at 20 requests/s on H100, H200 or A100, vLLM",
            "value": SERVING_PLAN_EXAMPLE}})],
    accelerators: AcceleratorsDep,
) -> ServingPlansResponse:
    """Every accelerator, tensor-parallel size (one NVLink domain), weight and KV precision,
    engine and max batch, each sized into replicas for the load under the SLOs, evaluated in
    bulk (up to 100,000 candidates, about a second); ranked by cost per hour at the given
    prices (GPUs without prices), with the cost against p99 TTFT front (at most 50 points);
    the plans returned are each re-estimated exactly as POST /v1/serving-estimates would."""
    model = request.model.to_core()
    specs = [accelerators.require(a, f"accelerators.{i}")
             for i, a in enumerate(request.accelerators)]
    result = serving.plan_serving(
        model, specs, request.traffic.to_core(), engine=request.engine,
        weight_precisions=request.weight_precisions,
        kv_cache_precisions=request.kv_cache_precisions,
        max_batches=request.max_batches or [None], max_tp=request.max_tp,
        price_per_gpu_hour_usd=request.prices(), top_k=request.top_k,
        engines=request.engines)
    return ServingPlansResponse.from_core(result, request, request.energy.to_core())
