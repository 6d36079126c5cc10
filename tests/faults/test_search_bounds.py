"""Every search path is bounded (issue 14, defect 3): quotes, verify, requote and budget plans
share one deadline and refuse (503 search-deadline, nothing stored) instead of answering from
part of the space; a search whose client has gone stops; a worker that would grow past
CQ_SEARCH_MEMORY_BYTES gets MemoryError, not the OOM killer.

No assertion here depends on the machine's speed: the deadlines are far below any machine's
time for the searches asked, and the abandoned-search test compares CPU time burnt while a
search runs with CPU time burnt after its client has gone, in the same run."""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from service.api import workers
from service.catalog.keys import create_key
from service.settings import Settings
from tests.databases import migrate_and_seed
from tests.live_server import live_server

# 64 (accelerator, GPU count) pairs of full 405B searches: seconds on any machine.
MANY_PAIRS: dict[str, Any] = {
    "model": {"preset": "llama3.1-405b"},
    "training": {"seq_len": 8192, "global_batch_seqs": 2048, "tokens": 15.6e12},
    "clusters": [{"accelerator": "h100-sxm5-80gb",
                  "num_gpus_range": {"start": 512, "stop": 16384, "step": 512}},
                 {"accelerator": "h200-sxm-141gb",
                  "num_gpus_range": {"start": 512, "stop": 16384, "step": 512}}],
}
TINY_DEADLINE_S = 0.05


def _owner(client: TestClient, db_session: Session) -> dict[str, str]:
    _, key = create_key(db_session, name=f"bounds-{uuid.uuid4().hex[:8]}",
                        scopes=["quotes:write"],
                        pepper=Settings().api_key_pepper.get_secret_value())
    return {"Authorization": f"Bearer {key}"}


def _deadline(client: TestClient, seconds: float) -> None:
    app: Any = client.app
    app.state.settings = app.state.settings.model_copy(update={"search_deadline_s": seconds})


def _assert_deadline_problem(response: Any) -> None:
    assert response.status_code == 503, response.text[:300]
    problem = response.json()
    assert problem["type"].endswith("search-deadline")
    assert "CQ_SEARCH_DEADLINE_S" in problem["detail"]
    assert problem["deadline_s"] == TINY_DEADLINE_S
    # A safety net on the wall clock says when to try again (issue 38; stop 48's CI saw a
    # calibration refused without it, which the fuzz test then took for a server error).
    assert int(response.headers["retry-after"]) >= 1


def test_a_quote_past_the_deadline_is_refused_stores_nothing_and_keeps_its_key(
    client: TestClient, db_session: Session
) -> None:
    owner = _owner(client, db_session)
    body = {"workload": {"optimise": {**MANY_PAIRS}}, "providers": ["aws"],
            "terms": ["on_demand"]}
    headers = {**owner, "Idempotency-Key": "deadline-1"}
    _deadline(client, TINY_DEADLINE_S)
    _assert_deadline_problem(client.post("/v1/quotes", json=body, headers=headers))
    assert client.get("/v1/quotes", headers=owner).json()["items"] == []
    plans = client.post("/v1/budget-plans", json={
        **MANY_PAIRS, "budget": {"amount": "1000000.00", "currency": "USD"}})
    _assert_deadline_problem(plans)
    # The refusal did not spend the key: with time enough, the same key makes the quote.
    _deadline(client, 600.0)
    small = {"workload": {"optimise": {**MANY_PAIRS, "clusters": [
        {"accelerator": "h100-sxm5-80gb", "num_gpus": 1024}]}}, "providers": ["aws"],
        "terms": ["on_demand"]}
    made = client.post("/v1/quotes", json=small, headers={**owner,
                                                         "Idempotency-Key": "deadline-2"})
    assert made.status_code == 201, made.text[:300]
    quote_id = made.json()["id"]
    # Verify under a deadline it cannot meet is refused; it never reports a mismatch.
    _deadline(client, 1e-9)
    verify = client.post(f"/v1/quotes/{quote_id}/verify", headers=owner)
    assert verify.status_code == 503
    assert verify.json()["type"].endswith("search-deadline")
    _deadline(client, 600.0)
    assert client.post(f"/v1/quotes/{quote_id}/verify", headers=owner).json()["matches"]


def _children_cpu_s() -> float:
    """CPU seconds (user + system) of this process's live children: the search workers."""
    me = os.getpid()
    total = 0
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me:  # ppid
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


LONG_PAIRS: dict[str, Any] = {**MANY_PAIRS, "clusters": [
    {"accelerator": accelerator, "num_gpus_range": {"start": 64, "stop": 16384, "step": 64}}
    for accelerator in ("h100-sxm5-80gb", "h200-sxm-141gb")]}
"""512 (accelerator, GPU count) searches: minutes of work on any machine we know (64 of
them took 1.6 s on the 2-core CI machine), so the client can leave while it runs."""


def test_a_search_whose_client_has_gone_stops(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/gone.sqlite3"
    migrate_and_seed(url)
    body = json.dumps({**LONG_PAIRS, "budget": {"amount": "1000000.00",
                                                 "currency": "USD"}}).encode()
    settings = Settings(database_url=url, search_workers=2, search_deadline_s=300.0,
                        search_max_candidates=1_000_000_000)
    with live_server(settings) as base:
        host, port = base.removeprefix("http://").split(":")
        sock = socket.create_connection((host, int(port)))
        sock.sendall(b"POST /v1/budget-plans HTTP/1.1\r\nHost: t\r\n"
                     b"Content-Type: application/json\r\n"
                     + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        # Searching: the workers burn CPU. Wait for 0.5 s of it however loaded the machine
        # is (another test process may share the cores), and take the rate it came at.
        start, began = _children_cpu_s(), time.monotonic()
        while (busy_s := _children_cpu_s() - start) < 0.5:
            assert time.monotonic() - began < 60.0, busy_s  # the request really searches
            time.sleep(0.05)
        busy_rate = busy_s / (time.monotonic() - began)
        sock.close()  # the client goes
        # One pair's search may still finish; then nothing more starts.
        time.sleep(1.5)
        start, began = _children_cpu_s(), time.monotonic()
        time.sleep(2.0)
        after_rate = (_children_cpu_s() - start) / (time.monotonic() - began)
    assert after_rate < busy_rate / 5, (busy_rate, after_rate)


def _allocate(size_bytes: int) -> int:
    return len(bytearray(size_bytes))


def test_a_worker_past_its_memory_cap_gets_memory_error_and_the_pool_lives_on() -> None:
    before = workers._memory_limit_bytes
    try:
        workers.set_memory_limit(1024**3)
        with pytest.raises(MemoryError, match="CQ_SEARCH_MEMORY_BYTES"):
            workers.run_cpu_bound(1, _allocate, 3 * 1024**3, timeout_s=60.0)
        # The same pool answers the next call.
        assert workers.run_cpu_bound(1, _allocate, 1024**2, timeout_s=60.0) == 1024**2
    finally:
        workers.set_memory_limit(before)
