"""POST /v1/serving-estimates (issue 40): coded warnings of an uncalibrated engine x
accelerator pair and of mixture-of-experts serving, in warning_details and warnings."""

from __future__ import annotations

import copy
from typing import Any

from fastapi.testclient import TestClient

from service.api.schemas.serving import SERVING_EXAMPLE


def body(**deployment: Any) -> dict[str, Any]:
    result = copy.deepcopy(SERVING_EXAMPLE)
    result["deployment"].update(deployment)
    return result


def test_an_uncalibrated_pair_is_coded_and_a_calibrated_one_is_not(client: TestClient) -> None:
    calibrated = client.post("/v1/serving-estimates", json=body(engine_version="0.16")).json()
    assert "uncalibrated_engine" not in {d["code"] for d in calibrated["warning_details"]}
    response = client.post("/v1/serving-estimates", json=body(
        accelerator="mi300x-192gb", engine="sglang", engine_version="0.4"))
    assert response.status_code == 200, response.text
    e = response.json()
    [detail] = [d for d in e["warning_details"] if d["code"] == "uncalibrated_engine"]
    assert detail["field"] == "deployment.engine"
    assert "sglang" in detail["message"]
    assert "mi300x-192gb" in detail["message"]
    assert detail["message"] in e["warnings"]


def test_moe_serving_is_coded_outside_the_validated_range(client: TestClient) -> None:
    request = body(engine_version="0.16")
    request["model"] = {"preset": "mixtral-8x7b"}
    e = client.post("/v1/serving-estimates", json=request).json()
    [detail] = [d for d in e["warning_details"]
                if d["code"] == "outside_validated_range" and d["field"] == "model"]
    assert detail["message"] in e["warnings"]
    assert e["throughput"]["output_tokens_per_s"] > 0


def test_every_serving_warning_code_and_field_is_documented(client: TestClient) -> None:
    """Every code a serving answer can carry, with the fields it names, is in the document's
    description of ``warning_details`` (the description had two of the four codes)."""
    from service.core import serving
    from service.core.plausibility import DEFAULTED_INPUT, OUTSIDE_VALIDATED_RANGE

    spec = client.get("/openapi.json").json()
    text = spec["components"]["schemas"]["ServingResponse"]["properties"]["warning_details"][
        "description"]
    for code in (DEFAULTED_INPUT, serving.SATURATED, serving.UNCALIBRATED_ENGINE,
                 OUTSIDE_VALIDATED_RANGE):
        assert code in text, code
    # The fields answers name: from real answers, not from a list kept beside the text.
    answers = [client.post("/v1/serving-estimates", json=b).json() for b in (
        body(accelerator="mi300x-192gb", engine="sglang"),
        {**body(), "model": {"preset": "mixtral-8x7b"}},
        {**body(), "traffic": {**SERVING_EXAMPLE["traffic"], "requests_per_s": 10_000.0}},
        body(replicas=1),
    )]
    fields = {d["field"] for a in answers for d in a.get("warning_details", [])}
    assert {"deployment.engine", "deployment.engine_version", "model"} <= fields
    for field in fields:
        assert field in text, field


def test_the_band_and_its_slow_end_are_in_every_answer(client: TestClient) -> None:
    e = client.post("/v1/serving-estimates", json=body()).json()
    throughput, latency, sizing = e["throughput"], e["latency"], e["sizing"]
    assert throughput["output_tokens_per_s_low"] <= throughput["output_tokens_per_s"]
    assert throughput["output_tokens_per_s_low"] <= throughput["output_tokens_per_s_high"]
    assert 0 < latency["tpot_p50_s_low"] <= latency["tpot_p50_s_high"]
    assert latency["ttft_p50_s_low"] <= latency["ttft_p50_s_high"]
    assert any(a.startswith("band: ") for a in e["assumptions"])
    # The example is online at a rate: sizing at the slow end needs at least as many.
    assert sizing["band_slow_end_factor"] >= 1
    assert sizing["replicas_at_band_slow_end"] >= sizing["replicas"]
    offline = {**body(), "traffic": {"mode": "offline", "prompt_tokens": {"mean": 512},
                                     "output_tokens": {"mean": 256}}}
    closed = client.post("/v1/serving-estimates", json=offline).json()
    assert closed["sizing"]["replicas_at_band_slow_end"] is None
    assert closed["throughput"]["output_tokens_per_s_low"] > 0


def test_the_cost_at_the_band_slow_end_is_the_slow_end_fleet_at_the_price(
        client: TestClient) -> None:
    """A plan and an estimate say what the fleet costs at the band's slow end (decision 428),
    the fleet a budget is judged at; offline there is none."""
    e = client.post("/v1/serving-estimates", json=body(price_per_gpu_hour_usd="2.50")).json()
    slow = e["sizing"]["replicas_at_band_slow_end"]
    assert slow > e["sizing"]["replicas"]
    cost = e["cost"]
    assert cost["usd_per_hour_at_band_slow_end"] == f"{2.5 * 4 * slow:.2f}"
    assert float(cost["usd_per_hour_at_band_slow_end"]) > float(cost["usd_per_hour"])
    offline = {**body(price_per_gpu_hour_usd="2.50"), "traffic": {
        "mode": "offline", "prompt_tokens": {"mean": 512}, "output_tokens": {"mean": 256}}}
    closed = client.post("/v1/serving-estimates", json=offline).json()
    assert closed["cost"]["usd_per_hour_at_band_slow_end"] is None
    plans = client.post("/v1/serving-plans", json={
        "model": SERVING_EXAMPLE["model"], "traffic": SERVING_EXAMPLE["traffic"],
        "accelerators": ["h100-sxm5-80gb"], "engine": "trtllm",
        "price_per_gpu_hour_usd": "2.50"}).json()
    assert plans["plans"], plans
    for plan in plans["plans"]:
        estimate = plan["estimate"]
        gpus = plan["deployment"]["gpus_per_replica"]
        assert estimate["cost"]["usd_per_hour_at_band_slow_end"] == (
            f"{2.5 * gpus * estimate['sizing']['replicas_at_band_slow_end']:.2f}")


def test_a_slow_end_cost_past_the_largest_figure_is_null_and_named() -> None:
    """The slow-end cost obeys the bound every cost figure does (issue 36): past 10^15 USD it
    is null and the warning names it; without a slow end it is null and not named."""
    from service.api.schemas.serving import MAX_COST_FIGURE_USD, _serving_cost

    price = str(MAX_COST_FIGURE_USD / 100)  # 4 GPUs stay under the bound, 400 do not
    cost, warnings = _serving_cost(price, 4, 100.0, 200.0, slow_end_num_gpus=400)
    assert cost.usd_per_hour is not None
    assert cost.usd_per_hour_at_band_slow_end is None
    assert len(warnings) == 1
    assert "usd_per_hour_at_band_slow_end" in warnings[0]
    plain, none = _serving_cost("2.50", 4, 100.0, 200.0)
    assert plain.usd_per_hour_at_band_slow_end is None
    assert none == []
