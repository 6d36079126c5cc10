"""Amounts are shown in their currency's ISO 4217 minor units in the portal and ``cq``."""

from __future__ import annotations

import pytest

from service.api import presentation as fmt
from service.catalog.currencies import ISO_4217, MINOR_UNITS


@pytest.mark.parametrize(("amount", "currency", "shown"), [
    ("1234567.891", "USD", "1,234,567.89 USD"),
    ("1234567.5", "JPY", "1,234,568 JPY"),
    ("1234566.5", "JPY", "1,234,566 JPY"),      # half-even: never biased upwards
    ("12.3456", "KWD", "12.346 KWD"),
    ("0.125", "EUR", "0.12 EUR"),
    ("5000000", "KRW", "5,000,000 KRW"),
])
def test_each_currency_shows_its_minor_units(amount: str, currency: str, shown: str) -> None:
    assert fmt.money(amount, currency) == shown


def test_the_minor_unit_table_names_only_currencies_in_use() -> None:
    assert set(MINOR_UNITS) <= ISO_4217
    assert fmt.money_band({"p10": "1.5", "p50": "2.5", "p90": "3.5"}, "JPY") == \
        "2–4 JPY (p50 2)"
