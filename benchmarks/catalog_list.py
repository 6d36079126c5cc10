"""Listing a 5,000-offer catalogue version with filters: ``make bench-catalog``.

Builds a fresh database per backend (SQLite file; PostgreSQL throw-away database when
reachable), imports 5,000 offers as one version, then times ``GET /v1/offers`` through the
ASGI app (in process, no network) against ``GET /livez`` measured in the same run, so the
machine's noise cancels in the ratio. Prints medians and p90 in milliseconds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

from service.catalog import prices
from service.catalog.db import make_engine
from service.catalog.migrate import upgrade
from service.catalog.seed import seed_catalog
from service.main import create_app
from service.settings import Settings

ACCELERATORS = ["h100-sxm5-80gb", "a100-sxm4-80gb", "h200-sxm-141gb", "b200-sxm-180gb",
                "l40s-48gb"]
TERMS = ["on_demand", "spot", "reserved_1y", "reserved_3y"]
POSTGRES_ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


def synthetic_offers(count: int) -> list[dict[str, Any]]:
    """``count`` distinct offers over 5 providers x 50 regions x 5 accelerators x 4 terms."""
    rows = []
    for i in range(count):
        term = TERMS[i % 4]
        rows.append({
            "provider": f"p{i % 5}", "region": f"region-{(i // 5) % 50}",
            "instance_type": f"gpu-{i // 250}", "accelerator": ACCELERATORS[(i // 20) % 5],
            "gpus_per_instance": 8, "term": term,
            "payment_option": "no_upfront" if term.startswith("reserved") else None,
            "zone": None, "currency": "USD",
            "price_per_hour": f"{10 + (i * 7919) % 9000 / 100:.2f}", "source": "synthetic",
            "as_of": "2026-11-01", "indicative": False,
        })
    return [{k: v for k, v in r.items() if v is not None} for r in rows]


@contextmanager
def database(backend: str) -> Iterator[str]:
    if backend == "sqlite":
        with tempfile.TemporaryDirectory() as folder:
            yield f"sqlite:///{folder}/bench.sqlite3"
        return
    name = f"cq_bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(POSTGRES_ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def timed(call: Callable[[], Any], repeats: int) -> list[float]:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def run(backend: str, offers: int, repeats: int) -> None:
    with database(backend) as url:
        upgrade(url)
        engine = make_engine(url)
        with Session(engine) as session:
            seed_catalog(session)
            start = time.perf_counter()
            prices.import_offers(session, synthetic_offers(offers),
                                 mode=prices.ImportMode.REPLACE, created_by="bench", note="")
            session.commit()
            import_s = time.perf_counter() - start
        engine.dispose()
        app = create_app(Settings(database_url=url))
        with TestClient(app) as client:
            def get(path: str, **params: Any) -> Callable[[], Any]:
                def call() -> Any:
                    response = client.get(path, params=params)
                    assert response.status_code == 200, response.text
                    return response
                return call

            last = get("/v1/offers", page_size=200)().json()
            cases = {
                "GET /livez (baseline)": get("/livez"),
                "offers, no filter, 200/page": get("/v1/offers", page_size=200),
                "offers, accelerator+term, 200/page": get(
                    "/v1/offers", accelerator="h100-sxm5-80gb", term="spot", page_size=200),
                "offers, provider+region, 50/page": get(
                    "/v1/offers", provider="p3", region="region-7", page_size=50),
                "offers, page 2 by cursor": get(
                    "/v1/offers", page_size=200, page_token=last["next_page_token"]),
            }
            for call in cases.values():
                call()  # warm caches and the connection pool
            results = {name: timed(call, repeats) for name, call in cases.items()}
        app.state.engine.dispose()
    baseline = statistics.median(results["GET /livez (baseline)"])
    print(f"\n{backend}: {offers} offers in one version (import {import_s:.2f} s); "
          f"{repeats} requests each")
    print(f"{'case':40} {'median ms':>10} {'p90 ms':>8} {'x livez':>8}")
    for name, samples in results.items():
        median = statistics.median(samples)
        p90 = statistics.quantiles(samples, n=10)[-1]
        print(f"{name:40} {median:10.2f} {p90:8.2f} {median / baseline:8.1f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--offers", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    args = parser.parse_args(argv)
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    for backend in backends:
        run(backend, args.offers, args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
