"""Quotes survive crashes.

- PostgreSQL is killed (``pg_ctl stop -m immediate``: no shutdown checkpoint, like a power cut)
  in the middle of 2,000 quote POSTs, and restarted. Every quote that got a 201 is stored, under
  its key and with the id the client saw, and its compressed lines read back, as many as the
  answer priced.
- One of two replicas is killed with SIGKILL during 30 s of quote creation by clients that retry
  with the same Idempotency-Key on the other replica. Every key that ever got a 2xx exists exactly
  once, with the id every one of its 2xx answers carried.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.catalog import quotes as store
from service.catalog.db import make_engine
from service.catalog.models import Quote
from service.settings import Settings
from tests.factories import seeded_database_with_key
from tests.faults.conftest import Cluster
from tests.live_server import live_server, server_process

PEPPER = Settings().api_key_pepper.get_secret_value()
QUOTE = {"workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb", "gpu_hours": 1000,
                                    "num_gpus": 8}}, "providers": ["lambda"]}
TOTAL_QUOTES = int(os.environ.get("CQ_DURABILITY_QUOTES", "700"))
KILL_RUN_S = float(os.environ.get("CQ_KILL_RUN_S", "10"))


def _prepare(url: str) -> str:
    return seeded_database_with_key(url, name="faults", scopes=["quotes:write", "quotes:read"])


def _stored(url: str, prefix: str) -> dict[str, list[str]]:
    """Quote ids by idempotency key, for keys starting with ``prefix``."""
    engine = make_engine(url)
    with Session(engine) as session:
        rows = session.execute(select(Quote.idempotency_key, Quote.id)
                               .where(Quote.idempotency_key.startswith(prefix))).all()
    engine.dispose()
    found: dict[str, list[str]] = {}
    for key, quote_id in rows:
        found.setdefault(key, []).append(quote_id)
    return found


def _incomplete(url: str, lines_total: dict[str, int]) -> list[str]:
    """The quote ids of ``lines_total`` whose stored lines do not decode to as many lines as
    the answer said it priced (the lines are committed with the quote, compressed: a 201 must
    mean the whole quote can be read back, not only its row)."""
    engine = make_engine(url)
    with Session(engine) as session:
        rows = session.scalars(select(Quote).where(Quote.id.in_(list(lines_total)))).all()
        found = {row.id: len(store.stored_lines(row)) for row in rows}
    engine.dispose()
    return [quote_id for quote_id, total in lines_total.items()
            if found.get(quote_id) != total]


def _run_threads(count: int, target: Callable[[], None]) -> None:
    threads = [threading.Thread(target=target) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


AFTER_RESTART = 50
"""Quote POSTs sent once PostgreSQL is back, whatever the machine's speed: the run must cover
the recovery, not only the outage (a fast machine answered the rest of a fixed count with
503s before the restart finished)."""


@pytest.mark.postgres
def test_every_201_survives_postgres_killed_mid_run(cluster: Cluster) -> None:
    api_key = _prepare(cluster.url)
    settings = Settings(database_url=cluster.url, search_workers=0)
    created: dict[str, str] = {}
    lines_total: dict[str, int] = {}
    statuses: Counter[int | str] = Counter()
    lock = threading.Lock()
    counter = itertools.count()
    crash_at = TOTAL_QUOTES * 2 // 5
    crashed = threading.Event()
    restarted = threading.Event()
    after_restart = itertools.count()
    sent = [0]

    def crash_and_restart() -> None:
        cluster.stop_immediately()
        crashed.set()
        time.sleep(1.0)
        cluster.start()
        restarted.set()

    def more() -> int | None:
        """The next request number, or None when the run has covered the count and the
        recovery (bounded, so a restart that never comes fails instead of hanging)."""
        i = next(counter)
        if i >= 20 * TOTAL_QUOTES:
            return None
        if i >= TOTAL_QUOTES and restarted.is_set() and next(after_restart) >= AFTER_RESTART:
            return None
        with lock:
            sent[0] += 1
        return i

    with live_server(settings) as base:
        def client_loop() -> None:
            with httpx.Client(base_url=base, timeout=15) as client:
                while (i := more()) is not None:
                    if i == crash_at:
                        threading.Thread(target=crash_and_restart).start()
                    key = f"dur-{i}"
                    try:
                        response = client.post("/v1/quotes", json=QUOTE, headers={
                            "Authorization": f"Bearer {api_key}", "Idempotency-Key": key})
                    except httpx.HTTPError:
                        with lock:
                            statuses["transport"] += 1
                        continue
                    with lock:
                        statuses[response.status_code] += 1
                        if response.status_code == 201:
                            answer = response.json()
                            created[key] = answer["id"]
                            lines_total[answer["id"]] = answer["lines_total"]

        _run_threads(4, client_loop)
        assert crashed.is_set()
        assert restarted.is_set()

    assert sum(statuses.values()) == sent[0]
    assert statuses[503] > 0, statuses  # the outage was seen by clients
    assert set(statuses) <= {201, 503}, statuses  # never a 500
    # Before the crash every quote is created, and after the restart the service recovers.
    assert len(created) >= crash_at - 4, statuses  # up to 4 in flight at the crash
    assert any(int(key.removeprefix("dur-")) >= TOTAL_QUOTES for key in created), statuses
    stored = _stored(cluster.url, "dur-")
    print(f"durability: {dict(statuses)}; 201s {len(created)}; stored {len(stored)}")
    lost = [k for k, quote_id in created.items() if stored.get(k) != [quote_id]]
    assert lost == [], f"{len(lost)} acknowledged quotes missing or changed: {lost[:5]}"
    incomplete = _incomplete(cluster.url, lines_total)
    assert incomplete == [], f"{len(incomplete)} acknowledged quotes' lines: {incomplete[:5]}"


@pytest.mark.postgres
def test_a_replica_killed_mid_run_loses_and_duplicates_nothing(
    database_url_factory: Callable[[str], str],
) -> None:
    url = database_url_factory("postgres")
    api_key = _prepare(url)
    env = {"CQ_DATABASE_URL": url, "CQ_SEARCH_WORKERS": "0", "CQ_LOG_LEVEL": "warning"}
    answers: dict[str, set[str]] = {}  # key -> quote ids seen in 2xx answers
    seen: Counter[str] = Counter()
    lock = threading.Lock()
    keys = itertools.count()
    with server_process(env) as first, server_process(env) as second:
        replicas = [first, second]
        stop_at = time.monotonic() + KILL_RUN_S

        def create_with_retries(client: httpx.Client, key: str, start: int) -> None:
            for attempt in range(20):
                replica = replicas[(start + attempt) % 2]
                try:
                    response = client.post(replica.url + "/v1/quotes", json=QUOTE, headers={
                        "Authorization": f"Bearer {api_key}", "Idempotency-Key": key})
                except httpx.TransportError:
                    with lock:
                        seen["transport_error"] += 1
                    continue
                with lock:
                    seen[str(response.status_code)] += 1
                    if response.is_success:
                        answers.setdefault(key, set()).add(response.json()["id"])
                        if response.headers.get("idempotent-replayed") == "true":
                            seen["replayed"] += 1
                        return
                time.sleep(0.05)

        def client_loop() -> None:
            with httpx.Client(timeout=15) as client:
                while time.monotonic() < stop_at:
                    i = next(keys)
                    create_with_retries(client, f"kill-{i}", i)

        killer = threading.Timer(KILL_RUN_S / 3, first.kill9)
        killer.start()
        _run_threads(4, client_loop)
        killer.join()
        assert first.process.poll() is not None  # it really died

    assert seen["transport_error"] > 0, seen  # clients met the dead replica
    assert set(seen) <= {"201", "transport_error", "replayed"}, seen
    stored = _stored(url, "kill-")
    print(f"replica kill: {dict(seen)}; keys answered {len(answers)}; rows {len(stored)}")
    assert len(answers) > 50, seen
    problems: list[Any] = []
    for key, ids in answers.items():
        if len(ids) != 1 or stored.get(key) != list(ids):
            problems.append((key, ids, stored.get(key)))
    assert problems == [], problems[:5]
    # No row without an acknowledged key: every attempt was retried until it was answered.
    assert sorted(stored) == sorted(answers)
