"""A GPU count that no layout multiplies to (issue 38): 100,000 GPUs of GPT-3 175B was
refused with "no candidate fits in memory" though nothing was evaluated. It is now a 422
naming the GPU count and the nearest counts that have a layout; a count whose layouts all
exceed memory keeps the memory refusal."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.api.schemas.plans import PLAN_SEARCH_EXAMPLE
from service.core.errors import NoFeasiblePlanError, NoLayoutError
from service.core.search import (
    SearchRequest,
    frozen_clock,
    nearest_layout_counts,
    no_layout_problem,
    search,
)
from service.core.specs import ClusterSpec, TrainingSpec
from tests.api.test_estimates import assert_problem
from tests.factories import accelerator, model

GPT3_NEAREST = (99_840, 100_224)
"""The nearest counts with a GPT-3 175B layout (batch 1536, sequence 2048, 8 per node) to
99,999 and 100,000: 99,840 = tp 8 x pp 65 x cp 4 x dp 48; 100,224 = tp 6 x pp 87 x cp 4 x
dp 48. Between them, every count has a prime factor or a power of 5 that no degree takes."""


def _plans(num_gpus: int) -> dict[str, Any]:
    body = copy.deepcopy(PLAN_SEARCH_EXAMPLE)
    body["cluster"]["num_gpus"] = num_gpus
    return body


def _gpt3(num_gpus: int) -> SearchRequest:
    return SearchRequest(
        model=model("gpt3-175b"),
        clusters=(ClusterSpec(accelerator=accelerator("a100-sxm4-80gb"), num_gpus=num_gpus,
                              gpus_per_node=8),),
        training=TrainingSpec(seq_len=2048, global_batch_seqs=1536, tokens=300e9))


@pytest.mark.parametrize("num_gpus", [100_000, 99_999])
def test_a_count_without_a_layout_names_it_and_the_nearest_counts(
    client: TestClient, num_gpus: int
) -> None:
    problem = assert_problem(client.post("/v1/parallelism-plans", json=_plans(num_gpus)), 422,
                             "cluster.num_gpus")
    assert problem["type"].endswith("invalid-spec")
    assert f"no layout of exactly {num_gpus:,} GPUs" in problem["detail"]
    assert "nothing was evaluated" in problem["detail"]
    assert "the nearest GPU counts with a layout are 99,840 and 100,224" in problem["detail"]
    assert "fits in memory" not in problem["detail"]


@pytest.mark.parametrize("num_gpus", GPT3_NEAREST)
def test_the_nearest_counts_named_are_searched(client: TestClient, num_gpus: int) -> None:
    response = client.post("/v1/parallelism-plans", json=_plans(num_gpus))
    assert response.status_code == 200, response.text
    assert response.json()["plans"]


def test_a_count_whose_layouts_all_exceed_memory_keeps_the_memory_refusal(
    client: TestClient,
) -> None:
    problem = assert_problem(client.post("/v1/parallelism-plans", json=_plans(8)), 422)
    assert problem["type"].endswith("no-feasible-plan")
    assert problem["detail"].startswith("no candidate fits in memory")
    assert problem["closest"]


def test_a_range_with_no_layout_names_the_range_field(client: TestClient) -> None:
    body = _plans(1)
    del body["cluster"]
    body["clusters"] = [{"accelerator": "a100-sxm4-80gb", "gpus_per_node": 8,
                         "num_gpus_range": {"start": 99_999, "stop": 100_001}}]
    problem = assert_problem(client.post("/v1/parallelism-plans", json=body), 422,
                             "clusters.0.num_gpus_range")
    assert "no layout of exactly 99,999 GPUs (nor of the other 2 GPU counts asked)" in (
        problem["detail"])
    assert "99,840 and 100,224" in problem["detail"]


def test_a_range_where_some_counts_have_a_layout_is_searched(client: TestClient) -> None:
    body = _plans(1)
    del body["cluster"]
    body["clusters"] = [{"accelerator": "a100-sxm4-80gb", "gpus_per_node": 8,
                         "num_gpus_range": {"start": 99_840, "stop": 100_000, "step": 160}}]
    response = client.post("/v1/parallelism-plans", json=body)
    assert response.status_code == 200, response.text
    assert {p["num_gpus"] for p in response.json()["plans"]} == {99_840}


def test_a_quote_whose_only_count_has_no_layout_names_it(
    client: TestClient, api_key: Callable[..., dict[str, str]]
) -> None:
    body = {"workload": {"optimise": {
        "model": {"preset": "llama3.1-8b"},
        "training": {"seq_len": 8192, "global_batch_seqs": 128, "tokens": 1e12},
        "clusters": [{"accelerator": "h100-sxm5-80gb", "num_gpus": 100_000}]}},
        "providers": ["aws"]}
    response = client.post("/v1/quotes", json=body, headers={
        **api_key("quotes:write"), "Idempotency-Key": uuid.uuid4().hex})
    problem = assert_problem(response, 422, "workload.optimise.clusters.0.num_gpus")
    assert "no layout of exactly 100,000 GPUs" in problem["detail"]
    assert "the nearest GPU counts with a layout are" in problem["detail"]


def test_the_core_raises_no_layout_before_any_work() -> None:
    with pytest.raises(NoLayoutError) as info:
        search(_gpt3(100_000), frozen_clock)
    assert isinstance(info.value, NoFeasiblePlanError)  # quote sizing still skips the count
    assert info.value.candidates_total == 0
    assert info.value.num_gpus == 100_000
    refusal = no_layout_problem(info.value, _gpt3(100_000), "cluster.num_gpus")
    assert refusal.nearest == GPT3_NEAREST
    assert refusal.field == "cluster.num_gpus"


def test_the_nearest_count_scan_is_bounded() -> None:
    assert nearest_layout_counts(_gpt3(100_000), probes=0) == (None, None)
    # 160 probes reach 99,840 (160 below) but not 100,224 (224 above).
    assert nearest_layout_counts(_gpt3(100_000), probes=2 * 160) == (99_840, None)
    assert nearest_layout_counts(_gpt3(1), probes=10) == (None, 2)
