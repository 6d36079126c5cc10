"""A refresh replaces only what its document covers (issue 39): the provider's offers in the
regions and of the terms the document has rows for. Before, a one-region AWS offer file
removed the provider's offers in every other region (420 on the seed). Both backends."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from service.catalog import importers, prices
from service.catalog.offers import OfferContent
from service.catalog.prices import revision_content

DATA = Path(__file__).resolve().parents[1] / "data/importers"
AWS_FILE_TERMS = ["on_demand", "reserved_1y", "reserved_3y"]


def _current(session: Session) -> dict[str, OfferContent]:
    version = prices.get_version(session, None)
    return {o.offer_id: o for o in map(revision_content,
                                       prices.version_revisions(session, version.id))}


def _refresh(client: TestClient, headers: dict[str, str], fmt: str, body: bytes,
             **params: Any) -> Any:
    media = "text/csv" if fmt == "skypilot" else "application/json"
    return client.post("/v1/catalog/refreshes", content=body,
                       params={"format": fmt, **params},
                       headers={**headers, "Content-Type": media})


def test_a_one_region_file_removes_nothing_outside_its_region(
        client: TestClient, api_key: Any, db_session: Session) -> None:
    before = _current(db_session)
    known = importers.instance_accelerators("aws")
    body = (DATA / "aws_ec2_offer.json").read_bytes()  # us-east-1 only
    done = _refresh(client, api_key("catalog:write"), "aws", body)
    assert done.status_code == 201, done.text
    report = done.json()
    after = _current(db_session)
    # Every AWS offer outside us-east-1 is in the new version, unchanged (372 on the seed,
    # each of which the refresh removed before).
    outside = {k: o for k, o in before.items() if o.provider == "aws" and o.region != "us-east-1"}
    assert len(outside) > 300
    assert {k: after[k].content_hash for k in outside if k in after} == {
        k: o.content_hash for k, o in outside.items()}
    assert report["scope"] == {"regions": ["us-east-1"], "terms": AWS_FILE_TERMS}
    # Inside the scope the old behaviour holds: what the file no longer has is removed.
    in_scope = {k for k, o in before.items() if o.provider == "aws" and o.region == "us-east-1"
                and o.term.value in AWS_FILE_TERMS and o.instance_type in known}
    imported = {o.offer_id for o in after.values() if o.source.startswith("AWS Price List")}
    assert len(imported) == 4
    gone = in_scope - imported
    assert report["removed"] == len(gone) == 48
    assert not gone & set(after)
    assert {r["offer_id"] for r in report["removals"]} == gone
    assert {r["region"] for r in report["removals"]} == {"us-east-1"}
    removal = next(r for r in report["removals"] if r["offer_id"] in gone)
    old = before[removal["offer_id"]]
    assert (removal["instance_type"], removal["term"], removal["currency"]) == (
        old.instance_type, old.term.value, old.currency)
    assert int(removal["price_per_hour"].replace(".", "")) == old.price_per_hour_micros
    # The rest of the catalogue: every other provider, and AWS spot and capacity blocks in
    # us-east-1 (terms the file has no rows for).
    kept = {k for k, o in before.items() if o.provider != "aws" or o.term.value not in
            AWS_FILE_TERMS}
    assert kept <= set(after)


def test_a_one_term_file_leaves_the_other_terms(client: TestClient, api_key: Any,
                                                db_session: Session) -> None:
    """A SkyPilot vms.csv publishes on-demand and spot; one whose rows have no spot price
    covers on-demand only, so spot offers stay, in its region too."""
    before = _current(db_session)
    text = ("InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,"
            "Region,AvailabilityZone\n"
            "p5.48xlarge,H100,8.0,192.0,2048.0,55.04,,us-east-1,\n"
            "p4d.24xlarge,A100,8.0,96.0,1152.0,21.957642,,us-east-1,\n")
    done = _refresh(client, api_key("catalog:write"), "skypilot", text.encode(),
                    provider="aws", as_of="2026-11-20")
    assert done.status_code == 201, done.text
    report = done.json()
    after = _current(db_session)
    spot = {k: o.content_hash for k, o in before.items()
            if o.provider == "aws" and o.term.value == "spot"}
    assert any(before[k].region == "us-east-1" for k in spot)
    assert {k: after[k].content_hash for k in spot if k in after} == spot
    assert report["scope"] == {"regions": ["us-east-1"], "terms": ["on_demand"]}
    assert {r["term"] for r in report["removals"]} <= {"on_demand"}
    others = {k: o.content_hash for k, o in before.items()
              if o.provider == "aws" and (o.region, o.term.value) != ("us-east-1", "on_demand")}
    assert {k: after[k].content_hash for k in others if k in after} == others


def test_a_dry_run_reports_the_scope_and_removals_and_stores_nothing(
        client: TestClient, api_key: Any) -> None:
    headers = api_key("catalog:write")
    current = client.get("/v1/catalog/versions", params={"page_size": 1}).json()["items"][0]
    dry = _refresh(client, headers, "aws", (DATA / "aws_ec2_offer.json").read_bytes(),
                   dry_run="true", threshold="5")
    assert dry.status_code == 200, dry.text
    report = dry.json()
    assert report["version_id"] is None
    assert report["moves_over_threshold"] == []
    assert report["removed"] == len(report["removals"]) == 48
    assert client.get("/v1/catalog/versions", params={"page_size": 1}).json()["items"][0][
        "id"] == current["id"]


def test_removals_are_listed_up_to_the_cap_and_counted_in_full(
        client: TestClient, api_key: Any, db_session: Session) -> None:
    """A GCP Billing Catalog page for us-central1 and us-east4 covers those regions' GCP GPU
    offers; what it lacks is removed, counted in full, listed up to the cap, in order."""
    before = _current(db_session)
    page = json.loads((DATA / "gcp_billing_skus.json").read_text())
    done = _refresh(client, api_key("catalog:write"), "gcp", json.dumps(page).encode(),
                    as_of="2025-11-20")
    assert done.status_code == 201, done.text
    report = done.json()
    regions = report["scope"]["regions"]
    assert regions == sorted(regions)
    assert len(report["removals"]) == min(report["removed"], importers.MAX_REMOVALS_LISTED)
    order = [(r["region"], r["instance_type"], r["term"], r["zone"] or "",
              r["payment_option"] or "") for r in report["removals"]]
    assert order == sorted(order)
    after = _current(db_session)
    gcp_outside = {k: o.content_hash for k, o in before.items()
                   if o.provider == "gcp" and o.region not in regions}
    assert gcp_outside
    assert {k: after[k].content_hash for k in gcp_outside if k in after} == gcp_outside
