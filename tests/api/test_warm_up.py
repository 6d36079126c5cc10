"""The start-up warm-up's promises: /readyz is 503 `warming-up` until it is done, the
replica becomes ready, and the requests it sends itself are neither counted nor logged."""

from __future__ import annotations

import time

import httpx

from tests.factories import seeded_database_with_key
from tests.live_server import STARTUP_WAIT_S, server_process


def test_a_replica_is_ready_only_once_warm_and_its_warm_up_is_not_counted(tmp_path) -> None:  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path}/warm.sqlite3"
    seeded_database_with_key(url, name="warm", scopes=["catalog:read"])
    env = {"CQ_DATABASE_URL": url, "CQ_SEARCH_WORKERS": "1", "CQ_WARM_UP": "1",
           "CQ_LOG_LEVEL": "info"}
    log = tmp_path / "server.log"
    with server_process(env, log_path=str(log)) as server:  # ready_path: /livez
        statuses = []
        deadline = time.monotonic() + STARTUP_WAIT_S  # the warm-up itself gives up at 60 s
        while time.monotonic() < deadline:
            answer = httpx.get(f"{server.url}/readyz", timeout=5)
            statuses.append(answer.status_code)
            if answer.status_code == 200:
                break
            assert answer.status_code == 503
            assert answer.json()["type"].endswith("/warming-up")
            assert answer.headers["retry-after"] == "1"
            time.sleep(0.05)
        assert statuses[-1] == 200, statuses
        metrics = httpx.get(f"{server.url}/metrics", timeout=5).text
    counted = [line for line in metrics.splitlines()
               if line.startswith("computequote_http_requests_total{")]
    assert not any("parallelism-plans" in line or "/v1/estimates" in line for line in counted)
    assert any('route="/readyz"' in line for line in counted)  # the probes are counted
    lines = log.read_text().splitlines()
    assert any('"message": "warm-up done in' in line for line in lines), lines[-5:]
    access = [line for line in lines if '"message": "request"' in line]
    assert access  # the access log is on, and the probes are in it
    assert not any("/v1/" in line for line in access)
