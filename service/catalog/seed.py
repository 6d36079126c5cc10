"""Load the seed catalogue into the database. Idempotent: re-running changes nothing unless
the seed files changed, and then it updates accelerator rows in place (accelerator facts are
not priced, so they are not versioned). Prices are seeded once, as the first catalogue
version; later price changes are imports or edits, each a new version."""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass, fields

from sqlalchemy.orm import Session

from service.catalog.fx import SEED_FILE as FX_SEED_FILE
from service.catalog.fx import seed_fx
from service.catalog.models import Accelerator
from service.catalog.offers import MICROS, OfferContent, with_sourced_facts
from service.catalog.prices import (
    commit_version,
    current_version_id,
    lock_catalog,
    revision_content,
    version_revisions,
)
from service.catalog.seed_data import AcceleratorSeed, accelerator_seeds
from service.catalog.seed_facts import seed_rows
from service.catalog.seed_prices import seed_offers


@dataclass(frozen=True, slots=True)
class SeedReport:
    inserted: int
    updated: int
    unchanged: int
    price_version: str | None
    """The seed price version created now, or None when a price version already existed."""
    offers: int
    facts_version: str | None = None
    """A version made now to add sourced facts (fabric, spot rates, the seed's observation
    days) that the current version's offers lack; None when nothing was missing."""


def _columns(seed: AcceleratorSeed) -> dict[str, object]:
    values: dict[str, object] = {
        f.name: getattr(seed, f.name) for f in fields(seed) if f.name != "purchase_price_usd"
    }
    price = seed.purchase_price_usd
    values["purchase_price_usd_micros"] = (
        int(price * MICROS) if price is not None else None
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
    lock_catalog(session)
    version_id, offers = None, 0
    accelerator_ids = frozenset(s.id for s in accelerator_seeds())
    if current_version_id(session) is None:
        prices = seed_offers(accelerator_ids)
        version = commit_version(session, prices, created_by="seed", kind="seed",
                                 note="seed: research price snapshot (seed/prices/README.md)")
        version_id, offers = version.id, version.offer_count
    seed_fx(session, seed_rows(FX_SEED_FILE), dt.datetime.now(dt.UTC))
    return SeedReport(inserted=inserted, updated=updated, unchanged=unchanged,
                      price_version=version_id, offers=offers,
                      facts_version=None if version_id else _add_missing_facts(
                          session, accelerator_ids))


def _add_missing_facts(session: Session, accelerator_ids: frozenset[str]) -> str | None:
    """A database seeded before offers carried fabric facts (schema 0004) or observation days
    (schema 0013) gets one new version with them; older versions stay as they were, so old
    quotes still verify."""
    current = current_version_id(session)
    if current is None:
        return None
    offers = [revision_content(row) for row in version_revisions(session, current)]
    updated = [with_sourced_facts(offer, replace_legacy_rates=True) for offer in offers]
    # The seed's offers are built (0.5 s) only when some offer has no observation day.
    observed = (_with_seed_observations(updated, seed_offers(accelerator_ids))
                if any(o.observed_at is None for o in updated) else updated)
    if observed == offers:
        return None
    notes = ([] if updated == offers else ["sourced instance fabric and spot interruption "
                                           "rates (seed/instance_fabric.md, "
                                           "seed/spot_interruption_rates.md)"])
    if observed != updated:
        notes.append("the seed files' observation days (seed/prices/README.md)")
    version = commit_version(session, observed, created_by="seed", kind="seed",
                             note="seed: " + "; ".join(notes))
    return version.id


def _with_seed_observations(offers: list[OfferContent], seeded: tuple[OfferContent, ...],
                            ) -> list[OfferContent]:
    """The offers, each with the seed's ``observed_at`` where its day is unknown and it is
    exactly the seed's offer otherwise (same id and every other column): its price is the
    seed file's, read on the file's copy day (issue 39). An offer an import or an edit changed
    keeps its unknown day: nothing records when that price was read."""
    days = {o.offer_id: o for o in seeded if o.observed_at is not None}
    out = []
    for offer in offers:
        seed = days.get(offer.offer_id)
        if (offer.observed_at is None and seed is not None
                and dataclasses.replace(seed, observed_at=None) == offer):
            offer = seed
        out.append(offer)
    return out
