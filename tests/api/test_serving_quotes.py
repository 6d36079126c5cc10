"""Serving quotes (issue 19): ``POST /v1/quotes`` with ``workload.serving`` prices a serving
fleet for a duration against the catalogue, with the same terms, commitment accounting,
policies and verdicts as a training quote."""

from __future__ import annotations

import copy
import math
import uuid
from decimal import Decimal
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.api.schemas.serving import SERVING_EXAMPLE, SERVING_PLAN_EXAMPLE
from service.core.pricing import DEFAULT_RESTART_S
from tests.api.test_estimates import assert_problem
from tests.api.test_quotes_api import KeyMaker, all_lines

YEAR_S = 31_557_600  # 365.25 days


def serving_quote(**extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "workload": {"serving": {"estimate": copy.deepcopy(SERVING_EXAMPLE),
                                 "duration_s": YEAR_S}},
        "providers": ["aws", "gcp", "lambda"],
        "terms": ["on_demand", "spot", "reserved_1y", "reserved_3y"],
    }
    body.update(extra)
    return body


def post(client: TestClient, headers: dict[str, str], body: dict[str, Any]) -> Any:
    return client.post("/v1/quotes", json=body,
                       headers={**headers, "Idempotency-Key": uuid.uuid4().hex})


@pytest.fixture
def writer(api_key: KeyMaker) -> dict[str, str]:
    return api_key("quotes:write", "quotes:read")


@pytest.fixture
def sized(client: TestClient) -> dict[str, Any]:
    """The serving estimate of the same deployment and load."""
    answer = client.post("/v1/serving-estimates", json=SERVING_EXAMPLE)
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


class TestServingQuote:
    def test_a_year_of_the_sized_fleet_on_every_term(
        self, client: TestClient, writer: dict[str, str], sized: dict[str, Any]
    ) -> None:
        response = post(client, writer, serving_quote())
        assert response.status_code == 201, response.text
        quote = response.json()
        lines = all_lines(client, quote, writer)
        feasible = [x for x in lines if x["feasible"]]
        assert {x["term"] for x in feasible} >= {"on_demand", "reserved_1y", "reserved_3y"}
        gpus = sized["sizing"]["num_gpus"]
        for line in lines:
            assert line["num_gpus"] == gpus
            fleet = line["serving"]
            assert fleet["replicas"] == sized["sizing"]["replicas"]
            assert fleet["gpus_per_replica"] == 4
            assert fleet["accelerator"] == "h100-sxm5-80gb"
            assert fleet["duration_s"] == YEAR_S
            assert fleet["ttft_p99_s"] == pytest.approx(sized["latency"]["ttft_s"]["p99"])
            assert line["plan"] is None
        for line in feasible:
            # Billed: every instance for the duration, stretched by the spare capacity.
            hours = Decimal(line["billed_hours"])
            expected_h = Decimal(YEAR_S) / 3600 * Decimal(1 + line["goodput_loss_fraction"])
            assert abs(hours - expected_h) <= Decimal("0.01"), line
            cost = Decimal(line["unit_price"]) * line["instances"] * hours
            assert abs(Decimal(line["job_cost_total"]) - cost) <= Decimal("0.01") * max(
                1, line["instances"]), line

    def test_the_commitment_of_a_three_year_reservation_is_three_years(
        self, client: TestClient, writer: dict[str, str]
    ) -> None:
        """The budget promise at its worst honest case: a one-year fleet on a three-year
        reservation commits three years of cash, and that is what ``total`` and the budget
        compare, not the year used."""
        quote = post(client, writer, serving_quote(terms=["reserved_3y"])).json()
        lines = [x for x in all_lines(client, quote, writer) if x["feasible"]]
        assert lines
        for line in lines:
            assert line["terms_bought"] == 1
            commitment = Decimal(line["commitment_total"])
            assert commitment > Decimal("2.9") * Decimal(line["job_cost_total"])
            assert line["total"] == line["commitment_total"]

    def test_the_budget_is_judged_at_the_cent(
        self, client: TestClient, writer: dict[str, str]
    ) -> None:
        first = post(client, writer, serving_quote(terms=["on_demand"])).json()
        recommended = first["recommended"]
        exact = Decimal(recommended["total"])
        at = post(client, writer, serving_quote(
            terms=["on_demand"], budget={"amount": str(exact), "currency": "USD"})).json()
        assert at["recommended"]["within_budget"] is True
        below = post(client, writer, serving_quote(
            terms=["on_demand"],
            budget={"amount": str(exact - Decimal("0.01")), "currency": "USD"})).json()
        # One cent less: the cheapest line is over budget; nothing cheaper exists.
        cheapest = min(Decimal(x["total"]) for x in all_lines(client, below, writer)
                       if x["feasible"])
        assert cheapest == exact
        assert below["verdict"] == "reject"
        assert any(d["code"].startswith("over_budget") or d["rule"] == "budget"
                   for d in below["reason_details"]), below["reason_details"]

    def test_a_replica_must_sit_in_one_nvlink_domain_but_replicas_need_no_network(
        self, client: TestClient, writer: dict[str, str]
    ) -> None:
        quote = post(client, writer, serving_quote()).json()
        lines = all_lines(client, quote, writer)
        for line in lines:
            codes = {r["code"] for r in line["rules"]}
            assert "interconnect_unknown" not in codes, line["rules"]
            if line["nvlink_domain"] is not None and line["nvlink_domain"] < 4:
                assert "nvlink_domain_too_small" in codes

    def test_spot_carries_spare_replicas_for_one_instance_restarting(
        self, client: TestClient, writer: dict[str, str]
    ) -> None:
        quote = post(client, writer, serving_quote(terms=["spot"])).json()
        lines = [x for x in all_lines(client, quote, writer) if x["feasible"]]
        assert lines
        for line in lines:
            # One instance's interruption rate (not the fleet's) times the restart.
            rate = float(line["goodput_basis"].split("spot interruptions ")[1].split(" ")[0])
            assert line["goodput_loss_fraction"] == pytest.approx(
                rate / 3600 * DEFAULT_RESTART_S, rel=1e-9)
            assert "spare replicas" in line["goodput_basis"]

    def test_it_verifies_and_replays(self, client: TestClient, writer: dict[str, str]) -> None:
        quote = post(client, writer, serving_quote()).json()
        result = client.post(f"/v1/quotes/{quote['id']}/verify", headers=writer).json()
        assert result["matches"], result["differences"][:3]

    def test_replicas_can_be_given(self, client: TestClient, writer: dict[str, str]) -> None:
        body = serving_quote(terms=["on_demand"])
        body["workload"]["serving"]["replicas"] = 7
        quote = post(client, writer, body).json()
        assert all(x["num_gpus"] == 28 for x in quote["lines"])


class TestServingPlanQuote:
    def test_each_accelerator_gets_its_fewest_gpu_deployment(
        self, client: TestClient, writer: dict[str, str]
    ) -> None:
        search = copy.deepcopy(SERVING_PLAN_EXAMPLE)
        search.pop("price_per_gpu_hour_usd", None)
        body = {"workload": {"serving": {"plan": search, "duration_s": YEAR_S / 2}},
                "terms": ["on_demand"], "providers": ["aws", "gcp", "lambda"]}
        response = post(client, writer, body)
        assert response.status_code == 201, response.text
        lines = all_lines(client, response.json(), writer)
        by_accelerator = {x["accelerator"]: x["num_gpus"] for x in lines}
        assert by_accelerator
        for accelerator, gpus in by_accelerator.items():
            alone = client.post("/v1/serving-plans", json={
                **search, "accelerators": [accelerator], "top_k": 1}).json()
            assert alone["plans"], accelerator
            assert gpus == alone["plans"][0]["estimate"]["sizing"]["num_gpus"]


class TestRefusals:
    @pytest.mark.parametrize(("change", "field"), [
        (lambda b: b.update(deadline_s=86_400), "deadline_s"),
        (lambda b: b["workload"]["serving"].update(duration_s=-1), "duration_s"),
        (lambda b: b["workload"]["serving"].update(duration_s=1e12), "duration_s"),
        (lambda b: b["workload"]["serving"].update(duration_s="a year"), "duration_s"),
        (lambda b: b["workload"]["serving"].update(plan=SERVING_PLAN_EXAMPLE), "serving"),
        (lambda b: b["workload"]["serving"]["estimate"]["deployment"].update(
            price_per_gpu_hour_usd="2.00"), "serving"),
        (lambda b: b["workload"]["serving"]["estimate"].update(
            energy={"pue": 1.5}), "serving"),
        (lambda b: b["workload"]["serving"].update(surprise=1), "surprise"),
    ])
    def test_bad_input_names_its_field(self, client: TestClient, writer: dict[str, str],
                                       change: Any, field: str) -> None:
        body = serving_quote()
        change(body)
        problem = assert_problem(post(client, writer, body), 422)
        fields = [e["field"] for e in problem.get("errors", [])] + [problem.get("field")]
        assert any(f and field in f for f in fields), problem

    def test_a_deployment_that_does_not_fit_is_refused(
        self, client: TestClient, writer: dict[str, str]
    ) -> None:
        body = serving_quote()
        deployment = body["workload"]["serving"]["estimate"]["deployment"]
        deployment.update(gpus_per_replica=1, tp=1, weight_precision="bf16")
        assert_problem(post(client, writer, body), 422,
                       "workload.serving.estimate.deployment")

    def test_a_deployment_that_misses_the_slo_is_refused(
        self, client: TestClient, writer: dict[str, str]
    ) -> None:
        body = serving_quote()
        body["workload"]["serving"]["estimate"]["traffic"]["slo"]["ttft_p99_s"] = 0.001
        problem = assert_problem(post(client, writer, body), 422)
        assert "serving-plans" in problem["detail"]

    def test_nan_duration_is_refused(self, client: TestClient,
                                     writer: dict[str, str]) -> None:
        body = serving_quote()
        text = (str(body).replace("'", '"').replace("True", "true").replace("False", "false")
                .replace("None", "null").replace(str(YEAR_S), "NaN"))
        response = client.post("/v1/quotes", content=text, headers={
            **writer, "Idempotency-Key": uuid.uuid4().hex, "content-type": "application/json"})
        assert_problem(response, 422)
        assert math.isfinite(YEAR_S)


def test_a_year_of_serving_is_not_an_impractical_run(
        client: TestClient, writer: dict[str, str]) -> None:
    """A training run over 365 days is warned; a fleet asked to serve for two years is not
    (but a line over ten times the cheapest still is)."""
    body = serving_quote()
    body["workload"]["serving"]["duration_s"] = 2 * YEAR_S
    quote = post(client, writer, body).json()
    lines = all_lines(client, quote, writer)
    assert not [w for x in lines for w in x["warnings"] if w.startswith("impractical wall")]
    cheapest = min(Decimal(x["total"]) for x in lines if x["feasible"])
    for line in lines:
        costly = [w for w in line["warnings"] if w.startswith("impractical cost: ")]
        assert bool(costly) == (line["feasible"] and Decimal(line["total"]) > 10 * cheapest)


def test_the_audit_page_shows_a_serving_quote(client: TestClient,
                                              writer: dict[str, str]) -> None:
    quote = post(client, writer, serving_quote(terms=["on_demand"])).json()
    page = client.get(f"/ui/quotes/{quote['id']}", headers=writer)
    assert page.status_code == 200, page.text[:2000]
    fleet = quote["recommended"]["serving"]
    assert f"{fleet['replicas']} × {fleet['gpus_per_replica']} h100-sxm5-80gb" in page.text
    assert "365.2 days" in page.text or "1.0 year" in page.text


def test_a_modelling_rule_names_the_field_inside_the_serving_workload(
        client: TestClient, writer: dict[str, str]) -> None:
    """tp x pp must equal the GPUs per replica: the problem names the field where the quote
    request has it, not where a serving estimate's body would."""
    body = serving_quote()
    body["workload"]["serving"]["estimate"]["deployment"]["tp"] = 2
    problem = assert_problem(post(client, writer, body), 422)
    assert problem["field"].startswith("workload.serving.estimate.deployment"), problem


def test_a_moe_serving_quote_carries_the_moe_warning_on_every_line(
        client: TestClient, writer: dict[str, str]) -> None:
    """The serving model is off by 5.8x (optimistic) to 1.4x (pessimistic) on the published
    MoE runs (decision 144, ``MOE_SERVING_WARNING``): a budget gated on a MoE serving quote
    sees that on every line, stored ones too; a dense model's lines do not carry it."""
    from service.core.serving import MOE_SERVING_WARNING

    body = serving_quote(terms=["on_demand", "reserved_1y"])
    estimate = body["workload"]["serving"]["estimate"]
    estimate["model"] = {"preset": "mixtral-8x7b"}
    estimate["deployment"].update(tp=2, gpus_per_replica=2)
    response = post(client, writer, body)
    assert response.status_code == 201, response.text
    quote = response.json()
    lines = all_lines(client, quote, writer)
    assert lines
    assert all(MOE_SERVING_WARNING in x["warnings"] for x in lines)
    assert all(MOE_SERVING_WARNING in x["warnings"] for x in quote["lines"])
    dense = post(client, writer, serving_quote(terms=["on_demand"])).json()
    assert not [x for x in all_lines(client, dense, writer)
                if MOE_SERVING_WARNING in x["warnings"]]


class TestTheBandSlowEnd:
    """Issue 40: a budget is judged at the serving band's slow end, and no verdict rests on
    an estimate the model marks as outside what it is validated for (decision 428)."""

    def test_the_cost_band_p90_is_the_slow_end_fleet_for_the_same_duration(
        self, client: TestClient, writer: dict[str, str], sized: dict[str, Any]
    ) -> None:
        slow = sized["sizing"]["replicas_at_band_slow_end"]
        replicas = sized["sizing"]["replicas"]
        assert slow > replicas  # the worst honest case: the slow end needs more replicas
        quote = post(client, writer, serving_quote(terms=["on_demand", "reserved_1y"])).json()
        lines = [x for x in all_lines(client, quote, writer) if x["feasible"]]
        assert lines
        for line in lines:
            fleet = line["serving"]
            assert fleet["replicas"] == replicas
            assert fleet["replicas_at_band_slow_end"] == slow
            assert fleet["band_slow_end_factor"] == pytest.approx(
                sized["sizing"]["band_slow_end_factor"])
            band = line["uncertainty"]
            # The same wall-clock at p10, p50 and p90: the band is in replicas, not time.
            assert band["wall_clock_s"]["p90"] == band["wall_clock_s"]["p50"]
            assert band["commitment_total"]["p10"] == line["commitment_total"]
            gpus_per_instance = line["gpus_per_instance"]
            slow_instances = math.ceil(slow * 4 / gpus_per_instance)
            expected = (Decimal(line["commitment_total"]) * slow_instances
                        / line["instances"])
            p90 = Decimal(band["commitment_total"]["p90"])
            assert p90 > Decimal(line["commitment_total"])
            assert abs(p90 - expected) <= Decimal("0.01") * slow_instances, line

    def test_a_budget_between_the_fleet_and_its_slow_end_warns_estimate_uncertain(
        self, client: TestClient, writer: dict[str, str]
    ) -> None:
        first = post(client, writer, serving_quote(terms=["on_demand"])).json()
        recommended = first["recommended"]
        p50 = Decimal(recommended["total"])
        p90 = Decimal(recommended["uncertainty"]["commitment_total"]["p90"])
        assert p90 > p50
        inside = post(client, writer, serving_quote(
            terms=["on_demand"], budget={"amount": str(p50), "currency": "USD"})).json()
        codes = {(d["code"], d["outcome"]) for d in inside["reason_details"]}
        assert ("estimate_uncertain", "warn") in codes, inside["reason_details"]
        assert inside["verdict"] == "approve"
        # At the slow end's own cost the warning goes.
        covered = post(client, writer, serving_quote(
            terms=["on_demand"], budget={"amount": str(p90), "currency": "USD"})).json()
        assert "estimate_uncertain" not in {d["code"] for d in covered["reason_details"]}
        assert covered["verdict"] == "approve"

    def test_a_moe_fleet_is_not_approved_on_an_unvalidated_estimate(
        self, client: TestClient, writer: dict[str, str], api_key: KeyMaker
    ) -> None:
        body = serving_quote(terms=["on_demand"],
                             budget={"amount": "1000000000", "currency": "USD"})
        estimate = body["workload"]["serving"]["estimate"]
        estimate["model"] = {"preset": "mixtral-8x7b"}
        estimate["deployment"].update(tp=2, gpus_per_replica=2)
        response = post(client, writer, body)
        assert response.status_code == 201, response.text
        quote = response.json()
        assert quote["verdict"] == "reject"
        failed = [d for d in quote["reason_details"] if d["code"] == "estimate_unvalidated"]
        assert failed, quote["reason_details"]
        assert failed[0]["outcome"] == "fail"
        assert failed[0]["rule"] == "forbid_unvalidated_estimates"
        for line in all_lines(client, quote, writer):
            assert "unvalidated_estimate" in line["flags"]
            assert "outside_validated_range" in {d["code"] for d in line["warning_details"]}
        # A policy that accepts the risk approves, with the rule as a warning.
        policies = api_key("policies:write")
        made = client.post("/v1/policies", json={
            "name": "serving-risk", "rules": {"forbid_unvalidated_estimates": False}},
            headers=policies)
        assert made.status_code == 201, made.text
        allowed = post(client, writer, {**body, "policy": "serving-risk"}).json()
        assert allowed["verdict"] == "approve", allowed["reason_details"]
        assert ("estimate_unvalidated", "warn") in {
            (d["code"], d["outcome"]) for d in allowed["reason_details"]}

    def test_a_dense_calibrated_fleet_is_not_flagged(
        self, client: TestClient, writer: dict[str, str]
    ) -> None:
        quote = post(client, writer, serving_quote(
            terms=["on_demand"], budget={"amount": "1000000000", "currency": "USD"})).json()
        assert quote["verdict"] == "approve", quote["reason_details"]
        lines = all_lines(client, quote, writer)
        assert lines
        assert not [x for x in lines if "unvalidated_estimate" in x["flags"]]
