"""Capacity for every term (issue 39, item 3) over ``POST /v1/quotes`` on SQLite and
PostgreSQL: on-demand and reserved lines of more GPUs of one instance type in one region than
the policy's limit fail ``capacity_limit_exceeded``, capacity blocks of more instances than
a block holds fail ``capacity_block_size_exceeded``; each reason names the limit, its policy
field and its source; a named policy raises or softens the limits and verify reproduces it.
An SLO-bound serving fleet on spot carries priced whole spare instances."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.api.schemas.serving import SERVING_EXAMPLE
from service.core import capacity
from service.core.policy import DEFAULT_POLICY, RULE_CODES
from tests.api.test_quotes_api import all_lines

KeyMaker = Callable[..., dict[str, str]]
H100 = "h100-sxm5-80gb"
YEAR_S = 31_557_600


def big_job(num_gpus: int, **extra: Any) -> dict[str, Any]:
    """``num_gpus`` H100s for about 52 days on AWS (the issue's $190M p5.48xlarge case)."""
    body: dict[str, Any] = {
        "workload": {"gpu_hours": {"accelerator": H100, "gpu_hours": num_gpus * 1250,
                                   "num_gpus": num_gpus}},
        "providers": ["aws"], "terms": ["on_demand"],
        "budget": {"amount": "500000000.00", "currency": "USD"}}
    body.update(extra)
    return body


@pytest.fixture
def writer(api_key: KeyMaker) -> dict[str, str]:
    return api_key("quotes:write", "quotes:read", "policies:write")


def post(client: TestClient, headers: dict[str, str], body: dict[str, Any]) -> Any:
    response = client.post("/v1/quotes", json=body,
                           headers={**headers, "Idempotency-Key": uuid.uuid4().hex})
    assert response.status_code == 201, response.text
    return response.json()


def codes(rules: list[dict[str, Any]]) -> set[str]:
    return {r["code"] for r in rules}


def capacity_rules(line: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in line["rules"] if r["rule"] in (
        "max_gpus_per_region_by_term", "max_capacity_block_instances")]


class TestOnDemandAndReserved:
    def test_12288_on_demand_p5_gpus_in_one_region_do_not_approve_without_a_capacity_code(
        self, client: TestClient, writer: dict[str, str],
    ) -> None:
        quote = post(client, writer, big_job(12_288))
        lines = [x for x in all_lines(client, quote, writer) if x["feasible"]]
        p5 = [x for x in lines if x["instance_type"] == "p5.48xlarge"]
        assert p5, "the seed has on-demand p5.48xlarge offers"
        for line in lines:
            gpus = line["instances"] * line["gpus_per_instance"]
            assert gpus > DEFAULT_POLICY.max_on_demand_gpus_per_region
            (rule,) = capacity_rules(line)
            assert rule["code"] == "capacity_limit_exceeded"
            assert rule["code"] in RULE_CODES
            assert rule["outcome"] == "fail"
            # The reason names the figure, the limit, its field, its source and the fix.
            assert f"{gpus:,.0f} GPUs" in rule["message"]
            assert "the policy allows 2,048 (max_on_demand_gpus_per_region" in rule["message"]
            assert "capacity-blocks-purchase" in rule["message"]
            assert "Running On-Demand P instances" in rule["message"]
            assert rule["fix"] in rule["message"]
        assert quote["verdict"] == "reject"
        assert "capacity_limit_exceeded" in codes(quote["reason_details"])

    def test_within_the_limit_no_capacity_rule_fires(
        self, client: TestClient, writer: dict[str, str],
    ) -> None:
        quote = post(client, writer, big_job(2048))
        for line in all_lines(client, quote, writer):
            assert not capacity_rules(line), line["rules"]

    def test_reserved_lines_have_their_own_limit(
        self, client: TestClient, writer: dict[str, str],
    ) -> None:
        quote = post(client, writer, big_job(4096, terms=["reserved_1y", "reserved_3y"]))
        lines = [x for x in all_lines(client, quote, writer) if x["feasible"]]
        assert lines
        for line in lines:
            (rule,) = capacity_rules(line)
            assert rule["code"] == "capacity_limit_exceeded"
            assert "max_reserved_gpus_per_region" in rule["message"]

    def test_a_policy_with_the_accounts_quota_approves_and_verify_reproduces_it(
        self, client: TestClient, writer: dict[str, str],
    ) -> None:
        created = client.post("/v1/policies", headers=writer, json={
            "name": "quota-16k", "rules": {"max_on_demand_gpus_per_region": 16_384}})
        assert created.status_code == 201, created.text
        assert created.json()["rules"]["max_on_demand_gpus_per_region"] == 16_384
        quote = post(client, writer, big_job(12_288, policy="quota-16k"))
        assert quote["policy_result"]["policy"]["max_on_demand_gpus_per_region"] == 16_384
        for line in all_lines(client, quote, writer):
            assert not capacity_rules(line)
        assert "capacity_limit_exceeded" not in codes(quote["reason_details"])
        verified = client.post(f"/v1/quotes/{quote['id']}/verify", headers=writer).json()
        assert verified["matches"], verified["differences"][:3]

    def test_warn_only_softens_the_limit(self, client: TestClient,
                                         writer: dict[str, str]) -> None:
        created = client.post("/v1/policies", headers=writer, json={
            "name": "capacity-warns",
            "rules": {"warn_only": ["max_gpus_per_region_by_term"]}})
        assert created.status_code == 201, created.text
        quote = post(client, writer, big_job(12_288, policy="capacity-warns"))
        rule = next(r for r in quote["reason_details"]
                    if r["code"] == "capacity_limit_exceeded")
        assert rule["outcome"] == "warn"
        assert quote["verdict"] in ("approve", "reject")

    @pytest.mark.parametrize(("field", "value"), [
        ("max_on_demand_gpus_per_region", 0), ("max_reserved_gpus_per_region", -1),
        ("max_capacity_block_instances", 1.5)])
    def test_a_bad_limit_is_a_422_naming_the_field(
        self, client: TestClient, writer: dict[str, str], field: str, value: object,
    ) -> None:
        response = client.post("/v1/policies", headers=writer, json={
            "name": "bad-limit", "rules": {field: value}})
        assert response.status_code == 422, response.text
        assert field in response.text


class TestCapacityBlocks:
    def test_more_instances_than_a_block_holds_fail_with_the_block_size(
        self, client: TestClient, writer: dict[str, str],
    ) -> None:
        quote = post(client, writer, big_job(1024, terms=["capacity_block"]))
        lines = [x for x in all_lines(client, quote, writer) if x["feasible"]]
        assert lines, "the seed has p5.48xlarge capacity blocks"
        for line in lines:
            assert line["instances"] > capacity.CAPACITY_BLOCK_MAX_INSTANCES
            (rule,) = capacity_rules(line)
            assert rule["code"] == "capacity_block_size_exceeded"
            assert f"{line['instances']:,} instances" in rule["message"]
            assert "allows 64 (max_capacity_block_instances)" in rule["message"]
            assert "256 across an account's blocks" in rule["message"]
        assert quote["verdict"] == "reject"
        assert "capacity_block_size_exceeded" in codes(quote["reason_details"])

    def test_one_block_of_64_instances_passes(self, client: TestClient,
                                              writer: dict[str, str]) -> None:
        quote = post(client, writer, big_job(512, terms=["capacity_block"]))
        lines = [x for x in all_lines(client, quote, writer) if x["feasible"]]
        assert lines
        for line in lines:
            assert line["instances"] <= 64
            assert not capacity_rules(line)


class TestServingOnSpot:
    def test_an_slo_bound_fleet_on_spot_carries_priced_spare_instances(
        self, client: TestClient, writer: dict[str, str],
    ) -> None:
        spec = copy.deepcopy(SERVING_EXAMPLE)
        assert spec["traffic"]["slo"], "the example is SLO-bound"
        body = {"workload": {"serving": {"estimate": spec, "duration_s": YEAR_S}},
                "providers": ["aws", "gcp"], "terms": ["spot", "on_demand"]}
        quote = post(client, writer, body)
        lines = [x for x in all_lines(client, quote, writer) if x["feasible"]]
        spot = [x for x in lines if x["term"] == "spot"]
        on_demand = [x for x in lines if x["term"] == "on_demand"]
        assert spot
        assert on_demand
        for line in spot:
            fleet = -(-line["num_gpus"] // int(line["gpus_per_instance"]))
            spares = line["instances"] - fleet
            assert spares >= capacity.MIN_SPARE_INSTANCES, line["goodput_basis"]
            assert f"{spares} spare instance" in line["goodput_basis"]
            # The spares are billed: every instance for the duration, with the restarts.
            hours = Decimal(YEAR_S) / 3600 * Decimal(1 + line["goodput_loss_fraction"])
            cost = Decimal(line["unit_price"]) * line["instances"] * hours
            assert abs(Decimal(line["job_cost_total"]) - cost) <= Decimal("0.01") * max(
                1, line["instances"])
        for line in on_demand:
            fleet = -(-line["num_gpus"] // int(line["gpus_per_instance"]))
            assert line["instances"] == fleet
            assert "spare instance" not in line["goodput_basis"]

    def test_without_an_slo_no_spares_are_bought(self, client: TestClient,
                                                 writer: dict[str, str]) -> None:
        spec = copy.deepcopy(SERVING_EXAMPLE)
        spec["traffic"].pop("slo")
        body = {"workload": {"serving": {"estimate": spec, "duration_s": YEAR_S}},
                "providers": ["aws", "gcp"], "terms": ["spot"]}
        quote = post(client, writer, body)
        for line in all_lines(client, quote, writer):
            if line["feasible"]:
                assert "spare instance" not in line["goodput_basis"]
