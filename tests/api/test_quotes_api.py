"""Quotes over HTTP, on SQLite and PostgreSQL: lines, budget gating, idempotency, storage,
verify after price changes, requote, listing, budget plans."""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from service.api.schemas.quotes import BUDGET_PLAN_EXAMPLE, QUOTE_EXAMPLE
from tests.api.test_estimates import assert_problem
from tests.factories import date_offers

KeyMaker = Callable[..., dict[str, str]]

GPU_HOURS_QUOTE: dict[str, Any] = {
    "workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb", "gpu_hours": 80_000,
                               "num_gpus": 256}},
    "providers": ["lambda", "aws"], "regions": ["us-east-1"],
    "terms": ["on_demand", "spot", "reserved_1y"],
}


def post(client: TestClient, headers: dict[str, str], body: dict[str, Any],
         key: str | None = None) -> Any:
    return client.post("/v1/quotes", json=body,
                       headers={**headers, "Idempotency-Key": key or uuid.uuid4().hex})


def all_lines(client: TestClient, quote: dict[str, Any],
              headers: dict[str, str]) -> list[dict[str, Any]]:
    """Every line of a quote, through GET /v1/quotes/{id}/lines, read by ``headers``' key."""
    lines: list[dict[str, Any]] = []
    token = None
    while True:
        params: dict[str, Any] = {"page_size": 200}
        if token:
            params["page_token"] = token
        page = client.get(f"/v1/quotes/{quote['id']}/lines", params=params,
                          headers=headers).json()
        lines += page["items"]
        token = page["next_page_token"]
        if not token:
            return lines


@pytest.fixture
def writer(api_key: KeyMaker) -> dict[str, str]:
    return api_key("quotes:write")


class TestLines:
    def test_example_prices_every_term_and_sorts_by_total(
        self, client: TestClient, writer: dict[str, str]
    ) -> None:
        response = post(client, writer, QUOTE_EXAMPLE)
        assert response.status_code == 201, response.text
        quote = response.json()
        assert quote["id"].startswith("q_")
        assert response.headers["location"] == f"/v1/quotes/{quote['id']}"
        feasible = [x for x in quote["lines"] if x["feasible"]]
        totals = [Decimal(x["total"]) for x in feasible]
        assert totals == sorted(totals)
        assert quote["cheapest"] == feasible[0]
        assert set(quote["cheapest_per_term"]) == {"on_demand", "spot", "reserved_1y",
                                                   "reserved_3y", "capacity_block", "onprem"}
        assert {x["provider"] for x in quote["lines"]} <= {"aws", "gcp", "onprem"}
        assert quote["summary"]["min_total"] == feasible[0]["total"]
        assert quote["verdict"] in {"approve", "reject"}
        assert quote["reasons"]
        assert quote["catalog_version"].startswith("cv_")
        assert len(quote["catalog_content_hash"]) == 64
        for line in feasible:
            assert line["currency"] == "USD"
            assert line["offer_id"] or line["term"] == "onprem"
            assert Decimal(line["total"]) == Decimal(line["total"]).quantize(Decimal("0.01"))
            # Commitment accounting (the default): the total is the cash committed.
            assert line["accounting"] == "commitment"
            assert line["total"] == line["commitment_total"]
            assert Decimal(line["commitment_total"]) >= Decimal(line["job_cost_total"])
            if line["term"].startswith("reserved"):
                assert line["reserved"]["dedicated_total"] == line["commitment_total"]
                assert line["reserved"]["amortised_total"] == line["job_cost_total"]
            if line["flags"] and line["term"].startswith("reserved"):
                assert "indicative_price" in line["flags"]

    def test_on_demand_line_is_instances_times_hours_times_price(
        self, client: TestClient, writer: dict[str, str]
    ) -> None:
        quote = post(client, writer, GPU_HOURS_QUOTE).json()
        line = next(x for x in all_lines(client, quote, writer)
                    if (x["provider"], x["term"]) == ("aws", "on_demand")
                    and x["instance_type"] == "p5.48xlarge")
        # 80,000 GPU-hours on 256 GPUs = 312.5 h; 256 x 2.2e-5 failures per hour, no
        # checkpoint: lost = Λ·R = 0.005632 x 600 / 3600... computed in the same units:
        lost = 256 * 2.2e-5 / 3600 * 600
        hours = Decimal(repr(312.5 * 3600)) / 3600 * (1 + Decimal(repr(lost)))
        expected = (32 * hours * Decimal("55.04")).quantize(Decimal("0.01"))
        assert line["instances"] == 32
        assert Decimal(line["total"]) == expected

    def test_a_currency_without_offers_or_fx_rate_is_422(self, client: TestClient,
                                                          writer: dict[str, str]) -> None:
        # ZAR: no offer prices in it and the ECB table has no rate for it (EUR converts:
        # tests/api/test_fx.py).
        body = {**GPU_HOURS_QUOTE, "budget": {"amount": "100.00", "currency": "ZAR"}}
        problem = assert_problem(post(client, writer, body), 422, "budget.currency")
        assert "ZAR" in problem["detail"]

    def test_spot_line_that_cannot_progress_is_infeasible_with_the_reason(
        self, client: TestClient, writer: dict[str, str]
    ) -> None:
        body = copy.deepcopy(GPU_HOURS_QUOTE)
        body.update({"providers": ["gcp"], "regions": [], "terms": ["spot"],
                     "reliability": {"restart_s": 3600.0}})
        # 512 instances x 0.00625 per instance-hour = 3.2 per hour, a 1 h restart: Λ·R ≥ 1
        body["workload"]["gpu_hours"]["num_gpus"] = 4096
        quote = post(client, writer, body).json()
        assert quote["lines"]
        assert all(not x["feasible"] for x in quote["lines"])
        assert "cannot make progress" in quote["lines"][0]["infeasible_reason"]
        assert quote["cheapest"] is None


class TestBudget:
    def _total(self, client: TestClient, writer: dict[str, str]) -> Decimal:
        body = {**GPU_HOURS_QUOTE, "providers": ["aws"], "terms": ["on_demand"]}
        return Decimal(post(client, writer, body).json()["cheapest"]["total"])

    @pytest.mark.parametrize(("delta", "within", "verdict"), [
        (Decimal("0.00"), True, "approve"),     # equal counts as within
        (Decimal("0.01"), True, "approve"),     # budget one cent over the total
        (Decimal("-0.01"), False, "reject"),    # budget one cent under the total
    ])
    def test_boundaries(self, client: TestClient, writer: dict[str, str], delta: Decimal,
                        within: bool, verdict: str, db_session: Session) -> None:
        date_offers(db_session, providers=("aws",))  # approvable: the prices are dated
        total = self._total(client, writer)
        body = {**GPU_HOURS_QUOTE, "providers": ["aws"], "terms": ["on_demand"],
                "budget": {"amount": str(total + delta), "currency": "USD"}}
        quote = post(client, writer, body).json()
        assert quote["cheapest"]["within_budget"] is within
        assert quote["verdict"] == verdict
        assert quote["reasons"]

    def test_deadline_gates_the_verdict(self, client: TestClient, writer: dict[str, str]) -> None:
        body = {**GPU_HOURS_QUOTE, "deadline_s": 3600.0}
        quote = post(client, writer, body).json()
        assert quote["verdict"] == "reject"
        assert all(x["meets_deadline"] is False for x in quote["lines"] if x["feasible"])


class TestIdempotency:
    def test_missing_key_is_400(self, client: TestClient, writer: dict[str, str]) -> None:
        response = client.post("/v1/quotes", json=GPU_HOURS_QUOTE, headers=writer)
        assert_problem(response, 400)

    def test_same_key_same_body_replays_byte_for_byte(
        self, client: TestClient, writer: dict[str, str]
    ) -> None:
        first = post(client, writer, GPU_HOURS_QUOTE, key="same")
        again = post(client, writer, GPU_HOURS_QUOTE, key="same")
        assert first.status_code == again.status_code == 201
        assert again.headers["idempotent-replayed"] == "true"
        assert "idempotent-replayed" not in first.headers
        assert again.content == first.content

    def test_same_key_other_body_is_422(self, client: TestClient, writer: dict[str, str]) -> None:
        post(client, writer, GPU_HOURS_QUOTE, key="k")
        other = {**GPU_HOURS_QUOTE, "terms": ["spot"]}
        assert_problem(post(client, writer, other, key="k"), 422)

    def test_writes_need_quotes_write(self, client: TestClient, api_key: KeyMaker) -> None:
        assert_problem(post(client, {}, GPU_HOURS_QUOTE), 401)
        assert_problem(post(client, api_key("catalog:write"), GPU_HOURS_QUOTE), 403)

    @pytest.mark.parametrize("field", ["id", "created_at", "verdict", "catalog_content_hash"])
    def test_server_owned_fields_are_rejected(
        self, client: TestClient, writer: dict[str, str], field: str
    ) -> None:
        assert_problem(post(client, writer, {**GPU_HOURS_QUOTE, field: "x"}), 422, field)


class TestStorage:
    def test_get_returns_the_stored_bytes_and_list_filters(
        self, client: TestClient, writer: dict[str, str]
    ) -> None:
        created = post(client, writer, {**GPU_HOURS_QUOTE, "deadline_s": 3600.0})
        quote_id = created.json()["id"]
        fetched = client.get(f"/v1/quotes/{quote_id}", headers=writer)
        assert fetched.content == created.content
        rejected = client.get("/v1/quotes", params={"verdict": "reject"},
                              headers=writer).json()["items"]
        assert quote_id in {q["id"] for q in rejected}
        approved = client.get("/v1/quotes", params={"verdict": "approve"},
                              headers=writer).json()["items"]
        assert quote_id not in {q["id"] for q in approved}
        assert_problem(client.get("/v1/quotes/q_" + "0" * 32, headers=writer), 404)

    @pytest.mark.parametrize("quote_id", ["q_" + "0" * 32, "nope", "q_" + "A" * 32,
                                          "q_" + "0" * 33, "x" * 300])
    def test_an_unknown_quote_id_of_any_form_is_404(
        self, client: TestClient, api_key: KeyMaker, quote_id: str
    ) -> None:
        """Issue 18: an id that is not q_ and 32 hex digits was a 422 showing the pattern."""
        key = {**api_key("quotes:read", "quotes:write"), "Idempotency-Key": "unknown-id"}
        for method, suffix in (("GET", ""), ("GET", "/lines"), ("POST", "/verify"),
                               ("POST", "/requote")):
            response = client.request(method, f"/v1/quotes/{quote_id}{suffix}", headers=key)
            problem = assert_problem(response, 404)
            assert problem["detail"] == "No quote with this id", (method, suffix)
            assert "[0-9a-f]" not in response.text

    def test_list_pages_newest_first(self, client: TestClient, writer: dict[str, str]) -> None:
        made = [post(client, writer, GPU_HOURS_QUOTE).json()["id"] for _ in range(5)]
        seen: list[str] = []
        token = None
        while True:
            params: dict[str, Any] = {"page_size": 2}
            if token:
                params["page_token"] = token
            page = client.get("/v1/quotes", params=params, headers=writer).json()
            seen += [q["id"] for q in page["items"]]
            token = page["next_page_token"]
            if not token:
                break
        assert [q for q in seen if q in made] == list(reversed(made))

    def test_price_change_keeps_the_old_quote_and_requote_links_a_new_one(
        self, client: TestClient, writer: dict[str, str], api_key: KeyMaker
    ) -> None:
        body = {**GPU_HOURS_QUOTE, "providers": ["aws"], "terms": ["on_demand"]}
        old = post(client, writer, body)
        old_quote = old.json()
        line = old_quote["cheapest"]
        offer = client.get(f"/v1/offers/{line['offer_id']}")
        new_price = str(Decimal(offer.json()["price_per_hour"]) * 2)
        edit = client.put(
            f"/v1/offers/{line['offer_id']}",
            headers={**api_key("catalog:write"), "If-Match": offer.headers["etag"]},
            json={"price_per_hour": new_price, "source": "test", "as_of": "2026-11-22",
                  "indicative": False})
        assert edit.status_code == 200, edit.text
        assert client.get(f"/v1/quotes/{old_quote['id']}", headers=writer).content == old.content
        verify = client.post(f"/v1/quotes/{old_quote['id']}/verify", headers=writer).json()
        assert verify == {**verify, "matches": True, "differences": []}
        path = f"/v1/quotes/{old_quote['id']}/requote"
        assert client.post(path, headers=writer).status_code == 400  # no Idempotency-Key
        requote = client.post(path, headers={**writer, "Idempotency-Key": "rq-1"})
        assert requote.status_code == 201, requote.text
        replay = client.post(path, headers={**writer, "Idempotency-Key": "rq-1"})
        assert replay.headers["idempotent-replayed"] == "true"
        assert replay.json()["id"] == requote.json()["id"]
        fresh = requote.json()
        assert fresh["requote_of"] == old_quote["id"]
        assert fresh["catalog_version"] == edit.json()["catalog_version"]
        again = next(x for x in all_lines(client, fresh, writer)
                     if x["offer_id"] == line["offer_id"])
        assert abs(Decimal(again["total"]) - 2 * Decimal(line["total"])) <= Decimal("0.01")


def test_twenty_quotes_of_every_workload_kind_verify_exactly(
    client: TestClient, writer: dict[str, str]
) -> None:
    bodies = [QUOTE_EXAMPLE, GPU_HOURS_QUOTE, {
        "workload": {"optimise": {
            "model": {"preset": "llama3.1-8b"},
            "training": {"seq_len": 8192, "global_batch_seqs": 128, "tokens": 1e12},
            "clusters": [{"accelerator": "h100-sxm5-80gb", "num_gpus_range": {
                "start": 64, "stop": 128, "step": 64}}]}},
        "providers": ["aws", "lambda", "onprem"],
        "onprem": {"purchase_price_per_gpu": "28000"},
    }]
    for i in range(20):
        body = copy.deepcopy(bodies[i % 3])
        body["reliability"] = {"restart_s": 60.0 * (i + 1)}
        quote = post(client, writer, body).json()
        result = client.post(f"/v1/quotes/{quote['id']}/verify", headers=writer).json()
        assert result["matches"], result["differences"][:3]


def test_budget_plan_ranks_within_budget_and_before_deadline(
    client: TestClient, api_key: KeyMaker, db_session: Session
) -> None:
    date_offers(db_session)  # "within budget" needs lines no rule fails: dated prices
    response = client.post("/v1/budget-plans", json=BUDGET_PLAN_EXAMPLE)
    assert response.status_code == 200, response.text
    result = response.json()
    soonest = result["soonest_within_budget"]
    assert soonest
    budget = Decimal(BUDGET_PLAN_EXAMPLE["budget"]["amount"])
    assert all(Decimal(x["total"]) <= budget for x in soonest)
    times = [x["wall_clock_s"] for x in soonest]
    assert times == sorted(times)
    cheapest = result["cheapest_before_deadline"]
    assert all(x["wall_clock_s"] <= BUDGET_PLAN_EXAMPLE["deadline_s"] for x in cheapest)
    totals = [Decimal(x["total"]) for x in cheapest]
    assert totals == sorted(totals)
    assert all(x["plan"] for x in soonest + cheapest)


def test_the_onprem_line_states_its_break_even_against_the_cheapest_on_demand_line(
    client: TestClient, writer: dict[str, str]
) -> None:
    body = {**GPU_HOURS_QUOTE, "providers": ["lambda", "aws", "onprem"],
            "terms": ["on_demand", "onprem"]}
    answer = post(client, writer, body)
    assert answer.status_code == 201, answer.text
    lines = all_lines(client, answer.json(), writer)
    owned = [x for x in lines if x["term"] == "onprem"]
    assert len(owned) == 1
    facts = owned[0]["onprem"]
    rented = [x for x in lines if x["term"] == "on_demand" and x["feasible"]]
    cheapest = min(rented, key=lambda x: (  # ties go to the lower offer id, as documented
        Decimal(x["unit_price"]) / Decimal(str(x["gpus_per_instance"])), x["offer_id"]))
    assert facts["break_even_offer_id"] == cheapest["offer_id"]
    assert Decimal(facts["capex_total"]) > 0
    assert Decimal(facts["break_even_months"]) > 0
    assert facts["break_even_utilisation_fraction"] == "1"


def test_rank_by_co2e_compares_regions_by_carbon_and_keeps_the_cheapest(
    client: TestClient, writer: dict[str, str]
) -> None:
    body = {"workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb", "gpu_hours": 20_000,
                                       "num_gpus": 64}},
            "providers": ["gcp"], "terms": ["on_demand"]}
    by_money = post(client, writer, body).json()
    by_carbon = post(client, writer, {**body, "rank_by": "co2e"}).json()
    money = [x for x in all_lines(client, by_money, writer) if x["feasible"]]
    carbon = [x for x in all_lines(client, by_carbon, writer) if x["feasible"]]
    assert len({x["region"] for x in carbon}) > 3  # one request, many regions
    co2e = [Decimal(x["co2e_kg"]) for x in carbon]
    assert co2e == sorted(co2e)
    assert len(set(co2e)) > 1  # the regions' grids differ
    totals = [Decimal(x["total"]) for x in money]
    assert totals == sorted(totals)
    # The cheapest stays the cheapest; the recommendation is the lowest CO2e of its outcome.
    assert by_carbon["cheapest"]["total"] == by_money["cheapest"]["total"]
    outcome = by_carbon["recommended"]["policy_outcome"]
    same = [Decimal(x["co2e_kg"]) for x in carbon if x["policy_outcome"] == outcome]
    assert Decimal(by_carbon["recommended"]["co2e_kg"]) == min(same)


def test_objective_carbon_is_rank_by_co2e_and_a_contradiction_is_refused(
    client: TestClient, writer: dict[str, str]
) -> None:
    body = {"workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb", "gpu_hours": 20_000,
                                       "num_gpus": 64}},
            "providers": ["gcp"], "terms": ["on_demand"]}
    by_rank = post(client, writer, {**body, "rank_by": "co2e"}).json()
    by_objective = post(client, writer, {**body, "objective": "carbon"}).json()
    assert [x["offer_id"] for x in by_objective["lines"]] == [
        x["offer_id"] for x in by_rank["lines"]]
    assert by_objective["recommended"] == by_rank["recommended"]
    clash = post(client, writer, {**body, "objective": "carbon", "rank_by": "total"})
    assert_problem(clash, 422, "body")
    assert "rank_by" in clash.json()["detail"] + json.dumps(clash.json().get("errors"))


class TestImpracticalLines:
    """Issue 18: plans nobody would run carry a warning in quotes and budget plans too, as in
    estimates and parallelism plans (a stable prefix, then the figures)."""

    @staticmethod
    def _check(lines: list[dict[str, Any]], limit_s: float) -> tuple[int, int]:
        feasible = [x for x in lines if x["feasible"] and x["total"] is not None]
        cheapest = min(Decimal(x["total"]) for x in feasible)
        costly = slow = 0
        for line in lines:
            warned_cost = [w for w in line["warnings"] if w.startswith("impractical cost: ")]
            warned_time = [w for w in line["warnings"]
                           if w.startswith("impractical wall-clock: ")]
            if line in feasible:
                assert bool(warned_cost) == (Decimal(line["total"]) > 10 * cheapest), line
                assert bool(warned_time) == (line["wall_clock_s"] > limit_s), line
            else:
                assert not line["warnings"], line
            costly += bool(warned_cost)
            slow += bool(warned_time)
        return costly, slow

    def test_a_reservation_ten_times_the_on_demand_cost_is_warned(
        self, client: TestClient, writer: dict[str, str]
    ) -> None:
        # 80,000 GPU-hours on 256 GPUs is 13 days: a 1-year reservation commits ~28x that.
        quote = post(client, writer, GPU_HOURS_QUOTE).json()
        lines = all_lines(client, quote, writer)
        costly, slow = self._check(lines, 365 * 86_400)
        assert costly > 0
        assert slow == 0
        assert {x["term"] for x in lines if x["warnings"]} == {"reserved_1y"}
        # The answer's own lines carry the same warnings as the stored ones.
        stored = {(x["offer_id"], x["term"]): x["warnings"] for x in lines}
        assert all(stored[(x["offer_id"], x["term"])] == x["warnings"] for x in quote["lines"])
        # Advisory: the quote still verifies.
        result = client.post(f"/v1/quotes/{quote['id']}/verify", headers=writer).json()
        assert result["matches"], result["differences"][:3]

    def test_a_run_over_the_wall_clock_limit_is_warned(
        self, client: TestClient, writer: dict[str, str]
    ) -> None:
        request = copy.deepcopy(GPU_HOURS_QUOTE)
        request["workload"]["gpu_hours"]["gpu_hours"] = 10_000_000  # 1,628 days on 256
        quote = post(client, writer, request).json()
        lines = all_lines(client, quote, writer)
        _, slow = self._check(lines, 365 * 86_400)
        assert slow == sum(1 for x in lines if x["feasible"])
        warning = next(w for w in lines[0]["warnings"] if w.startswith("impractical wall"))
        assert "365-day limit" in warning

    def test_budget_plan_lines_are_warned(
        self, client: TestClient, db_session: Session
    ) -> None:
        from service.api.deps import get_settings
        from service.settings import Settings

        date_offers(db_session)
        request = copy.deepcopy(BUDGET_PLAN_EXAMPLE)
        request["top_k"] = 50
        first = client.post("/v1/budget-plans", json=request).json()
        days = sorted(x["wall_clock_s"] / 86_400 for x in first["soonest_within_budget"])
        limit_days = int(days[len(days) // 2])  # a limit some lines are over and some within
        app: Any = client.app
        app.dependency_overrides[get_settings] = lambda: Settings(
            max_reasonable_train_days=limit_days)
        try:
            result = client.post("/v1/budget-plans", json=request).json()
        finally:
            app.dependency_overrides.pop(get_settings)
        lines = result["soonest_within_budget"] + result["cheapest_before_deadline"]
        slow = [x for x in lines if x["wall_clock_s"] > limit_days * 86_400]
        assert slow
        assert len(slow) < len(lines)
        for line in lines:
            warned = [w for w in line["warnings"] if w.startswith("impractical wall-clock: ")]
            assert bool(warned) == (line in slow), line["wall_clock_s"]
            assert all(f"{limit_days}-day limit" in w for w in warned)


def test_a_hybrid_sharded_workload_is_priced_on_its_own_plan_and_verifies(
    client: TestClient, writer: dict[str, str]
) -> None:
    """parallelism.dp_shard reaches the quote: the lines' plan names it (and only theirs), and
    verify recomputes the quote, replica all-reduce included, to the cent."""
    body = copy.deepcopy(QUOTE_EXAMPLE)
    body["workload"]["estimate"]["parallelism"] = {"tp": 8, "pp": 4, "dp": 8,
                                                   "zero_stage": 1, "dp_shard": 2}
    hybrid = post(client, writer, body)
    assert hybrid.status_code == 201, hybrid.text
    plain = post(client, writer, QUOTE_EXAMPLE).json()
    lines = all_lines(client, hybrid.json(), writer)
    assert lines
    assert {line["plan"]["dp_shard"] for line in lines if line.get("plan")} == {2}
    assert all("dp_shard" not in (line.get("plan") or {}) for line in all_lines(
        client, plain, writer))
    result = client.post(f"/v1/quotes/{hybrid.json()['id']}/verify", headers=writer).json()
    assert result["matches"], result["differences"][:3]


class TestNoStore:
    """Issue 36 (low): quote reads hold budgets and prices, but sent no Cache-Control."""

    def test_every_quote_answer_says_no_store(
        self, client: TestClient, api_key: KeyMaker
    ) -> None:
        key = api_key("quotes:read", "quotes:write")
        created = post(client, key, GPU_HOURS_QUOTE, key="no-store-1")
        assert created.status_code == 201, created.text[:300]
        quote_id = created.json()["id"]
        answers = {
            "create": created,
            "replay": post(client, key, GPU_HOURS_QUOTE, key="no-store-1"),
            "get": client.get(f"/v1/quotes/{quote_id}", headers=key),
            "list": client.get("/v1/quotes", headers=key),
            "lines": client.get(f"/v1/quotes/{quote_id}/lines", headers=key),
            "verify": client.post(f"/v1/quotes/{quote_id}/verify", headers=key),
            "requote": client.post(f"/v1/quotes/{quote_id}/requote",
                                   headers={**key, "Idempotency-Key": "no-store-2"}),
            "budget plan": client.post("/v1/budget-plans", json=BUDGET_PLAN_EXAMPLE,
                                       headers=key),
        }
        for what, answer in answers.items():
            assert answer.is_success, (what, answer.text[:300])
            assert answer.headers.get("cache-control") == "no-store", what
