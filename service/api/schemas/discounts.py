"""``/v1/discount-books``: an organisation's negotiated prices (docs/catalog.md)."""

from __future__ import annotations

import datetime as dt
import itertools
from typing import Annotated, Any, Self

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from service.api.schemas.common import AcceleratorRef, IsoDate, RequestModel, TextRule
from service.api.schemas.quotes import CurrencyCode, Slug, TermName

BookName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$")]
Percent = Annotated[str, StringConstraints(pattern=r"^[0-9]{1,2}(\.[0-9]{1,4})?$",
                                           max_length=7)]
Rate = Annotated[str, StringConstraints(pattern=r"^[0-9]{1,7}(\.[0-9]{1,6})?$", max_length=14)]
MAX_ENTRIES = 2000
MAX_WINDOW_DAYS = 3660
"""A validity window of at most about ten years (3-year reservations, renewals)."""

DISCOUNT_BOOK_EXAMPLE: dict[str, Any] = {
    "name": "acme-enterprise-2026",
    "description": "ACME's 2026 agreements: 18% off AWS H100, a fixed Lambda H100 rate",
    "entries": [
        {"provider": "aws", "accelerator": "h100-sxm5-80gb", "percent_off": "18",
         "valid_from": "2026-01-01", "valid_until": "2026-12-31"},
        {"provider": "lambda", "term": "on_demand", "accelerator": "h100-sxm5-80gb",
         "price_per_gpu_hour": "2.10", "currency": "USD",
         "valid_from": "2026-04-01", "valid_until": "2027-03-31"},
    ],
}


class DiscountEntryIn(RequestModel):
    """One negotiated price: a percentage off the list price, or a fixed rate per GPU-hour.
    Null term, accelerator or region: every one. The most specific matching entry applies;
    among equally specific ones, the one with the higher net price."""

    provider: Slug
    term: TermName | None = None
    accelerator: AcceleratorRef | None = None
    region: Slug | None = None
    percent_off: Percent | None = Field(
        default=None, description="Off the list price, 0 < percent < 100 (decimal string).")
    price_per_gpu_hour: Rate | None = Field(
        default=None, description="A fixed net price per GPU-hour, > 0, in currency.")
    currency: CurrencyCode | None = Field(
        default=None, description="Required with price_per_gpu_hour; the entry applies only "
                                  "to offers priced in it.")
    valid_from: IsoDate
    valid_until: IsoDate = Field(description="Inclusive.")

    @model_validator(mode="after")
    def _checks(self) -> Self:
        if (self.percent_off is None) == (self.price_per_gpu_hour is None):
            raise ValueError("give exactly one of percent_off and price_per_gpu_hour")
        if self.percent_off is not None and not 0 < float(self.percent_off) < 100:
            raise ValueError("percent_off must be > 0 and < 100")
        if self.price_per_gpu_hour is not None:
            if float(self.price_per_gpu_hour) <= 0:
                raise ValueError("price_per_gpu_hour must be > 0")
            if self.currency is None:
                raise ValueError("price_per_gpu_hour needs currency")
        elif self.currency is not None:
            raise ValueError("currency applies only to price_per_gpu_hour")
        if self.valid_until < self.valid_from:
            raise ValueError("valid_until is before valid_from")
        if (self.valid_until - self.valid_from).days > MAX_WINDOW_DAYS:
            raise ValueError(f"the validity window is over {MAX_WINDOW_DAYS} days")
        return self


class DiscountBookRevisionIn(RequestModel):
    description: Annotated[str, TextRule(max_length=2000)] = ""
    entries: list[DiscountEntryIn] = Field(min_length=1, max_length=MAX_ENTRIES)

    @model_validator(mode="after")
    def _no_overlap(self) -> Self:
        """Two entries for the same provider, term, accelerator and region may not be valid
        on the same day: the book would say two things about one price."""
        by_key: dict[tuple[Any, ...], list[DiscountEntryIn]] = {}
        for entry in self.entries:
            key = (entry.provider, entry.term, entry.accelerator, entry.region)
            by_key.setdefault(key, []).append(entry)
        for key, group in by_key.items():
            group.sort(key=lambda e: e.valid_from)
            for before, after in itertools.pairwise(group):
                if after.valid_from <= before.valid_until:
                    raise ValueError(
                        f"two entries for {'/'.join(str(k) for k in key if k)} are both valid "
                        f"on {after.valid_from}; give them windows that do not overlap")
        return self


class DiscountBookIn(DiscountBookRevisionIn):
    model_config = ConfigDict(json_schema_extra={"examples": [DISCOUNT_BOOK_EXAMPLE]})

    name: BookName


class DiscountBookOut(BaseModel):
    name: str
    revision: int
    created_at: dt.datetime
    created_by: str
    description: str
    entries: list[dict[str, Any]]
