"""The price catalogue below HTTP: offer rules, quality checks, versions, on both backends."""

from __future__ import annotations

import csv
import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.catalog import prices
from service.catalog.errors import PreconditionFailedError
from service.catalog.models import CatalogVersion, OfferRevision
from service.catalog.offers import (
    ImportRejectedError,
    Term,
    parse_offer,
    parse_offers,
)
from service.catalog.quality import check_offers
from service.catalog.seed_data import accelerator_seeds
from service.catalog.seed_facts import default_interruption_rate
from service.catalog.seed_prices import RESERVED_DISCOUNTS

ACCELERATORS = {s.id for s in accelerator_seeds()}
MEMORY = {s.id: s.memory_gib for s in accelerator_seeds()}


def row(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "provider": "acme", "region": "eu-1", "instance_type": "gpu-8x-h100",
        "accelerator": "h100-sxm5-80gb", "gpus_per_instance": "8", "term": "on_demand",
        "currency": "USD", "price_per_hour": "20.00", "source": "ACME price list",
        "as_of": "2026-11-01", "indicative": "false",
    }
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


def errors_of(rows: list[dict[str, Any]]) -> list[tuple[int, str, str]]:
    with pytest.raises(ImportRejectedError) as info:
        parse_offers(rows, ACCELERATORS)
    return [(e.row, e.field, e.code) for e in info.value.errors]


class TestOfferRules:
    def test_reserved_effective_rate_spreads_the_upfront_fee_over_the_term(self) -> None:
        offer = parse_offer(1, row(term="reserved_1y", payment_option="partial_upfront",
                                   price_per_hour="10.00", upfront_fee="87600.00"), ACCELERATORS)
        # 87,600 / 8,760 h = 10.00 per hour on top of the hourly 10.00
        assert offer.effective_price_per_hour_micros == 20_000_000
        assert offer.price_per_gpu_hour_micros == 2_500_000

    def test_fractional_gpus_give_a_larger_per_gpu_price(self) -> None:
        offer = parse_offer(1, row(gpus_per_instance="0.25", price_per_hour="0.50"),
                            ACCELERATORS)
        assert offer.price_per_gpu_hour_micros == 2_000_000

    def test_per_gpu_price_rounds_half_even_to_the_micro(self) -> None:
        offer = parse_offer(1, row(gpus_per_instance="3", price_per_hour="0.000005"),
                            ACCELERATORS)
        assert offer.price_per_gpu_hour_micros == 2  # 1.666… micros

    def test_spot_without_a_rate_gets_the_documented_provider_default(self) -> None:
        offer = parse_offer(1, row(provider="aws", term="spot"), ACCELERATORS)
        rate, source = default_interruption_rate("aws", offer.instance_type, offer.region)
        assert offer.interruption_rate_per_hour == rate
        assert offer.interruption_rate_source == source
        assert source.startswith("assumed: ")  # the AWS advisor bucket is a labelled guess

    def test_spot_rates_fall_back_from_family_to_provider_to_the_labelled_default(
        self,
    ) -> None:
        p3, _ = default_interruption_rate("aws", "p3.2xlarge", "eu-west-1")
        p3_east, source = default_interruption_rate("aws", "p3.2xlarge", "us-east-1")
        assert p3 != p3_east
        assert not source.startswith("assumed: ")
        unknown, source = default_interruption_rate("acme-cloud", "x1", "moon-1")
        assert unknown > 0
        assert source.startswith("assumed: ")

    def test_known_instances_get_their_sourced_fabric_and_unknown_ones_none(self) -> None:
        p5 = parse_offer(1, row(provider="aws", instance_type="p5.48xlarge",
                                gpus_per_instance="8"), ACCELERATORS)
        assert (p5.nvlink_domain, p5.inter_node_gbps) == (8, 3200.0)
        assert p5.fabric_source
        assert "aws" in p5.fabric_source.lower()
        other = parse_offer(1, row(provider="acme", instance_type="big-8g",
                                   gpus_per_instance="8"), ACCELERATORS)
        assert (other.nvlink_domain, other.inter_node_gbps, other.fabric_source) == (
            None, None, None)

    def test_fabric_given_without_a_source_or_beyond_the_instance_is_refused(self) -> None:
        with pytest.raises(ImportRejectedError) as caught:
            parse_offer(1, row(gpus_per_instance="8", nvlink_domain="16",
                               inter_node_gbps="400"), ACCELERATORS)
        assert {e.field for e in caught.value.errors} == {"fabric_source", "nvlink_domain"}

    def test_id_and_hash_are_stable_and_content_sensitive(self) -> None:
        a = parse_offer(1, row(), ACCELERATORS)
        b = parse_offer(2, row(), ACCELERATORS)
        c = parse_offer(3, row(price_per_hour="20.01"), ACCELERATORS)
        assert a.offer_id == b.offer_id == c.offer_id
        assert a.content_hash == b.content_hash != c.content_hash
        assert parse_offer(1, row(zone="eu-1a"), ACCELERATORS).offer_id != a.offer_id

    @pytest.mark.parametrize(("changes", "field", "code"), [
        ({"price_per_hour": "NaN"}, "price_per_hour", "finite_number"),
        ({"price_per_hour": "-1"}, "price_per_hour", "out_of_range"),
        ({"price_per_hour": "1.0000001"}, "price_per_hour", "decimal_max_places"),
        ({"price_per_hour": 1.5}, "price_per_hour", "decimal_type"),
        ({"price_per_hour": "1e400"}, "price_per_hour", "out_of_range"),
        ({"gpus_per_instance": "inf"}, "gpus_per_instance", "finite_number"),
        ({"gpus_per_instance": "0"}, "gpus_per_instance", "out_of_range"),
        ({"gpus_per_instance": True}, "gpus_per_instance", "float_type"),
        ({"accelerator": "h900"}, "accelerator", "unknown_accelerator"),
        ({"term": "monthly"}, "term", "enum"),
        ({"term": "reserved_1y"}, "payment_option", "missing"),
        ({"payment_option": "all_upfront"}, "payment_option", "not_applicable"),
        ({"upfront_fee": "5"}, "upfront_fee", "not_applicable"),
        ({"currency": "usd"}, "currency", "string_pattern_mismatch"),
        ({"as_of": "2026-13-01"}, "as_of", "date_parsing"),
        ({"indicative": "maybe"}, "indicative", "bool_type"),
        ({"source": None}, "source", "missing"),
        ({"colour": "red"}, "colour", "extra_forbidden"),
        ({"id": "off_000000000000000000000000"}, "id", "id_mismatch"),
        ({"region_carbon_g_per_kwh": "300"}, "region_carbon_source", "missing"),
        ({"source": "list\x00price"}, "source", "string_control_character"),
    ])
    def test_bad_fields_are_named_with_their_row(
        self, changes: dict[str, Any], field: str, code: str
    ) -> None:
        assert (2, field, code) in errors_of([row(), row(region="eu-2", **changes)])

    def test_every_bad_row_is_reported_not_just_the_first(self) -> None:
        found = errors_of([row(price_per_hour="x"), row(region="eu-2"),
                           row(region="eu-3", currency="EURO"), row(region="eu-2")])
        assert [(r, f) for r, f, _ in found] == [
            (1, "price_per_hour"), (3, "currency"), (4, "id")]


class TestQualityChecks:
    def test_spot_above_and_equal_to_on_demand_are_flagged(self) -> None:
        offers = parse_offers([row(), row(term="spot", zone="a", price_per_hour="21"),
                               row(term="spot", zone="b", price_per_hour="20"),
                               row(term="spot", zone="c", price_per_hour="15")], ACCELERATORS)
        flags = check_offers(offers, MEMORY)
        codes = [[f.code for f in flags.get(o.offer_id, ())] for o in offers]
        assert codes == [[], ["spot_above_on_demand"], ["spot_not_discounted"], []]

    def test_a_commitment_dearer_than_on_demand_is_flagged_on_its_effective_rate(self) -> None:
        """Issue 39: a reserved or committed price is a discount on on-demand; one above it
        (per GPU-hour, the up-front fee spread over the term) is flagged. Equal or below is
        not, nor a capacity block (its own market), nor another region's on-demand."""
        offers = parse_offers([
            row(),  # on-demand 20.00 in eu-1
            row(term="reserved_1y", price_per_hour="21", payment_option="no_upfront"),
            row(term="reserved_3y", price_per_hour="20", payment_option="no_upfront"),
            # 10/h + 105,120 up front over 3 x 8,760 h = 14/h: below on-demand
            row(term="reserved_3y", price_per_hour="10", upfront_fee="105120",
                payment_option="partial_upfront"),
            # 15/h + 52,560 up front over 8,760 h = 21/h effective: above on-demand
            row(term="reserved_1y", price_per_hour="15", upfront_fee="52560",
                payment_option="partial_upfront"),
            row(term="capacity_block", price_per_hour="30"),
            row(region="eu-2", price_per_hour="25"),
            row(region="eu-2", term="reserved_1y", price_per_hour="21",
                payment_option="no_upfront"),
        ], ACCELERATORS)
        flags = check_offers(offers, MEMORY)
        codes = [[f.code for f in flags.get(o.offer_id, ())] for o in offers]
        # the on-demand row below those commitments is flagged on its own side (issue 39,
        # on_demand_below_committed: tests/catalog/test_gcp_a3_on_demand.py)
        assert codes == [["on_demand_below_committed"], ["reserved_above_on_demand"], [], [],
                         ["reserved_above_on_demand"], [], [], []]
        detail = flags[offers[1].offer_id][0].detail
        assert detail.startswith("reserved_1y 2.625000 per GPU-hour (effective) is above "
                                 "on-demand 2.500000 (1.05x)")

    def test_price_far_from_the_cross_region_median_is_flagged_both_ways(self) -> None:
        prices_usd = ["10", "11", "12", "40", "3"]
        offers = parse_offers([row(region=f"r{i}", price_per_hour=p)
                               for i, p in enumerate(prices_usd)], ACCELERATORS)
        flags = check_offers(offers, MEMORY)
        flagged = [o.price_per_hour_micros // 1_000_000 for o in offers if o.offer_id in flags]
        # median 11: 40 > 27.5 and 3 < 4.4 are outliers; 12 and 10 are not
        assert flagged == [40, 3]

    def test_runpod_memory_unit_error_and_missing_on_demand_are_flagged(self) -> None:
        # tests/data holds a verbatim copy of the research RunPod sample (80 "MiB" per A100).
        path = Path(__file__).parents[1] / "data" / "gpu_prices_runpod_sample.csv"
        rows = [row(provider="runpod", region=r["Region"], zone=r["AvailabilityZone"],
                    instance_type=r["InstanceType"], accelerator="a100-sxm4-80gb",
                    gpus_per_instance=r["AcceleratorCount"], term="spot",
                    price_per_hour=r["SpotPrice"],
                    gpu_memory_gib=repr(80 / 1024))  # the file's "SizeInMiB": 80
                for r in csv.DictReader(path.read_text().splitlines())]
        offers = parse_offers(rows, ACCELERATORS)
        flags = check_offers(offers, MEMORY)
        for offer in offers:
            codes = {f.code for f in flags[offer.offer_id]}
            assert codes == {"gpu_memory_mismatch", "missing_on_demand"}


class TestSeedVersion:
    def test_seed_is_the_current_version_with_every_source(self, db_session: Session) -> None:
        version = prices.get_version(db_session, None)
        assert version.kind == "seed"
        rows = prices.version_revisions(db_session, version.id)
        assert len(rows) == version.offer_count > 1000
        assert {r.provider_id for r in rows} == {"aws", "gcp", "lambda", "nebius", "azure"}
        assert all(r.source for r in rows)
        # A price whose source gives no date says so (NULL, shown "unknown"), never a stand-in
        # date (issue 17): the SkyPilot snapshots and everything derived from them.
        undated = [r for r in rows if r.as_of is None]
        assert undated
        assert all("unknown" in r.notes or "unknown" in r.source for r in undated
                   if not r.source.startswith("derived:"))
        assert {r.provider_id for r in rows if r.as_of is not None} >= {"gcp", "aws"}
        assert sum(r.term == "capacity_block" for r in rows) == 5

    def test_derived_reserved_rates_follow_the_documented_discount(
        self, db_session: Session
    ) -> None:
        rows = prices.version_revisions(db_session, prices.get_version(db_session, None).id)
        on_demand = {(r.provider_id, r.instance_type, r.region): r for r in rows
                     if r.term == "on_demand"}
        reserved = [r for r in rows if r.term.startswith("reserved")]
        assert len(reserved) == 2 * len(on_demand)  # one per term, real or derived
        derived = [r for r in reserved if r.source.startswith("derived:")]
        assert len(reserved) - len(derived) == 70  # GCP committed use (test_seed_cud.py)
        for r in derived:
            base = on_demand[(r.provider_id, r.instance_type, r.region)]
            discount, _ = RESERVED_DISCOUNTS[Term(r.term)]
            expected = (Decimal(base.price_per_hour_micros) * (1 - discount)).to_integral_value()
            assert r.indicative
            assert r.payment_option == "no_upfront"
            assert abs(r.price_per_hour_micros - int(expected)) <= 1

    def test_documented_data_problems_are_flagged_not_dropped(self, db_session: Session) -> None:
        rows = prices.version_revisions(db_session, prices.get_version(db_session, None).id)

        def codes(provider: str, instance: str, region: str, term: str) -> set[str]:
            return {f["code"] for r in rows if (r.provider_id, r.instance_type, r.region,
                                                 r.term) == (provider, instance, region, term)
                    for f in r.quality_flags}

        # AWS p4d in eu-central-1: some zones' spot is above the regional on-demand.
        assert "spot_above_on_demand" in {
            f["code"] for r in rows if (r.instance_type, r.zone) == ("p4d.24xlarge", "euc1-az2")
            for f in r.quality_flags}
        # GCP A100-80GB us-central1: the GPU SKU's spot (1.964) is above its on-demand
        # (1.8462), but the host price masks it in the instance total, so it is noted.
        gcp = [r for r in rows if (r.instance_type, r.region) == ("a2-ultragpu-1g", "us-central1")]
        assert all("spot price 1.964 is above its on-demand 1.8462" in r.notes for r in gcp)
        # AWS p5e has no on-demand price (capacity block / reservation only).
        assert "missing_on_demand" in codes("aws", "p5e.48xlarge", "us-east-2",
                                            "capacity_block")
        # AWS p5.48xlarge us-east-1 use1-az1: spot equal to on-demand.
        assert "spot_not_discounted" in {
            f["code"] for r in rows if r.instance_type == "p5.48xlarge" and r.zone == "use1-az1"
            for f in r.quality_flags}

    def test_gcp_commitments_above_the_seeds_on_demand_are_flagged(
            self, db_session: Session) -> None:
        """Issue 39: 17 of the 70 real GCP committed-use rows (Cyclenerd) are dearer than the
        seed's on-demand row (SkyPilot) of the same machine and region: every 1-year row and
        six 3-year rows in the eleven regions where SkyPilot's H100 GPU part is 4.20076 (or
        H100 Mega 4.424) per GPU-hour, about half of GCP's list price (docs/catalog.md)."""
        rows = prices.version_revisions(db_session, prices.get_version(db_session, None).id)
        flagged = sorted((r.instance_type, r.region, r.term) for r in rows
                         if any(f["code"] == "reserved_above_on_demand"
                                for f in r.quality_flags))
        low_h100 = {"asia-northeast1", "asia-southeast1", "australia-southeast1",
                    "us-central1", "us-west1", "us-west4"}
        low_mega = {"asia-northeast1", "asia-southeast1", "europe-west1", "europe-west3",
                    "us-east5"}
        assert len(flagged) == 17
        assert {(i, g) for i, g, t in flagged if t == "reserved_1y"} == (
            {("a3-highgpu-8g", g) for g in low_h100} | {("a3-megagpu-8g", g) for g in low_mega})
        assert {(i, g) for i, g, t in flagged if t == "reserved_3y"} == {
            ("a3-highgpu-8g", "asia-northeast1"), ("a3-highgpu-8g", "asia-southeast1"),
            ("a3-highgpu-8g", "australia-southeast1"), ("a3-megagpu-8g", "asia-northeast1"),
            ("a3-megagpu-8g", "asia-southeast1"), ("a3-megagpu-8g", "europe-west3")}
        by_key = {(r.provider_id, r.instance_type, r.region, r.term): r for r in rows}
        assert all(by_key[("gcp", i, g, t)].source.startswith("Cyclenerd")
                   for i, g, t in flagged)
        report = prices.get_version(db_session, None).report["quality"]["flags"]
        assert report["reserved_above_on_demand"]["count"] == 17


def _count(session: Session, model: type[Any]) -> int:
    return session.scalar(select(func.count()).select_from(model)) or 0


class TestVersions:
    def test_an_edit_makes_a_new_version_and_the_old_one_still_holds_the_old_price(
        self, db_session: Session
    ) -> None:
        old = prices.get_version(db_session, None)
        target = prices.list_offers(db_session, old.id, prices.OfferFilter(provider="lambda"),
                                    limit=1)[0]
        revisions_before = _count(db_session, OfferRevision)
        version, edited = prices.edit_offer(
            db_session, target.offer_id, expected_revision_id=target.id,
            changes={"price_per_hour": "1.230000", "as_of": "2026-11-20"},
            created_by="test", note="price cut")
        assert version.parent_id == old.id
        assert prices.current_version_id(db_session) == version.id
        assert edited.price_per_hour_micros == 1_230_000
        assert prices.get_offer(db_session, target.offer_id, old.id).price_per_hour_micros == (
            target.price_per_hour_micros)
        assert version.content_hash != old.content_hash
        # Only the edited offer (and any whose flags moved with it) got a new revision.
        assert _count(db_session, OfferRevision) - revisions_before <= 3
        assert version.report["changes"]["unchanged"] >= old.offer_count - 3

    def test_a_stale_revision_is_refused(self, db_session: Session) -> None:
        current = prices.get_version(db_session, None)
        target = prices.list_offers(db_session, current.id, prices.OfferFilter(), limit=1)[0]
        prices.edit_offer(db_session, target.offer_id, expected_revision_id=target.id,
                          changes={"notes": "first"}, created_by="t", note="")
        with pytest.raises(PreconditionFailedError):
            prices.edit_offer(db_session, target.offer_id, expected_revision_id=target.id,
                              changes={"notes": "second"}, created_by="t", note="")

    def test_a_rejected_import_changes_nothing(self, db_session: Session) -> None:
        before = (prices.current_version_id(db_session), _count(db_session, CatalogVersion),
                  _count(db_session, OfferRevision))
        with pytest.raises(ImportRejectedError):
            prices.import_offers(db_session, [row(), row(region="eu-2", price_per_hour="-5")],
                                 mode=prices.ImportMode.PATCH, created_by="t", note="")
        after = (prices.current_version_id(db_session), _count(db_session, CatalogVersion),
                 _count(db_session, OfferRevision))
        assert after == before

    def test_patch_adds_to_the_current_version_and_replace_is_the_whole_set(
        self, db_session: Session
    ) -> None:
        base = prices.get_version(db_session, None)
        patched = prices.import_offers(db_session, [row()], mode=prices.ImportMode.PATCH,
                                       created_by="t", note="add acme")
        assert patched.offer_count == base.offer_count + 1
        replaced = prices.import_offers(db_session, [row(), row(region="eu-2")],
                                        mode=prices.ImportMode.REPLACE, created_by="t", note="")
        assert replaced.offer_count == 2
        assert replaced.report["changes"]["removed"] == base.offer_count
        assert prices.get_version(db_session, base.id).offer_count == base.offer_count
        assert len(prices.version_revisions(db_session, base.id)) == base.offer_count

    def test_created_at_is_recent_utc(self, db_session: Session) -> None:
        version = prices.import_offers(db_session, [row()], mode=prices.ImportMode.PATCH,
                                       created_by="t", note="")
        created = version.created_at.replace(tzinfo=version.created_at.tzinfo or dt.UTC)
        assert abs(dt.datetime.now(dt.UTC) - created) < dt.timedelta(minutes=5)


@pytest.mark.parametrize("gpus", ["1e-7", "1e-300", "0.01"])
def test_absurdly_small_gpu_shares_are_refused_not_a_500(gpus: str) -> None:
    with pytest.raises(ImportRejectedError) as caught:
        parse_offer(1, row(gpus_per_instance=gpus), ACCELERATORS)
    assert [e.field for e in caught.value.errors] == ["gpus_per_instance"]
    assert "0.0625" in caught.value.errors[0].message


def _peak_bytes(work: Any) -> int:
    import tracemalloc

    tracemalloc.start()
    try:
        with pytest.raises(ImportRejectedError) as caught:
            work()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert caught.value.errors[0].code == "too_long"
    return peak


def test_an_import_of_millions_of_tiny_rows_is_refused_before_they_are_built() -> None:
    """Issue 14: an 8 MiB CSV of one-character rows peaked at 3.7 GB; counted as read, the
    refusal now peaks at a small multiple of the body."""
    csv_body = "provider\n" + "a\n" * (4 * 1024 * 1024)
    peak = _peak_bytes(lambda: prices.parse_csv(csv_body))
    assert 0 < peak < 64 * 1024 * 1024, f"{peak:,} bytes"
    from service.api.routes.prices import _parse_import_body

    json_body = ('{"offers": [' + ",".join(["{}"] * (1024 * 1024)) + "]}").encode()
    peak = _peak_bytes(lambda: _parse_import_body(json_body, "application/json"))
    assert 0 < peak < 128 * 1024 * 1024, f"{peak:,} bytes"


FORMULA_PAYLOADS = ["=1+1", "+SUM(A1:A2)", "-2+3", "@SUM(A1)", "=HYPERLINK(\"http://x\")",
                    "\t=1+1", "'=already escaped", "=cmd|' /C calc'!A0", "-"]


def test_csv_exports_neutralise_formulas_and_imports_undo_it(db_session: Session) -> None:
    """OWASP CSV injection (issue 14): no exported cell starts with = + - @ tab or CR, and an
    export imports back to the same content."""
    rows = [row(region=f"r{i}", notes=payload, source=payload)
            for i, payload in enumerate(FORMULA_PAYLOADS)]
    version = prices.import_offers(db_session, rows, mode=prices.ImportMode.REPLACE,
                                   created_by="test", note="formulas")
    revisions = prices.version_revisions(db_session, version.id)
    text = prices.export_csv(revisions)
    for cells in csv.reader(text.splitlines()[1:]):
        for cell in cells:
            assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")), cell
    again = parse_offers(prices.parse_csv(text), ACCELERATORS)
    assert sorted(o.content_hash for o in again) == sorted(r.content_hash for r in revisions)
    assert sorted(o.notes for o in again) == sorted(r.notes for r in revisions)
    assert "'=already escaped" in {o.notes for o in again}  # an apostrophe survives too


def test_a_bare_carriage_return_is_refused() -> None:
    assert errors_of([row(notes="one\rtwo")]) == [(1, "notes", "string_control_character")]
    parse_offers([row(notes="one\r\ntwo")], ACCELERATORS)  # a CRLF line break is text


@pytest.mark.parametrize(("changes", "field", "code"), [
    ({"currency": "XXX"}, "currency", "currency"),
    ({"currency": "ZZZ"}, "currency", "currency"),
    ({"price_per_hour": "١٢.٥"}, "price_per_hour", "decimal_parsing"),   # Arabic-Indic digits
    ({"price_per_hour": "1e2"}, "price_per_hour", "decimal_parsing"),
    ({"upfront_fee": "٣", "term": "reserved_1y", "payment_option": "all_upfront"},
     "upfront_fee", "decimal_parsing"),
])
def test_currencies_are_iso_4217_and_prices_ascii_decimals(
    changes: dict[str, str], field: str, code: str,
) -> None:
    assert errors_of([row(**changes)]) == [(1, field, code)]
