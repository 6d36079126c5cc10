"""Real GCP committed-use rows in the seed (issue 17): where the CUD table has a machine the
seed offers on demand in that region, its 1- and 3-year offers are the real ones and no
synthetic row remains; everywhere else the synthetic rows stay, marked derived."""

from __future__ import annotations

import csv
from decimal import Decimal
from pathlib import Path

from fastapi.testclient import TestClient

from service.catalog.offers import Term
from service.catalog.seed_facts import seed_rows
from service.catalog.seed_prices import seed_offers

TABLE = Path(__file__).resolve().parents[2] / "service/catalog/seed/prices/" \
    "gcp_committed_use_prices.csv"
COLUMNS = {Term.RESERVED_1Y: "cud_1y_usd_per_hour", Term.RESERVED_3Y: "cud_3y_usd_per_hour"}


def _offers() -> tuple[object, ...]:
    return seed_offers(frozenset(r["id"] for r in seed_rows("accelerators.csv")))


def test_real_committed_use_prices_replace_the_synthetic_ones_where_they_exist() -> None:
    offers = _offers()
    on_demand = {(o.instance_type, o.region) for o in offers  # type: ignore[attr-defined]
                 if o.provider == "gcp" and o.term is Term.ON_DEMAND}  # type: ignore[attr-defined]
    with TABLE.open(encoding="utf-8") as handle:
        table = [r for r in csv.DictReader(handle)
                 if (r["machine_type"], r["region"]) in on_demand]
    assert len(table) >= 30
    for row in table:
        for term, column in COLUMNS.items():
            found = [o for o in offers if o.provider == "gcp"  # type: ignore[attr-defined]
                     and o.instance_type == row["machine_type"]  # type: ignore[attr-defined]
                     and o.region == row["region"] and o.term is term]  # type: ignore[attr-defined]
            assert len(found) == 1, (row["machine_type"], row["region"], term)
            offer = found[0]
            assert not offer.source.startswith("derived:")  # type: ignore[attr-defined]
            assert not offer.indicative  # type: ignore[attr-defined]
            assert offer.as_of.isoformat() == row["as_of"]  # type: ignore[attr-defined]
            expected = (Decimal(row[column]) * 1_000_000).to_integral_value()
            assert offer.price_per_hour_micros == expected  # type: ignore[attr-defined]


def test_synthetic_reserved_rows_remain_only_where_no_real_one_exists_and_say_so() -> None:
    offers = _offers()
    reserved = [o for o in offers if o.term in COLUMNS]  # type: ignore[attr-defined]
    derived = [o for o in reserved if o.source.startswith("derived:")]  # type: ignore[attr-defined]
    real = [o for o in reserved if not o.source.startswith("derived:")]  # type: ignore[attr-defined]
    assert real
    assert derived
    assert all(o.indicative for o in derived)  # type: ignore[attr-defined]
    keys = {(o.provider, o.instance_type, o.region, o.term) for o in real}  # type: ignore[attr-defined]
    assert not any((o.provider, o.instance_type, o.region, o.term) in keys  # type: ignore[attr-defined]
                   for o in derived)


def test_a_gcp_committed_use_quote_line_is_not_flagged_derived(client: TestClient,
                                                               api_key: object) -> None:
    body = {"workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb", "gpu_hours": 10000,
                                       "num_gpus": 64}},
            "terms": ["reserved_1y"], "providers": ["gcp"]}
    headers = api_key("quotes:write")  # type: ignore[operator]
    answer = client.post("/v1/quotes", json=body,
                         headers={**headers, "Idempotency-Key": "cud-1"})
    assert answer.status_code == 201, answer.text
    lines: list[dict[str, object]] = []
    url = f"/v1/quotes/{answer.json()['id']}/lines"
    params: dict[str, object] = {"page_size": 200}
    while True:  # every stored line, page by page
        page = client.get(url, params=params, headers=headers).json()
        lines.extend(page["items"])
        if not page["next_page_token"]:
            break
        params["page_token"] = page["next_page_token"]
    assert len(lines) == answer.json()["lines_total"]
    real = [x for x in lines if "derived_price" not in x["flags"]]  # type: ignore[operator]
    assert real, "no committed-use line"
    assert all(str(x["instance_type"]).startswith("a3-") for x in real)
    assert any("derived_price" in x["flags"] for x in lines)  # type: ignore[operator]
