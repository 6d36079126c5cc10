"""Procurement-safe quotes over HTTP (SQLite and PostgreSQL): the examples a new user tried,
commitment against the budget, node fit and fabric, policies and their revisions, paged
lines, and verify reproducing the verdict and every rule."""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any, ClassVar

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from service.catalog import quotes as store
from service.catalog.models import Quote
from tests.api.test_estimates import assert_problem
from tests.api.test_quotes_api import all_lines
from tests.factories import date_offers

KeyMaker = Callable[..., dict[str, str]]

LLAMA_70B_1024: dict[str, Any] = {"estimate": {
    "model": {"preset": "llama3.1-70b"},
    "cluster": {"accelerator": "h100-sxm5-80gb", "num_gpus": 1024},
    "parallelism": {"tp": 8, "pp": 4, "dp": 32},
    "training": {"seq_len": 8192, "global_batch_seqs": 512, "tokens": 15e12}}}


@pytest.fixture
def writer(api_key: KeyMaker) -> dict[str, str]:
    return api_key("quotes:write", "policies:write")


def post(client: TestClient, headers: dict[str, str], body: dict[str, Any]) -> Any:
    response = client.post("/v1/quotes", json=body,
                           headers={**headers, "Idempotency-Key": uuid.uuid4().hex})
    assert response.status_code == 201, response.text
    return response.json()


def codes(quote: dict[str, Any]) -> set[str]:
    return {r["code"] for r in quote["reason_details"]}


class TestTheExamples:
    @pytest.mark.parametrize("budget", ["5000000.00", "10000.00"])
    def test_a_budget_below_every_commitment_is_rejected_on_the_commitment(
        self, client: TestClient, writer: dict[str, str], budget: str,
    ) -> None:
        quote = post(client, writer, {"workload": LLAMA_70B_1024,
                                      "budget": {"amount": budget, "currency": "USD"}})
        assert quote["verdict"] == "reject"
        assert "commitment_over_budget" in codes(quote)
        assert quote["policy_result"]["outcome"] == "fail"
        for line in all_lines(client, quote, writer):
            if line["feasible"] and line["term"].startswith("reserved"):
                assert line["commitment_total"] == line["reserved"]["dedicated_total"]
                assert line["within_budget"] is False
        detail = next(r for r in quote["reason_details"]
                      if r["code"] == "commitment_over_budget")
        assert detail["severity"] == "error"
        assert detail["rule"] == "budget"

    def test_amortised_accounting_is_asked_for_and_said(
        self, client: TestClient, writer: dict[str, str],
    ) -> None:
        body = {"workload": LLAMA_70B_1024, "terms": ["reserved_3y"],
                "budget": {"amount": "5000000.00", "currency": "USD"},
                "accounting": "amortised"}
        response = client.post("/v1/quotes", json=body, headers={
            **writer, "Idempotency-Key": uuid.uuid4().hex})
        assert_problem(response, 422, None)
        assert "reservation_utilisation_fraction" in response.text
        quote = post(client, writer, {**body, "reservation_utilisation_fraction": "0.5"})
        assert quote["accounting"] == "amortised"
        assert "amortised_accounting" in codes(quote)
        line = quote["recommended"]
        assert Decimal(line["total"]) == 2 * Decimal(line["job_cost_total"])
        assert Decimal(line["commitment_total"]) > Decimal(line["total"])

    def test_a_tp8_plan_is_never_priced_on_single_gpu_vms(
        self, client: TestClient, writer: dict[str, str],
    ) -> None:
        quote = post(client, writer, {"workload": LLAMA_70B_1024, "terms": ["on_demand"]})
        lines = all_lines(client, quote, writer)
        assert lines
        assert len(lines) == quote["lines_total"]
        assert all(x["gpus_per_instance"] >= 8 and x["nvlink_domain"] >= 8 for x in lines)
        rejected = quote["rejected_offers"]
        assert rejected["count"] > 0
        assert {g["code"] for g in rejected["groups"]} >= {"nvlink_domain_too_small"}
        single = next(g for g in rejected["groups"] if g["instance_type"] == "a3-highgpu-1g")
        assert "needs 8 GPUs in one NVLink domain" in single["reason"]

    def test_the_same_plan_is_slower_on_a_slower_network(
        self, client: TestClient, writer: dict[str, str],
    ) -> None:
        quote = post(client, writer, {"workload": LLAMA_70B_1024, "terms": ["on_demand"],
                                      "providers": ["aws", "gcp"]})
        lines = {(x["instance_type"], x["inter_node_gbps"]): x
                 for x in all_lines(client, quote, writer)}
        fast = next(x for (name, _), x in lines.items() if name == "p5.48xlarge")
        slow = next(x for (name, _), x in lines.items() if name == "a3-highgpu-8g")
        assert fast["inter_node_gbps"] > slow["inter_node_gbps"]
        assert slow["wall_clock_s"] > fast["wall_clock_s"]
        assert "Gbit/s per instance" in slow["timing_basis"]

    def test_spot_at_scale_in_one_zone_is_unverified_capacity(
        self, client: TestClient, writer: dict[str, str],
    ) -> None:
        quote = post(client, writer, {
            "workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb", "gpu_hours": 250000,
                                       "num_gpus": 512}},
            "providers": ["aws"], "terms": ["spot"],
            "budget": {"amount": "10000000.00", "currency": "USD"}})
        assert quote["verdict"] == "reject"
        assert "spot_capacity_unverified" in codes(quote)
        assert "assumed_interruption_rate" in codes(quote)
        assert "spot_capacity_unverified" in quote["recommended"]["flags"]
        assert "(an assumption)" in quote["recommended"]["goodput_basis"]

    def test_indicative_reserved_prices_never_approve_under_the_default_policy(
        self, client: TestClient, writer: dict[str, str],
    ) -> None:
        quote = post(client, writer, {
            "workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb", "gpu_hours": 20000,
                                       "num_gpus": 64}},
            "providers": ["aws"], "terms": ["reserved_1y"],
            "budget": {"amount": "100000000.00", "currency": "USD"}})
        assert quote["verdict"] == "reject"
        assert "derived_price" in codes(quote)
        assert "derived_price" in quote["recommended"]["flags"]

    def test_every_line_carries_bands_and_the_deadline_probability(
        self, client: TestClient, writer: dict[str, str],
    ) -> None:
        quote = post(client, writer, {"workload": LLAMA_70B_1024, "terms": ["on_demand"],
                                      "deadline_s": 120 * 86_400.0})
        line = quote["recommended"]
        band = line["uncertainty"]
        assert band["wall_clock_s"]["p10"] < band["wall_clock_s"]["p50"] < (
            band["wall_clock_s"]["p90"])
        assert band["wall_clock_s"]["p50"] == line["wall_clock_s"]
        assert Decimal(band["job_cost_total"]["p90"]) > Decimal(line["job_cost_total"])
        assert 0 <= band["deadline_probability"] <= 1


class TestPolicies:
    def test_create_read_revise_with_if_match(self, client: TestClient,
                                              writer: dict[str, str]) -> None:
        body = {"name": "finance-2027", "description": "FY27",
                "rules": {"max_commitment": "2000000.00", "allowed_terms": ["on_demand"]}}
        created = client.post("/v1/policies", json=body, headers=writer)
        assert created.status_code == 201, created.text
        assert created.headers["etag"] == '"p1"'
        assert created.json()["rules"]["max_commitment"] == "2000000.00"
        assert client.post("/v1/policies", json=body, headers=writer).status_code == 409
        got = client.get("/v1/policies/finance-2027")
        assert (got.status_code, got.headers["etag"]) == (200, '"p1"')
        revision = {"rules": {"max_commitment": "3000000.00"}}
        assert client.put("/v1/policies/finance-2027", json=revision,
                          headers=writer).status_code == 428
        second = client.put("/v1/policies/finance-2027", json=revision,
                            headers={**writer, "If-Match": '"p1"'})
        assert (second.status_code, second.json()["revision"]) == (200, 2)
        stale = client.put("/v1/policies/finance-2027", json=revision,
                           headers={**writer, "If-Match": '"p1"'})
        assert stale.status_code == 412
        first = client.get("/v1/policies/finance-2027", params={"revision": 1}).json()
        assert first["rules"]["max_commitment"] == "2000000.00"
        listed = client.get("/v1/policies").json()["items"]
        assert [(p["name"], p["revision"]) for p in listed] == [("finance-2027", 2)]

    def test_writes_need_the_policies_scope(self, client: TestClient,
                                            api_key: KeyMaker) -> None:
        body = {"name": "nope", "rules": {}}
        assert client.post("/v1/policies", json=body).status_code == 401
        assert client.post("/v1/policies", json=body,
                           headers=api_key("quotes:write")).status_code == 403

    def test_bad_rules_are_422_naming_the_field(self, client: TestClient,
                                                writer: dict[str, str]) -> None:
        for rules in ({"min_success_probability": 1.5}, {"warn_only": ["nonsense"]},
                      {"max_commitment": "-1"}, {"surprise": True}):
            response = client.post("/v1/policies", json={"name": "bad", "rules": rules},
                                   headers=writer)
            assert_problem(response, 422, None)

    def test_a_lenient_policy_warns_and_verify_reproduces_it_after_a_revision(
        self, client: TestClient, writer: dict[str, str], db_session: Session,
    ) -> None:
        date_offers(db_session, providers=("aws",))
        rules = {"forbid_indicative": False, "forbid_unverified_spot_capacity": False}
        assert client.post("/v1/policies", json={"name": "lenient", "rules": rules},
                           headers=writer).status_code == 201
        body = {"workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb",
                                           "gpu_hours": 20000, "num_gpus": 64}},
                "providers": ["aws"], "terms": ["reserved_1y"], "policy": "lenient",
                "budget": {"amount": "100000000.00", "currency": "USD"}}
        quote = post(client, writer, body)
        assert (quote["verdict"], quote["policy_result"]["outcome"]) == ("approve", "warn")
        assert quote["policy_result"]["revision"] == 1
        assert {r["outcome"] for r in quote["reason_details"]} >= {"warn"}
        # The policy gets strict in revision 2; the stored quote still verifies by revision 1.
        strict = {"rules": {"forbid_indicative": True}}
        assert client.put("/v1/policies/lenient", json=strict,
                          headers={**writer, "If-Match": '"p1"'}).status_code == 200
        verify = client.post(f"/v1/quotes/{quote['id']}/verify", headers=writer).json()
        assert verify == {**verify, "matches": True, "differences": []}
        again = post(client, writer, body)
        assert (again["verdict"], again["policy_result"]["revision"]) == ("reject", 2)

    def test_an_unknown_policy_is_422(self, client: TestClient,
                                      writer: dict[str, str]) -> None:
        response = client.post("/v1/quotes", json={
            "workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb", "gpu_hours": 10,
                                       "num_gpus": 8}}, "policy": "ghost"},
            headers={**writer, "Idempotency-Key": uuid.uuid4().hex})
        assert_problem(response, 422, "policy")


class TestLinesAndVerify:
    def test_the_answer_holds_the_best_line_per_provider_and_term(
        self, client: TestClient, writer: dict[str, str],
    ) -> None:
        quote = post(client, writer, {"workload": copy.deepcopy(LLAMA_70B_1024)})
        keys = [(x["provider"], x["term"]) for x in quote["lines"]]
        assert len(keys) == len(set(keys))
        lines = all_lines(client, quote, writer)
        assert len(lines) == quote["lines_total"] > len(quote["lines"])
        for line in quote["lines"]:
            same = [x for x in lines if (x["provider"], x["term"]) == (line["provider"],
                                                                       line["term"])]
            assert line == same[0]
        verify = client.post(f"/v1/quotes/{quote['id']}/verify", headers=writer).json()
        assert verify == {**verify, "matches": True, "differences": []}

    def test_the_load_benchmarks_default_answer_is_at_most_50_kb(
        self, client: TestClient, writer: dict[str, str],
    ) -> None:
        """Issue 16's size target, on the load benchmark's quote (512 H100 for 250,000
        GPU-hours, AWS and GCP, three terms, a budget): the default answer, the best line per
        provider and term, is at most 50 KB (38.8 KB when this was written) while every line
        is stored. Over the whole catalogue the answer is 69 KB (decision 170): not claimed."""
        body = {"workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb",
                                           "gpu_hours": 250_000, "num_gpus": 512}},
                "terms": ["on_demand", "spot", "reserved_1y"], "providers": ["aws", "gcp"],
                "budget": {"amount": "2000000.00", "currency": "USD"}}
        response = client.post("/v1/quotes", json=body,
                               headers={**writer, "Idempotency-Key": uuid.uuid4().hex})
        assert response.status_code == 201, response.text
        quote = response.json()
        assert len(response.content) <= 50_000
        assert quote["lines_shown"] == "best_per_provider_term"
        assert len(quote["lines"]) == 6 < quote["lines_total"]

    def test_stored_lines_are_compressed_and_a_text_row_reads_the_same(
        self, client: TestClient, writer: dict[str, str], db_session: Session,
    ) -> None:
        """New quotes store their lines zstd-compressed only (decision 163); a quote stored
        before schema 0010 (its lines as text) pages and verifies the same."""
        quote = post(client, writer, {"workload": copy.deepcopy(LLAMA_70B_1024)})
        lines = all_lines(client, quote, writer)
        row = db_session.get(Quote, quote["id"])
        assert row is not None
        assert row.lines is None
        assert row.lines_zstd is not None
        text = store.unpack_lines(row.lines_zstd)
        assert json.loads(text)["lines"] == lines
        assert len(row.lines_zstd) * 10 < len(text.encode())
        row.lines, row.lines_zstd = text, None
        db_session.flush()
        assert all_lines(client, quote, writer) == lines
        verify = client.post(f"/v1/quotes/{quote['id']}/verify", headers=writer).json()
        assert verify == {**verify, "matches": True, "differences": []}

    def test_lines_of_an_unknown_quote_are_404(self, client: TestClient,
                                               writer: dict[str, str]) -> None:
        assert client.get(f"/v1/quotes/q_{'0' * 32}/lines", headers=writer).status_code == 404


class TestBudgetPlans:
    BODY: ClassVar[dict[str, Any]] = {
        "model": {"preset": "llama3.1-8b"},
        "training": {"seq_len": 8192, "global_batch_seqs": 512, "tokens": 1e12},
        "clusters": [{"accelerator": "h100-sxm5-80gb", "num_gpus": 512}],
        "terms": ["on_demand", "reserved_1y"], "providers": ["aws"],
        "policy": None,
    }

    def test_a_reservation_committing_more_than_the_budget_is_never_within_it(
        self, client: TestClient, db_session: Session,
    ) -> None:
        date_offers(db_session)
        body = {**self.BODY, "budget": {"amount": "1000000.00", "currency": "USD"}}
        body.pop("policy")
        plan = client.post("/v1/budget-plans", json=body)
        assert plan.status_code == 200, plan.text
        answer = plan.json()
        assert answer["soonest_within_budget"]
        for line in answer["soonest_within_budget"]:
            assert Decimal(line["commitment_total"]) <= Decimal("1000000.00")
            assert line["term"] != "reserved_1y"  # 512 H100 for a year commit about 7M

    def test_nothing_within_the_budget_is_explained(self, client: TestClient) -> None:
        body = {**self.BODY, "budget": {"amount": "10.00", "currency": "USD"}}
        body.pop("policy")
        answer = client.post("/v1/budget-plans", json=body).json()
        assert answer["soonest_within_budget"] == []
        assert "nothing fits the budget" in answer["explanation"]

    def test_the_largest_compute_optimal_model_within_budget_and_deadline(
        self, client: TestClient, db_session: Session,
    ) -> None:
        date_offers(db_session)
        body = {k: v for k, v in self.BODY.items() if k not in ("model", "policy")}
        body.update({"objective": "largest_model", "tokens_per_param": 20.0,
                     "candidate_models": ["llama3.1-8b", "llama3.1-70b", "llama3.1-405b"],
                     "terms": ["on_demand"], "deadline_s": 60 * 86_400.0,
                     "budget": {"amount": "2000000.00", "currency": "USD"}})
        answer = client.post("/v1/budget-plans", json=body).json()
        tried = answer["models_tried"]
        assert next(m["preset"] for m in tried) == "llama3.1-8b"
        largest = answer["largest_model"]
        assert largest is not None
        assert largest["tokens"] == pytest.approx(20.0 * largest["params"])
        assert Decimal(largest["line"]["commitment_total"]) <= Decimal("2000000.00")
        assert largest["line"]["wall_clock_s"] <= 60 * 86_400.0
        # the search stops at the first model that does not fit: that one is larger
        last = tried[-1]
        if last["preset"] != largest["preset"]:
            assert last["lines_within"] == 0
            assert last["params"] > largest["params"]

    def test_largest_model_needs_no_model_but_soonest_does(self, client: TestClient) -> None:
        body = {k: v for k, v in self.BODY.items() if k not in ("model", "policy")}
        body["budget"] = {"amount": "10.00", "currency": "USD"}
        assert_problem(client.post("/v1/budget-plans", json=body), 422, None)


def test_the_estimator_version_is_the_same_in_every_process() -> None:
    """The fingerprint covers every model constant and no process-specific text (object
    addresses, set order), so verify and diff agree across replicas and restarts."""
    import subprocess
    import sys

    code = "from service.api.quoting import ESTIMATOR_VERSION; print(ESTIMATOR_VERSION)"
    seen = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,  # noqa: S603
                           check=True, env={"PYTHONHASHSEED": seed, "PATH": ""}).stdout
            for seed in ("1", "2", "3")}
    assert len(seen) == 1
    assert "+cal." in seen.pop()


@pytest.mark.parametrize("currency", ["XXX", "ZZZ", "XTS"])
def test_a_budget_in_no_real_currency_is_422_naming_the_field(
    client: TestClient, writer: dict[str, str], currency: str,
) -> None:
    response = client.post("/v1/quotes", json={
        "workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb", "gpu_hours": 10,
                                   "num_gpus": 8}},
        "budget": {"amount": "10.00", "currency": currency}},
        headers={**writer, "Idempotency-Key": uuid.uuid4().hex})
    assert_problem(response, 422, "budget.currency")
    assert "ISO 4217" in response.text


def test_one_request_searches_within_one_work_budget(
    database_url_factory: Callable[[str], str],
) -> None:
    """Issue 14: budget plans and quotes ran one search per (accelerator, GPU count), each
    under the cap but unbounded together. Now the cap holds for the whole request."""
    from service.main import create_app, dispose
    from service.settings import Settings
    from tests.databases import migrate_and_seed

    url = database_url_factory("sqlite")
    migrate_and_seed(url)
    app = create_app(Settings(database_url=url, search_workers=0,
                              search_max_candidates=100_000))
    body = {"model": {"preset": "llama3.1-8b"},
            "training": {"seq_len": 8192, "global_batch_seqs": 512, "tokens": 1e11},
            "clusters": [{"accelerator": "h100-sxm5-80gb",
                          "num_gpus_range": {"start": 64, "stop": 512, "step": 64}}],  # 8 x 35-59k
            "budget": {"amount": "1000000.00", "currency": "USD"},
            "terms": ["on_demand"], "providers": ["aws"]}
    with TestClient(app) as client:
        too_much = client.post("/v1/budget-plans", json=body)
        small = client.post("/v1/budget-plans", json={**body, "clusters": [
            {"accelerator": "h100-sxm5-80gb", "num_gpus": 64}]})
    dispose(app)
    problem = assert_problem(too_much, 422, "clusters")
    assert "together hold more than 100,000 candidates" in problem["detail"]
    assert small.status_code == 200, small.text
