"""Every money field of a quote line names its FinOps FOCUS column (issue 39), so a finance
team can map the answer onto FOCUS cost-and-usage data (docs/focus.md); a new money field
without one fails here."""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path
from typing import Any, get_args, get_origin

from pydantic import BaseModel
from typing_extensions import TypeAliasType

from service.api.schemas.quotes import QuoteLineOut

# FOCUS v1.0 cost-and-usage columns (https://focus.finops.org/focus-specification/v1-0/), the
# ones a quote line can map to; their names are unchanged through v1.2.
FOCUS_COLUMNS = frozenset({
    "BilledCost", "EffectiveCost", "ListCost", "ContractedCost", "ListUnitPrice",
    "ContractedUnitPrice", "PricingQuantity", "PricingUnit", "PricingCategory",
    "ConsumedQuantity", "ConsumedUnit", "BillingCurrency", "ChargeCategory",
    "ChargeFrequency", "ChargePeriodStart", "ChargePeriodEnd", "CommitmentDiscountType",
    "CommitmentDiscountCategory", "CommitmentDiscountStatus",
})

# Leaf fields (model.field) that are not money and need no FOCUS column. A field whose name
# says money (MONEY_NAME) may not be listed here.
NOT_MONEY = frozenset({
    "QuoteLineOut.provider", "QuoteLineOut.region", "QuoteLineOut.zone",
    "QuoteLineOut.instance_type", "QuoteLineOut.accelerator", "QuoteLineOut.fabric_source",
    "QuoteLineOut.accounting", "QuoteLineOut.goodput_basis", "QuoteLineOut.timing_basis",
    "QuoteLineOut.energy_kwh", "QuoteLineOut.co2e_kg", "QuoteLineOut.carbon_basis",
    "QuoteLineOut.flags", "QuoteLineOut.infeasible_reason", "QuoteLineOut.policy_outcome",
    "QuoteLineOut.offer_id", "QuoteLineOut.catalog_version", "QuoteLineOut.warnings",
    "InBudgetCurrencyOut.rate", "ReservedOut.utilisation_fraction",
    "ReservedOut.break_even_utilisation_fraction", "UncertaintyOut.basis",
    "RuleOut.rule", "RuleOut.outcome", "RuleOut.code", "RuleOut.severity", "RuleOut.message",
    "RuleOut.fix", "Parallelism.recompute", "ServingFleetOut.accelerator",
    "ServingFleetOut.weight_precision", "ServingFleetOut.kv_cache_precision",
    "ServingFleetOut.engine", "WarningDetailOut.code", "WarningDetailOut.field",
    "WarningDetailOut.message",
})
MONEY_NAME = re.compile(r"(total|price|cost|currency|amount|fee|capex|charge)s?$")
MONEY_MODELS = frozenset({"MoneyBandOut", "MoneyOut"})
"""Models of amounts whose parent field names the column (a band's p10/p50/p90 are the
parent's amount)."""


def _leaf_types(annotation: Any) -> list[Any]:
    """The types an annotation can hold (Optional, unions, lists and aliases unpacked)."""
    if isinstance(annotation, TypeAliasType):
        return _leaf_types(annotation.__value__)
    origin = get_origin(annotation)
    if origin in (typing.Union, types.UnionType, list, tuple, typing.Annotated):
        args = get_args(annotation)
        if origin is typing.Annotated:
            args = args[:1]
        return [t for a in args for t in _leaf_types(a)]
    if origin is dict:
        return [dict]
    if origin is typing.Literal:
        return [str]
    return [annotation]


def _fields(model: type[BaseModel], seen: set[str]) -> list[tuple[str, str, Any, str]]:
    """(model, field, leaf type, description) of every field reachable from ``model``."""
    out: list[tuple[str, str, Any, str]] = []
    seen.add(model.__name__)
    for name, info in model.model_fields.items():
        for leaf in _leaf_types(info.annotation):
            out.append((model.__name__, name, leaf, info.description or ""))
            if (isinstance(leaf, type) and issubclass(leaf, BaseModel)
                    and leaf.__name__ not in MONEY_MODELS and leaf.__name__ not in seen):
                out.extend(_fields(leaf, seen))
    return out


def _is_money(leaf: Any) -> bool:
    """A leaf that can carry an amount: a string (every amount is a decimal string), a dict
    (onprem's parts) or a model of amounts."""
    return leaf in (str, dict) or (isinstance(leaf, type) and leaf.__name__ in MONEY_MODELS)


LINE_FIELDS = _fields(QuoteLineOut, set())
MONEY_FIELDS = sorted({(m, f, d) for m, f, leaf, d in LINE_FIELDS
                       if _is_money(leaf) and f"{m}.{f}" not in NOT_MONEY})


def test_every_money_field_of_a_line_names_a_focus_column() -> None:
    missing = [f"{m}.{f}" for m, f, d in MONEY_FIELDS
               if not FOCUS_COLUMNS & set(re.findall(r"\b[A-Z][A-Za-z]+\b", d))]
    assert not missing, (
        f"{missing}: name the field's FinOps FOCUS column in its description (docs/focus.md), "
        "or list it in NOT_MONEY if it is no amount")


def test_the_money_fields_include_the_amounts_and_prices() -> None:
    """The walk finds what it must (a broken walk would pass the test above vacuously)."""
    names = {f"{m}.{f}" for m, f, _ in MONEY_FIELDS}
    for required in ("QuoteLineOut.commitment_total", "QuoteLineOut.job_cost_total",
                     "QuoteLineOut.total", "QuoteLineOut.unit_price",
                     "QuoteLineOut.list_unit_price", "QuoteLineOut.currency",
                     "QuoteLineOut.onprem", "ReservedOut.dedicated_total",
                     "ReservedOut.amortised_total", "InBudgetCurrencyOut.total",
                     "UncertaintyOut.job_cost_total", "UncertaintyOut.commitment_total"):
        assert required in names, required


def test_no_field_named_as_money_is_excused() -> None:
    named = sorted(f"{m}.{f}" for m, f, _, _ in LINE_FIELDS
                   if MONEY_NAME.search(f) and f"{m}.{f}" in NOT_MONEY)
    assert not named, f"{named} are money by their names: name their FOCUS column instead"
    stale = sorted(NOT_MONEY - {f"{m}.{f}" for m, f, _, _ in LINE_FIELDS})
    assert not stale, f"{stale} are no longer fields of a quote line: drop them from NOT_MONEY"


def test_the_core_columns_map_as_finance_reads_them() -> None:
    """The pairs a finance team reconciles on: billed (cash, invoices) against effective
    (amortised), list against contracted."""
    described = {f"{m}.{f}": d for m, f, d in MONEY_FIELDS}
    assert "BilledCost" in described["QuoteLineOut.commitment_total"]
    assert "EffectiveCost" in described["QuoteLineOut.job_cost_total"]
    assert "ListUnitPrice" in described["QuoteLineOut.list_unit_price"]
    assert "ContractedUnitPrice" in described["QuoteLineOut.unit_price"]
    assert "BillingCurrency" in described["QuoteLineOut.currency"]


def test_docs_focus_table_lists_every_money_field() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "focus.md").read_text()
    for m, f, _ in MONEY_FIELDS:
        shown = f if m == "QuoteLineOut" else {
            "ReservedOut": f"reserved.{f}", "InBudgetCurrencyOut": f"in_budget_currency.{f}",
            "UncertaintyOut": f"uncertainty.{f}"}.get(m, f"{m}.{f}")
        assert f"`{shown}`" in text, f"docs/focus.md has no row for `{shown}`"
    assert "focus.finops.org/focus-specification/v1-0" in text
