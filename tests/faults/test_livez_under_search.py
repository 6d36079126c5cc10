"""Two searches at their deadline do not starve the process: /livez stays as quick as it is
idle (a ratio in the same run, so a fast or a loaded machine does not decide the outcome)."""

from __future__ import annotations

import collections
import copy
import threading
import time
from pathlib import Path

import httpx
from sqlalchemy.orm import Session

from service.api.schemas.plans import SWEEP_EXAMPLE
from service.catalog.db import make_engine
from service.catalog.seed import seed_catalog
from service.settings import Settings
from tests.databases import upgrade
from tests.live_server import live_server


def _p99(latencies: list[float]) -> float:
    ordered = sorted(latencies)
    return ordered[int(len(ordered) * 0.99)]


PROBES = 101
"""/livez probes while the searches run, at least (more than 100, so the p99 is not simply
the slowest probe)."""


def test_livez_p99_under_two_searches_stays_near_idle(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/live.sqlite3"
    upgrade(url)
    engine = make_engine(url)
    with Session(engine) as session:
        seed_catalog(session)
        session.commit()
    engine.dispose()
    body = copy.deepcopy(SWEEP_EXAMPLE)
    body["constraints"] = {}  # the full 405B sweep: millions of candidates
    # A deadline far below any machine's full-sweep time (about 2.4 s on a quiet 2-core
    # machine), so every search runs its worker to the deadline whatever the machine's speed
    # and is refused (503 search-deadline: never a partial plan), or waits for a worker the
    # other search holds until the deadline (503 search-queue-timeout). Each thread keeps
    # searching for 3 s and until the probes below number PROBES (a loaded machine answers
    # fewer in 3 s), at once after each answer (not after Retry-After), so the workers are
    # busy and the probes overlap searches the whole time.
    settings = Settings(database_url=url, search_deadline_s=0.25, search_workers=2)
    statuses: list[tuple[int, str, str | None]] = []
    probed = threading.Event()
    with live_server(settings) as base:
        def search() -> None:
            start = time.monotonic()
            while (time.monotonic() < start + 3.0 or not probed.is_set()) and (
                    time.monotonic() < start + 60.0):
                response = httpx.post(f"{base}/v1/parallelism-plans", json=body, timeout=120)
                slug = response.json().get("type", "").rsplit("/", 1)[-1]
                statuses.append((response.status_code, slug, response.headers.get("retry-after")))

        with httpx.Client(base_url=base, timeout=5) as client:
            idle = []
            for _ in range(150):
                start = time.perf_counter()
                assert client.get("/livez").status_code == 200
                idle.append(time.perf_counter() - start)
                time.sleep(0.005)
            workers = [threading.Thread(target=search) for _ in range(2)]
            for worker in workers:
                worker.start()
            latencies = []
            while any(w.is_alive() for w in workers):
                start = time.perf_counter()
                assert client.get("/livez").status_code == 200
                latencies.append(time.perf_counter() - start)
                if len(latencies) >= PROBES:
                    probed.set()
                time.sleep(0.01)
            for worker in workers:
                worker.join()
    assert len(statuses) >= 2
    assert all(code == 503 and slug in ("search-deadline", "search-queue-timeout")
               and retry_after is not None and int(retry_after) >= 1
               for code, slug, retry_after in statuses), statuses
    # Either refusal means the search workers were saturated, the load this test is about: a
    # search ran to its deadline (search-deadline), or none was free for it (queue timeout).
    # Which one a request gets depends on the machine's load, so neither is required.
    print(collections.Counter(slug for _, slug, _ in statuses))
    assert len(latencies) >= PROBES
    busy, quiet = _p99(latencies), _p99(idle)
    # In the request thread (no workers) two sweeps pushed p99 from about 5 ms to 54 ms; in
    # worker processes it stays within a small multiple of the idle figure.
    assert busy < 10 * quiet + 0.020, (
        f"p99 {busy * 1000:.1f} ms busy against {quiet * 1000:.1f} ms idle "
        f"over {len(latencies)} probes")
