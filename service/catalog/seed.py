"""Load the seed catalogue into the database. Idempotent: re-running changes nothing unless
the seed files changed, and then it updates those rows in place (accelerator facts are not
priced, so they are not versioned)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from decimal import Decimal

from sqlalchemy.orm import Session

from service.catalog.models import Accelerator
from service.catalog.seed_data import AcceleratorSeed, accelerator_seeds

MICROS_PER_UNIT = Decimal(1_000_000)


@dataclass(frozen=True, slots=True)
class SeedReport:
    inserted: int
    updated: int
    unchanged: int


def _columns(seed: AcceleratorSeed) -> dict[str, object]:
    values: dict[str, object] = {
        f.name: getattr(seed, f.name) for f in fields(seed) if f.name != "purchase_price_usd"
    }
    price = seed.purchase_price_usd
    values["purchase_price_usd_micros"] = (
        int(price * MICROS_PER_UNIT) if price is not None else None
    )
    return values


def seed_catalog(session: Session) -> SeedReport:
    """Insert or update every seed accelerator; flushes, never commits."""
    inserted = updated = unchanged = 0
    for seed in accelerator_seeds():
        values = _columns(seed)
        row = session.get(Accelerator, seed.id)
        if row is None:
            session.add(Accelerator(**values))
            inserted += 1
            continue
        changed = {k: v for k, v in values.items() if getattr(row, k) != v}
        for key, value in changed.items():
            setattr(row, key, value)
        if changed:
            updated += 1
        else:
            unchanged += 1
    session.flush()
    return SeedReport(inserted=inserted, updated=updated, unchanged=unchanged)
