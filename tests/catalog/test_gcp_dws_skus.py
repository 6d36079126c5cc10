"""A GCP Billing Catalog refresh must not read DWS (flex-start) SKUs as on-demand prices
(issue 39, docs/data-quality.md): the Compute Engine catalogue lists, under usage type
``OnDemand``, both "Nvidia H100 80GB GPU running in Americas" and "Nvidia H100 80GB GPU attached
to DWS Defined Duration VMs running in Americas" (SKU 341A-49A5-0C07, 4.200761 USD per hour),
and the A3 host SKUs beside "DWS Defined Duration A3 Core/Ram" ones. SkyPilot's fetcher took
the DWS GPU SKU in some regions (the seed's 35 half-price A3 rows); ``from_gcp_billing``
matches both kinds too, and the SKU read last wins.

The importer now skips them (counted in ``skipped``)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from service.catalog import importers

ON_DEMAND_GPU = Decimal("9.79655")
DWS_GPU = Decimal("4.200761")
ON_DEMAND_CORE, ON_DEMAND_RAM = Decimal("0.02254"), Decimal("0.00255")
DWS_CORE, DWS_RAM = Decimal("0.010934"), Decimal("0.000952")


def _sku(sku_id: str, description: str, price: Decimal) -> dict[str, Any]:
    units, fraction = divmod(price, 1)
    return {
        "skuId": sku_id, "description": description,
        "category": {"resourceFamily": "Compute", "resourceGroup": "GPU",
                     "usageType": "OnDemand"},
        "serviceRegions": ["us-central1"],
        "pricingInfo": [{"pricingExpression": {"tieredRates": [{
            "startUsageAmount": 0,
            "unitPrice": {"currencyCode": "USD", "units": str(int(units)),
                          "nanos": int(fraction * 10**9)}}]}}],
    }


ON_DEMAND = [
    _sku("A1", "Nvidia H100 80GB GPU running in Americas", ON_DEMAND_GPU),
    _sku("A2", "A3 Instance Core running in Americas", ON_DEMAND_CORE),
    _sku("A3", "A3 Instance Ram running in Americas", ON_DEMAND_RAM),
]
DWS = [
    _sku("341A-49A5-0C07",
         "Nvidia H100 80GB GPU attached to DWS Defined Duration VMs running in Americas",
         DWS_GPU),
    _sku("9A32-36B2-7FBC", "DWS Defined Duration A3 Core running in Americas", DWS_CORE),
    _sku("ED19-A584-4A84", "DWS Defined Duration A3 Ram running in Americas", DWS_RAM),
]


def _on_demand_a3(skus: list[dict[str, Any]]) -> Decimal:
    out = importers.from_gcp_billing([{"skus": skus}], as_of="2026-08-20", source="test")
    rows = {(r["instance_type"], r["region"], r["term"]): r for r in out.rows}
    return Decimal(rows[("a3-highgpu-8g", "us-central1", "on_demand")]["price_per_hour"])


def test_the_on_demand_skus_alone_price_the_machine() -> None:
    assert _on_demand_a3(ON_DEMAND) == (208 * ON_DEMAND_CORE + 1872 * ON_DEMAND_RAM
                                        + 8 * ON_DEMAND_GPU)


def test_dws_skus_beside_them_change_nothing_in_either_order() -> None:
    expected = 208 * ON_DEMAND_CORE + 1872 * ON_DEMAND_RAM + 8 * ON_DEMAND_GPU
    assert _on_demand_a3(DWS + ON_DEMAND) == expected
    assert _on_demand_a3(ON_DEMAND + DWS) == expected


def test_the_dws_skus_are_counted_as_skipped() -> None:
    out = importers.from_gcp_billing([{"skus": DWS + ON_DEMAND}], as_of="2026-08-20",
                                     source="test")
    assert out.skipped["a DWS (flex-start) SKU, not an on-demand price"] == len(DWS)
