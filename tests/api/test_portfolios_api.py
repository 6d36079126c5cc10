"""POST /v1/portfolios (issue 44): a stored, immutable plan that verifies; the quote's
ownership rules; 422s naming the field. On SQLite and PostgreSQL."""

from __future__ import annotations

import copy
import math
import uuid
from decimal import Decimal
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from service.api import portfolio_solver
from service.catalog.models import Portfolio
from tests.factories import auth_headers

JOB = {"gpu_hours": {"accelerator": "h100-sxm5-80gb", "gpu_hours": 20000, "num_gpus": 16}}
BODY: dict[str, Any] = {
    "name": "test portfolio",
    "horizon": {"start": "2027-01", "months": 3},
    "jobs": [{"id": "a", "workload": JOB, "earliest_start": "2027-01", "deadline": "2027-03"},
             {"id": "b", "workload": JOB, "earliest_start": "2027-02", "deadline": "2027-03",
              "must_run": False}],
    "providers": ["aws"], "regions": ["us-east-1"],
}
KEYS = {"owner": (("quotes:write",), "alpha"), "stranger": (("quotes:write",), "beta"),
        "teammate": (("quotes:read",), "alpha")}


@pytest.fixture
def keys(db_session: Session) -> dict[str, dict[str, str]]:
    return auth_headers(db_session, KEYS)


def _post(client: TestClient, headers: dict[str, str], body: dict[str, Any],
          key: str | None = None) -> Any:
    return client.post("/v1/portfolios", json=body,
                       headers={**headers, "Idempotency-Key": key or uuid.uuid4().hex})


def test_a_plan_is_stored_replayed_read_and_verified(
        client: TestClient, keys: dict[str, dict[str, str]]) -> None:
    key = uuid.uuid4().hex
    made = _post(client, keys["owner"], BODY, key)
    assert made.status_code == 201, made.text
    plan = made.json()
    assert plan["solver"]["optimal"] is True
    assert plan["solver"]["gap_usd"] is not None
    assert plan["verdict"] == "approve"
    assert all(j["run"] for j in plan["jobs"])
    totals = plan["totals"]
    billed = sum(Decimal(m["billed_cost_usd"]) for m in plan["months"])
    assert billed == Decimal(totals["billed_in_horizon_usd"])
    assert (Decimal(totals["effective_in_horizon_usd"])
            + Decimal(totals["effective_beyond_horizon_usd"])
            == Decimal(totals["committed_total_usd"]))
    assert plan["baselines"]
    assert all(
        Decimal(totals["objective_usd"]) <= Decimal(b["total_usd"]) for b in plan["baselines"])
    again = _post(client, keys["owner"], BODY, key)
    assert again.status_code == 201
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.content == made.content
    url = f"/v1/portfolios/{plan['id']}"
    assert client.get(url, headers=keys["teammate"]).content == made.content
    assert client.get(url, headers=keys["stranger"]).status_code == 404
    verified = client.post(f"{url}/verify", headers=keys["owner"])
    assert verified.status_code == 200, verified.text
    assert verified.json()["matches"], verified.text

    # The portal page: the charts for the owner, the key form without a key, 404 otherwise.
    page = client.get(f"/ui/portfolios/{plan['id']}", headers=keys["owner"])
    assert page.status_code == 200, page.text
    assert 'id="capacity-chart"' in page.text
    assert 'id="cash-chart"' in page.text
    assert plan["months"][0]["billed_cost_usd"] in page.text
    asked = client.get(f"/ui/portfolios/{plan['id']}")
    assert asked.status_code == 401
    assert 'name="api_key"' in asked.text
    assert client.get(f"/ui/portfolios/{plan['id']}",
                      headers=keys["stranger"]).status_code == 404

    # What if: the same prices change nothing; spot (what the plan runs on) at half price
    # costs less.
    same = client.post(f"{url}/what-if", headers=keys["owner"],
                       json={"change": "price", "term": "on_demand", "factor": 1.0})
    assert same.status_code == 200, same.text
    assert Decimal(same.json()["delta_usd"]) == 0
    assert same.json()["purchases_added"] == same.json()["purchases_removed"] == []
    half = client.post(f"{url}/what-if", headers=keys["owner"],
                       json={"change": "price", "term": "spot", "factor": 0.5}).json()
    assert Decimal(half["delta_usd"]) < 0
    assert Decimal(half["changed_total_usd"]) < Decimal(totals["objective_usd"])
    assert client.post(f"{url}/what-if", headers=keys["stranger"], json={
        "change": "price", "term": "on_demand", "factor": 0.5}).status_code == 404

    # A horizon budget a cent below the optimum rejects, naming the period.
    cent_below = Decimal(totals["objective_usd"]) - Decimal("0.01")
    tight = {**BODY, "jobs": BODY["jobs"][:1], "budget": {
        "amount": str(cent_below), "currency": "USD", "per": "horizon"}}
    solo = _post(client, keys["owner"], {**BODY, "jobs": BODY["jobs"][:1]}).json()
    tight["budget"]["amount"] = str(Decimal(solo["totals"]["objective_usd"]) - Decimal("0.01"))
    refused = _post(client, keys["owner"], tight)
    assert refused.status_code == 201, refused.text
    assert refused.json()["verdict"] == "reject"
    assert [r["period"] for r in refused.json()["reasons"]] == ["horizon"]


@pytest.mark.parametrize(("change", "field"), [
    ({"jobs": [{**BODY["jobs"][0], "deadline": "2026-12"}]}, "deadline"),
    ({"jobs": [{**BODY["jobs"][0], "deadline": "2027-09"}]}, "horizon"),
    ({"terms": ["reserved_5y"]}, "terms"),
    ({"jobs": [{**BODY["jobs"][0], "deadline": "2027-01", "workload": {"gpu_hours": {
        "accelerator": "h100-sxm5-80gb", "gpu_hours": 2000000, "num_gpus": 16}}}]}, "jobs.0"),
])
def test_bad_input_is_422_naming_the_field(client: TestClient,
                                           keys: dict[str, dict[str, str]],
                                           change: dict[str, Any], field: str) -> None:
    response = _post(client, keys["owner"], {**BODY, **change})
    assert response.status_code == 422, response.text
    assert field in response.text


FLEET: dict[str, Any] = {"id": "chat", "workload": {"serving": {"estimate": {
    "model": {"preset": "llama3.1-70b"},
    "deployment": {"accelerator": "h100-sxm5-80gb", "gpus_per_replica": 4, "tp": 4, "pp": 1,
                   "weight_precision": "fp8", "kv_cache_precision": "fp8", "engine": "trtllm",
                   "max_batch": 256},
    "traffic": {"mode": "online", "prompt_tokens": {"mean": 1024},
                "output_tokens": {"mean": 256}, "requests_per_s": 10,
                "slo": {"ttft_p99_s": 2.0, "tpot_p99_s": 0.1}}}, "duration_s": 2629800}},
    "monthly_requests_per_s": [5.0, 10.0, 20.0]}


def test_a_fleet_follows_its_monthly_load_and_a_higher_load_costs_more(
        client: TestClient, keys: dict[str, dict[str, str]]) -> None:
    body = {**BODY, "jobs": [], "fleets": [FLEET]}
    made = _post(client, keys["owner"], body)
    assert made.status_code == 201, made.text
    plan = made.json()
    replicas = plan["fleets"][0]["replicas"]
    assert replicas == sorted(replicas)
    assert replicas[0] < replicas[-1]  # the load quadruples over the horizon
    assert all(month for month in plan["fleets"][0]["months"])  # served every month
    assert plan["baselines"]
    assert all(Decimal(plan["totals"]["objective_usd"]) <= Decimal(b["total_usd"])
               for b in plan["baselines"])  # never worse than a baseline
    higher = client.post(f"/v1/portfolios/{plan['id']}/what-if", headers=keys["owner"],
                          json={"change": "demand", "fleet": "chat", "month": "2027-03",
                                "factor": 4.0})  # past the 4 replicas of its 2 instances
    assert higher.status_code == 200, higher.text
    assert Decimal(higher.json()["delta_usd"]) > 0
    unknown = client.post(f"/v1/portfolios/{plan['id']}/what-if", headers=keys["owner"],
                          json={"change": "demand", "fleet": "nope", "month": "2027-03",
                                "factor": 2.0})
    assert unknown.status_code == 422
    assert "fleet" in unknown.text


# --- The band's slow end (issue 40): each fleet's sizing there, its cost, the verdict -------

FLEET_BODY = {**BODY, "jobs": [], "fleets": [FLEET]}


def _estimate_at(rate: float) -> dict[str, Any]:
    estimate: dict[str, Any] = copy.deepcopy(FLEET["workload"]["serving"]["estimate"])
    estimate["traffic"]["requests_per_s"] = rate
    return estimate


def test_a_fleet_states_its_replicas_at_the_band_slow_end_and_the_plan_their_cost(
        client: TestClient, keys: dict[str, dict[str, str]]) -> None:
    made = _post(client, keys["owner"], FLEET_BODY)
    assert made.status_code == 201, made.text
    plan = made.json()
    fleet = plan["fleets"][0]
    factor = fleet["band_slow_end_factor"]
    assert factor >= 1
    slow = fleet["replicas_at_band_slow_end"]
    assert len(slow) == len(fleet["replicas"]) == 3
    assert all(s >= e for s, e in zip(slow, fleet["replicas"], strict=True))
    for rate, at_slow_end in zip(FLEET["monthly_requests_per_s"], slow, strict=True):
        # The same serving estimate's figures, as a quote line carries them.
        answer = client.post("/v1/serving-estimates", json=_estimate_at(rate))
        assert answer.status_code == 200, answer.text
        sizing = answer.json()["sizing"]
        assert sizing["replicas_at_band_slow_end"] == at_slow_end
        assert sizing["band_slow_end_factor"] == pytest.approx(factor)
        # At least the load x the factor over one replica's capacity (the SLOs divided by
        # the factor may need more).
        capacity = answer.json()["throughput"]["capacity_requests_per_s"]
        assert at_slow_end >= math.ceil(rate * factor / capacity - 1e-9)
    assert {d["code"] for d in fleet["warning_details"]} == {
        d["code"] for d in answer.json()["warning_details"]}  # the peak month's estimate
    extra = fleet["extra_instances_at_band_slow_end"]
    assert len(extra) == 3
    assert all(month for month, s, e in zip(extra, slow, fleet["replicas"], strict=True)
               if s > e)
    for month in plan["months"]:
        assert (Decimal(month["billed_cost_at_band_slow_end_usd"])
                >= Decimal(month["billed_cost_usd"]))
    totals = plan["totals"]
    assert Decimal(totals["objective_at_band_slow_end_usd"]) > Decimal(totals["objective_usd"])
    assert plan["verdict"] == "approve"
    verified = client.post(f"/v1/portfolios/{plan['id']}/verify", headers=keys["owner"])
    assert verified.json()["matches"], verified.text


def test_a_budget_between_the_expected_and_the_slow_end_cost_warns_naming_the_period(
        client: TestClient, keys: dict[str, dict[str, str]]) -> None:
    free = _post(client, keys["owner"], FLEET_BODY).json()
    # A monthly budget that the dearest expected month meets: every month the slow end
    # takes past it warns estimate_uncertain, naming the month; the verdict approves.
    dearest = max(Decimal(m["billed_cost_usd"]) for m in free["months"])
    body = {**FLEET_BODY, "budget": {"amount": str(dearest), "currency": "USD",
                                     "per": "month"}}
    made = _post(client, keys["owner"], body)
    assert made.status_code == 201, made.text
    plan = made.json()
    assert plan["verdict"] == "approve", plan["reasons"]
    periods = plan["budget"]["periods"]
    assert all(p["within"] for p in periods)
    over = [p["period"] for p in periods if not p["within_at_band_slow_end"]]
    assert over  # the slow end needs several times the replicas
    for p in periods:
        assert (Decimal(p["spent_usd"]) <= Decimal(p["budget_usd"])
                < Decimal(p["spent_at_band_slow_end_usd"])) is (p["period"] in over)
    warned = [r for r in plan["reasons"] if r["code"] == "estimate_uncertain"]
    assert [r["period"] for r in warned] == over
    assert all(r["outcome"] == "warn" and r["rule"] == "budget" for r in warned)
    # A budget above the slow-end cost too approves without the warning.
    high = 2 * max(Decimal(p["spent_at_band_slow_end_usd"]) for p in periods)
    covered = _post(client, keys["owner"], {**body, "budget": {
        "amount": str(high), "currency": "USD", "per": "month"}}).json()
    assert covered["verdict"] == "approve"
    assert all(p["within_at_band_slow_end"] for p in covered["budget"]["periods"])
    assert "estimate_uncertain" not in {r["code"] for r in covered["reasons"]}


def test_a_moe_fleet_fails_estimate_unvalidated_unless_the_policy_allows_it(
        client: TestClient, keys: dict[str, dict[str, str]], db_session: Session) -> None:
    fleet = copy.deepcopy(FLEET)
    estimate = fleet["workload"]["serving"]["estimate"]
    estimate["model"] = {"preset": "mixtral-8x7b"}
    estimate["deployment"].update(tp=2, gpus_per_replica=2)
    body = {**BODY, "jobs": [], "fleets": [fleet]}
    made = _post(client, keys["owner"], body)
    assert made.status_code == 201, made.text  # was 422 "fleet chat fits no offer"
    plan = made.json()
    assert "outside_validated_range" in {d["code"] for d in plan["fleets"][0]["warning_details"]}
    assert plan["verdict"] == "reject"
    failed = [r for r in plan["reasons"] if r["code"] == "estimate_unvalidated"]
    assert len(failed) == 1, plan["reasons"]
    assert failed[0]["outcome"] == "fail"
    assert failed[0]["rule"] == "forbid_unvalidated_estimates"
    assert failed[0]["fleet"] == "chat"
    # A policy that accepts the risk approves, with the rule as a warning.
    admin = auth_headers(db_session, {"policy-admin": (("policies:write",), "alpha")})
    policy = client.post("/v1/policies", json={
        "name": "serving-risk", "rules": {"forbid_unvalidated_estimates": False}},
        headers=admin["policy-admin"])
    assert policy.status_code == 201, policy.text
    allowed = _post(client, keys["owner"], {**body, "policy": "serving-risk"}).json()
    assert allowed["verdict"] == "approve", allowed["reasons"]
    assert ("estimate_unvalidated", "warn") in {
        (r["code"], r.get("outcome")) for r in allowed["reasons"]}


def test_a_running_serving_job_on_a_moe_estimate_fails_estimate_unvalidated(
        client: TestClient, keys: dict[str, dict[str, str]]) -> None:
    serving = copy.deepcopy(FLEET["workload"]["serving"])
    serving["estimate"]["model"] = {"preset": "mixtral-8x7b"}
    serving["estimate"]["deployment"].update(tp=2, gpus_per_replica=2)
    body = {**BODY, "jobs": [{"id": "moe", "workload": {"serving": serving},
                              "earliest_start": "2027-01", "deadline": "2027-03"}]}
    made = _post(client, keys["owner"], body)
    assert made.status_code == 201, made.text
    plan = made.json()
    assert plan["verdict"] == "reject"
    failed = [r for r in plan["reasons"] if r["code"] == "estimate_unvalidated"]
    assert [(r["job"], r["outcome"]) for r in failed] == [("moe", "fail")]


# --- Bounds: the work budget (node_limit, counted) and the clock guard (time_limit_s) -------
#
# node_limit 0 stops every HiGHS solve before its root node, whatever the machine's speed:
# the limit is a count, so these tests never depend on how fast the machine is.

def _job(index: int, gpus: int, gpu_hours: int) -> dict[str, Any]:
    return {"id": f"k{index}", "workload": {"gpu_hours": {
        "accelerator": "h100-sxm5-80gb", "gpu_hours": gpu_hours, "num_gpus": gpus}},
        "earliest_start": "2027-01", "deadline": "2027-04", "must_run": index % 3 != 2}


KNAPSACK = {**BODY, "horizon": {"start": "2027-01", "months": 4}, "jobs": [
    _job(i, gpus, hours) for i, (gpus, hours) in enumerate(
        [(16, 9000), (24, 20000), (32, 15000), (16, 30000), (40, 12000), (24, 8000)])]}
"""Six jobs competing for the zone's 64 spot GPUs over four months: a knapsack that HiGHS's
presolve does not solve by itself, so a node limit of 0 stops it (the BODY above is solved
by presolve alone)."""


def _stored(db_session: Session) -> int:
    return db_session.query(Portfolio).count()


def _is_deadline_problem(response: Any) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["type"].endswith(":problems/search-deadline")
    assert "Retry-After" in response.headers
    assert "nothing was stored" in response.json()["detail"]


def test_past_the_work_budget_refuse_is_503_with_nothing_stored(
        client: TestClient, keys: dict[str, dict[str, str]], db_session: Session) -> None:
    before = _stored(db_session)
    refused = _post(client, keys["owner"], {**KNAPSACK, "node_limit": 0})  # on_limit: refuse
    _is_deadline_problem(refused)
    assert "node_limit 0" in refused.json()["detail"]
    assert _stored(db_session) == before


def test_past_the_work_budget_best_stores_the_best_plan_with_its_gap_and_it_verifies(
        client: TestClient, keys: dict[str, dict[str, str]], db_session: Session) -> None:
    before = _stored(db_session)
    made = _post(client, keys["owner"], {**KNAPSACK, "node_limit": 0, "on_limit": "best"})
    assert made.status_code == 201, made.text
    assert _stored(db_session) == before + 1
    solver = made.json()["solver"]
    assert solver["status"] == "node_limit"
    assert solver["optimal"] is False
    assert solver["gap_usd"] is not None
    assert solver["gap_usd"] > 0
    assert solver["gap_fraction"] is not None
    assert solver["gap_fraction"] > 0
    # Never cheaper than the proven optimum of the same request without the limit.
    optimum = _post(client, keys["owner"], KNAPSACK).json()
    assert optimum["solver"]["optimal"] is True
    best_total = Decimal(made.json()["totals"]["objective_usd"])
    assert best_total >= Decimal(optimum["totals"]["objective_usd"])
    # Never worse than a baseline that keeps the limits, even stopped before the root node.
    kept = [b for b in made.json()["baselines"] if b["within_limits"]]
    assert kept
    assert all(best_total <= Decimal(b["total_usd"]) for b in kept), made.json()["baselines"]
    # Reproducible: the same request and versions give the same plan, so it verifies.
    verified = client.post(f"/v1/portfolios/{made.json()['id']}/verify",
                           headers=keys["owner"])
    assert verified.status_code == 200, verified.text
    assert verified.json()["matches"], verified.text


def test_a_solve_the_clock_stops_is_503_even_under_on_limit_best(
        client: TestClient, keys: dict[str, dict[str, str]], db_session: Session,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The clock guard is injected as spent, so no test waits on (or races) a real clock: a
    # plan cut by the clock depends on the machine's speed and would not verify.
    monkeypatch.setattr(portfolio_solver._Clock, "left_s", lambda self: 0.0)
    before = _stored(db_session)
    refused = _post(client, keys["owner"], {**KNAPSACK, "on_limit": "best"})
    _is_deadline_problem(refused)
    assert "stopped by the clock" in refused.json()["detail"]
    assert _stored(db_session) == before
