"""When a price was read (``observed_at``) apart from when it was published (``as_of``):
the seed's copy days, imports, edits and exports (issue 39)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session

from service.catalog import prices
from service.catalog.offers import ImportRejectedError, parse_offer, parse_offers
from service.catalog.seed_data import accelerator_seeds
from service.catalog.seed_prices import OBSERVED_AT, seed_offers

ACCELERATORS = {s.id for s in accelerator_seeds()}
IMPORT_DAY = dt.date(2026, 12, 1)


def row(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "provider": "acme", "region": "eu-1", "instance_type": "gpu-8x-h100",
        "accelerator": "h100-sxm5-80gb", "gpus_per_instance": "8", "term": "on_demand",
        "currency": "USD", "price_per_hour": "20.00", "source": "ACME price list",
        "as_of": "unknown", "indicative": "false",
    }
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


class TestSeed:
    def test_every_seed_offer_has_its_files_copy_day(self) -> None:
        offers = seed_offers(frozenset(ACCELERATORS))
        days = Counter(o.observed_at for o in offers)
        assert None not in days
        assert set(days) == {dt.date.fromisoformat(d) for d in OBSERVED_AT.values()}
        undated = [o for o in offers if o.as_of is None]
        # The figure: 2,878 of the 2,953 seed prices carry no publication date;
        # every one of them has the day it was read.
        assert (len(offers), len(undated)) == (2953, 2878)
        assert all(o.observed_at is not None for o in undated)

    def test_the_copy_days_are_the_ones_the_seed_readme_documents(self) -> None:
        readme = (Path(__file__).resolve().parents[2] / "service" / "catalog" / "seed"
                  / "prices" / "README.md").read_text()
        for name, day in OBSERVED_AT.items():
            line = next(x for x in readme.splitlines() if x.startswith(f"| `{name}` |"))
            assert line.rstrip().endswith(f"| {day} |"), name

    def test_derived_reserved_rows_keep_their_on_demand_rows_day(self) -> None:
        offers = seed_offers(frozenset(ACCELERATORS))
        on_demand = {(o.provider, o.instance_type, o.region): o.observed_at for o in offers
                     if o.term.value == "on_demand"}
        derived = [o for o in offers if o.source.startswith("derived:")]
        assert derived
        assert all(o.observed_at == on_demand[(o.provider, o.instance_type, o.region)]
                   for o in derived)


class TestParsing:
    def test_a_row_without_observed_at_was_read_on_the_import_day(self) -> None:
        assert parse_offer(1, row(), ACCELERATORS,
                           observed_on=IMPORT_DAY).observed_at == IMPORT_DAY

    def test_a_stated_day_is_kept_and_unknown_stays_unknown(self) -> None:
        stated = parse_offer(1, row(observed_at="2026-11-20"), ACCELERATORS,
                             observed_on=IMPORT_DAY)
        unknown = parse_offer(1, row(observed_at="unknown"), ACCELERATORS,
                              observed_on=IMPORT_DAY)
        assert (stated.observed_at, unknown.observed_at) == (dt.date(2026, 11, 20), None)

    def test_a_day_after_the_import_or_not_a_date_is_refused(self) -> None:
        with pytest.raises(ImportRejectedError) as info:
            parse_offers([row(observed_at="2026-12-02"), row(region="eu-2",
                                                             observed_at="yesterday")],
                         ACCELERATORS, observed_on=IMPORT_DAY)
        assert [(e.row, e.field, e.code) for e in info.value.errors] == [
            (1, "observed_at", "date_in_future"), (2, "observed_at", "date_parsing")]

    def test_an_unknown_day_leaves_the_content_hash_as_it_was_before_the_column(
            self) -> None:
        """Revisions stored before schema 0013 keep their hashes (and so do the versions
        and quotes naming them); a known day is content."""
        offer = parse_offer(1, row(observed_at="unknown"), ACCELERATORS)
        before = offer.canonical()
        del before["observed_at"]
        old_hash = hashlib.sha256(json.dumps(before, sort_keys=True,
                                             separators=(",", ":")).encode()).hexdigest()
        assert offer.content_hash == old_hash
        dated = dataclasses.replace(offer, observed_at=IMPORT_DAY)
        assert dated.content_hash != old_hash


class TestImportsAndEdits:
    def test_an_import_dates_its_rows_and_a_reread_of_the_same_price_is_a_change(
            self, db_session: Session) -> None:
        first = prices.import_offers(db_session, [row()], mode=prices.ImportMode.PATCH,
                                     created_by="t", note="", observed_on=IMPORT_DAY)
        stored = prices.get_offer(db_session, parse_offer(1, row(), ACCELERATORS).offer_id,
                                  first.id)
        assert stored.observed_at == IMPORT_DAY
        later = IMPORT_DAY + dt.timedelta(days=3)
        second = prices.import_offers(db_session, [row()], mode=prices.ImportMode.PATCH,
                                      created_by="t", note="", observed_on=later)
        assert second.report["changes"]["changed"] == 1
        assert prices.get_offer(db_session, stored.offer_id, second.id).observed_at == later

    def test_an_export_imports_back_with_its_days(self, db_session: Session) -> None:
        version = prices.get_version(db_session, None)
        rows = prices.version_revisions(db_session, version.id)
        text = prices.export_csv(rows)
        parsed = prices.parse_csv(text)
        assert {r["observed_at"] for r in parsed} == {"2026-11-22", "2026-11-24"}
        again = prices.import_offers(db_session, parsed, mode=prices.ImportMode.REPLACE,
                                     created_by="t", note="", observed_on=IMPORT_DAY)
        assert again.content_hash == version.content_hash
        assert again.report["changes"]["unchanged"] == len(rows)

    def test_an_edit_restates_the_price_on_its_day(self, db_session: Session) -> None:
        version = prices.get_version(db_session, None)
        old = prices.version_revisions(db_session, version.id)[0]
        changes = {"price_per_hour": "1.000000", "source": "re-read", "as_of": "unknown",
                   "indicative": "false"}
        _, edited = prices.edit_offer(db_session, old.offer_id, expected_revision_id=old.id,
                                      changes=changes, created_by="t", note="",
                                      observed_on=IMPORT_DAY)
        assert (old.observed_at is not None, edited.observed_at) == (True, IMPORT_DAY)
        _, unknown = prices.edit_offer(
            db_session, old.offer_id, expected_revision_id=edited.id,
            changes={**changes, "observed_at": "unknown"}, created_by="t", note="",
            observed_on=IMPORT_DAY)
        assert unknown.observed_at is None
