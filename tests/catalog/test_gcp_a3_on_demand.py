"""The GCP A3 on-demand rows re-checked (issue 39, docs/data-quality.md): in some regions the
seed's SkyPilot row prices the GPUs at GCP's DWS flex-start SKU (4.200761 USD per H100-hour,
"Nvidia H100 80GB GPU attached to DWS Defined Duration VMs") on top of the on-demand host, about
half of the list price; the quality check ``on_demand_below_committed`` flags an on-demand price
below a real commitment of the same accelerator and region."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from service.catalog.offers import OfferContent, Term, parse_offers
from service.catalog.quality import ON_DEMAND_BELOW_COMMITTED, check_offers
from service.catalog.seed_data import accelerator_seeds
from service.catalog.seed_prices import seed_offers
from tests.catalog.test_prices import row

ACCELERATORS = {s.id for s in accelerator_seeds()}
MEMORY = {s.id: s.memory_gib for s in accelerator_seeds()}
PRICES = Path(__file__).resolve().parents[2] / "service" / "catalog" / "seed" / "prices"
DWS_H100_SKU_USD = Decimal("4.200761")
"""SKU 341A-49A5-0C07, "Nvidia H100 80GB GPU attached to DWS Defined Duration VMs running in
Americas", per hour (https://cloud.google.com/skus?currency=USD&filter=341A-49A5-0C07, as
listed in a Google Cloud Japan article comparing on-demand and DWS flex-start bills)."""


def codes(offers: Sequence[OfferContent]) -> list[list[str]]:
    flags = check_offers(offers, MEMORY)
    return [[f.code for f in flags.get(o.offer_id, ()) if f.code == ON_DEMAND_BELOW_COMMITTED]
            for o in offers]


class TestRule:
    def test_on_demand_below_a_real_commitment_of_its_accelerator_and_region_is_flagged(
            self) -> None:
        offers = parse_offers([
            row(),  # 2.50 per GPU-hour on demand
            row(term="reserved_1y", payment_option="no_upfront", price_per_hour="24"),  # 3.00
            # another machine type with the same GPU, in the same region: 2.00 per GPU-hour
            row(instance_type="gpu-1x-h100", gpus_per_instance="1", price_per_hour="2.00"),
            # at the commitment's rate exactly: not below it
            row(instance_type="gpu-2x-h100", gpus_per_instance="2", price_per_hour="6.00"),
            # a region without a commitment, a currency without one
            row(region="eu-2", price_per_hour="1.00"),
            row(instance_type="gpu-8x-h100-eu", currency="EUR", price_per_hour="1.00"),
        ], ACCELERATORS)
        assert codes(offers) == [[ON_DEMAND_BELOW_COMMITTED], [],
                                 [ON_DEMAND_BELOW_COMMITTED], [], [], []]
        detail = check_offers(offers, MEMORY)[offers[0].offer_id]
        assert [f.detail for f in detail if f.code == ON_DEMAND_BELOW_COMMITTED] == [
            "on-demand 2.500000 per GPU-hour is below the reserved_1y 3.000000 (effective) "
            "of gpu-8x-h100 in eu-1 (0.83x): a commitment is a discount on on-demand, so this "
            "on-demand price is likely too low"]

    def test_the_commitments_up_front_fee_counts_and_indicative_ones_do_not(self) -> None:
        offers = parse_offers([
            row(),  # 2.50 per GPU-hour
            # 16/h + 43,800 up front over 8,760 h = 21/h effective = 2.625 per GPU-hour
            row(term="reserved_1y", payment_option="partial_upfront", price_per_hour="16",
                upfront_fee="43800"),
            row(region="eu-2"),
            # an indicative (derived) commitment says nothing about the on-demand price
            row(region="eu-2", term="reserved_1y", payment_option="no_upfront",
                price_per_hour="30", indicative="true"),
            row(region="eu-3"),
            # a capacity block is its own market, not a discount
            row(region="eu-3", term="capacity_block", price_per_hour="30"),
        ], ACCELERATORS)
        assert codes(offers) == [[ON_DEMAND_BELOW_COMMITTED], [], [], [], [], []]

    def test_a_right_on_demand_price_is_not_flagged(self) -> None:
        offers = parse_offers([
            row(),
            row(term="reserved_1y", payment_option="no_upfront", price_per_hour="13.80"),
            row(term="reserved_3y", payment_option="no_upfront", price_per_hour="8.80"),
        ], ACCELERATORS)
        assert codes(offers) == [[], [], []]


def _gcp_totals() -> list[dict[str, str]]:
    with (PRICES / "gpu_prices_gcp_instance_totals.csv").open(encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _gpu_part(r: dict[str, str]) -> Decimal:
    """The accelerator part of a SkyPilot GCP row per GPU-hour, to its 5 decimals."""
    return (Decimal(r["AcceleratorPrice"]) / Decimal(r["AcceleratorCount"])).quantize(
        Decimal("0.00001"))


@pytest.fixture(scope="module")
def seed() -> tuple[tuple[OfferContent, ...], dict[str, Any]]:
    offers = seed_offers(frozenset(ACCELERATORS))
    return offers, check_offers(offers, MEMORY)


class TestSeed:
    def test_the_flat_h100_gpu_part_is_the_dws_flex_start_sku(self) -> None:
        """Where SkyPilot's H100 part is one flat figure it is the DWS SKU's price to its 5
        decimals; elsewhere it varies by region and is about twice as high."""
        h100 = [r for r in _gcp_totals() if r["AcceleratorName"] == "H100"]
        parts = {_gpu_part(r) for r in h100}
        dws = DWS_H100_SKU_USD.quantize(Decimal("0.00001"))
        assert dws in parts
        flat = [r for r in h100 if _gpu_part(r) == dws]
        assert len(flat) == 30  # a3-highgpu-1g/2g/4g/8g and a3-edgegpu-8g in 6 regions each
        assert {r["Region"] for r in flat} >= {"us-central1", "us-west1", "asia-southeast1"}
        others = [_gpu_part(r) for r in h100 if _gpu_part(r) != dws]
        assert min(others) > 2 * dws  # 9.79655 (us-east4) and up

    def test_the_flat_rows_are_about_half_the_billing_catalogues_on_demand(self) -> None:
        """Against the other source in the seed, Cyclenerd's on-demand column (Cloud Billing
        Catalog, 2026-08-20): the DWS-priced A3 machines are 0.36-0.49x of it, the other A3
        rows 0.99x (it adds the bundled local SSD)."""
        with (PRICES / "gcp_committed_use_prices.csv").open(encoding="utf-8") as handle:
            listed = {(r["machine_type"], r["region"]): Decimal(r["on_demand_usd_per_hour"])
                      for r in csv.DictReader(handle)}
        low: list[Decimal] = []
        right: list[Decimal] = []
        flat_parts = {Decimal("4.20076"), Decimal("4.42394")}  # H100, H100 Mega
        for r in _gcp_totals():
            key = (r["InstanceType"], r["Region"])
            if key in listed and key[0].startswith("a3-"):
                ratio = Decimal(r["Price"]) / listed[key]
                (low if _gpu_part(r) in flat_parts else right).append(ratio)
        assert len(low) == 11
        assert Decimal("0.35") < min(low)
        assert max(low) < Decimal("0.5")
        assert Decimal("0.98") < min(right)
        assert max(right) < Decimal("1.0")

    def test_the_dws_priced_on_demand_rows_are_flagged_where_a_commitment_shows_it(
            self, seed: tuple[tuple[OfferContent, ...], dict[str, Any]]) -> None:
        offers, flags = seed
        flat_parts = {Decimal("4.20076"), Decimal("4.42394")}
        dws_priced = {(r["InstanceType"], r["Region"]) for r in _gcp_totals()
                      if _gpu_part(r) in flat_parts}
        assert len(dws_priced) == 35  # the 35 rows
        flagged = {(o.instance_type, o.region) for o in offers
                   if o.provider == "gcp" and o.term is Term.ON_DEMAND
                   and any(f.code == ON_DEMAND_BELOW_COMMITTED
                           for f in flags.get(o.offer_id, ()))}
        h100_committed = {o.region for o in offers if o.provider == "gcp"
                          and o.term is Term.RESERVED_1Y and not o.indicative
                          and o.accelerator == "h100-sxm5-80gb"}
        # every DWS-priced row in a region with a real H100 commitment is flagged ...
        assert {k for k in dws_priced if k[1] in h100_committed} <= flagged
        # ... which is all but one (a3-edgegpu-8g in northamerica-northeast2: no commitment)
        assert dws_priced - flagged == {("a3-edgegpu-8g", "northamerica-northeast2")}
        # no GCP H100 row at the list price is; the rest are the README's low A100 40GB rows
        extra = flagged - dws_priced
        assert all(i.startswith("a2-") for i, _ in extra), extra
        assert not any(o.provider != "gcp" for o in offers
                       if any(f.code == ON_DEMAND_BELOW_COMMITTED
                              for f in flags.get(o.offer_id, ())))
