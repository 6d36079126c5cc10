"""PostgreSQL stops under a running service and comes back (a private cluster, so the shared
server is never touched): readiness drops within 2 s, estimates keep answering from the cache,
quotes answer 503 problem+json with Retry-After, and everything recovers within 5 s."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest
from sqlalchemy.orm import Session

from service.api.schemas.estimate import ESTIMATE_EXAMPLE
from service.catalog.db import make_engine
from service.catalog.keys import create_key
from service.catalog.seed import seed_catalog
from service.settings import Settings
from tests.databases import upgrade
from tests.faults.conftest import Cluster
from tests.live_server import live_server


def _until(check: object, limit_s: float) -> float:
    """Seconds until ``check()`` is true; fails after ``limit_s``."""
    start = time.monotonic()
    while time.monotonic() - start < limit_s:
        try:
            if check():  # type: ignore[operator]
                return time.monotonic() - start
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    pytest.fail(f"not within {limit_s} s")


@pytest.mark.postgres
def test_outage_and_recovery(cluster: Cluster) -> None:
    upgrade(cluster.url)
    engine = make_engine(cluster.url)
    settings = Settings(database_url=cluster.url)
    with Session(engine) as session:
        seed_catalog(session)
        _, key = create_key(session, name="ops", scopes=["quotes:write"],
                            pepper=settings.api_key_pepper.get_secret_value())
        session.commit()
    engine.dispose()
    quote = {"workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb", "gpu_hours": 100,
                                        "num_gpus": 8}}, "providers": ["lambda"]}

    def post_quote(client: httpx.Client) -> httpx.Response:
        return client.post("/v1/quotes", json=quote, headers={
            "Authorization": f"Bearer {key}", "Idempotency-Key": uuid.uuid4().hex})

    with live_server(settings) as base, httpx.Client(base_url=base, timeout=10) as client:
        ready = client.get("/readyz")
        assert ready.status_code == 200, ready.text
        assert client.post("/v1/estimates", json=ESTIMATE_EXAMPLE).status_code == 200
        assert post_quote(client).status_code == 201

        cluster.stop_immediately()
        took = _until(lambda: client.get("/readyz").status_code == 503, 2.0)
        assert took < 2.0
        estimate = client.post("/v1/estimates", json=ESTIMATE_EXAMPLE)
        assert estimate.status_code == 200  # accelerator specs come from the cache
        failed = post_quote(client)
        assert failed.status_code == 503, failed.text
        assert failed.headers["content-type"] == "application/problem+json"
        assert int(failed.headers["retry-after"]) >= 1

        cluster.start()
        recovered = _until(lambda: client.get("/readyz").status_code == 200
                           and post_quote(client).status_code == 201, 5.0)
        assert recovered < 5.0
