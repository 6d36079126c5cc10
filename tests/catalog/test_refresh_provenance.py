"""A refresh records where its document came from and the day it was read (issue 41, item 4,
and issue 39's observation dates): ``observed_at`` and ``source_url`` on
``POST /v1/catalog/refreshes``, and a live SkyPilot refresh that reads the file at a pinned
commit and records that address."""

from __future__ import annotations

import datetime as dt
from typing import Any

import httpx
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from service.catalog import prices
from service.catalog.prices import revision_content
from service.cli.catalog import _fetch

CSV = ("InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,"
       "Region,AvailabilityZone\n"
       "p5.48xlarge,H100,8.0,192.0,2048.0,55.04,,us-east-1,\n")
SHA = "0123456789abcdef0123456789abcdef01234567"
PINNED = ("https://raw.githubusercontent.com/skypilot-org/skypilot-catalog/" + SHA
          + "/catalogs/v8/aws/vms.csv")


def _refresh(client: TestClient, headers: dict[str, str], **params: Any) -> Any:
    return client.post("/v1/catalog/refreshes", content=CSV.encode(),
                       params={"format": "skypilot", "provider": "aws", **params},
                       headers={**headers, "Content-Type": "text/csv"})


def _refreshed(session: Session) -> list[Any]:
    version = prices.get_version(session, None)
    return [o for o in map(revision_content, prices.version_revisions(session, version.id))
            if (o.provider, o.instance_type, o.region, o.term.value)
            == ("aws", "p5.48xlarge", "us-east-1", "on_demand") and o.zone is None]


def test_the_day_read_and_the_source_address_are_on_every_refreshed_offer(
        client: TestClient, api_key: Any, db_session: Session) -> None:
    done = _refresh(client, api_key("catalog:write"), observed_at="2026-11-30",
                    source_url=PINNED)
    assert done.status_code == 201, done.text
    (offer,) = _refreshed(db_session)
    assert offer.observed_at == dt.date(2026, 11, 30)
    assert offer.source.endswith(f"; fetched from {PINNED}")


def test_without_a_day_the_refresh_is_dated_today(
        client: TestClient, api_key: Any, db_session: Session) -> None:
    assert _refresh(client, api_key("catalog:write")).status_code == 201
    (offer,) = _refreshed(db_session)
    assert offer.observed_at == dt.datetime.now(dt.UTC).date()
    assert "fetched from" not in offer.source


def test_a_future_day_or_a_non_https_source_is_a_422_naming_the_field(
        client: TestClient, api_key: Any) -> None:
    headers = api_key("catalog:write")
    tomorrow = (dt.datetime.now(dt.UTC).date() + dt.timedelta(days=2)).isoformat()
    future = _refresh(client, headers, observed_at=tomorrow)
    assert future.status_code == 422
    assert "observed_at" in future.text
    for bad in ("http://example.com/x.csv", "https://a b", "https://x\u0000"):
        answer = _refresh(client, headers, source_url=bad)
        assert answer.status_code == 422, bad
        assert "source_url" in answer.text


def _github(sha_answer: httpx.Response, seen: list[str]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        if request.url.host == "api.github.com":
            return sha_answer
        return httpx.Response(200, content=CSV.encode())

    return httpx.MockTransport(handle)


def test_a_live_skypilot_refresh_reads_and_records_the_file_at_its_newest_commit() -> None:
    seen: list[str] = []
    body, source = _fetch(httpx, "skypilot", "aws",
                          _github(httpx.Response(200, json=[{"sha": SHA}]), seen))
    assert body == CSV.encode()
    assert source == PINNED
    assert seen[-1] == PINNED
    assert "path=catalogs/v8/aws/vms.csv" in seen[0]


def test_without_a_commit_from_github_the_source_says_master() -> None:
    for answer in (httpx.Response(403, json={"message": "rate limit"}),
                   httpx.Response(200, json=[{"sha": "not-a-sha"}]),
                   httpx.Response(200, content=b"not json")):
        seen: list[str] = []
        _, source = _fetch(httpx, "skypilot", "gcp", _github(answer, seen))
        assert source == ("https://raw.githubusercontent.com/skypilot-org/skypilot-catalog/"
                          "master/catalogs/v8/gcp/vms.csv")
