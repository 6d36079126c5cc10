"""POST /v1/parallelism-plans over HTTP."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from service.api.schemas.plans import MAX_SEARCH_CANDIDATES, PLAN_SEARCH_EXAMPLE, SWEEP_EXAMPLE
from service.main import create_app, dispose
from service.settings import Settings
from tests.api.test_estimates import assert_problem


def body(**changes: Any) -> dict[str, Any]:
    result = copy.deepcopy(PLAN_SEARCH_EXAMPLE)
    for path, value in changes.items():
        *parents, leaf = path.split(".")
        node = result
        for part in parents:
            node = node.setdefault(part, {})
        if value is None:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return result


def test_documented_example_ranks_plans_that_agree_with_estimates(client: TestClient) -> None:
    response = client.post("/v1/parallelism-plans", json=PLAN_SEARCH_EXAMPLE)
    assert response.status_code == 200, response.text
    result = response.json()
    plans = result["plans"]
    assert [p["rank"] for p in plans] == [1, 2, 3, 4, 5]
    times = [p["time"]["train_s"] for p in plans]
    assert times == sorted(times)
    assert result["search"]["candidates_total"] >= 100_000
    assert result["search"]["feasible"] <= result["search"]["candidates_evaluated"]
    assert result["search"]["truncated"] is False
    assert result["search"]["covered_fraction"] == 1.0
    best = plans[0]
    assert best["memory"]["fits"] is True
    estimate = client.post("/v1/estimates", json={
        "model": {"preset": "gpt3-175b"},
        "cluster": {"accelerator": "a100-sxm4-80gb", "num_gpus": 1024, "gpus_per_node": 8},
        "parallelism": best["parallelism"],
        "training": {"seq_len": 2048, "global_batch_seqs": 1536, "tokens": 300e9},
    }).json()
    assert estimate["time"]["tokens_per_s"] == pytest.approx(best["time"]["tokens_per_s"],
                                                             rel=1e-12)
    assert estimate["memory"] == best["memory"]


def test_sweep_with_prices_returns_a_time_cost_front(client: TestClient) -> None:
    request = body(
        model={"preset": "llama3.1-8b"},
        training={"seq_len": 8192, "global_batch_range": {"start": 64, "stop": 256, "step": 64},
                  "tokens": 1e12},
        cluster=None,
        clusters=[
            {"accelerator": "h100-sxm5-80gb", "num_gpus_range": {"start": 32, "stop": 128,
                                                                 "step": 32}},
            {"accelerator": "a100-sxm4-80gb", "num_gpus": 64},
        ],
        constraints={"price_per_gpu_hour_usd": {"h100-sxm5-80gb": "2.50",
                                                "a100-sxm4-80gb": "1.20"},
                     "memory_headroom_fraction": 0.1},
        objective="pareto",
    )
    response = client.post("/v1/parallelism-plans", json=request)
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["cost_basis"] == "usd"
    front = result["pareto"]
    assert front
    times = [p["time"]["train_s"] for p in front]
    costs = [float(p["cost_usd"]) for p in front]
    assert times == sorted(times)
    assert costs == sorted(costs, reverse=True)
    assert result["plans"] == front[: len(result["plans"])]
    for plan in front:
        capacity = plan["memory"]["capacity_bytes_per_gpu"]
        assert plan["memory"]["peak_bytes_per_gpu"] <= 0.9 * capacity


def test_nothing_fits_is_422_with_the_closest_candidates(client: TestClient) -> None:
    response = client.post("/v1/parallelism-plans",
                           json=body(**{"cluster.num_gpus": 8}))
    problem = assert_problem(response, 422)
    assert problem["type"].endswith("no-feasible-plan")
    assert problem["closest"]
    assert "GiB per GPU, has" in problem["closest"][0]["reasons"][0]


@pytest.fixture
def capped_client(migrated_engine: Engine) -> Iterator[TestClient]:
    settings = Settings(database_url=migrated_engine.url.render_as_string(hide_password=False),
                        search_max_candidates=10_000)
    app = create_app(settings)
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client
    dispose(app)


def test_space_over_the_work_cap_is_422_before_any_work(capped_client: TestClient) -> None:
    problem = assert_problem(capped_client.post("/v1/parallelism-plans", json=body()), 422,
                             "constraints")
    assert "limit is 10,000" in problem["detail"]


@pytest.mark.parametrize(("changes", "field"), [
    ({"top_k": 101}, "top_k"),
    ({"top_k": 0}, "top_k"),
    ({"objective": "fastest"}, "objective"),
    ({"cluster.accelerator": "h900"}, "cluster.accelerator"),
    ({"cluster.num_gpus": 0}, "cluster.num_gpus"),
    ({"constraints": {"vary": ["tp", "warp"]}}, "constraints.vary.1"),
    ({"constraints": {"memory_headroom_fraction": 0.95}},
     "constraints.memory_headroom_fraction"),
    ({"constraints": {"fixed": {"dp": 4}}}, "constraints.fixed"),
    ({"constraints": {"budget_usd": "-5"}}, "constraints.budget_usd"),
    ({"objective": "cost"}, "price_per_gpu_hour_usd"),
    ({"training.global_batch_seqs_options": [64]}, "training"),
    ({"clusters": [{"accelerator": "h100-sxm5-80gb", "num_gpus": 8}]}, "body"),
    ({"cluster.num_gpus_range": {"start": 8, "stop": 100000, "step": 8}}, "cluster"),
    ({"training.tokens": float("nan")}, "training.tokens"),
    ({"training.tokens": "3e11"}, "training.tokens"),
    ({"constraints": {"max_train_s": True}}, "constraints.max_train_s"),
])
def test_bad_requests_are_problems_naming_the_field(
    client: TestClient, changes: dict[str, Any], field: str
) -> None:
    payload = json.dumps(body(**changes))  # NaN is written as the bare token NaN
    response = client.post("/v1/parallelism-plans", content=payload,
                           headers={"content-type": "application/json"})
    assert_problem(response, 422, field)


def test_the_carbon_objective_ranks_by_each_clusters_grid_not_by_energy(
    client: TestClient,
) -> None:
    """One request compares regions: the same H100 cluster in a coal-heavy grid and in a
    hydro/nuclear one, plus an A100 cluster in the dirty one. Energy ranks by kWh alone; carbon
    must put every plan of the clean site first, and each plan's CO2e is its own grid's."""
    dirty, clean = 820.0, 39.32
    request = body(
        model={"preset": "llama3.1-8b"},
        training={"seq_len": 8192, "global_batch_seqs": 128, "tokens": 1e11},
        cluster=None,
        clusters=[
            {"accelerator": "h100-sxm5-80gb", "num_gpus": 64, "grid_gco2e_per_kwh": dirty},
            {"accelerator": "a100-sxm4-80gb", "num_gpus": 64, "grid_gco2e_per_kwh": clean},
        ],
        top_k=20,
    )
    by_energy = client.post("/v1/parallelism-plans", json={**request, "objective": "energy"})
    by_carbon = client.post("/v1/parallelism-plans", json={**request, "objective": "carbon"})
    assert by_energy.status_code == by_carbon.status_code == 200, by_carbon.text
    energy_plans, carbon_plans = by_energy.json()["plans"], by_carbon.json()["plans"]
    # H100 needs fewer kWh for the same tokens, so energy prefers it; its grid is 21x dirtier.
    assert energy_plans[0]["accelerator"] == "h100-sxm5-80gb"
    assert carbon_plans[0]["accelerator"] == "a100-sxm4-80gb"
    co2e = [p["energy"]["co2e_kg"] for p in carbon_plans]
    assert co2e == sorted(co2e)
    for plan in carbon_plans + energy_plans:
        grid = clean if plan["accelerator"] == "a100-sxm4-80gb" else dirty
        assert plan["energy"]["grid_gco2e_per_kwh"] == grid
        assert plan["energy"]["co2e_kg"] == pytest.approx(plan["energy"]["kwh"] * grid / 1000)


def test_a_cluster_grid_intensity_out_of_range_is_a_problem_naming_it(
    client: TestClient,
) -> None:
    request = body(cluster={"accelerator": "a100-sxm4-80gb", "num_gpus": 8,
                            "grid_gco2e_per_kwh": float("inf")})
    response = client.post("/v1/parallelism-plans",
                           content=json.dumps(request).replace("Infinity", "1e309"),
                           headers={"content-type": "application/json"})
    assert_problem(response, 422, "cluster.grid_gco2e_per_kwh")
    response = client.post("/v1/parallelism-plans", json=body(
        cluster={"accelerator": "a100-sxm4-80gb", "num_gpus": 8, "grid_gco2e_per_kwh": 2001}))
    assert_problem(response, 422, "cluster.grid_gco2e_per_kwh")


def test_plans_nobody_would_run_are_warned(client: TestClient) -> None:
    """Issue 18: a plan over 10x the cheapest of the same answer, or over the wall-clock limit
    (365 days by default), carries a warning with a stable prefix."""
    request = body(
        model={"preset": "llama3.1-8b"},
        training={"seq_len": 8192, "global_batch_seqs": 512, "tokens": 1e12},
        cluster=None,
        clusters=[{"accelerator": "h100-sxm5-80gb", "num_gpus": 64},
                  {"accelerator": "a100-sxm4-80gb", "num_gpus": 8}],
        constraints={"price_per_gpu_hour_usd": {"h100-sxm5-80gb": "100.00",
                                                "a100-sxm4-80gb": "1.00"}},
        objective="pareto", top_k=100,
    )
    response = client.post("/v1/parallelism-plans", json=request)
    assert response.status_code == 200, response.text
    plans = response.json()["plans"]
    cheapest = min(float(p["cost_usd"]) for p in plans)
    for plan in plans:
        costly = [w for w in plan["warnings"] if w.startswith("impractical cost: ")]
        assert bool(costly) == (float(plan["cost_usd"]) > 10 * cheapest), plan["cost_usd"]
        slow = [w for w in plan["warnings"] if w.startswith("impractical wall-clock: ")]
        assert bool(slow) == (plan["time"]["train_s"] > 365 * 86_400)
    assert any(w.startswith("impractical cost: ") for p in plans for w in p["warnings"])
    assert any(w.startswith("impractical wall-clock: ") for p in plans for w in p["warnings"])


def test_the_cap_is_published_in_the_answer_and_the_openapi_document(
    app_with: Any,
) -> None:
    """Issue 38: the work is counted in candidates; the cap a search ran under is in its
    answer, and the request fields that size the space say what it is."""
    client = app_with(search_max_candidates=300_000)
    answer = client.post("/v1/parallelism-plans", json=PLAN_SEARCH_EXAMPLE).json()
    assert answer["search"]["max_candidates"] == 300_000
    assert answer["search"]["candidates_total"] <= 300_000
    default = app_with().post("/v1/parallelism-plans", json=PLAN_SEARCH_EXAMPLE).json()
    assert default["search"]["max_candidates"] == MAX_SEARCH_CANDIDATES
    schemas = app_with().get("/openapi.json").json()["components"]["schemas"]
    published = f"at most {MAX_SEARCH_CANDIDATES:,} candidates"
    request = schemas["PlanSearchRequest"]["properties"]
    assert published in request["clusters"]["description"]
    assert published in request["constraints"]["description"]
    assert published in schemas["SearchOut"]["properties"]["max_candidates"]["description"]


def test_a_request_over_the_cap_names_the_field_and_the_limit_before_any_work(
    app_with: Any,
) -> None:
    client = app_with(search_max_candidates=1_000_000)
    sweep = copy.deepcopy(SWEEP_EXAMPLE)  # millions of candidates over 64 clusters
    problem = assert_problem(client.post("/v1/parallelism-plans", json=sweep), 422,
                             "constraints")
    assert "the limit is 1,000,000" in problem["detail"]
    assert "closest" not in problem


@pytest.mark.parametrize("workers", [0, 2])
def test_past_the_deadline_a_search_is_503_with_retry_after_never_a_partial_plan(
    app_with: Any, workers: int,
) -> None:
    """The deadline is a safety net: a 405B sweep of millions of candidates cannot finish in
    a millisecond on any machine, and it is refused, where it used to answer 200 from the
    part it had reached (``truncated``)."""
    client = app_with(search_deadline_s=0.001, search_workers=workers)
    sweep = copy.deepcopy(SWEEP_EXAMPLE)
    sweep["constraints"] = {}
    response = client.post("/v1/parallelism-plans", json=sweep)
    problem = assert_problem(response, 503)
    assert problem["type"].rsplit("/", 1)[-1] in ("search-deadline", "search-queue-timeout")
    assert "plans" not in problem
    assert int(response.headers["retry-after"]) == problem["retry_after_s"] >= 1
