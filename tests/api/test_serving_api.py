"""POST /v1/serving-estimates (issue 19): the contract names, cost arithmetic, and bad input
as problems naming the field."""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.api.schemas.serving import SERVING_EXAMPLE
from tests.api.test_estimates import assert_problem


def body(**deployment: Any) -> dict[str, Any]:
    result = copy.deepcopy(SERVING_EXAMPLE)
    result["deployment"].update(deployment)
    return result


def test_the_documented_example_answers_every_contract_field(client: TestClient) -> None:
    response = client.post("/v1/serving-estimates", json=SERVING_EXAMPLE)
    assert response.status_code == 200, response.text
    e = response.json()
    memory = e["memory"]
    # Llama 3.1 70B, fp8 KV over tp 4: 2 x 80 layers x 2 heads x 128 x 1 byte per GPU.
    assert memory["kv_cache_bytes_per_token"] == 2 * 80 * 2 * 128 * 1
    # At steady state a running sequence holds its prompt and half its output.
    assert memory["kv_cache_bytes_per_sequence"] == (1024 + 256 / 2) * 40960
    assert memory["fits"] is True
    assert memory["max_concurrency"] > 256
    assert 17e9 < memory["weights_bytes_per_gpu"] < 18e9  # 70.6 B fp8 weights over 4 GPUs
    t = e["throughput"]
    assert t["output_tokens_per_s_per_gpu"] == pytest.approx(t["output_tokens_per_s"] / 4)
    assert t["requests_per_s"] * e["sizing"]["replicas"] == pytest.approx(10)
    latency = e["latency"]
    for name in ("ttft_s", "tpot_s", "e2e_s"):
        assert 0 < latency[name]["p50"] <= latency[name]["p99"]
    assert latency["ttft_s"]["p99"] <= 2.0
    assert latency["tpot_s"]["p99"] <= 0.1
    assert "M/G/1" in latency["queueing_model"]
    sizing = e["sizing"]
    assert sizing["meets_slo"] is True
    assert sizing["num_gpus"] == 4 * sizing["replicas"]
    assert e["cost"] is None  # no price given
    assert e["energy"]["kwh_per_million_output_tokens"] > 0
    assert e["assumptions"]


def test_the_cost_per_million_tokens_is_the_hourly_price_over_tokens_per_hour(
        client: TestClient) -> None:
    e = client.post("/v1/serving-estimates", json=body(price_per_gpu_hour_usd="2.50")).json()
    replicas = e["sizing"]["replicas"]
    per_hour = Decimal("2.50") * 4 * replicas
    tokens_per_hour = Decimal(repr(e["throughput"]["output_tokens_per_s"] * replicas)) * 3600
    assert Decimal(e["cost"]["usd_per_hour"]) == per_hour
    assert Decimal(e["cost"]["usd_per_million_output_tokens"]) == (
        per_hour * 1_000_000 / tokens_per_hour).quantize(Decimal("0.0001"))
    assert Decimal(e["cost"]["usd_per_million_total_tokens"]) < Decimal(
        e["cost"]["usd_per_million_output_tokens"])


def test_offline_and_fixed_batch_modes(client: TestClient) -> None:
    offline = copy.deepcopy(SERVING_EXAMPLE)
    offline["traffic"] = {"mode": "offline", "prompt_tokens": {"p50": 800, "p99": 3000},
                          "output_tokens": {"samples": [100, 200, 300]}}
    answer = client.post("/v1/serving-estimates", json=offline)
    assert answer.status_code == 200, answer.text
    assert answer.json()["decode"]["batch"] == 256  # max_batch
    fixed = copy.deepcopy(offline)
    fixed["traffic"]["mode"] = "fixed_batch"
    fixed["traffic"]["batch_size"] = 8
    small = client.post("/v1/serving-estimates", json=fixed).json()
    assert small["decode"]["batch"] == 8
    assert small["decode"]["memory_bound_s"] > small["decode"]["compute_bound_s"]


@pytest.mark.parametrize(("change", "field"), [
    ({"deployment": {"accelerator": "h100-sxm5-80gb", "gpus_per_replica": 4, "tp": 2}},
     "deployment.gpus_per_replica"),
    ({"deployment": {"accelerator": "nope", "gpus_per_replica": 1}}, "deployment.accelerator"),
    ({"deployment": {"accelerator": "h100-sxm5-80gb", "gpus_per_replica": 4, "tp": 4,
                     "prefix_caching": True}}, "deployment"),
    ({"traffic": {"mode": "online", "prompt_tokens": {"mean": 10},
                  "output_tokens": {"mean": 10}}}, "traffic"),
    ({"traffic": {"mode": "offline", "prompt_tokens": {"p50": 10},
                  "output_tokens": {"mean": 10}}}, "traffic.prompt_tokens"),
    ({"traffic": {"mode": "online", "prompt_tokens": {"mean": -1},
                  "output_tokens": {"mean": 10}, "requests_per_s": 1}},
     "traffic.prompt_tokens.mean"),
    ({"traffic": {"mode": "online", "prompt_tokens": {"mean": 10},
                  "output_tokens": {"mean": 10}, "requests_per_s": 1, "extra": 1}},
     "traffic.extra"),
])
def test_bad_requests_are_problems_naming_the_field(client: TestClient, change: dict[str, Any],
                                                    field: str) -> None:
    request = {**copy.deepcopy(SERVING_EXAMPLE), **change}
    assert_problem(client.post("/v1/serving-estimates", json=request), 422, field)


def test_nan_is_refused(client: TestClient) -> None:
    text = ('{"model": {"preset": "llama3.1-8b"}, "deployment": {"accelerator": '
            '"h100-sxm5-80gb", "gpus_per_replica": 1}, "traffic": {"mode": "online", '
            '"prompt_tokens": {"mean": NaN}, "output_tokens": {"mean": 10}, '
            '"requests_per_s": 1}}')
    response = client.post("/v1/serving-estimates", content=text,
                           headers={"content-type": "application/json"})
    assert response.status_code in (400, 422)
    assert response.headers["content-type"] == "application/problem+json"


def test_serving_plans_rank_by_cost_and_every_plan_meets_the_slo(client: TestClient) -> None:
    from service.api.schemas.serving import SERVING_PLAN_EXAMPLE
    response = client.post("/v1/serving-plans", json=SERVING_PLAN_EXAMPLE)
    assert response.status_code == 200, response.text
    answer = response.json()
    plans = answer["plans"]
    assert plans
    costs = [Decimal(p["estimate"]["cost"]["usd_per_hour"]) for p in plans]
    assert costs == sorted(costs)
    for plan in plans:
        e = plan["estimate"]
        assert e["sizing"]["meets_slo"] is True
        assert e["memory"]["fits"] is True
        assert e["latency"]["ttft_s"]["p99"] <= 2.0
        assert e["latency"]["tpot_s"]["p99"] <= 0.1
        # The plan's own serving estimate reproduces it.
        again = client.post("/v1/serving-estimates", json={
            "model": SERVING_PLAN_EXAMPLE["model"], "deployment": plan["deployment"],
            "traffic": SERVING_PLAN_EXAMPLE["traffic"]}).json()
        assert again["sizing"]["replicas"] == e["sizing"]["replicas"]
    front = answer["pareto"]
    ttfts = [p["estimate"]["latency"]["ttft_s"]["p99"] for p in front]
    assert ttfts == sorted(ttfts, reverse=True)
    assert front[0]["estimate"]["cost"] == plans[0]["estimate"]["cost"]
    # 3 accelerators x tp options x 2 x 2 precisions, A100 has no fp8 peak.
    assert answer["search"]["candidates_total"] >= 3 * 4 * 4
    assert answer["search"]["feasible"] >= len(plans)


def test_serving_plans_with_an_impossible_slo_return_the_closest(client: TestClient) -> None:
    from service.api.schemas.serving import SERVING_PLAN_EXAMPLE
    request = copy.deepcopy(SERVING_PLAN_EXAMPLE)
    request["traffic"]["slo"] = {"tpot_p99_s": 0.0005}
    answer = client.post("/v1/serving-plans", json=request).json()
    assert answer["plans"] == []
    assert answer["pareto"] == []
    assert answer["closest"]
    bad = copy.deepcopy(SERVING_PLAN_EXAMPLE)
    bad["price_per_gpu_hour_usd"] = {"b200-sxm-180gb": "5.00"}
    assert_problem(client.post("/v1/serving-plans", json=bad), 422)


def test_pinned_replicas_past_their_capacity_answer_saturated_with_null_latency(
        client: TestClient) -> None:
    """Issue 40: a replica pinned at twice its capacity is not re-sized; the answer is 200,
    coded saturated with the queue's growth, and its unbounded latencies are null (no NaN,
    no infinity: the body parses as strict JSON)."""
    import json

    one = client.post("/v1/serving-estimates", json=body(replicas=1)).json()
    capacity = one["throughput"]["capacity_requests_per_s"]
    request = body(replicas=1)
    request["traffic"]["requests_per_s"] = 2 * capacity
    response = client.post("/v1/serving-estimates", json=request)
    assert response.status_code == 200, response.text
    e = json.loads(response.text, parse_constant=lambda c: pytest.fail(f"{c} in the body"))
    assert e["sizing"]["replicas"] == 1
    assert e["sizing"]["saturated"] is True
    assert e["sizing"]["meets_slo"] is False
    assert e["sizing"]["queue_growth_requests_per_s"] == pytest.approx(capacity, rel=1e-9)
    assert e["latency"]["ttft_s"] is None
    assert e["latency"]["e2e_s"] is None
    assert e["latency"]["tpot_s"]["p99"] > 0
    codes = {d["code"]: d for d in e["warning_details"]}
    assert codes["saturated"]["field"] == "deployment.replicas"
    # Without the pin the same load is sized into replicas that serve it.
    sized = client.post("/v1/serving-estimates", json={**request, "deployment": {
        k: v for k, v in request["deployment"].items() if k != "replicas"}}).json()
    assert sized["sizing"]["replicas"] >= 2
    assert sized["sizing"]["saturated"] is False
    assert sized["sizing"]["queue_growth_requests_per_s"] is None
    assert sized["latency"]["ttft_s"]["p99"] > 0


def test_engine_version_defaults_to_the_latest_and_an_unknown_one_is_refused(
        client: TestClient) -> None:
    from service.core.serving import ENGINE_LIMITS, Engine

    e = client.post("/v1/serving-estimates", json=SERVING_EXAMPLE).json()
    [detail] = [d for d in e["warning_details"] if d["code"] == "defaulted_input"]
    assert detail["field"] == "deployment.engine_version"
    assert ENGINE_LIMITS[Engine.TRTLLM][-1].version in detail["message"]
    assert any(a.startswith("engine limits: trtllm") for a in e["assumptions"])
    pinned = client.post("/v1/serving-estimates", json=body(engine_version="0.16")).json()
    assert pinned["warning_details"] == []
    for version in ("seven", "0.15.0", "0.16 ", "0.16.0-final"):  # malformed, or too old
        problem = assert_problem(client.post("/v1/serving-estimates",
                                             json=body(engine_version=version)),
                                 422, "deployment.engine_version")
        assert all(x.version in problem["detail"] for x in ENGINE_LIMITS[Engine.TRTLLM])
    assert_problem(client.post("/v1/serving-estimates", json=body(replicas=0)), 422,
                   "deployment.replicas")


def test_a_release_is_accepted_and_mapped_to_the_documented_defaults_at_or_below_it(
        client: TestClient) -> None:
    """issue 40: ``engine_version`` takes a release such as 0.6.3 (before, only a documented
    version, 0.6 or 0.10 for vLLM): the newest documented defaults at or below it, named in
    the assumptions; vLLM before 0.8 runs V0, coded on the field."""
    request = body(engine="vllm", engine_version="0.6.3")
    response = client.post("/v1/serving-estimates", json=request)
    assert response.status_code == 200, response.text
    e = response.json()
    [mapped] = [a for a in e["assumptions"] if a.startswith("deployment.engine_version 0.6.3")]
    assert "0.6's" in mapped
    assert any(a.startswith("engine limits: vllm 0.6 defaults") for a in e["assumptions"])
    [v0] = [d for d in e["warning_details"] if d["field"] == "deployment.engine_version"]
    assert v0["code"] == "outside_validated_range"
    assert "V0" in v0["message"]
    later = client.post("/v1/serving-estimates", json=body(engine="vllm",
                                                           engine_version="0.10.2")).json()
    assert not [d for d in later["warning_details"]
                if d["field"] == "deployment.engine_version"]
    assert any(a.startswith("deployment.engine_version 0.10.2") for a in later["assumptions"])
    assert_problem(client.post("/v1/serving-estimates",
                               json=body(engine="vllm", engine_version="0.6.three")),
                   422, "deployment.engine_version")
    assert_problem(client.post("/v1/serving-estimates",
                               json=body(engine="vllm", engine_version="0.5.4")),
                   422, "deployment.engine_version")
