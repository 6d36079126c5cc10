"""Search workers never outlive their server (issue 14, issue 18): after a SIGTERM or a
SIGKILL of the server, every child process it started is gone within a few seconds."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from service.api.schemas.plans import PLAN_SEARCH_EXAMPLE
from service.catalog.migrate import migrate_and_seed
from tests.live_server import server_process


def _children(pid: int) -> set[int]:
    """Every descendant of ``pid``, from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry.name)] = int(fields[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier}
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_no_worker_outlives_the_server(tmp_path: Path, how: signal.Signals) -> None:
    url = f"sqlite:///{tmp_path}/workers.sqlite3"
    migrate_and_seed(url)
    env = {"CQ_DATABASE_URL": url, "CQ_SEARCH_WORKERS": "2", "CQ_LOG_LEVEL": "warning"}
    with server_process(env) as server:
        answer = httpx.post(f"{server.url}/v1/parallelism-plans", json=PLAN_SEARCH_EXAMPLE,
                            timeout=60)
        assert answer.status_code == 200, answer.text[:300]
        children = _children(server.process.pid)
        assert len(children) >= 2  # the two search workers (and the resource tracker)
        os.kill(server.process.pid, how)
        server.process.wait(timeout=30)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(p) for p in children):
        time.sleep(0.1)
    left = sorted(p for p in children if _alive(p))
    assert left == [], f"{len(left)} of {len(children)} children outlived a {how.name}"
