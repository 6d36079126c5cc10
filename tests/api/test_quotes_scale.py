"""Quotes at scale: a 1,000-quote random sample recomputes to the cent, and 50 concurrent
identical requests with one Idempotency-Key store exactly one quote."""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.api.deps import AcceleratorCache
from service.api.routes.quotes import _differences, compute_body
from service.api.schemas.quotes import QuoteRequest
from service.api.work import WorkBudget
from service.catalog.db import make_engine, make_session_factory
from service.catalog.keys import create_key
from service.catalog.models import Quote
from service.catalog.prices import get_version
from service.catalog.seed import seed_catalog
from service.core.policy import DEFAULT_POLICY
from service.settings import Settings
from tests.databases import upgrade
from tests.live_server import live_server

ACCELERATORS = ["h100-sxm5-80gb", "a100-sxm4-80gb", "h200-sxm-141gb", "a100-sxm4-40gb",
                "b200-sxm-180gb", "l40s-48gb"]
PROVIDER_SETS = [["lambda"], ["nebius"], ["aws", "onprem"], ["gcp"], ["lambda", "nebius"]]
TERMS = ["on_demand", "spot", "reserved_1y", "reserved_3y", "capacity_block", "onprem"]


def random_request(rng: random.Random) -> dict[str, Any]:
    body: dict[str, Any] = {
        "workload": {"gpu_hours": {
            "accelerator": rng.choice(ACCELERATORS),
            "gpu_hours": round(rng.uniform(10, 5e6), rng.randint(0, 3)),
            "num_gpus": rng.choice([1, 3, 8, 12, 64, 100, 256, 1000]),
            "checkpoint_bytes": rng.choice([0.0, 1e11, 2.5e12]),
        }},
        "providers": rng.choice(PROVIDER_SETS),
        "terms": rng.sample(TERMS, rng.randint(1, len(TERMS))),
        "reliability": {"restart_s": rng.choice([60.0, 600.0, 1800.0]),
                        "failure_rate_per_gpu_hour": rng.choice([0.0, 2.2e-5, 1e-4])},
        "reserved_utilisation_fraction": rng.choice(["1", "0.8", "0.333333"]),
        "onprem": {"purchase_price_per_gpu": rng.choice(["25000", "31999.99"])},
    }
    if rng.random() < 0.5:
        body["budget"] = {"amount": f"{rng.uniform(1, 2e7):.2f}", "currency": "USD"}
    if rng.random() < 0.5:
        body["deadline_s"] = rng.uniform(3600, 1e8)
    return body


NOW = dt.datetime(2026, 11, 23, tzinfo=dt.UTC)


RANDOM_QUOTES = int(os.environ.get("CQ_RANDOM_QUOTES", "300"))
"""Random quote requests recomputed (1,000 measured in session 4; 500 until session 25, when
the suite reached 10.6 minutes on 2 cores; 300 keeps make test under 10; CQ_RANDOM_QUOTES=1000
runs the full sweep)."""


def test_random_quotes_recompute_to_the_cent(
    database_url_factory: Callable[[str], str]
) -> None:
    url = database_url_factory("sqlite")
    upgrade(url)
    engine = make_engine(url)
    factory = make_session_factory(engine)
    with factory() as session:
        seed_catalog(session)
        session.commit()
    cache = AcceleratorCache(factory, ttl_s=3600)
    rng = random.Random(20261122)
    lines = 0
    with factory() as session:
        version = get_version(session, None).id
        for _ in range(RANDOM_QUOTES):
            request = QuoteRequest.model_validate(random_request(rng))
            stored_request = json.loads(json.dumps(request.model_dump(mode="json")))
            body, every = compute_body(session, request, cache, version, WorkBudget(10), 0,
                                       DEFAULT_POLICY, NOW, gated=True)
            stored, stored_lines = json.loads(json.dumps([body, every]))
            again = QuoteRequest.model_validate(stored_request)
            fresh, fresh_lines = compute_body(session, again, cache, version, WorkBudget(10),
                                              0, DEFAULT_POLICY, NOW, gated=True)
            assert _differences(stored, stored_lines, fresh, fresh_lines) == []
            lines += len(stored_lines)
    engine.dispose()
    assert lines > 5 * RANDOM_QUOTES


@pytest.mark.postgres
def test_fifty_concurrent_identical_requests_store_one_quote(
    database_url_factory: Callable[[str], str]
) -> None:
    url = database_url_factory("postgres")
    upgrade(url)
    engine = make_engine(url)
    # 50 at once is above the default load-shedding limit (32); this test is about the
    # Idempotency-Key race, so every request must reach the handler.
    settings = Settings(database_url=url, max_in_flight=64)
    with Session(engine) as session:
        seed_catalog(session)
        _, key = create_key(session, name="buyer", scopes=["quotes:write"],
                            pepper=settings.api_key_pepper.get_secret_value())
        session.commit()
    body = {"workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb", "gpu_hours": 1000,
                                       "num_gpus": 64}}, "providers": ["lambda"]}
    results: list[httpx.Response] = []
    lock = threading.Lock()
    start = threading.Barrier(50)

    with live_server(settings) as base:
        def worker() -> None:
            with httpx.Client(base_url=base, timeout=60) as client:
                start.wait()
                response = client.post("/v1/quotes", json=body, headers={
                    "Authorization": f"Bearer {key}", "Idempotency-Key": "one-key"})
                with lock:
                    results.append(response)

        threads = [threading.Thread(target=worker) for _ in range(50)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    with Session(engine) as session:
        stored = session.scalar(select(func.count()).select_from(Quote))
    engine.dispose()
    assert stored == 1
    statuses = Counter(r.status_code for r in results)
    assert set(statuses) <= {201, 409}, statuses
    bodies = {r.content for r in results if r.status_code == 201}
    assert len(bodies) == 1  # every 2xx is the one stored quote, byte for byte
    assert sum(r.headers.get("idempotent-replayed") == "true" for r in results) == (
        statuses[201] - 1)
