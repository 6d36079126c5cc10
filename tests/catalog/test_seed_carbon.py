"""Grid carbon on the seed's offers (issue 17): every offer whose provider region is in
``seed/prices/region_carbon_intensity.csv`` carries that region's newest figure, with its
year and source, and a quote's CO2e uses it."""

from __future__ import annotations

import csv
from decimal import Decimal
from pathlib import Path

from fastapi.testclient import TestClient

from service.catalog.seed_facts import seed_rows
from service.catalog.seed_prices import seed_offers

TABLE = Path(__file__).resolve().parents[2] / "service/catalog/seed/prices/" \
    "region_carbon_intensity.csv"


def _table() -> dict[tuple[str, str], list[dict[str, str]]]:
    rows: dict[tuple[str, str], list[dict[str, str]]] = {}
    with TABLE.open(encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            rows.setdefault((row["provider"].lower(), row["region"]), []).append(row)
    return rows


def _offers() -> tuple[object, ...]:
    return seed_offers(frozenset(r["id"] for r in seed_rows("accelerators.csv")))


def test_every_seed_offer_in_a_tabled_region_carries_its_newest_figure_and_year() -> None:
    table = _table()
    tabled = untabled = 0
    for offer in _offers():
        rows = table.get((offer.provider, offer.region or ""))  # type: ignore[attr-defined]
        if rows is None:
            assert offer.region_carbon_g_per_kwh is None  # type: ignore[attr-defined]
            untabled += 1
            continue
        newest = max(rows, key=lambda r: int(r["year"][:4]) if r["year"][:4].isdigit() else 0)
        assert offer.region_carbon_g_per_kwh == float(newest["gco2e_per_kwh"])  # type: ignore[attr-defined]
        source = offer.region_carbon_source  # type: ignore[attr-defined]
        assert newest["source"] in source
        assert f"grid year {newest['year']}" in source
        tabled += 1
    assert tabled > 1000  # AWS, GCP and Azure regions
    assert untabled < tabled


def test_gcp_takes_its_2025_figure_where_2024_is_also_published() -> None:
    rows = _table()[("gcp", "us-central1")]
    assert {r["year"] for r in rows} >= {"2024", "2025"}
    figure = next(float(r["gco2e_per_kwh"]) for r in rows if r["year"] == "2025")
    gcp = [o for o in _offers() if o.provider == "gcp"  # type: ignore[attr-defined]
           and o.region == "us-central1"]  # type: ignore[attr-defined]
    assert gcp
    assert {o.region_carbon_g_per_kwh for o in gcp} == {figure}  # type: ignore[attr-defined]


def test_a_quote_line_in_a_tabled_region_uses_the_regions_carbon(client: TestClient,
                                                                 api_key: object) -> None:
    body = {"workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb", "gpu_hours": 10000,
                                       "num_gpus": 64}},
            "terms": ["on_demand"], "providers": ["gcp"], "regions": ["us-central1"],
            "energy": {"grid_gco2e_per_kwh": 1000}}
    answer = client.post("/v1/quotes", json=body, headers={
        **api_key("quotes:write"), "Idempotency-Key": "carbon-1"})  # type: ignore[operator]
    assert answer.status_code == 201, answer.text
    line = answer.json()["cheapest"]
    assert line["carbon_basis"] == "region"
    figure = next(float(r["gco2e_per_kwh"]) for r in _table()[("gcp", "us-central1")]
                  if r["year"] == "2025")
    kwh = Decimal(line["energy_kwh"])
    expected = kwh * Decimal(repr(figure)) / 1000
    assert abs(Decimal(line["co2e_kg"]) - expected) <= Decimal("0.002")
    assert figure != 1000  # the request's default intensity was not used


def test_every_seed_offer_with_a_region_has_a_sourced_figure() -> None:
    """Issue 17's 'carbon is on every offer with a region': the neocloud regions and AWS
    eu-south-2 take a same-grid proxy, and the source says it is one."""
    offers = [o for o in _offers() if o.region]  # type: ignore[attr-defined]
    assert offers
    missing = [(o.provider, o.region) for o in offers  # type: ignore[attr-defined]
               if o.region_carbon_g_per_kwh is None]  # type: ignore[attr-defined]
    assert missing == []
    proxied = {(o.provider, o.region): o.region_carbon_source  # type: ignore[attr-defined]
               for o in offers if o.provider in ("lambda", "nebius")  # type: ignore[attr-defined]
               or o.region == "eu-south-2"}  # type: ignore[attr-defined]
    assert {p for p, _ in proxied} == {"lambda", "nebius", "aws"}
    assert all(source.startswith("grid proxy: ") for source in proxied.values())
