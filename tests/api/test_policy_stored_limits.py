"""Stored policies carry every limit (issue 39): the ``fx_rate_age`` limits and the capacity
limits a revision states are the ones its quotes are judged by (``catalog.policies.to_core``
used to drop the fx_rate_age limits, so a named policy could only ``warn_only`` the rule), and
a revision stored before a limit existed takes the built-in one. SQLite and PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from service.catalog import policies
from service.core.policy import DEFAULT_POLICY

KeyMaker = Callable[..., dict[str, str]]

EUR_QUOTE: dict[str, Any] = {
    "workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb", "gpu_hours": 8_000,
                               "num_gpus": 64}},
    "providers": ["aws"], "regions": ["us-east-1"], "terms": ["on_demand"],
    "fx_date": "2025-05-04", "budget": {"amount": "1000000.00", "currency": "EUR"},
}
"""The seed's fixing of 2025-04-30 is hundreds of days before any day these tests run."""


@pytest.fixture
def writer(api_key: KeyMaker) -> dict[str, str]:
    return api_key("quotes:write", "quotes:read", "policies:write")


def quote(client: TestClient, headers: dict[str, str], **extra: Any) -> Any:
    response = client.post("/v1/quotes", json={**EUR_QUOTE, **extra},
                           headers={**headers, "Idempotency-Key": uuid.uuid4().hex})
    assert response.status_code == 201, response.text
    return response.json()


def fx_rules(answer: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in answer["reason_details"] if r["rule"] == "fx_rate_age"]


def make(client: TestClient, headers: dict[str, str], name: str, **rules: Any) -> None:
    response = client.post("/v1/policies", headers=headers, json={"name": name,
                                                                 "rules": rules})
    assert response.status_code == 201, response.text


def test_the_built_in_limits_fail_an_old_fixing(client: TestClient,
                                                writer: dict[str, str]) -> None:
    answer = quote(client, writer)
    (rule,) = fx_rules(answer)
    assert (rule["code"], rule["outcome"]) == ("fx_rate_too_old", "fail")
    assert rule["limit_days"] == DEFAULT_POLICY.fx_rate_fail_age_days


def test_a_stored_policys_fx_limits_are_the_ones_judged(client: TestClient,
                                                         writer: dict[str, str]) -> None:
    make(client, writer, "treasury-rate", fx_rate_warn_age_days=30,
         fx_rate_fail_age_days=36_525)
    answer = quote(client, writer, policy="treasury-rate")
    shown = answer["policy_result"]["policy"]
    assert (shown["fx_rate_warn_age_days"], shown["fx_rate_fail_age_days"]) == (30, 36_525)
    (rule,) = fx_rules(answer)
    # Past 30 days, within a century: it warns, naming the policy's limit, not the built-in.
    assert (rule["code"], rule["outcome"], rule["limit_days"]) == ("fx_rate_stale", "warn",
                                                                   30.0)
    assert "fails after 36,525 days" in rule["message"]
    verified = client.post(f"/v1/quotes/{answer['id']}/verify", headers=writer).json()
    assert verified["matches"], verified["differences"][:3]


def test_null_limits_switch_the_rule_off(client: TestClient, writer: dict[str, str]) -> None:
    make(client, writer, "no-fx-age", fx_rate_warn_age_days=None, fx_rate_fail_age_days=None)
    answer = quote(client, writer, policy="no-fx-age")
    assert fx_rules(answer) == []


@pytest.mark.parametrize("value", [0, -1, 40_000, "7"])
def test_a_bad_fx_limit_is_a_422_naming_the_field(client: TestClient, writer: dict[str, str],
                                                  value: object) -> None:
    response = client.post("/v1/policies", headers=writer, json={
        "name": "bad-fx", "rules": {"fx_rate_fail_age_days": value}})
    assert response.status_code == 422, response.text
    assert "fx_rate_fail_age_days" in response.text


def test_a_revision_stored_before_the_limits_takes_the_built_in_ones(
    db_session: Session,
) -> None:
    row = policies.create(db_session, name="old-revision", description="",
                          rules={"currency": "USD", "warn_only": []}, created_by="test")
    core = policies.to_core(row)
    assert core.fx_rate_warn_age_days == DEFAULT_POLICY.fx_rate_warn_age_days
    assert core.fx_rate_fail_age_days == DEFAULT_POLICY.fx_rate_fail_age_days
    assert core.max_on_demand_gpus_per_region == DEFAULT_POLICY.max_on_demand_gpus_per_region
    assert core.max_reserved_gpus_per_region == DEFAULT_POLICY.max_reserved_gpus_per_region
    assert core.max_capacity_block_instances == DEFAULT_POLICY.max_capacity_block_instances
    db_session.rollback()


def test_every_stored_rule_reaches_the_core(db_session: Session) -> None:
    """Each field of ``PolicyRulesIn`` that is not the default reaches ``to_core``'s policy:
    a field added to the schema but not read would be silently ignored."""
    from service.api.schemas.policies import PolicyRulesIn

    given = {"fx_rate_warn_age_days": 3.0, "fx_rate_fail_age_days": 9.0,
             "max_on_demand_gpus_per_region": 16_384, "max_reserved_gpus_per_region": 8192,
             "max_capacity_block_instances": 256, "max_observed_age_days": 12.0,
             "max_duration_s": 86_400.0, "min_success_probability": 0.5}
    rules = PolicyRulesIn.model_validate(given).model_dump(mode="json")
    row = policies.create(db_session, name="every-limit", description="", rules=rules,
                          created_by="test")
    core = policies.to_core(row)
    for name, value in given.items():
        assert getattr(core, name) == value, name
    db_session.rollback()
