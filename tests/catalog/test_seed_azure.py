"""Real Azure rows in the seed (issue 17): every priced Azure VM whose GPU has a datasheet row
is offered from SkyPilot's Azure catalog (Azure Retail Prices API), with the documented source
defects fixed: ND H100 v5 has 8 GPUs, not 12; a spot price equal to on-demand is no spot
price; no stand-in date."""

from __future__ import annotations

import csv
import uuid
from decimal import Decimal
from pathlib import Path

from fastapi.testclient import TestClient

from service.catalog.offers import OfferContent, Term
from service.catalog.seed_facts import seed_rows
from service.catalog.seed_prices import AZURE_ACCELERATORS, seed_offers

TABLE = Path(__file__).resolve().parents[2] / "service/catalog/seed/prices/gpu_prices_azure.csv"


def _azure() -> list[OfferContent]:
    offers = seed_offers(frozenset(r["id"] for r in seed_rows("accelerators.csv")))
    return [o for o in offers if o.provider == "azure" and not o.source.startswith("derived:")]


def _source() -> list[dict[str, str]]:
    with TABLE.open(encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_every_priced_mapped_vm_is_an_on_demand_offer_at_its_list_price() -> None:
    offers = {(o.instance_type, o.region): o for o in _azure() if o.term is Term.ON_DEMAND}
    rows = [r for r in _source() if r["InstanceType"] in AZURE_ACCELERATORS and r["Price"]]
    assert len(rows) >= 20
    for row in rows:
        offer = offers[(row["InstanceType"], row["Region"])]
        assert offer.price_per_hour_micros == int(Decimal(row["Price"]) * 1_000_000)
        assert offer.accelerator == AZURE_ACCELERATORS[row["InstanceType"]]
        assert not offer.indicative
        assert offer.as_of is None  # commit dates unknown (seed/prices/README.md)
        assert offer.canonical()["as_of"] == "unknown"


def test_nd_h100_v5_has_eight_gpus_and_the_per_gpu_price_follows() -> None:
    nd = [o for o in _azure() if o.instance_type == "Standard_ND96isr_H100_v5"
          and o.region == "eastus" and o.term is Term.ON_DEMAND]
    assert len(nd) == 1
    assert nd[0].gpus_per_instance == 8
    assert nd[0].price_per_gpu_hour_micros == 12_290_000  # 98.32 / 8
    assert "corrected to 8" in nd[0].notes


def test_spot_equal_to_on_demand_is_not_a_spot_offer() -> None:
    spot = {(o.instance_type, o.region) for o in _azure() if o.term is Term.SPOT}
    equal = [(r["InstanceType"], r["Region"]) for r in _source()
             if r["InstanceType"] in AZURE_ACCELERATORS and r["Price"]
             and r["SpotPrice"] == r["Price"]]
    assert equal
    assert not spot.intersection(equal)
    # Where the source has a real discount, the spot offer is there.
    assert ("Standard_ND96isr_H100_v5", "northcentralus") in spot
    assert ("Standard_ND96asr_v4", "eastus") in spot


def test_every_azure_offer_in_a_us_region_carries_its_carbon_intensity() -> None:
    offers = [o for o in _azure() if o.region.endswith("us") or "us" in o.region]
    assert offers
    assert all(o.region_carbon_g_per_kwh is not None and o.region_carbon_source for o in offers)


def test_an_h100_quote_lists_real_azure_lines(client: TestClient,
                                              api_key: object) -> None:
    headers = {**api_key("quotes:write"),  # type: ignore[operator]
               "Idempotency-Key": uuid.uuid4().hex}
    body = {"workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb", "gpu_hours": 50_000,
                                       "num_gpus": 64}},
            "providers": ["azure"], "terms": ["on_demand", "spot"]}
    answer = client.post("/v1/quotes", json=body, headers=headers)
    assert answer.status_code == 201, answer.text
    lines = client.get(f"/v1/quotes/{answer.json()['id']}/lines",
                       params={"page_size": 200}, headers=headers).json()["items"]
    real = [x for x in lines if x["provider"] == "azure" and "indicative_price" not in x["flags"]]
    assert {x["term"] for x in real} == {"on_demand", "spot"}
    assert {x["instance_type"] for x in real} >= {"Standard_ND96isr_H100_v5"}
    assert all("undated_price" in x["flags"] for x in real)
    eastus = next(x for x in real if x["region"] == "eastus" and x["term"] == "on_demand")
    assert Decimal(eastus["unit_price"]) == Decimal("98.32")
