"""Every amount in one currency, through one conversion (issue 39, item 2): with a budget in
another currency every line, the on-prem line included, is priced in USD and shown in the
budget's currency with the quote's one ECB rate; break-even compares USD with USD."""

from __future__ import annotations

import uuid
from decimal import ROUND_CEILING, Decimal
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import given
from hypothesis import strategies as st

H100 = "h100-sxm5-80gb"
BASE: dict[str, Any] = {
    "workload": {"gpu_hours": {"accelerator": H100, "gpu_hours": 8_000, "num_gpus": 64}},
    "providers": ["aws", "acme-cn", "onprem"],
    "regions": ["us-east-1", "cn-north-1"],
    "terms": ["on_demand", "onprem"],
    "fx_date": "2025-05-04",
}
CNY_OFFER: dict[str, Any] = {
    "provider": "acme-cn",
    "region": "cn-north-1",
    "instance_type": "gpu-8x-h100",
    "accelerator": H100,
    "gpus_per_instance": 8,
    "term": "on_demand",
    "currency": "CNY",
    "price_per_hour": "180.00",
    "source": "ACME China price list (test)",
    "as_of": "2026-11-01",
    "indicative": False,
    "nvlink_domain": 8,
    "inter_node_gbps": 3200,
    "fabric_source": "ACME China instance guide (test)",
}


def import_cny_offer(client: TestClient, headers: dict[str, str]) -> None:
    """A price list in CNY, imported as an operator would (a patch of one offer)."""
    made = client.post(
        "/v1/catalog/imports",
        json={"offers": [CNY_OFFER]},
        headers=headers,
        params={"mode": "patch", "note": "a CNY price list"},
    )
    assert made.status_code == 201, made.text


def quote(client: TestClient, headers: dict[str, str], **changes: Any) -> dict[str, Any]:
    response = client.post(
        "/v1/quotes",
        json={**BASE, **changes},
        headers={**headers, "Idempotency-Key": uuid.uuid4().hex},
    )
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def onprem_line(body: dict[str, Any]) -> dict[str, Any]:
    return next(x for x in body["lines"] if x["provider"] == "onprem")


def test_a_cny_budget_shows_the_onprem_line_in_usd_and_in_cny_at_the_quotes_rate(
    client: TestClient, api_key: Any
) -> None:
    """Before: with a CNY offer in the catalogue a CNY budget priced only in CNY, and the
    on-prem line's USD amounts were labelled CNY (a commitment of 23,374,835.62 'CNY' was
    $23.37M). Now the line is USD, and its CNY figure is the USD amount times the rate."""
    headers = api_key("quotes:write", "catalog:write")
    import_cny_offer(client, headers)
    usd = quote(client, headers, budget={"amount": "100000000.00", "currency": "USD"})
    cny = quote(client, headers, budget={"amount": "700000000.00", "currency": "CNY"})
    owned_usd, owned_cny = onprem_line(usd), onprem_line(cny)
    assert owned_cny["currency"] == "USD"
    assert owned_cny["commitment_total"] == owned_usd["commitment_total"]
    rate = Decimal(cny["fx"]["rate"])  # USD per CNY
    shown = owned_cny["in_budget_currency"]
    assert shown["currency"] == "CNY"
    assert Decimal(shown["rate"]) == rate
    for key in ("commitment_total", "total", "job_cost_total"):
        amount = Decimal(owned_cny[key])
        exact = amount / rate
        assert Decimal(shown[key]) == exact.quantize(Decimal("0.01"), rounding=ROUND_CEILING)
        assert Decimal(shown[key]) - exact < Decimal("0.01")
    # Roughly 7.2 CNY to the dollar in 2025: the CNY figure is several times the USD one.
    assert Decimal(shown["commitment_total"]) > 6 * Decimal(owned_cny["commitment_total"])
    assert cny["summary"]["currency"] == "USD"


def test_break_even_is_the_same_whatever_the_budgets_currency(
    client: TestClient, api_key: Any
) -> None:
    """Before: USD capex over CNY rent gave '1.0 month'. Now both sides are USD."""
    headers = api_key("quotes:write", "catalog:write")
    import_cny_offer(client, headers)
    months = {}
    for currency, amount in (
        ("USD", "100000000.00"),
        ("CNY", "700000000.00"),
        ("EUR", "90000000.00"),
        ("JPY", "15000000000"),
    ):
        body = quote(client, headers, budget={"amount": amount, "currency": currency})
        facts = onprem_line(body)["onprem"]
        assert facts["break_even_months"] is not None, facts
        assert " USD / (" in facts["break_even_basis"]
        months[currency] = (facts["break_even_months"], facts["break_even_offer_id"])
    assert len(set(months.values())) == 1, months
    assert Decimal(months["USD"][0]) > Decimal(1)


def test_an_offer_priced_in_cny_under_a_usd_budget_is_a_coded_rejection(
        client: TestClient, api_key: Any) -> None:
    """Before: the CNY offer vanished (no line, no rejected_offers entry, no reason)."""
    headers = api_key("quotes:write", "catalog:write")
    import_cny_offer(client, headers)
    body = quote(client, headers, budget={"amount": "1000000.00", "currency": "USD"},
                 terms=["on_demand"])
    assert not any(x["provider"] == "acme-cn" for x in body["lines"])
    groups = [g for g in body["rejected_offers"]["groups"] if g["provider"] == "acme-cn"]
    assert [(g["code"], g["offers"]) for g in groups] == [("currency_not_converted", 1)]
    assert "priced in CNY" in groups[0]["reason"]
    assert body["rejected_offers"]["count"] >= 1
    # Only the CNY offer: no line, and the reason says why instead of 'cannot host'.
    alone = quote(client, headers, budget={"amount": "1000000.00", "currency": "USD"},
                  terms=["on_demand"], providers=["acme-cn"])
    assert alone["verdict"] == "reject"
    assert alone["reason_details"][0]["code"] == "no_offer_in_quote_currency"
    assert "priced in USD" in alone["reasons"][0]


def test_fx_rate_age_warns_after_7_days_and_fails_after_35_naming_date_limits_and_fix(
        client: TestClient, api_key: Any) -> None:
    """Before: a quote on the seed converted at a fixing 19 months old with no word. Now the
    rule fx_rate_age judges the fixing's age against the quote's day (the route's clock)."""
    import datetime as dt

    from service.core.policy import DEFAULT_POLICY

    headers = api_key("quotes:write", "catalog:write")
    today = dt.datetime.now(dt.UTC).date()
    stale = quote(client, headers, budget={"amount": "1000000.00", "currency": "EUR"},
                  providers=["aws"], fx_date=None)
    aged = next(r for r in stale["reason_details"] if r["rule"] == "fx_rate_age")
    fixing = dt.date.fromisoformat(stale["fx"]["fixing_date"])
    assert (aged["outcome"], aged["code"]) == ("fail", "fx_rate_too_old")
    assert (aged["date"], aged["age_days"]) == (fixing.isoformat(), (today - fixing).days)
    assert aged["limit_days"] == DEFAULT_POLICY.fx_rate_fail_age_days == 35
    assert "/v1/fx-rates/imports" in aged["fix"]
    assert "7 days" in aged["message"]
    assert "35 days" in aged["message"]
    assert stale["verdict"] == "reject"
    policy = stale["policy_result"]["policy"]
    assert (policy["fx_rate_warn_age_days"], policy["fx_rate_fail_age_days"]) == (7, 35)
    # A fixing 10 days old warns; 3 days old passes silently. A USD budget is not judged.
    for days, outcome in ((10, "warn"), (3, None)):
        day = today - dt.timedelta(days=days)
        made = client.post(
            "/v1/fx-rates/imports", content=f"Date,USD,\n{day.isoformat()},1.1000,\n".encode(),
            headers={**headers, "Content-Type": "text/csv"})
        assert made.status_code == 201, made.text
        body = quote(client, headers, budget={"amount": "1000000.00", "currency": "EUR"},
                     providers=["aws"], fx_date=None)
        assert body["fx"]["fixing_date"] == day.isoformat()
        found = [r for r in body["reason_details"] if r["rule"] == "fx_rate_age"]
        assert [r["outcome"] for r in found] == ([outcome] if outcome else [])
        if outcome:
            assert (found[0]["code"], found[0]["age_days"], found[0]["limit_days"]) == (
                "fx_rate_stale", days, 7.0)
    usd = quote(client, headers, budget={"amount": "1000000.00", "currency": "USD"},
                providers=["aws"], fx_date=None)
    assert not any(r["rule"] == "fx_rate_age" for r in usd["reason_details"])


# -- property tests: every currency of the FX table ------------------------------------------

def _seed_table() -> tuple[str, dict[str, Decimal]]:
    """The seed's latest fixing and its rates per EUR, every currency it has."""
    import csv
    from pathlib import Path

    seed = (Path(__file__).resolve().parents[2]
            / "service/catalog/seed/prices/fx_reference_rates.csv")
    with seed.open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    latest = max(r["date"] for r in rows)
    return latest, {r["currency"]: Decimal(r["rate_per_eur"]) for r in rows
                    if r["date"] == latest}


LATEST, RATES = _seed_table()
CURRENCIES = sorted({"EUR", *RATES} - {"USD"})


@given(currency=st.sampled_from(CURRENCIES),
       budget=st.decimals(min_value=Decimal("1"), max_value=Decimal("1e12"), places=2),
       cost=st.decimals(min_value=Decimal("0.01"), max_value=Decimal("1e11"), places=2))
def test_a_passed_line_never_shows_more_than_the_budget_in_any_table_currency(
        currency: str, budget: Decimal, cost: Decimal) -> None:
    """For every currency of the FX table: a USD cost the verdict finds within the converted
    budget is never shown above the budget, and its shown amount is the USD amount times the
    rate (units of the currency per USD), rounded up to the currency's minor unit."""
    import datetime as dt

    from service.catalog import fx
    from service.catalog.currencies import minor_units

    unit = Decimal(1).scaleb(-minor_units(currency))
    budget = budget.quantize(unit, rounding=ROUND_CEILING)
    c = fx.convert(budget, currency, "USD", RATES, dt.date.fromisoformat(LATEST), "fx_000001")
    shown = c.in_budget_currency(cost)
    per_usd = fx.CONVERSION_PRECISION.divide(Decimal(1), c.rate)
    exact = cost * per_usd
    assert shown >= exact - Decimal("1e-18")
    assert shown - exact <= unit + Decimal("1e-18")
    if cost <= c.converted:
        assert shown <= budget


@pytest.mark.parametrize("currency", ["CNY", "EUR", "JPY", "GBP"])
def test_passed_lines_and_the_onprem_line_agree_in_the_budgets_currency(
        client: TestClient, api_key: Any, currency: str) -> None:
    """Real quotes: every line within the budget shows at most the budget in its currency;
    the on-prem line in that currency is its USD amount times the rate (rounded up)."""
    from service.catalog.currencies import minor_units

    headers = api_key("quotes:write")
    unit = Decimal(1).scaleb(-minor_units(currency))
    probe = quote(client, headers, budget={"amount": "1", "currency": currency})
    rate = Decimal(probe["fx"]["rate"])
    usd_cheapest = Decimal(probe["cheapest"]["total"])
    # A budget between the cheapest line and the dearest: some lines pass, some do not.
    amount = (usd_cheapest * 3 / rate).quantize(unit)
    body = quote(client, headers, budget={"amount": str(amount), "currency": currency})
    lines = [x for x in body["lines"] if x["feasible"]]
    assert any(x["within_budget"] for x in lines)
    for line in lines:
        shown = line["in_budget_currency"]
        assert shown["currency"] == currency
        if line["within_budget"]:
            assert Decimal(shown["total"]) <= amount
        exact = Decimal(line["total"]) / rate
        assert Decimal(shown["total"]) == exact.quantize(unit, rounding=ROUND_CEILING)
    owned = onprem_line(body)
    assert owned["currency"] == "USD"
    exact = Decimal(owned["commitment_total"]) / rate
    assert Decimal(owned["in_budget_currency"]["commitment_total"]) == exact.quantize(
        unit, rounding=ROUND_CEILING)
