"""FX reference rates (issue 17): the ECB table is seeded, importable in the ECB's own CSV
formats (all or nothing, append-only, conflicts refused), and a quote judges a budget in
another currency with a stated rate, rounded so that rounding never enlarges the budget, and
verify reproduces it after the table has grown."""

from __future__ import annotations

import csv
import datetime as dt
import uuid
from decimal import ROUND_DOWN, Decimal
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.orm import Session

from service.catalog import fx
from tests.api.test_estimates import assert_problem
from tests.factories import date_offers

SEED = Path(__file__).resolve().parents[2] / "service/catalog/seed/prices/fx_reference_rates.csv"
TODAY = dt.date(2026, 11, 24)


def seed_rate(day: str, currency: str) -> Decimal:
    with SEED.open(encoding="utf-8") as handle:
        return next(Decimal(r["rate_per_eur"]) for r in csv.DictReader(handle)
                    if r["date"] == day and r["currency"] == currency)


# -- the ECB formats --------------------------------------------------------------------------

HIST = ("Date,USD,JPY,BGN,CYP,\n"
        "2025-06-03,1.1376,163.37,1.9558,N/A,\n"
        "2025-06-02,1.1444,163.48,1.9558,N/A,\n")
DAILY = "Date, USD, JPY, GBP, \n03 June 2025, 1.1376, 163.37, 0.84270, \n"


def test_both_ecb_formats_parse_to_exact_rates() -> None:
    hist = fx.parse_ecb_csv(HIST, latest_allowed=TODAY)
    assert {(r.date.isoformat(), r.currency): r.rate_per_eur for r in hist} == {
        ("2025-06-03", "USD"): Decimal("1.1376"), ("2025-06-03", "JPY"): Decimal("163.37"),
        ("2025-06-03", "BGN"): Decimal("1.9558"), ("2025-06-02", "USD"): Decimal("1.1444"),
        ("2025-06-02", "JPY"): Decimal("163.48"), ("2025-06-02", "BGN"): Decimal("1.9558")}
    daily = fx.parse_ecb_csv(DAILY, latest_allowed=TODAY)
    assert [(r.date, r.currency, str(r.rate_per_eur)) for r in daily] == [
        (dt.date(2025, 6, 3), "USD", "1.1376"), (dt.date(2025, 6, 3), "JPY", "163.37"),
        (dt.date(2025, 6, 3), "GBP", "0.84270")]


@pytest.mark.parametrize(("text", "row", "column"), [
    ("Date,USD,\n2025-06-03,NaN,\n", 2, "USD"),
    ("Date,USD,\n2025-06-03,-1.1,\n", 2, "USD"),
    ("Date,USD,\n2025-06-03,1e3,\n", 2, "USD"),
    ("Date,USD,\n2025-06-03,Infinity,\n", 2, "USD"),
    ("Date,USD,\n2025-06-03,0,\n", 2, "USD"),
    ("Date,USD,\n2025-06-03,99999999,\n", 2, "USD"),
    ("Date,USD,\n2025-13-03,1.1,\n", 2, "Date"),
    ("Date,USD,\n2027-01-04,1.1,\n", 2, "Date"),                 # after today
    ("Date,USD,\n2025-06-03,1.1,\n2025-06-03,1.2,\n", 3, "Date"),  # a day twice
    ("Date,XYZ,\n2025-06-03,1.1,\n", 1, "XYZ"),                  # not ISO 4217
    ("Date,EUR,\n2025-06-03,1,\n", 1, "EUR"),                    # the base itself
    ("Day,USD,\n2025-06-03,1.1,\n", 1, "Date"),
    ("Date,USD,\n", 2, "Date"),                                  # no rates at all
])
def test_a_bad_cell_rejects_the_file_naming_row_and_column(text: str, row: int,
                                                           column: str) -> None:
    with pytest.raises(fx.FxImportRejectedError) as caught:
        fx.parse_ecb_csv(text, latest_allowed=TODAY)
    assert (caught.value.problems[0].row, caught.value.problems[0].column) == (row, column)


@given(amount=st.decimals(min_value=Decimal("0.01"), max_value=Decimal("1e12"), places=2),
       into=st.decimals(min_value=Decimal("0.0001"), max_value=Decimal("20000"), places=4),
       of=st.decimals(min_value=Decimal("0.0001"), max_value=Decimal("20000"), places=4))
def test_rounding_never_enlarges_a_budget(amount: Decimal, into: Decimal, of: Decimal) -> None:
    """The converted budget is at most the exact value and less than a cent below it."""
    c = fx.convert(amount, "GBP", "USD", {"GBP": of, "USD": into}, dt.date(2025, 4, 30),
                   "fx_000001")
    exact = amount * into / of  # 28 digits: within a cent's rounding of 34 digits
    assert c.converted <= exact.quantize(Decimal("0.01"), rounding=ROUND_DOWN) + Decimal(
        "0.01")
    assert c.converted <= exact + Decimal("1e-12")
    assert exact - c.converted < Decimal("0.0100001")


@given(budget=st.decimals(min_value=Decimal("0.01"), max_value=Decimal("1e12"), places=2),
       cost=st.decimals(min_value=Decimal("0.01"), max_value=Decimal("1e12"), places=2),
       into=st.decimals(min_value=Decimal("0.0001"), max_value=Decimal("20000"), places=4),
       of=st.decimals(min_value=Decimal("0.0001"), max_value=Decimal("20000"), places=4),
       currency=st.sampled_from(["GBP", "JPY"]))
def test_a_line_shown_in_the_budget_currency_agrees_with_the_verdict(
        budget: Decimal, cost: Decimal, into: Decimal, of: Decimal, currency: str) -> None:
    """Worst honest case of showing a USD line in the budget's currency: a cost the verdict
    finds within the converted budget is never shown above the budget, and a shown amount is
    never below the exact cost (JPY has no minor unit, so it is rounded to whole yen)."""
    budget = budget.quantize(Decimal(1)) if currency == "JPY" else budget
    if budget <= 0:
        return
    c = fx.convert(budget, currency, "USD", {currency: of, "USD": into},
                   dt.date(2025, 4, 30), "fx_000001")
    shown = c.in_budget_currency(cost)
    assert shown >= cost * of / into - Decimal("1e-20")
    if currency == "JPY":
        assert shown == shown.to_integral_value()
    if cost <= c.converted:  # the verdict's comparison
        assert shown <= budget
    # The boundary itself: a cost of exactly the converted budget (found failing when the
    # conversion's product could round up at its 34th digit).
    assert c.in_budget_currency(c.converted) <= budget


# -- the API ----------------------------------------------------------------------------------

def test_the_seed_table_answers_the_latest_fixing_on_or_before_a_day(
        client: TestClient) -> None:
    answer = client.get("/v1/fx-rates", params={"date": "2025-05-04",
                                                "currency": ["USD", "GBP"]})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    # 2025-05-04 is a Sunday; the seed keeps month-ends, so the fixing is 2025-04-30.
    assert (body["version"], body["fixing_date"]) == ("fx_000001", "2025-04-30")
    assert body["rates_per_eur"] == {"GBP": str(seed_rate("2025-04-30", "GBP")),
                                     "USD": str(seed_rate("2025-04-30", "USD"))}
    early = client.get("/v1/fx-rates", params={"date": "2020-01-01", "currency": ["USD"]})
    problem = assert_problem(early, 404)
    assert "USD on or before 2020-01-01" in problem["detail"]


def _import(client: TestClient, headers: dict[str, str], text: str) -> Any:
    return client.post("/v1/fx-rates/imports", content=text.encode(),
                       headers={**headers, "Content-Type": "text/csv"})


def test_an_import_adds_a_version_and_a_replay_adds_nothing(
        client: TestClient, api_key: Any) -> None:
    headers = api_key("catalog:write")
    first = _import(client, headers, HIST)
    assert first.status_code == 201, first.text
    made = first.json()
    assert (made["added"], made["unchanged"], made["version"]["id"]) == (6, 0, "fx_000002")
    assert made["version"]["last_date"] == "2025-06-03"
    again = _import(client, headers, HIST)
    assert again.status_code == 200
    assert (again.json()["added"], again.json()["version"]["id"]) == (0, "fx_000002")
    read = client.get("/v1/fx-rates", params={"date": "2025-06-05", "currency": ["USD"]})
    assert read.json()["fixing_date"] == "2025-06-03"
    # The older version still answers as it did.
    old = client.get("/v1/fx-rates", params={"date": "2025-06-05", "currency": ["USD"],
                                             "version": "fx_000001"})
    assert old.json()["fixing_date"] == "2025-05-09"


def test_a_rate_that_contradicts_a_stored_one_is_409_and_nothing_is_stored(
        client: TestClient, api_key: Any) -> None:
    headers = api_key("catalog:write")
    stored = seed_rate("2025-04-30", "USD")
    text = f"Date,USD,JPY,\n2025-06-02,1.1444,163.48,\n2025-04-30,{stored + 1},,\n"
    response = _import(client, headers, text)
    problem = assert_problem(response, 409)
    assert "USD on 2025-04-30" in problem["detail"]
    later = client.get("/v1/fx-rates", params={"date": "2025-06-05", "currency": ["USD"]})
    assert later.json()["version"] == "fx_000001"  # the good row was not stored either


def test_bad_imports_are_4xx_problems(client: TestClient, api_key: Any) -> None:
    headers = api_key("catalog:write")
    problem = assert_problem(_import(client, headers, "Date,USD,\n2025-06-03,abc,\n"), 422)
    assert problem["errors"][0]["field"].endswith("USD")
    wrong_type = client.post("/v1/fx-rates/imports", json={"rates": []}, headers=headers)
    assert_problem(wrong_type, 415)
    reader = api_key("quotes:write")
    assert_problem(_import(client, reader, HIST), 403)


# -- quotes -----------------------------------------------------------------------------------

QUOTE: dict[str, Any] = {
    "workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb", "gpu_hours": 8_000,
                               "num_gpus": 64}},
    "providers": ["aws"], "regions": ["us-east-1"], "terms": ["on_demand"],
    "fx_date": "2025-05-04",
}


def _quote(client: TestClient, headers: dict[str, str], body: dict[str, Any]) -> Any:
    return client.post("/v1/quotes", json=body,
                       headers={**headers, "Idempotency-Key": uuid.uuid4().hex})


def test_a_eur_budget_is_judged_with_a_stated_ecb_rate_to_the_cent(
        client: TestClient, api_key: Any, db_session: Session) -> None:
    """The worst honest case: a EUR budget whose converted value is exactly the commitment
    approves; one cent of EUR less rejects. The rate, its fixing date and table version are
    stated, and verify reproduces the quote after the table has grown."""
    date_offers(db_session, providers=("aws",))
    headers = api_key("quotes:write", "catalog:write", "policies:write")
    # The seed's fixings are 19 months before today: fx_rate_age would fail; this test is
    # about the budget's rounding, so the policy only warns of the rate's age.
    made = client.post("/v1/policies", headers=headers, json={
        "name": "fx-age-warns", "rules": {"warn_only": ["fx_rate_age"]}})
    assert made.status_code == 201, made.text
    usd_per_eur = seed_rate("2025-04-30", "USD")
    probe = _quote(client, headers, {**QUOTE, "budget": {"amount": "1.00", "currency": "EUR"}})
    assert probe.status_code == 201, probe.text
    total = Decimal(probe.json()["cheapest"]["total"])
    # The smallest EUR amount (in cents) whose conversion covers the total.
    eur = (total / usd_per_eur).quantize(Decimal("0.01"), rounding=ROUND_DOWN)
    while (eur * usd_per_eur).quantize(Decimal("0.01"), rounding=ROUND_DOWN) < total:
        eur += Decimal("0.01")
    enough = _quote(client, headers, {**QUOTE, "policy": "fx-age-warns", "budget": {
        "amount": str(eur), "currency": "EUR"}}).json()
    assert enough["verdict"] == "approve", enough["reasons"]
    aged = next(r for r in enough["reason_details"] if r["rule"] == "fx_rate_age")
    assert (aged["outcome"], aged["code"], aged["date"]) == ("warn", "fx_rate_too_old",
                                                             "2025-04-30")
    conversion = enough["fx"]
    assert conversion["fixing_date"] == "2025-04-30"
    assert conversion["version"] == "fx_000001"
    assert Decimal(conversion["rate"]) == usd_per_eur
    assert conversion["rates_per_eur"] == {"EUR": "1", "USD": str(usd_per_eur)}
    assert conversion["budget"] == {"amount": str(eur), "currency": "EUR"}
    assert Decimal(conversion["converted_budget"]["amount"]) == (
        eur * usd_per_eur).quantize(Decimal("0.01"), rounding=ROUND_DOWN)
    # The line in the budget's currency: never over the budget it passed, never below its cost.
    shown = enough["cheapest"]["in_budget_currency"]
    assert shown["currency"] == "EUR"
    assert total / usd_per_eur <= Decimal(shown["total"]) <= eur
    budget_rule = next(r for r in enough["reason_details"] if r["rule"] == "budget")
    assert "EUR at" in budget_rule["message"]
    assert "2025-04-30" in budget_rule["message"]
    short = _quote(client, headers, {**QUOTE, "policy": "fx-age-warns", "budget": {
        "amount": str(eur - Decimal("0.01")), "currency": "EUR"}}).json()
    assert short["verdict"] == "reject"
    assert short["cheapest"]["within_budget"] is False
    assert Decimal(short["cheapest"]["in_budget_currency"]["total"]) > eur - Decimal("0.01")
    # A later import adds a fixing the quote's day would now pick; verify still matches,
    # because the quote named its table version.
    grown = _import(client, headers, "Date,USD,\n2025-05-02,1.1301,\n")
    assert grown.status_code == 201, grown.text
    verify = client.post(f"/v1/quotes/{enough['id']}/verify", headers=headers).json()
    assert verify["matches"], verify["differences"]
    requote = _quote(client, headers, {**QUOTE, "policy": "fx-age-warns", "budget": {
        "amount": str(eur), "currency": "EUR"}}).json()
    assert requote["fx"]["fixing_date"] == "2025-05-02"
    assert requote["fx"]["version"] == "fx_000002"


def test_a_gbp_budget_uses_the_cross_rate_through_the_euro(
        client: TestClient, api_key: Any) -> None:
    headers = api_key("quotes:write")
    quote = _quote(client, headers, {**QUOTE, "budget": {"amount": "1000000.00",
                                                         "currency": "GBP"}})
    assert quote.status_code == 201, quote.text
    conversion = quote.json()["fx"]
    usd, gbp = seed_rate("2025-04-30", "USD"), seed_rate("2025-04-30", "GBP")
    assert conversion["rates_per_eur"] == {"GBP": str(gbp), "USD": str(usd)}
    expected = (Decimal("1000000.00") * fx.CONVERSION_PRECISION.divide(usd, gbp)).quantize(
        Decimal("0.01"), rounding=ROUND_DOWN)
    assert Decimal(conversion["converted_budget"]["amount"]) == expected
    assert quote.json()["summary"]["currency"] == "USD"


def test_a_usd_budget_needs_no_conversion_and_says_so(client: TestClient,
                                                      api_key: Any) -> None:
    headers = api_key("quotes:write")
    quote = _quote(client, headers, {**QUOTE, "budget": {"amount": "1000.00",
                                                         "currency": "USD"}}).json()
    assert quote["fx"] is None


def test_an_unknown_fx_version_is_422_naming_it(client: TestClient, api_key: Any) -> None:
    headers = api_key("quotes:write")
    body = {**QUOTE, "fx_version": "fx_000099",
            "budget": {"amount": "1000.00", "currency": "EUR"}}
    assert_problem(_quote(client, headers, body), 422, "fx_version")


def test_a_budget_plan_converts_the_budget_too(client: TestClient) -> None:
    from service.api.schemas.quotes import BUDGET_PLAN_EXAMPLE

    body = {**BUDGET_PLAN_EXAMPLE, "budget": {"amount": "2500000.00", "currency": "EUR"},
            "fx_date": "2025-01-15"}
    answer = client.post("/v1/budget-plans", json=body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["fx"]["fixing_date"] == "2024-12-31"


def test_carriage_returns_and_oversized_fields_are_read_or_refused_never_a_crash() -> None:
    rates = fx.parse_ecb_csv("Date,USD,\r2025-06-03,1.1376,\r", latest_allowed=TODAY)
    assert [(r.currency, r.rate_per_eur) for r in rates] == [("USD", Decimal("1.1376"))]
    with pytest.raises(fx.FxImportRejectedError, match="not CSV"):
        fx.parse_ecb_csv("Date,USD\n" + "1" * 200_000 + "\n", latest_allowed=TODAY)


def test_a_date_must_be_written_as_a_date(client: TestClient, api_key: Any) -> None:
    """Lax parsing would read 0 as 1970-01-01; every request date is an ISO string."""
    headers = api_key("quotes:write")
    body = {**QUOTE, "fx_date": 0, "budget": {"amount": "1000.00", "currency": "EUR"}}
    assert_problem(_quote(client, headers, body), 422, "fx_date")


def test_a_policy_limit_in_the_budgets_currency_is_converted_at_the_same_fixing(
        client: TestClient, api_key: Any, db_session: Session) -> None:
    """A EUR organisation: EUR budget, EUR policy limit. The limit is converted with the
    budget's own fixing and rounded down (never loosened), and verify reproduces it."""
    date_offers(db_session, providers=("aws",))
    headers = api_key("quotes:write", "policies:write")
    usd_per_eur = seed_rate("2025-04-30", "USD")
    probe = _quote(client, headers, {**QUOTE, "budget": {"amount": "1.00", "currency": "EUR"}})
    total = Decimal(probe.json()["cheapest"]["total"])
    eur = (total / usd_per_eur).quantize(Decimal("0.01"), rounding=ROUND_DOWN)
    while (eur * usd_per_eur).quantize(Decimal("0.01"), rounding=ROUND_DOWN) < total:
        eur += Decimal("0.01")
    for name, limit in (("eur-enough", eur), ("eur-short", eur - Decimal("0.01"))):
        created = client.post("/v1/policies", headers=headers, json={
            "name": name, "rules": {"currency": "EUR", "max_commitment": str(limit),
                                    "warn_only": ["fx_rate_age"]}})
        assert created.status_code == 201, created.text
    body = {**QUOTE, "budget": {"amount": "100000000.00", "currency": "EUR"}}
    enough = _quote(client, headers, {**body, "policy": "eur-enough"}).json()
    assert not any(r["rule"] == "max_commitment" for r in enough["cheapest"]["rules"])
    assert enough["verdict"] == "approve", enough["reasons"]
    assert "max_commitment" in enough["fx"]["policy_limits"]
    assert f"{eur:,.2f} EUR" in enough["fx"]["policy_limits"]["max_commitment"]
    short = _quote(client, headers, {**body, "policy": "eur-short"}).json()
    assert short["verdict"] == "reject"
    assert any(r["code"] == "commitment_over_policy_limit" for r in short["reason_details"])
    verify = client.post(f"/v1/quotes/{short['id']}/verify", headers=headers).json()
    assert verify["matches"], verify["differences"]
