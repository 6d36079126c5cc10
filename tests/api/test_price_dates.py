"""Quotes on a fresh seed judge what is known of each price's date (issue 39): the day it was
read (``observed_at``) when the provider's date (``as_of``) is unknown. The clock is frozen
(``service.api.routes.quotes.dt``), as the goldens freeze it, so no age depends on the day the
tests run."""

from __future__ import annotations

import datetime as dt
import types
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update
from sqlalchemy.orm import Session

from service.api.routes import quotes as quote_routes
from service.catalog.models import OfferRevision
from service.core.policy import DEFAULT_POLICY

READ_DAY = dt.date(2026, 11, 22)
"""The copy day of the seed's AWS file (service/catalog/seed/prices/README.md)."""
README_QUOTE: dict[str, Any] = {
    "workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb", "gpu_hours": 250000,
                               "num_gpus": 512}},
    "providers": ["aws"], "budget": {"amount": "2000000.00", "currency": "USD"}}
"""README's first ``cq quote`` (--gpu-hours 250000 --accelerator h100-sxm5-80gb --gpus 512
--provider aws --budget 2000000), as the body cq sends (``tests/cli`` runs the line itself)."""
BUDGET_PLAN: dict[str, Any] = {
    "objective": "soonest", "model": {"preset": "llama3.1-8b"},
    "training": {"seq_len": 8192, "global_batch_seqs": 128, "tokens": 1e11},
    "clusters": [{"accelerator": "h100-sxm5-80gb",
                  "num_gpus_range": {"start": 8, "stop": 64, "step": 8}}],
    "providers": ["aws"], "budget": {"amount": "200000.00", "currency": "USD"},
    "deadline_s": 60 * 86_400}


def freeze(monkeypatch: pytest.MonkeyPatch, day: dt.date) -> None:
    """The API's clock reads noon UTC of ``day`` (quotes and budget plans)."""
    moment = dt.datetime(day.year, day.month, day.day, 12, tzinfo=dt.UTC)

    class Frozen(dt.datetime):
        @classmethod
        def now(cls, tz: dt.tzinfo | None = None) -> dt.datetime:  # type: ignore[override]
            return moment if tz is not None else moment.replace(tzinfo=None)

    monkeypatch.setattr(quote_routes, "dt", types.SimpleNamespace(
        datetime=Frozen, timedelta=dt.timedelta, UTC=dt.UTC, date=dt.date))


@pytest.fixture
def post(client: TestClient, api_key: Callable[..., dict[str, str]]
         ) -> Callable[[str, dict[str, Any]], dict[str, Any]]:
    headers = api_key("quotes:write", "quotes:read")

    def send(path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = client.post(path, json=body, headers={
            **headers, "Idempotency-Key": uuid.uuid4().hex})
        assert response.status_code in (200, 201), response.text[:600]
        answer: dict[str, Any] = response.json()
        return answer
    return send


def date_rules(line: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in line["rules"] if r["rule"] in ("max_price_age_s",
                                                       "max_observed_age_days")]


def test_the_readme_quote_approves_on_a_fresh_seed_with_the_observed_warning(
        post: Callable[[str, dict[str, Any]], dict[str, Any]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: every seed price without as_of failed undated_price, so the README's first
    quote was a reject on a fresh install. Now a price read 9 days ago approves with a
    coded warning naming the day read, its age, the limit and the fix."""
    freeze(monkeypatch, READ_DAY + dt.timedelta(days=9))
    quote = post("/v1/quotes", README_QUOTE)
    assert quote["verdict"] == "approve"
    line = quote["recommended"]
    assert (line["price_as_of"], line["price_observed_at"]) == (None, "2026-11-22")
    assert "undated_price" in line["flags"]  # the fact stays: the provider's date is unknown
    [rule] = date_rules(line)
    assert (rule["code"], rule["outcome"], rule["severity"]) == (
        "price_date_unknown_observed", "warn", "warning")
    assert (rule["date"], rule["age_days"], rule["limit_days"]) == ("2026-11-22", 9, 30.0)
    assert "read on 2026-11-22, 9 days ago" in rule["message"]
    assert "cq catalog refresh --provider aws" in rule["fix"]
    assert rule["fix"] in rule["message"]
    assert any(r["code"] == "price_date_unknown_observed" for r in quote["reason_details"])
    assert quote["policy_result"]["outcome"] == "warn"


def test_a_price_read_longer_ago_than_the_limit_rejects_naming_rule_age_limit_and_fix(
        post: Callable[[str, dict[str, Any]], dict[str, Any]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    limit = DEFAULT_POLICY.max_observed_age_days
    assert limit == 30
    freeze(monkeypatch, READ_DAY + dt.timedelta(days=31))
    quote = post("/v1/quotes", README_QUOTE)
    assert quote["verdict"] == "reject"
    stale = [r for r in quote["reason_details"] if r["code"] == "observed_price_stale"]
    assert stale, quote["reason_details"]
    rule = stale[0]
    assert (rule["rule"], rule["outcome"], rule["age_days"], rule["limit_days"]) == (
        "max_observed_age_days", "fail", 31, 30.0)
    for needle in ("2026-11-22", "31 days ago", "30 days", "max_observed_age_days",
                   "cq catalog refresh --provider aws", "cq catalog import"):
        assert needle in rule["message"], needle


def test_a_price_with_neither_date_rejects_with_the_fix(
        post: Callable[[str, dict[str, Any]], dict[str, Any]], db_session: Session,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """As offers stored before schema 0013 are: no as_of and no observed_at."""
    freeze(monkeypatch, READ_DAY + dt.timedelta(days=9))
    db_session.execute(update(OfferRevision).where(OfferRevision.provider_id == "aws")
                       .values(observed_at=None))
    db_session.flush()
    quote = post("/v1/quotes", README_QUOTE)
    assert quote["verdict"] == "reject"
    line = quote["recommended"]
    assert line["price_observed_at"] is None
    [rule] = date_rules(line)
    assert (rule["rule"], rule["code"], rule["outcome"]) == (
        "max_price_age_s", "undated_price", "fail")
    assert (rule.get("date"), rule.get("age_days"), rule["limit_days"]) == (None, None, 180.0)
    assert "not recorded" in rule["message"]
    assert "cq catalog refresh --provider aws" in rule["message"]


def test_a_policy_can_switch_the_observed_rule_off_or_tighten_it(
        client: TestClient, api_key: Callable[..., dict[str, str]],
        post: Callable[[str, dict[str, Any]], dict[str, Any]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    freeze(monkeypatch, READ_DAY + dt.timedelta(days=9))
    headers = api_key("policies:write", "quotes:write")
    names = {}
    for label, limit in (("off", None), ("tight", 7)):
        name = f"dates-{label}-{uuid.uuid4().hex[:6]}"
        made = client.post("/v1/policies", headers=headers, json={
            "name": name, "rules": {"max_observed_age_days": limit}})
        assert made.status_code == 201, made.text
        assert made.json()["rules"]["max_observed_age_days"] == limit
        names[label] = name
    off = post("/v1/quotes", {**README_QUOTE, "policy": names["off"]})
    assert off["verdict"] == "reject"
    assert date_rules(off["recommended"])[0]["code"] == "undated_price"
    tight = post("/v1/quotes", {**README_QUOTE, "policy": names["tight"]})
    assert tight["verdict"] == "reject"
    assert date_rules(tight["recommended"])[0]["code"] == "observed_price_stale"


def test_offers_answer_the_day_read_and_its_age(client: TestClient) -> None:
    page = client.get("/v1/offers", params={"provider": "aws", "page_size": 5}).json()
    for offer in page["items"]:
        assert offer["observed_at"] == "2026-11-22"
        today = dt.datetime.now(dt.UTC).date()
        assert offer["observed_age_days"] == (today - READ_DAY).days


def test_budget_plan_names_the_rule_that_failed_not_a_contradicting_figure(
        post: Callable[[str, dict[str, Any]], dict[str, Any]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: "nothing fits the budget: the cheapest line's commitment total is 3,755.56
    USD" against a 200,000 USD budget, the price date unnamed."""
    freeze(monkeypatch, READ_DAY + dt.timedelta(days=9))
    fresh = post("/v1/budget-plans", BUDGET_PLAN)
    assert fresh["soonest_within_budget"], fresh["explanation"]
    assert fresh["explanation"] == ""
    freeze(monkeypatch, READ_DAY + dt.timedelta(days=45))
    old = post("/v1/budget-plans", BUDGET_PLAN)
    assert old["soonest_within_budget"] == []
    why = old["explanation"]
    assert "nothing fits the budget" not in why
    assert "within the budget but the policy fails each of them" in why
    assert "max_observed_age_days (observed_price_stale)" in why
    assert "45 days ago" in why
    assert "cq catalog refresh --provider aws" in why


def test_largest_model_names_the_rule_that_failed(
        post: Callable[[str, dict[str, Any]], dict[str, Any]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    freeze(monkeypatch, READ_DAY + dt.timedelta(days=45))
    body = {"objective": "largest_model", "training": {"seq_len": 8192,
                                                       "global_batch_seqs": 128,
                                                       "tokens": 1e11},
            "clusters": [{"accelerator": "h100-sxm5-80gb",
                          "num_gpus_range": {"start": 256, "stop": 512, "step": 256}}],
            "providers": ["aws"], "budget": {"amount": "2000000.00", "currency": "USD"},
            "deadline_s": 60 * 86_400}
    answer = post("/v1/budget-plans", body)
    assert answer["largest_model"] is None
    note = answer["models_tried"][0]["note"]
    assert "max_observed_age_days (observed_price_stale)" in note, note


def test_the_portal_quote_approves_with_the_warning_named(
        client: TestClient, api_key: Callable[..., dict[str, str]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The portal's quote on a fresh seed: the verdict, and the coded warning in its reasons
    table with the day read and its age."""
    from tests.api.test_ui import FORM

    freeze(monkeypatch, READ_DAY + dt.timedelta(days=9))
    key = api_key("quotes:write", "quotes:read")["Authorization"].split()[1]
    response = client.post("/ui", data={**FORM, "api_key": key, "budget": "10000000.00",
                                        "providers": "aws", "action": "quote",
                                        "nonce": uuid.uuid4().hex[:12]})
    assert response.status_code == 200, response.text[:800]
    html = response.text
    assert "Budget verdict: <strong>approve</strong>" in html
    assert "price_date_unknown_observed" in html
    assert "read on 2026-11-22, 9 days ago" in html
