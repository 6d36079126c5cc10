"""Negotiated discounts: an organisation's discount book turns a seller's list price into the
net price it pays (issue 17, decision 69).

An entry names a provider and, optionally, a term, an accelerator and a region, with a
validity window (inclusive dates, as proleptic Gregorian ordinals: the core reads no clock).
It gives either ``percent_off`` (net = list × (1 − percent/100)) or a fixed
``price_per_gpu_hour`` in one currency (net per instance-hour = rate × GPUs per instance).

Which entry applies to an offer on a day: of the entries that match it and are valid that
day, the most specific (the most of term, accelerator and region named); among equally
specific ones, the one giving the **higher** net price, so an ambiguous book never makes a
commitment look smaller than one of its readings (the worst honest case). A fixed rate in a
currency other than the offer's does not match it. Net prices are rounded half-even to the
micro-unit, as every catalogue price is (``service/catalog/offers.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal

from service.core.quote import PriceOffer

MICRO = Decimal("0.000001")
HUNDRED = Decimal(100)


@dataclass(frozen=True, slots=True, kw_only=True)
class DiscountEntry:
    provider: str
    term: str | None = None
    accelerator: str | None = None
    region: str | None = None
    percent_off: Decimal | None = None
    """0 < percent_off < 100."""
    price_per_gpu_hour: Decimal | None = None
    currency: str | None = None
    """The fixed rate's currency (required with ``price_per_gpu_hour``)."""
    valid_from_day: int
    valid_until_day: int
    """Inclusive."""

    @property
    def specificity(self) -> int:
        return sum(x is not None for x in (self.term, self.accelerator, self.region))

    def matches(self, offer: PriceOffer, day: int) -> bool:
        return (self.valid_from_day <= day <= self.valid_until_day
                and self.provider == offer.provider
                and self.term in (None, offer.term.value)
                and self.accelerator in (None, offer.accelerator)
                and self.region in (None, offer.region)
                and (self.price_per_gpu_hour is None or self.currency == offer.currency))

    def net(self, offer: PriceOffer) -> Decimal:
        """The net price per instance-hour."""
        if self.percent_off is not None:
            value = offer.price_per_instance_hour * (1 - self.percent_off / HUNDRED)
        else:
            assert self.price_per_gpu_hour is not None  # noqa: S101 - one of the two is set
            value = self.price_per_gpu_hour * Decimal(repr(offer.fabric.gpus_per_instance))
        return value.quantize(MICRO, rounding=ROUND_HALF_EVEN)

    def describe(self) -> str:
        what = (f"{self.percent_off.normalize():f}% off" if self.percent_off is not None
                else f"fixed {self.price_per_gpu_hour} {self.currency} per GPU-hour")
        scope = ", ".join(x for x in (self.term, self.accelerator, self.region) if x)
        return f"{what} ({self.provider}{', ' + scope if scope else ''})"


@dataclass(frozen=True, slots=True, kw_only=True)
class DiscountBook:
    name: str
    revision: int
    entries: Sequence[DiscountEntry]


def best_entry(entries: Iterable[DiscountEntry], offer: PriceOffer,
               day: int) -> DiscountEntry | None:
    """The entry that applies (module docstring), or None."""
    found = [e for e in entries if e.matches(offer, day)]
    if not found:
        return None
    top = max(e.specificity for e in found)
    return max((e for e in found if e.specificity == top), key=lambda e: e.net(offer))


def apply_book(book: DiscountBook, offers: Iterable[PriceOffer], day: int) -> list[PriceOffer]:
    """Each offer at its net price, with its list price and the entry kept beside it."""
    priced: list[PriceOffer] = []
    for offer in offers:
        entry = best_entry(book.entries, offer, day)
        if entry is None:
            priced.append(offer)
            continue
        priced.append(dataclasses.replace(
            offer, price_per_instance_hour=entry.net(offer),
            list_price_per_instance_hour=offer.price_per_instance_hour,
            discount=f"discount book {book.name}@{book.revision}: {entry.describe()}"))
    return priced
