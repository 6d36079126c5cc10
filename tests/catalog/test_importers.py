"""Price importers (issue 17): each public format, read from a small hand-made sample in that
exact format (tests/data/importers), becomes the right offers; a refresh lands them as one
all-or-nothing version that replaces only that provider's offers, with a diff report."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.catalog import importers
from service.catalog.seed_facts import seed_rows
from service.catalog.seed_prices import seed_offers

DATA = Path(__file__).resolve().parents[1] / "data/importers"


def _seed() -> tuple[Any, ...]:
    return seed_offers(frozenset(r["id"] for r in seed_rows("accelerators.csv")))


def _by(rows: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {(r["instance_type"], r["term"], r.get("zone", "")): r for r in rows}


def test_skypilot_rows_become_on_demand_and_spot_offers() -> None:
    out = importers.from_skypilot_csv((DATA / "skypilot_aws_vms.csv").read_text(),
                                      provider="aws", as_of="unknown", source="test")
    rows = _by(out.rows)
    assert set(rows) == {("p5.48xlarge", "on_demand", ""), ("p5.48xlarge", "spot", "use1-az4"),
                         ("p4d.24xlarge", "on_demand", ""),
                         ("p4d.24xlarge", "spot", "use1-az1")}
    assert rows[("p5.48xlarge", "on_demand", "")]["price_per_hour"] == "55.040000"
    assert rows[("p5.48xlarge", "on_demand", "")]["accelerator"] == "h100-sxm5-80gb"
    assert rows[("p4d.24xlarge", "spot", "use1-az1")]["price_per_hour"] == "2.465500"
    assert out.skipped == {"instance type without a catalogued accelerator": 1,
                           "spot equal to on-demand (no spot price)": 1,
                           "no on-demand price": 1}


def test_azure_retail_items_become_linux_offers_and_reservations_per_hour() -> None:
    page = json.loads((DATA / "azure_retail_prices.json").read_text())
    out = importers.from_azure_retail([page], as_of="2026-11-20", source="test")
    rows = _by(out.rows)
    sku = "Standard_ND96isr_H100_v5"
    assert set(rows) == {(sku, "on_demand", ""), (sku, "spot", ""), (sku, "reserved_1y", "")}
    assert rows[(sku, "on_demand", "")]["price_per_hour"] == "98.320000"
    assert rows[(sku, "on_demand", "")]["gpus_per_instance"] == "8"
    assert rows[(sku, "spot", "")]["price_per_hour"] == "39.328000"
    # A reservation's retailPrice is the whole term: 516,744 / 8,760 h = 58.989041 per hour.
    reserved = rows[(sku, "reserved_1y", "")]
    assert Decimal(reserved["price_per_hour"]) == (Decimal("516744") / 8760).quantize(
        Decimal("0.000001"))
    assert reserved["payment_option"] == "all_upfront"
    assert out.skipped == {"Windows": 1, "instance type without a catalogued accelerator": 1,
                           "not a virtual machine": 1}


def test_aws_offer_file_gives_on_demand_and_standard_reserved_with_upfront_fees() -> None:
    document = json.loads((DATA / "aws_ec2_offer.json").read_text())
    out = importers.from_aws_offer(document, source="test")
    rows = {(r["instance_type"], r["term"], r.get("payment_option", "")): r for r in out.rows}
    assert set(rows) == {("p5.48xlarge", "on_demand", ""), ("p4d.24xlarge", "on_demand", ""),
                         ("p5.48xlarge", "reserved_1y", "no_upfront"),
                         ("p5.48xlarge", "reserved_3y", "partial_upfront")}
    assert all(r["as_of"] == "2025-11-20" for r in out.rows)  # the publicationDate
    partial = rows[("p5.48xlarge", "reserved_3y", "partial_upfront")]
    assert (partial["price_per_hour"], partial["upfront_fee"]) == ("15.200000",
                                                                    "400000.000000")
    assert out.skipped == {"not Linux, shared, no software, used capacity": 1,
                           "instance type without a catalogued accelerator": 1,
                           "convertible or unknown reserved term": 1}


def test_aws_savings_plans_give_ec2_instance_plan_rates_by_payment_option() -> None:
    """The EC2 Instance Savings Plan rate is the effective hourly price: No Upfront pays it
    every hour, All Upfront pays rate x the term's hours before it. Partial Upfront (its split
    is not published), Compute Savings Plans, Windows and dedicated usage are skipped."""
    document = json.loads((DATA / "aws_savings_plans.json").read_text())
    out = importers.from_aws_savings_plans(document, source="test")
    rows = {(r["instance_type"], r["term"], r["payment_option"]): r for r in out.rows}
    assert set(rows) == {("p5.48xlarge", "reserved_1y", "savings_plan_no_upfront"),
                         ("p5.48xlarge", "reserved_3y", "savings_plan_all_upfront")}
    hourly = rows[("p5.48xlarge", "reserved_1y", "savings_plan_no_upfront")]
    assert (hourly["price_per_hour"], hourly["upfront_fee"]) == ("34.675200", "0.000000")
    assert (hourly["region"], hourly["accelerator"], hourly["gpus_per_instance"]) == (
        "us-east-1", "h100-sxm5-80gb", "8.0")
    assert hourly["as_of"] == "2025-11-20"
    upfront = rows[("p5.48xlarge", "reserved_3y", "savings_plan_all_upfront")]
    assert upfront["price_per_hour"] == "0.000000"
    assert Decimal(upfront["upfront_fee"]) == Decimal("22.0160") * 3 * 8760
    assert out.skipped == {
        "Partial Upfront (the up-front part is not in the price list)": 1,
        "Compute Savings Plan (the EC2 Instance plan is the lower rate)": 1,
        "not Linux shared-tenancy usage": 2}


def test_a_savings_plans_refresh_keeps_the_reserved_instances_of_the_same_terms(
        client: TestClient, api_key: Any) -> None:
    """Scope: the Savings Plans file replaces AWS Savings Plan offers only; the Reserved
    Instances (here the seed's derived ones) and everything else stay."""
    headers = api_key("catalog:write")
    current = client.get("/v1/catalog/versions", params={"page_size": 1}).json()["items"][0]
    before = client.get(f"/v1/catalog/versions/{current['id']}").json()
    done = _refresh(client, headers, "aws", (DATA / "aws_savings_plans.json").read_bytes())
    assert done.status_code == 201, done.text
    report = done.json()
    assert (report["added"], report["changed"], report["removed"]) == (2, 0, 0)
    version = client.get(f"/v1/catalog/versions/{report['version_id']}").json()
    assert version["by_provider"]["aws"] == before["by_provider"]["aws"] + 2
    reserved = client.get("/v1/offers", params={
        "provider": "aws", "term": "reserved_1y", "region": "us-east-1",
        "page_size": 200}).json()["items"]
    p5 = {o["payment_option"]: o for o in reserved if o["instance_type"] == "p5.48xlarge"}
    assert {"no_upfront", "savings_plan_no_upfront"} <= set(p5)
    assert Decimal(p5["savings_plan_no_upfront"]["price_per_hour"]) == Decimal("34.6752")
    # Replaying the same file changes nothing; the EC2 offer file then leaves the plans alone.
    again = _refresh(client, headers, "aws", (DATA / "aws_savings_plans.json").read_bytes())
    assert (again.json()["added"], again.json()["removed"]) == (0, 0)
    ec2 = _refresh(client, headers, "aws", (DATA / "aws_ec2_offer.json").read_bytes()).json()
    after = client.get("/v1/offers", params={
        "provider": "aws", "term": "reserved_1y", "region": "us-east-1",
        "page_size": 200}).json()["items"]
    assert ec2["version_id"]
    assert any(o["payment_option"] == "savings_plan_no_upfront" for o in after)


def test_gcp_skus_are_assembled_per_machine_type_region_and_usage_type() -> None:
    page = json.loads((DATA / "gcp_billing_skus.json").read_text())
    out = importers.from_gcp_billing([page], as_of="2025-11-20", source="test")
    rows = {(r["instance_type"], r["region"], r["term"]): r for r in out.rows}
    a3 = rows[("a3-highgpu-8g", "us-central1", "on_demand")]
    # 208 vCPU x 0.02254 + 1872 GiB x 0.00255 + 8 H100 x 4.20076 (the seed's machine shape).
    expected = (208 * Decimal("0.02254") + 1872 * Decimal("0.00255")
                + 8 * Decimal("4.20076"))
    assert Decimal(a3["price_per_hour"]) == expected
    assert (a3["accelerator"], a3["gpus_per_instance"], a3["as_of"]) == (
        "h100-sxm5-80gb", "8", "2025-11-20")
    spot = rows[("a3-highgpu-8g", "us-east4", "spot")]
    assert Decimal(spot["price_per_hour"]) == (208 * Decimal("0.00688") + 1872 * Decimal(
        "0.00078") + 8 * Decimal("2.9926"))
    committed = rows[("a3-highgpu-8g", "us-central1", "reserved_1y")]
    assert committed["payment_option"] == "no_upfront"
    # The 1-year SKUs exist only in us-central1: no committed row is made up for us-east4.
    assert ("a3-highgpu-8g", "us-east4", "reserved_1y") not in rows
    # No A2 host SKUs in the page: no A2 machine is priced from the A100 GPU alone.
    assert not any(k[0].startswith("a2-") for k in rows)
    assert out.skipped == {"not a GPU, or an A2/A3/A4 core or RAM SKU": 2}


@pytest.mark.parametrize(("call", "message"), [
    (lambda: importers.from_skypilot_csv("a,b\n1,2\n", provider="aws", as_of="unknown",
                                         source="t"), "no column"),
    (lambda: importers.from_azure_retail([{"items": []}], as_of="unknown", source="t"),
     "Items"),
    (lambda: importers.from_aws_offer({"offerCode": "AmazonS3"}, source="t"), "AmazonEC2"),
    (lambda: importers.from_aws_savings_plans({"products": {}}, source="t"), "savingsPlan"),
    (lambda: importers.from_gcp_billing([{"services": []}], as_of="unknown", source="t"),
     "skus"),
])
def test_a_document_in_another_format_is_refused_with_the_reason(call: Any,
                                                                 message: str) -> None:
    with pytest.raises(importers.ImporterError, match=message):
        call()


def _refresh(client: TestClient, headers: dict[str, str], fmt: str, body: bytes,
             **params: Any) -> Any:
    media = "text/csv" if fmt == "skypilot" else "application/json"
    return client.post("/v1/catalog/refreshes", content=body,
                       params={"format": fmt, **params},
                       headers={**headers, "Content-Type": media})


def test_a_refresh_replaces_only_that_providers_offers_and_reports_the_diff(
        client: TestClient, api_key: Any) -> None:
    headers = api_key("catalog:write")
    current = client.get("/v1/catalog/versions", params={"page_size": 1}).json()["items"][0]
    before = client.get(f"/v1/catalog/versions/{current['id']}").json()
    body = (DATA / "aws_ec2_offer.json").read_bytes()
    dry = _refresh(client, headers, "aws", body, dry_run="true", threshold="0.2")
    assert dry.status_code == 200, dry.text
    assert dry.json()["version_id"] is None
    assert client.get("/v1/catalog/versions", params={"page_size": 1}).json()["items"][0][
        "id"] == before["id"]
    done = _refresh(client, headers, "aws", body, threshold="0.05")
    assert done.status_code == 201, done.text
    report = done.json()
    # p5 and p4d on-demand and p5's 1-year no-upfront reservation replace the seed's
    # (undated, or derived) offers with the same ids; the 3-year partial-upfront one is new.
    assert (report["added"], report["changed"]) == (1, 3)
    # Only offers in the file's scope go: AWS on-demand and reserved offers in us-east-1 (the
    # file's one region, issue 39) of instance types the importer knows. The offer file has no
    # spot prices and no capacity blocks, so those stay as they were, and so does every other
    # region.
    scope = sum(1 for o in _seed() if o.provider == "aws" and o.region == "us-east-1"
                and o.term.value in ("on_demand", "reserved_1y", "reserved_3y"))
    assert report["scope"] == {"regions": ["us-east-1"],
                               "terms": ["on_demand", "reserved_1y", "reserved_3y"]}
    assert report["removed"] == scope - 3
    # The seed's derived 1-year rate was 55.04 x 0.55 = 30.272; the file says 33.00 (+9 %).
    moves = {m["instance_type"] + "/" + m["term"]: m for m in report["moves_over_threshold"]}
    assert set(moves) == {"p5.48xlarge/reserved_1y"}
    assert (moves["p5.48xlarge/reserved_1y"]["before"],
            moves["p5.48xlarge/reserved_1y"]["after"]) == ("30.272000", "33.000000")
    version = client.get(f"/v1/catalog/versions/{report['version_id']}").json()
    assert version["by_provider"]["aws"] == before["by_provider"]["aws"] - scope + 4
    assert {k: v for k, v in version["by_provider"].items() if k != "aws"} == {
        k: v for k, v in before["by_provider"].items() if k != "aws"}
    offers = client.get("/v1/offers", params={"provider": "aws", "term": "on_demand",
                                              "region": "us-east-1", "page_size": 10}).json()
    assert {o["as_of"] for o in offers["items"]} == {"2025-11-20"}
    spot = client.get("/v1/offers", params={"provider": "aws", "term": "spot",
                                            "page_size": 1}).json()
    assert spot["items"]


def test_a_move_over_the_threshold_is_listed(client: TestClient, api_key: Any) -> None:
    headers = api_key("catalog:write")
    text = (DATA / "skypilot_aws_vms.csv").read_text().replace("21.957642,2.465500",
                                                              "32.000000,2.465500")
    report = _refresh(client, headers, "skypilot", text.encode(), provider="aws",
                      dry_run="true").json()
    moves = {m["instance_type"] + "/" + m["term"]: m for m in report["moves_over_threshold"]}
    move = moves["p4d.24xlarge/on_demand"]
    assert (move["before"], move["after"]) == ("21.957642", "32.000000")
    assert Decimal(move["change_fraction"]) == Decimal("0.4574")  # 32 / 21.957642 - 1


def test_bad_refreshes_are_4xx(client: TestClient, api_key: Any) -> None:
    headers = api_key("catalog:write")
    assert _refresh(client, headers, "aws", b"{not json").status_code == 422
    assert _refresh(client, headers, "azure", b"false").status_code == 422
    assert _refresh(client, headers, "gcp", b'{"skus": [{"category": 3}]}').status_code == 422
    assert _refresh(client, headers, "azure", b'[{"Items": [7]}]').status_code == 422
    assert _refresh(client, headers, "aws", b'{"offerCode": "AmazonEC2", "products": '
                                            b'{"x": {"attributes": []}}, "terms": {}}'
                    ).status_code == 422
    assert _refresh(client, headers, "aws", b'{"offerCode": "AmazonS3"}').status_code == 422
    assert _refresh(client, headers, "skypilot", b"a,b\n", provider="aws").status_code == 422
    assert _refresh(client, headers, "skypilot", b"x", provider="oracle").status_code == 422
    wrong = client.post("/v1/catalog/refreshes", params={"format": "aws"}, content=b"a,b",
                        headers={**headers, "Content-Type": "text/csv"})
    assert wrong.status_code == 415
    assert _refresh(client, api_key("quotes:write"), "aws", b"{}").status_code == 403


def test_a_csv_the_reader_cannot_read_is_refused() -> None:
    with pytest.raises(importers.ImporterError, match="not CSV"):
        importers.from_skypilot_csv("x" * 200_000 + "\n", provider="aws",
                                    as_of="unknown", source="t")


def test_a_gcp_refresh_lands_dated_assembled_offers(client: TestClient, api_key: Any) -> None:
    headers = api_key("catalog:write")
    body = (DATA / "gcp_billing_skus.json").read_bytes()
    done = _refresh(client, headers, "gcp", body, as_of="2025-11-20")
    assert done.status_code == 201, done.text
    report = done.json()
    offers = client.get("/v1/offers", params={"provider": "gcp", "region": "us-central1",
                                              "page_size": 200}).json()["items"]
    a3 = {o["term"]: o for o in offers if o["instance_type"] == "a3-highgpu-8g"}
    assert {t: o["as_of"] for t, o in a3.items() if t != "reserved_3y"} == {
        "on_demand": "2025-11-20", "spot": "2025-11-20", "reserved_1y": "2025-11-20"}
    # The page has no 3-year commitment SKU: the seed's 3-year row (Cyclenerd's, dated by its
    # file) is outside the refresh's scope and stays (issue 39).
    assert report["scope"]["terms"] == ["on_demand", "reserved_1y", "spot"]
    assert a3["reserved_3y"]["as_of"] == "2026-08-20"
    # TPU slices are outside a GPU SKU refresh's scope: they stay.
    assert any(o["accelerator"].startswith("tpu-") for o in offers)
    assert report["removed"] > 0
