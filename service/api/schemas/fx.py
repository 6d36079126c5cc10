"""FX reference rates: the table's versions, one day's rates, and a quote's conversion."""

from __future__ import annotations

import datetime as dt

from pydantic import BaseModel, Field

from service.api.schemas.prices import as_utc
from service.catalog.fx import ECB_SOURCE, ROUNDING, Conversion
from service.catalog.models import FxVersion


class FxVersionOut(BaseModel):
    """One append-only version of the FX table."""

    id: str = Field(examples=["fx_000001"])
    number: int
    created_at: dt.datetime
    created_by: str
    note: str
    source: str
    added: int = Field(description="Rates this version added.")
    rate_count: int = Field(description="Rates in the table at this version.")
    first_date: dt.date
    last_date: dt.date = Field(description="The latest fixing in the table at this version.")

    @classmethod
    def from_row(cls, row: FxVersion) -> FxVersionOut:
        return cls(id=row.id, number=row.number, created_at=as_utc(row.created_at),
                   created_by=row.created_by, note=row.note, source=row.source,
                   added=row.added, rate_count=row.rate_count, first_date=row.first_date,
                   last_date=row.last_date)


class FxImportOut(BaseModel):
    """What an import did: the version it made (or the unchanged current one)."""

    version: FxVersionOut
    added: int = Field(description="Rates new to the table (0: no version was made).")
    unchanged: int = Field(description="Rates already stored with the same value.")


class FxRatesOut(BaseModel):
    """The ECB reference rates of one fixing day: units of each currency per 1 EUR."""

    model_config = {"json_schema_extra": {"examples": [{
        "version": "fx_000001", "requested_date": "2025-05-01", "fixing_date": "2025-04-30",
        "base": "EUR", "rates_per_eur": {"USD": "1.1373", "GBP": "0.85", "JPY": "161.96"},
        "source": ECB_SOURCE}]}}

    version: str
    requested_date: dt.date
    fixing_date: dt.date = Field(description="The latest fixing on or before requested_date "
                                             "at which every listed currency has a rate.")
    base: str = Field(default="EUR")
    rates_per_eur: dict[str, str] = Field(description="Exact as published, as strings.")
    source: str


class MoneyOut(BaseModel):
    amount: str
    currency: str


class FxConversionOut(BaseModel):
    """How a quote turned its budget into the pricing currency (issue 17): the rate, its
    fixing date and FX table version, so ``verify`` reproduces it to the cent."""

    budget: MoneyOut = Field(description="The budget as the request gave it.")
    converted_budget: MoneyOut = Field(description="The budget the verdict compares with.")
    rate: str = Field(description="Units of the pricing currency per 1 unit of the budget's "
                                  "currency.")
    requested_date: dt.date = Field(description="The request's fx_date, or the quote's date.")
    fixing_date: dt.date = Field(description="The ECB fixing used: the latest on or before "
                                             "requested_date.")
    rates_per_eur: dict[str, str] = Field(description="The two ECB rates the cross rate is "
                                                      "made from (EUR is 1).")
    version: str = Field(description="The FX table version (GET /v1/fx-rates?version=).")
    source: str
    rounding: str
    policy_limits: dict[str, str] = Field(
        default_factory=dict, description="The policy's money limits converted with the same "
                                          "fixing (rounded down), when the policy is in the "
                                          "budget's currency, not the pricing one.")

    @classmethod
    def from_conversion(cls, c: Conversion, requested: dt.date,
                        policy_limits: dict[str, str] | None = None) -> FxConversionOut:
        return cls(
            budget=MoneyOut(amount=f"{c.amount:f}", currency=c.currency),
            converted_budget=MoneyOut(amount=f"{c.converted:f}", currency=c.into),
            rate=f"{c.rate:f}", requested_date=requested, fixing_date=c.rate_date,
            rates_per_eur={k: f"{v:f}" for k, v in c.rates_per_eur.items()},
            version=c.version, source=ECB_SOURCE, rounding=ROUNDING,
            policy_limits=policy_limits or {})
