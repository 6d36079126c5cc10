"""The first search after start-up against a warm one: ``python -m benchmarks.first_search``.

Starts a fresh uvicorn process (2 search workers, SQLite), waits until ``/readyz`` answers 200,
then times ``POST /v1/parallelism-plans`` with the documented example: the first answer right
away (or ``--after S`` seconds later), then ``--warm`` more. Repeats on ``--servers`` fresh
processes and prints each, and the median ratio first ÷ warm (issue 16's target: 1.5).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import httpx

from service.api.schemas.plans import PLAN_SEARCH_EXAMPLE
from tests.factories import seeded_database_with_key
from tests.live_server import server_process


def one_server(database_url: str, after_s: float, warm: int) -> tuple[float, float]:
    env = {"CQ_DATABASE_URL": database_url, "CQ_SEARCH_WORKERS": "2",
           "CQ_LOG_LEVEL": "warning"}
    with server_process(env, ready_path="/readyz") as server, \
            httpx.Client(base_url=server.url, timeout=60) as client:
        time.sleep(after_s)
        times = []
        for _ in range(1 + warm):
            started = time.perf_counter()
            answer = client.post("/v1/parallelism-plans", json=PLAN_SEARCH_EXAMPLE)
            times.append(time.perf_counter() - started)
            answer.raise_for_status()
    return times[0], statistics.median(times[1:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", type=int, default=3)
    parser.add_argument("--warm", type=int, default=3)
    parser.add_argument("--after", type=float, default=0.0,
                        help="seconds between /readyz answering 200 and the first search")
    args = parser.parse_args(argv)
    ratios = []
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{folder}/first.sqlite3"
        seeded_database_with_key(url, name="first-search", scopes=["catalog:read"])
        for _ in range(args.servers):
            first, warm = one_server(url, args.after, args.warm)
            ratios.append(first / warm)
            print(f"first {first * 1e3:7.1f} ms   warm {warm * 1e3:7.1f} ms   "
                  f"first / warm {first / warm:4.2f}")
    print(f"median first / warm: {statistics.median(ratios):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
