"""Load figures for ComputeQuote on this machine: ``make bench-load``.

Every scenario runs the real service as one uvicorn process (one replica) and reports its
figures next to a bare FastAPI endpoint (``bare_app.py``) measured in the same run, the same
way, so a noisy shared machine cancels out in the ratios. Scenarios:

- ``estimates``: ``POST /v1/estimates`` (the example body), wrk, 32 connections, closed loop;
- ``offers``: ``GET /v1/offers`` with accelerator and term filters on PostgreSQL, wrk;
- ``quotes``: ``POST /v1/quotes`` on PostgreSQL, open loop at a fixed rate with a unique
  Idempotency-Key each; afterwards the ``quotes`` rows must equal the 2xx answers;
- ``overload``: 512 closed-loop connections on ``POST /v1/estimates``; the excess must be shed as
  503 quickly, accepted requests must keep p99 < 1 s, and the latency must come back within 5 s
  of the load stopping.

Prints a Markdown report (paste it into benchmarks/RESULTS.md) and a JSON line per scenario.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, func, select, text
from sqlalchemy.orm import Session

from benchmarks.catalog_list import database
from benchmarks.load import loadgen
from service.api.schemas.estimate import ESTIMATE_EXAMPLE
from service.catalog.models import Quote
from service.settings import Settings
from tests.factories import seeded_database_with_key
from tests.live_server import server_process

HERE = Path(__file__).parent
PEPPER = Settings().api_key_pepper.get_secret_value()
OFFERS_PATH = "/v1/offers?accelerator=h100-sxm5-80gb&term=on_demand&page_size=50"
QUOTE_BODY: dict[str, Any] = {
    "workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb", "gpu_hours": 250000,
                               "num_gpus": 512}},
    "terms": ["on_demand", "spot", "reserved_1y"], "providers": ["aws", "gcp"],
    "budget": {"amount": "2000000.00", "currency": "USD"},
}
# The service's own settings for these runs: no search worker processes (no scenario searches).
SERVICE_ENV = {"CQ_SEARCH_WORKERS": "0", "CQ_LOG_LEVEL": "warning"}


def prepared(url: str) -> str:
    """Migrate and seed ``url``; returns an API key for quotes and catalogue reads."""
    return seeded_database_with_key(url, name="load", scopes=[
        "quotes:write", "quotes:read", "catalog:read"])


@contextmanager
def bare_server() -> Iterator[str]:
    with server_process({}, app="benchmarks.load.bare_app:app", factory=False,
                        ready_path="/bare") as server:
        yield server.url


def wrk(url: str, path: str, *, connections: int, duration_s: int,
        body: dict[str, Any] | None = None) -> dict[str, float]:
    """Runs wrk with 1 thread (the other core serves) and returns its summary."""
    env = dict(os.environ, CQ_WRK_METHOD="POST" if body is not None else "GET")
    with tempfile.NamedTemporaryFile("wb", suffix=".json", delete=False) as handle:
        handle.write(loadgen.dumps(body or {}))
    env["CQ_WRK_BODY_FILE"] = handle.name
    command = ["wrk", "-t1", f"-c{connections}", f"-d{duration_s}s", "--timeout", "10s",
               "-s", str(HERE / "wrk_report.lua"), url + path]
    out = subprocess.run(command, env=env, capture_output=True, text=True,  # noqa: S603
                         check=True).stdout
    os.unlink(handle.name)
    match = re.search(r"CQ_WRK_JSON (\{.*\})", out)
    if not match:
        raise RuntimeError(f"wrk printed no summary:\n{out}")
    raw = json.loads(match.group(1))
    seconds = raw["duration_us"] / 1e6
    errors = sum(raw[k] for k in ("connect_errors", "read_errors", "write_errors",
                                  "status_errors", "timeouts"))
    return {"requests": raw["requests"], "rps": raw["requests"] / seconds,
            "p50_ms": raw["p50_us"] / 1e3, "p99_ms": raw["p99_us"] / 1e3, "errors": errors}


def ratio_row(name: str, figures: dict[str, float], base: dict[str, float]) -> str:
    return (f"| {name} | {figures['rps']:,.0f} | {figures['p50_ms']:.1f} | "
            f"{figures['p99_ms']:.1f} | {figures['errors']:.0f} | "
            f"{figures['rps'] / base['rps']:.2f} | {figures['p50_ms'] / base['p50_ms']:.1f} | "
            f"{figures['p99_ms'] / base['p99_ms']:.1f} |")


TABLE_HEAD = ("| endpoint | req/s | p50 ms | p99 ms | errors | req/s ÷ bare | p50 ÷ bare | "
              "p99 ÷ bare |\n|---|---|---|---|---|---|---|---|")


def closed_loop_pair(service_url: str, method: str, path: str, body: dict[str, Any] | None,
                     connections: int, duration_s: int) -> tuple[dict[str, float], ...]:
    """The service, a bare sync endpoint and a bare ``async def`` one (issue 16's baseline),
    each measured the same way in the same run."""
    with bare_server() as bare:
        base = wrk(bare, "/bare", connections=connections, duration_s=duration_s,
                   body=body if method == "POST" else None)
        base_async = wrk(bare, "/bare-async", connections=connections, duration_s=duration_s,
                         body=body if method == "POST" else None)
    # One request first: the targets are for a warm replica (issue 16: "with a warm page
    # cache"); the cold first request is measured by benchmarks/asgi_cpu.py --cold.
    warm = httpx.request(method, service_url + path, json=body, timeout=60)
    warm.raise_for_status()
    figures = wrk(service_url, path, connections=connections, duration_s=duration_s,
                  body=body)
    return base, figures, base_async


WORKERS: tuple[str, ...] = ()
"""uvicorn arguments for the service (``--workers N``: N processes behind one socket)."""


def scenario_estimates(sqlite_url: str, duration_s: int) -> dict[str, Any]:
    with server_process({**SERVICE_ENV, "CQ_DATABASE_URL": sqlite_url},
                        extra_args=WORKERS) as server:
        base, figures, base_async = closed_loop_pair(
            server.url, "POST", "/v1/estimates", ESTIMATE_EXAMPLE, 32, duration_s)
    print(TABLE_HEAD)
    print(ratio_row("bare FastAPI `async def` `POST /bare-async`", base_async, base_async))
    print(ratio_row("bare FastAPI sync `POST /bare` (vs async)", base, base_async))
    print(ratio_row("`POST /v1/estimates` (vs async)", figures, base_async))
    return {"scenario": "estimates", "bare": base, "bare_async": base_async,
            "service": figures}


def scenario_offers(pg_url: str, duration_s: int) -> dict[str, Any]:
    with server_process({**SERVICE_ENV, "CQ_DATABASE_URL": pg_url},
                        extra_args=WORKERS) as server:
        base, figures, base_async = closed_loop_pair(server.url, "GET", OFFERS_PATH, None, 32,
                                                     duration_s)
    print(TABLE_HEAD)
    print(ratio_row("bare FastAPI `async def` `GET /bare-async`", base_async, base_async))
    print(ratio_row("bare FastAPI sync `GET /bare` (vs async)", base, base_async))
    print(ratio_row(f"`GET {OFFERS_PATH}` (PostgreSQL, vs async)", figures, base_async))
    return {"scenario": "offers", "bare": base, "bare_async": base_async, "service": figures}


def scenario_quotes(pg_url: str, key: str, duration_s: int, rate: float) -> dict[str, Any]:
    body = loadgen.dumps(QUOTE_BODY)
    run_id = uuid.uuid4().hex[:8]

    def make(i: int) -> tuple[str, str, bytes, dict[str, str]]:
        return ("POST", "/v1/quotes", body, {"Authorization": f"Bearer {key}",
                                             "Idempotency-Key": f"load-{run_id}-{i}"})

    def bare_make(i: int) -> tuple[str, str, bytes, dict[str, str]]:
        return ("POST", "/bare", body, {})

    with bare_server() as bare:
        base = asyncio.run(loadgen.open_loop(bare, rate, duration_s, bare_make))
    engine = create_engine(pg_url)
    with Session(engine) as session:
        before = session.scalar(select(func.count()).select_from(Quote)) or 0
    with server_process({**SERVICE_ENV, "CQ_DATABASE_URL": pg_url}) as server:
        got = asyncio.run(loadgen.open_loop(server.url, rate, duration_s, make))
    with Session(engine) as session:
        rows = (session.scalar(select(func.count()).select_from(Quote)) or 0) - before
    engine.dispose()
    statuses = got.by_status()
    ok = sum(n for s, n in statuses.items() if 200 <= s < 300)
    lat = got.latencies(lambda s: 200 <= s < 300)
    base_lat = base.latencies(lambda s: 200 <= s < 300)
    result = {"scenario": "quotes", "rate_per_s": rate, "sent": len(got.samples),
              "statuses": statuses, "rows": rows,
              "p50_ms": loadgen.percentile(lat, 50) * 1e3,
              "p99_ms": loadgen.percentile(lat, 99) * 1e3,
              "bare_p50_ms": loadgen.percentile(base_lat, 50) * 1e3,
              "bare_p99_ms": loadgen.percentile(base_lat, 99) * 1e3}
    print("| rate | sent | statuses | rows stored | p50 ms | p99 ms | bare p50 ms | bare p99 ms "
          "| p99 ÷ bare |\n|---|---|---|---|---|---|---|---|---|")
    print(f"| {rate:g}/s | {len(got.samples)} | {statuses} | {rows} (2xx: {ok}) | "
          f"{result['p50_ms']:.1f} | {result['p99_ms']:.1f} | {result['bare_p50_ms']:.1f} | "
          f"{result['bare_p99_ms']:.1f} | {result['p99_ms'] / result['bare_p99_ms']:.1f} |")
    return result


def scenario_overload(sqlite_url: str, duration_s: int, connections: int) -> dict[str, Any]:
    body = loadgen.dumps(ESTIMATE_EXAMPLE)

    async def sequential_p50(url: str, path: str) -> float:
        conn = loadgen.Connection(url)
        samples = []
        for _ in range(50):
            t0 = time.perf_counter()
            await conn.request("POST", path, body)
            samples.append(time.perf_counter() - t0)
        await conn.close()
        return loadgen.percentile(sorted(samples), 50)

    async def run(url: str, path: str) -> tuple[float, loadgen.Recorder, float]:
        baseline = await sequential_p50(url, path)
        recorder = await loadgen.closed_loop(url, "POST", path, body, connections, duration_s)
        recovery = await loadgen.probe_until_recovered(url, "POST", path, body, baseline)
        return baseline, recorder, recovery

    with bare_server() as bare:
        b_base, b_rec, b_recovery = asyncio.run(run(bare, "/bare"))
    with server_process({**SERVICE_ENV, "CQ_DATABASE_URL": sqlite_url}) as server:
        s_base, s_rec, s_recovery = asyncio.run(run(server.url, "/v1/estimates"))

    def figures(baseline: float, rec: loadgen.Recorder, recovery: float) -> dict[str, Any]:
        ok = rec.latencies(lambda s: 200 <= s < 300)
        shed = rec.latencies(lambda s: s == 503)
        return {"statuses": rec.by_status(), "ok_rps": len(ok) / duration_s,
                "ok_p50_ms": loadgen.percentile(ok, 50) * 1e3,
                "ok_p99_ms": loadgen.percentile(ok, 99) * 1e3,
                "shed_p50_ms": loadgen.percentile(shed, 50) * 1e3,
                "shed_p99_ms": loadgen.percentile(shed, 99) * 1e3,
                "idle_p50_ms": baseline * 1e3, "recovery_s": recovery}

    bare_f, svc_f = figures(b_base, b_rec, b_recovery), figures(s_base, s_rec, s_recovery)
    print(f"{connections} connections for {duration_s} s, closed loop:\n")
    print("| server | statuses | 2xx/s | 2xx p50 ms | 2xx p99 ms | 503 p50 ms | 503 p99 ms | "
          "idle p50 ms | back to 2× idle p50 after |\n|---|---|---|---|---|---|---|---|---|")
    for name, f in (("bare FastAPI", bare_f), ("`POST /v1/estimates`", svc_f)):
        print(f"| {name} | {f['statuses']} | {f['ok_rps']:,.0f} | {f['ok_p50_ms']:.1f} | "
              f"{f['ok_p99_ms']:.1f} | {f['shed_p50_ms']:.1f} | {f['shed_p99_ms']:.1f} | "
              f"{f['idle_p50_ms']:.2f} | {f['recovery_s']:.2f} s |")
    print(f"\nratios: 2xx p99 ÷ bare 2xx p99 = {svc_f['ok_p99_ms'] / bare_f['ok_p99_ms']:.2f}")
    return {"scenario": "overload", "connections": connections, "bare": bare_f,
            "service": svc_f}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=int, default=30, help="seconds per measurement")
    parser.add_argument("--quote-rate", type=float, default=10.0, help="quotes per second")
    parser.add_argument("--overload-connections", type=int, default=512)
    parser.add_argument("--workers", type=int, default=1,
                        help="uvicorn processes for the estimates and offers scenarios")
    parser.add_argument("scenarios", nargs="*",
                        default=["estimates", "offers", "quotes", "overload"])
    args = parser.parse_args(argv)
    if shutil.which("wrk") is None:
        parser.error("wrk is missing: apt-get install wrk")
    global WORKERS
    WORKERS = ("--workers", str(args.workers)) if args.workers > 1 else ()
    results = []
    with tempfile.TemporaryDirectory() as folder, database("postgresql") as pg_url:
        sqlite_url = f"sqlite:///{folder}/load.sqlite3"
        prepared(sqlite_url)
        key = prepared(pg_url)
        engine = create_engine(pg_url)
        with engine.connect() as conn:
            print("PostgreSQL:", conn.execute(text("select version()")).scalar_one()[:40])
        engine.dispose()
        for name in args.scenarios:
            print(f"\n### {name}\n")
            if name == "estimates":
                results.append(scenario_estimates(sqlite_url, args.duration))
            elif name == "offers":
                results.append(scenario_offers(pg_url, args.duration))
            elif name == "quotes":
                results.append(scenario_quotes(pg_url, key, args.duration, args.quote_rate))
            elif name == "overload":
                results.append(scenario_overload(sqlite_url, args.duration,
                                                 args.overload_connections))
            else:
                parser.error(f"unknown scenario {name}")
    for result in results:
        print("CQ_LOAD_JSON " + json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
