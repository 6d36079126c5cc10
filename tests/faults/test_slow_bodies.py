"""Slow request bodies cannot take a replica down (issue 14, defect 2): 64 connections that
trickle a body hold no in-flight slot while ordinary requests keep getting answers, and each
slow body is answered 408 once CQ_BODY_TIMEOUT_S has passed."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import httpx

from service.api.schemas.estimate import ESTIMATE_EXAMPLE
from tests.databases import migrate_and_seed
from tests.live_server import server_process

SLOW_CLIENTS = 64


def _trickle(port: int, answers: list[bytes], stop_at: float) -> None:
    """Headers at once, then one byte of a 1,000-byte body every 0.25 s."""
    with socket.create_connection(("127.0.0.1", port), timeout=15) as sock:
        sock.sendall(b"POST /v1/estimates HTTP/1.1\r\nHost: test\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
        sock.settimeout(0.25)
        answer = b""
        while time.monotonic() < stop_at:
            try:
                sock.sendall(b" ")
                chunk = sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                break
            if not chunk:
                break
            answer += chunk
            if b"\r\n\r\n" in answer:
                break
        answers.append(answer)


def test_slow_bodies_hold_no_slot_and_time_out(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/slow.sqlite3"
    migrate_and_seed(url)
    env = {"CQ_DATABASE_URL": url, "CQ_SEARCH_WORKERS": "0", "CQ_MAX_IN_FLIGHT": "8",
           "CQ_BODY_TIMEOUT_S": "3", "CQ_LOG_LEVEL": "warning"}
    with server_process(env) as server:
        port = int(server.url.rsplit(":", 1)[1])
        answers: list[bytes] = []
        stop_at = time.monotonic() + 12
        slow = [threading.Thread(target=_trickle, args=(port, answers, stop_at))
                for _ in range(SLOW_CLIENTS)]
        for thread in slow:
            thread.start()
        time.sleep(0.5)  # every slow client has sent its headers and is trickling
        statuses = []
        with httpx.Client(base_url=server.url, timeout=10) as client:
            assert "server" not in client.get("/livez").headers  # no banner (issue 14)
            for _ in range(10):
                statuses.append(client.post("/v1/estimates", json=ESTIMATE_EXAMPLE).status_code)
                statuses.append(client.get("/v1/models").status_code)
        for thread in slow:
            thread.join()
    assert statuses == [200] * 20, statuses
    timed_out = [a for a in answers if a.startswith(b"HTTP/1.1 408")]
    print(f"slow bodies: {SLOW_CLIENTS} trickling, 20 ordinary requests all 200, "
          f"{len(timed_out)} answered 408")
    assert len(timed_out) == SLOW_CLIENTS
