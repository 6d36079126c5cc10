"""Concurrent read-modify-write edits of one offer through a real server: every edit that is
acknowledged is applied exactly once, losers get 412 and retry, and nothing answers 500."""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from decimal import Decimal

import httpx
import pytest
from sqlalchemy.orm import Session

from service.catalog.db import make_engine
from service.catalog.keys import create_key
from service.catalog.seed import seed_catalog
from service.settings import Settings
from tests.conftest import BACKENDS
from tests.databases import upgrade
from tests.live_server import live_server

WORKLOAD = {"sqlite": (8, 10), "postgres": (
    int(os.environ.get("CQ_CONCURRENCY_THREADS", "10")),
    int(os.environ.get("CQ_CONCURRENCY_EDITS", "10")))}
"""(threads, edits per thread). 10 x 10 on PostgreSQL in ``make test`` (keeping the
suite under 10 minutes on 2 cores); the original issue's 20 x 20 is
``CQ_CONCURRENCY_THREADS=20 CQ_CONCURRENCY_EDITS=20``. SQLite has one writer at a time by
design; the check there is that contention never surfaces as a 500."""


def _small_catalogue(count: int) -> list[dict[str, object]]:
    return [{"provider": "acme", "region": f"r{i}", "instance_type": "gpu-8x-h100",
             "accelerator": "h100-sxm5-80gb", "gpus_per_instance": 8, "term": "on_demand",
             "currency": "USD", "price_per_hour": "10.000000", "source": "test",
             "as_of": "2026-11-01", "indicative": False} for i in range(count)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_concurrent_if_match_edits_apply_exactly_once(
    backend: str, database_url_factory: Callable[[str], str]
) -> None:
    url = database_url_factory(backend)
    upgrade(url)
    engine = make_engine(url)
    settings = Settings(database_url=url)
    with Session(engine) as session:
        seed_catalog(session)
        _, key = create_key(session, name="writer", scopes=["catalog:write"],
                            pepper=settings.api_key_pepper.get_secret_value())
        session.commit()
    engine.dispose()
    threads, edits = WORKLOAD[backend]
    statuses: Counter[int] = Counter()
    lock = threading.Lock()
    failures: list[str] = []

    with live_server(settings) as base:
        auth = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=base, headers=auth, timeout=60) as client:
            created = client.post("/v1/catalog/imports", json={"offers": _small_catalogue(30)})
            assert created.status_code == 201, created.text
            offer_id = client.get("/v1/offers", params={"region": "r0"}).json()["items"][0]["id"]
            start_version = created.json()["number"]

        def worker() -> None:
            with httpx.Client(base_url=base, headers=auth, timeout=60) as client:
                applied = attempt = 0
                rng = random.Random()
                while applied < edits:
                    got = client.get(f"/v1/offers/{offer_id}")
                    offer = got.json()
                    price = Decimal(offer["price_per_hour"]) + Decimal("0.000001")
                    put = client.put(
                        f"/v1/offers/{offer_id}", headers={"If-Match": got.headers["etag"]},
                        json={"price_per_hour": str(price), "source": offer["source"],
                              "as_of": offer["as_of"], "indicative": False})
                    with lock:
                        statuses[put.status_code] += 1
                    if put.status_code == 200:
                        applied, attempt = applied + 1, 0
                    elif put.status_code == 412:
                        # What a well-behaved client does: back off with jitter, then retry.
                        attempt += 1
                        time.sleep(rng.uniform(0, 0.02 * 2 ** min(attempt, 4)))
                    else:
                        with lock:
                            failures.append(f"{put.status_code}: {put.text[:200]}")
                        return

        pool = [threading.Thread(target=worker) for _ in range(threads)]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()

        with httpx.Client(base_url=base, timeout=60) as client:
            final = client.get(f"/v1/offers/{offer_id}").json()
            versions = client.get("/v1/catalog/versions", params={"page_size": 1}).json()

    total = threads * edits
    assert failures == []
    assert statuses[200] == total
    assert set(statuses) <= {200, 412}
    assert Decimal(final["price_per_hour"]) == Decimal("10") + total * Decimal("0.000001")
    assert versions["items"][0]["number"] == start_version + total
