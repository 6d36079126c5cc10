"""Discount books (issue 17): stored with immutable revisions, If-Match edits and their own
scope; a quote that names one shows each line's list price beside its net price, names the
book and revision, and verifies after the book is revised."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from service.api.schemas.discounts import DISCOUNT_BOOK_EXAMPLE
from tests.api.test_estimates import assert_problem
from tests.api.test_quotes_api import all_lines
from tests.factories import date_offers

TODAY = dt.datetime.now(dt.UTC).date()
WINDOW = {"valid_from": (TODAY - dt.timedelta(days=30)).isoformat(),
          "valid_until": (TODAY + dt.timedelta(days=365)).isoformat()}
QUOTE: dict[str, Any] = {
    "workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb", "gpu_hours": 8_000,
                               "num_gpus": 64}},
    "providers": ["aws"], "terms": ["on_demand"],
}


@pytest.fixture
def writer(api_key: Any) -> dict[str, str]:
    headers: dict[str, str] = api_key("discounts:write", "discounts:read", "quotes:write")
    return headers


def _book(client: TestClient, headers: dict[str, str], name: str,
          entries: list[dict[str, Any]]) -> Any:
    return client.post("/v1/discount-books", headers=headers,
                       json={"name": name, "description": "test", "entries": entries})


def _quote(client: TestClient, headers: dict[str, str], body: dict[str, Any]) -> Any:
    return client.post("/v1/quotes", json=body,
                       headers={**headers, "Idempotency-Key": uuid.uuid4().hex})


def test_the_documented_example_is_stored_and_revised_with_if_match(
        client: TestClient, writer: dict[str, str], api_key: Any) -> None:
    created = client.post("/v1/discount-books", json=DISCOUNT_BOOK_EXAMPLE, headers=writer)
    assert created.status_code == 201, created.text
    assert created.headers["etag"] == '"d1"'
    assert created.headers["location"] == "/v1/discount-books/acme-enterprise-2026"
    assert created.json()["entries"][0]["percent_off"] == "18"
    assert_problem(client.post("/v1/discount-books", json=DISCOUNT_BOOK_EXAMPLE,
                               headers=writer), 409)
    revision = {"description": "renewed", "entries": DISCOUNT_BOOK_EXAMPLE["entries"][:1]}
    url = "/v1/discount-books/acme-enterprise-2026"
    assert_problem(client.put(url, json=revision, headers=writer), 428)
    assert_problem(client.put(url, json=revision, headers={**writer, "If-Match": '"d7"'}), 412)
    revised = client.put(url, json=revision, headers={**writer, "If-Match": '"d1"'})
    assert revised.status_code == 200, revised.text
    assert (revised.json()["revision"], revised.headers["etag"]) == (2, '"d2"')
    first = client.get(url, params={"revision": 1}, headers=writer).json()
    assert len(first["entries"]) == 2  # revision 1 is kept as it was
    # Its own scope: a quotes writer cannot write books.
    assert_problem(client.post("/v1/discount-books", headers=api_key("quotes:write"),
                               json={**DISCOUNT_BOOK_EXAMPLE, "name": "other"}), 403)


@pytest.mark.parametrize(("entry", "why"), [
    ({"percent_off": "10", "price_per_gpu_hour": "2.00", "currency": "USD"}, "exactly one"),
    ({}, "exactly one"),
    ({"percent_off": "100"}, "percent_off"),
    ({"percent_off": "0"}, "percent_off"),
    ({"percent_off": "NaN"}, "percent_off"),
    ({"price_per_gpu_hour": "2.00"}, "currency"),
    ({"price_per_gpu_hour": "-2.00", "currency": "USD"}, "price_per_gpu_hour"),
    ({"percent_off": "10", "currency": "USD"}, "currency"),
    ({"percent_off": "10", "valid_from": "2026-02-01", "valid_until": "2026-01-01"},
     "before"),
    ({"percent_off": "10", "valid_from": "2000-01-01", "valid_until": "2030-01-01"},
     "window"),
    ({"percent_off": "10", "colour": "red"}, "colour"),
])
def test_a_bad_entry_is_422_naming_it(client: TestClient, writer: dict[str, str],
                                      entry: dict[str, Any], why: str) -> None:
    problem = assert_problem(_book(client, writer, "bad", [{"provider": "aws", **WINDOW,
                                                             **entry}]), 422)
    assert why in problem["detail"]


def test_two_entries_for_one_price_on_one_day_are_refused(client: TestClient,
                                                          writer: dict[str, str]) -> None:
    entries = [{"provider": "aws", "percent_off": "10", **WINDOW},
               {"provider": "aws", "percent_off": "12", "valid_from": TODAY.isoformat(),
                "valid_until": TODAY.isoformat()}]
    problem = assert_problem(_book(client, writer, "overlap", entries), 422)
    assert "both valid" in problem["detail"]


def test_a_quote_shows_list_and_net_prices_and_verifies_after_a_revision(
        client: TestClient, writer: dict[str, str], db_session: Session) -> None:
    date_offers(db_session, providers=("aws",))
    plain = _quote(client, writer, QUOTE)
    assert plain.status_code == 201, plain.text
    list_prices = {x["offer_id"]: Decimal(x["unit_price"])
                   for x in all_lines(client, plain.json(), writer)}
    entries = [{"provider": "aws", "accelerator": "h100-sxm5-80gb", "percent_off": "18",
                **WINDOW},
               {"provider": "aws", "accelerator": "h100-sxm5-80gb", "region": "us-east-1",
                "term": "on_demand", "percent_off": "25", **WINDOW}]
    assert _book(client, writer, "acme", entries).status_code == 201
    quote = _quote(client, writer, {**QUOTE, "discount_book": "acme"})
    assert quote.status_code == 201, quote.text
    answer = quote.json()
    assert answer["discount_book"] == {"name": "acme", "revision": 1}
    lines = all_lines(client, answer, writer)
    assert len(lines) == len(list_prices) > 3
    for line in lines:
        listed = list_prices[line["offer_id"]]
        off = Decimal("25") if line["region"] == "us-east-1" else Decimal("18")
        net = (listed * (1 - off / 100)).quantize(Decimal("0.000001"), ROUND_HALF_EVEN)
        assert Decimal(line["list_unit_price"]) == listed
        assert Decimal(line["unit_price"]) == net
        assert f"acme@1: {off}% off" in line["discount"]
    cheapest_before = Decimal(plain.json()["cheapest"]["total"])
    assert Decimal(answer["cheapest"]["total"]) < cheapest_before
    # Revise the book; the stored quote still verifies with revision 1, a new one uses 2.
    client.put("/v1/discount-books/acme", headers={**writer, "If-Match": '"d1"'},
               json={"entries": [{"provider": "aws", "percent_off": "5", **WINDOW}]})
    verify = client.post(f"/v1/quotes/{answer['id']}/verify", headers=writer).json()
    assert verify["matches"], verify["differences"]
    again = _quote(client, writer, {**QUOTE, "discount_book": "acme"}).json()
    assert again["discount_book"]["revision"] == 2
    assert "5% off" in again["cheapest"]["discount"]


def test_an_entry_outside_its_window_does_not_apply(client: TestClient,
                                                    writer: dict[str, str]) -> None:
    old = {"provider": "aws", "percent_off": "50", "valid_from": "2024-01-01",
           "valid_until": "2024-12-31"}
    assert _book(client, writer, "expired", [old]).status_code == 201
    answer = _quote(client, writer, {**QUOTE, "discount_book": "expired"}).json()
    assert answer["cheapest"]["list_unit_price"] is None
    assert answer["cheapest"]["discount"] is None


def test_an_unknown_book_is_422_naming_discount_book(client: TestClient,
                                                     writer: dict[str, str]) -> None:
    assert_problem(_quote(client, writer, {**QUOTE, "discount_book": "ghost"}), 422,
                   "discount_book")
