"""Issue 38's targets that users feel, over HTTP: ``python -m benchmarks.targets``.

Every request carries a body the server has not seen (a memo on exact request bytes counts
toward none of these targets), and each figure sits beside a baseline measured the same way in
the same run:

- ``estimates``: ``POST /v1/estimates``, wrk, 32 connections, closed loop, 30 s; the documented
  example with a new ``training.tokens`` in every request (wrk_report.lua's ``CQ_WRK_VARY``).
  Targets: p99 <= 50 ms; server CPU per request above the core's own <= 2x the bare ``async
  def`` endpoint's, which gets the same varied bodies. The core's own CPU is ``estimate()`` on
  the same bodies, in this process.
- ``serving``: ``POST /v1/serving-estimates`` the same way, a new ``traffic.requests_per_s``
  each time ("serving estimates take the same path").
- ``quotes``: ``POST /v1/quotes`` over the whole catalogue (every provider and term), a new
  ``gpu_hours`` each time, open loop at 10 per second for 60 s on PostgreSQL. Target: p99 <=
  300 ms, latency counted from each request's scheduled send time.
- ``soak``: 10,000 such quotes (two closed-loop clients) on PostgreSQL, the server's resident
  memory (``VmRSS``) read after every 500. Targets: <= 600 MB after 10,000, growth <= 50 MB
  between the 2,000th and the 10,000th.

Server CPU is the uvicorn process's user + system time (``/proc/PID/stat``) across the wrk run,
divided by the requests it answered. Needs wrk and PostgreSQL on 127.0.0.1:5432. Prints a
Markdown report for benchmarks/RESULTS.md and one ``CQ_TARGETS_JSON`` line per scenario.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from benchmarks.asgi_cpu import WHOLE_CATALOGUE_QUOTE
from benchmarks.catalog_list import database
from benchmarks.load import loadgen
from benchmarks.load.run import HERE, SERVICE_ENV, bare_server, prepared
from service.api.schemas.estimate import ESTIMATE_EXAMPLE, EstimateRequest
from service.api.schemas.serving import SERVING_EXAMPLE
from service.catalog.mapping import accelerator_to_spec
from service.catalog.repository import get_accelerator
from service.core.estimate import estimate
from tests.live_server import server_process

VARY = "__CQ_VARY__"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def varied_template(body: dict[str, Any], path: tuple[str, ...], integer_part: int,
                    exponent: str = "") -> str:
    """``body`` as JSON with the number at ``path`` written
    ``<integer_part>.__CQ_VARY__<exponent>``: wrk fills in new digits per request, so the value
    stays near ``integer_part`` (times ``exponent``, e.g. ``"e12"``)."""
    copy = json.loads(json.dumps(body))
    node = copy
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = "SENTINEL"
    return json.dumps(copy).replace('"SENTINEL"', f"{integer_part}.{VARY}{exponent}")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_mb(pid: int) -> float:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_BYTES / 2**20


def wrk_varied(url: str, path: str, template: str, *, pid: int, connections: int = 32,
               duration_s: int = 30) -> dict[str, float]:
    """wrk with a new body per request; with the server's CPU per answered request."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        handle.write(template)
    env = dict(os.environ, CQ_WRK_METHOD="POST", CQ_WRK_BODY_FILE=handle.name, CQ_WRK_VARY="1")
    command = ["wrk", "-t1", f"-c{connections}", f"-d{duration_s}s", "--timeout", "10s",
               "-s", str(HERE / "wrk_report.lua"), url + path]
    before = cpu_s(pid)
    out = subprocess.run(command, env=env, capture_output=True, text=True,  # noqa: S603
                         check=True).stdout
    spent = cpu_s(pid) - before
    os.unlink(handle.name)
    match = re.search(r"CQ_WRK_JSON (\{.*\})", out)
    if not match:
        raise RuntimeError(f"wrk printed no summary:\n{out}")
    raw = json.loads(match.group(1))
    errors = sum(raw[k] for k in ("connect_errors", "read_errors", "write_errors",
                                  "status_errors", "timeouts"))
    return {"requests": raw["requests"], "rps": raw["requests"] / (raw["duration_us"] / 1e6),
            "p50_ms": raw["p50_us"] / 1e3, "p99_ms": raw["p99_us"] / 1e3, "errors": errors,
            "cpu_ms_per_request": spent / max(raw["requests"], 1) * 1e3}


def core_estimate_ms(sqlite_url: str, count: int = 2000) -> float:
    """``estimate()`` alone, on ``count`` varied example bodies (median of 5 rounds)."""
    engine = create_engine(sqlite_url)
    with Session(engine) as session:
        accelerator = accelerator_to_spec(get_accelerator(
            session, ESTIMATE_EXAMPLE["cluster"]["accelerator"]))
    engine.dispose()
    inputs = []
    for _ in range(count):
        body = json.loads(json.dumps(ESTIMATE_EXAMPLE))
        body["training"]["tokens"] = random.uniform(1e12, 2e12)
        request = EstimateRequest.model_validate(body)
        cluster = request.cluster.to_core(accelerator)
        inputs.append((request.model.to_core(), cluster,
                       request.parallelism.to_core(cluster.num_gpus),
                       request.training.to_core(), request.energy.to_core()))
    rounds = []
    for _ in range(5):
        start = time.process_time()
        for model, cluster, plan, training, energy in inputs:
            estimate(model, cluster, plan, training, energy=energy)
        rounds.append((time.process_time() - start) / count * 1e3)
    return statistics.median(rounds)


def scenario_http(name: str, path: str, template: str, sqlite_url: str,
                  duration_s: int) -> dict[str, Any]:
    with server_process({}, app="benchmarks.load.bare_app:app", factory=False,
                        ready_path="/bare") as bare:
        base = wrk_varied(bare.url, "/bare-async", template, pid=bare.process.pid,
                          duration_s=duration_s)
    with server_process({**SERVICE_ENV, "CQ_DATABASE_URL": sqlite_url}) as server:
        warm = template.replace(VARY, "5")
        httpx.post(server.url + path, content=warm, timeout=60,
                   headers={"content-type": "application/json"}).raise_for_status()
        figures = wrk_varied(server.url, path, template, pid=server.process.pid,
                             duration_s=duration_s)
    result: dict[str, Any] = {"scenario": name, "bare_async": base, "service": figures}
    print(f"\n### `POST {path}`, a new body every request, 32 connections, {duration_s} s\n")
    print("| endpoint | req/s | p50 ms | p99 ms | errors | server CPU ms/request |\n"
          "|---|---|---|---|---|---|")
    for label, row in (("bare `async def` (same varied bodies)", base),
                       (f"`POST {path}`", figures)):
        print(f"| {label} | {row['rps']:,.0f} | {row['p50_ms']:.1f} | {row['p99_ms']:.1f} | "
              f"{row['errors']:.0f} | {row['cpu_ms_per_request']:.3f} |")
    return result


def quote_maker(key: str) -> Any:
    run_id = uuid.uuid4().hex[:8]

    def make(i: int) -> tuple[str, str, bytes, dict[str, str]]:
        body = json.loads(json.dumps(WHOLE_CATALOGUE_QUOTE))
        body["workload"]["gpu_hours"]["gpu_hours"] = random.randint(10_000, 2_000_000)
        return ("POST", "/v1/quotes", loadgen.dumps(body),
                {"Authorization": f"Bearer {key}", "Idempotency-Key": f"t-{run_id}-{i}"})
    return make


def scenario_quotes(pg_url: str, key: str, duration_s: int, rate: float) -> dict[str, Any]:
    make = quote_maker(key)

    def bare_make(i: int) -> tuple[str, str, bytes, dict[str, str]]:
        return ("POST", "/bare-async", make(i)[2], {})

    with bare_server() as bare:
        base = asyncio.run(loadgen.open_loop(bare, rate, duration_s, bare_make))
    with server_process({**SERVICE_ENV, "CQ_DATABASE_URL": pg_url}) as server:
        # Warm the offers cache, under other Idempotency-Keys (a reused key with a new body
        # is a 422 by design).
        asyncio.run(loadgen.open_loop(server.url, 1, 3, quote_maker(key)))
        got = asyncio.run(loadgen.open_loop(server.url, rate, duration_s, make))
    lat = got.latencies(lambda s: 200 <= s < 300)
    base_lat = base.latencies(lambda s: 200 <= s < 300)
    result = {"scenario": "quotes", "rate_per_s": rate, "sent": len(got.samples),
              "statuses": got.by_status(),
              "p50_ms": loadgen.percentile(lat, 50) * 1e3,
              "p99_ms": loadgen.percentile(lat, 99) * 1e3,
              "bare_p99_ms": loadgen.percentile(base_lat, 99) * 1e3}
    print(f"\n### `POST /v1/quotes`, whole catalogue, new figures each, open loop {rate:g}/s, "
          f"{duration_s} s, PostgreSQL\n")
    print("| sent | statuses | p50 ms | p99 ms | bare p99 ms |\n|---|---|---|---|---|")
    print(f"| {result['sent']} | {result['statuses']} | {result['p50_ms']:.1f} | "
          f"{result['p99_ms']:.1f} | {result['bare_p99_ms']:.1f} |")
    return result


def scenario_soak(pg_url: str, key: str, total: int, clients: int = 2) -> dict[str, Any]:
    make = quote_maker(key)
    samples: list[tuple[int, float]] = []
    statuses: dict[int, int] = {}
    with server_process({**SERVICE_ENV, "CQ_DATABASE_URL": pg_url}) as server:
        pid = server.process.pid
        samples.append((0, rss_mb(pid)))
        counter = iter(range(total))

        async def client() -> None:
            conn = loadgen.Connection(server.url)
            for i in counter:
                method, path, body, headers = make(i)
                try:
                    status, _ = await conn.request(method, path, body, headers)
                except (OSError, asyncio.IncompleteReadError, ValueError):
                    await conn.close()
                    status = 0
                statuses[status] = statuses.get(status, 0) + 1
                done = sum(statuses.values())
                if done % 500 == 0:
                    samples.append((done, rss_mb(pid)))
            await conn.close()

        async def main() -> None:
            await asyncio.gather(*(client() for _ in range(clients)))

        start = time.perf_counter()
        asyncio.run(main())
        wall = time.perf_counter() - start
    at = dict(samples)
    result = {"scenario": "soak", "quotes": total, "statuses": statuses, "wall_s": wall,
              "rss_mb": samples,
              "rss_at_2000_mb": at.get(2000), "rss_at_end_mb": samples[-1][1],
              "growth_2000_to_end_mb": samples[-1][1] - at.get(2000, samples[-1][1])}
    print(f"\n### {total:,} whole-catalogue quotes, new figures each, PostgreSQL\n")
    print("| quotes | " + " | ".join(f"{n:,}" for n, _ in samples) + " |")
    print("|---|" + "---|" * len(samples))
    print("| RSS MB | " + " | ".join(f"{mb:.0f}" for _, mb in samples) + " |")
    print(f"\nstatuses {statuses}, {wall:.0f} s wall; RSS at 2,000: "
          f"{result['rss_at_2000_mb']:.0f} MB, at {total:,}: {result['rss_at_end_mb']:.0f} MB, "
          f"growth {result['growth_2000_to_end_mb']:.1f} MB")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="*", default=["estimates", "serving", "quotes",
                                                         "soak"])
    parser.add_argument("--duration", type=int, default=30)
    parser.add_argument("--quote-duration", type=int, default=60)
    parser.add_argument("--quote-rate", type=float, default=10.0)
    parser.add_argument("--soak", type=int, default=10_000)
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory() as folder, database("postgresql") as pg_url:
        sqlite_url = f"sqlite:///{folder}/targets.sqlite3"
        prepared(sqlite_url)
        key = prepared(pg_url)
        for name in args.scenarios:
            if name == "estimates":
                result = scenario_http(
                    "estimates", "/v1/estimates",
                    varied_template(ESTIMATE_EXAMPLE, ("training", "tokens"), 1, "e12"),
                    sqlite_url, args.duration)
                core_ms = core_estimate_ms(sqlite_url)
                service = result["service"]["cpu_ms_per_request"]
                bare = result["bare_async"]["cpu_ms_per_request"]
                result["core_ms"] = core_ms
                result["above_core_over_bare"] = (service - core_ms) / bare
                print(f"\ncore estimate() {core_ms:.3f} ms CPU; server CPU above the core "
                      f"{service - core_ms:.3f} ms = {(service - core_ms) / bare:.2f}x bare "
                      f"async ({bare:.3f} ms)")
                results.append(result)
            elif name == "serving":
                results.append(scenario_http(
                    "serving", "/v1/serving-estimates",
                    varied_template(SERVING_EXAMPLE, ("traffic", "requests_per_s"), 10),
                    sqlite_url, args.duration))
            elif name == "quotes":
                results.append(scenario_quotes(pg_url, key, args.quote_duration,
                                               args.quote_rate))
            elif name == "soak":
                results.append(scenario_soak(pg_url, key, args.soak))
            else:
                parser.error(f"unknown scenario {name}")
    for result in results:
        print("CQ_TARGETS_JSON " + json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
