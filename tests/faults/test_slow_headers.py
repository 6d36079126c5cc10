"""Slow request heads and connection floods cannot hold a replica (issue 36, medium 3).

Before: uvicorn bounded neither the time a request head may take nor the connections one
address may hold (3,000 connections trickling headers were held for 25 s, bounded only by the
file-descriptor limit). Now, against a real server process run as the image runs it
(``--http service.api.connections:...``), for both of uvicorn's HTTP implementations:

- a connection trickling its head one byte every 0.5 s is answered 408 and closed once
  CQ_HEAD_TIMEOUT_S has passed, while another client is served;
- a kept-alive connection idle for longer than the head timeout still serves its next
  request (the head timer runs from the next request's first byte);
- one connection more than CQ_MAX_CONNECTIONS_PER_CLIENT from one address is answered 503
  with Retry-After and closed; once the others close, that address is served again.

The only timing asserted is a 2 s timer against a margin of 10 s.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from service.api.connections import HTTP_PROTOCOL
from tests.databases import migrate_and_seed
from tests.live_server import ServerProcess, server_process

HEAD_TIMEOUT_S = 2.0
MARGIN_S = 10.0
PER_CLIENT = 8
TRICKLERS = 4
GIVE_UP_S = 30.0
"""A trickler stops here; before the fix every one was still open then."""
PROTOCOLS = {"httptools": "service.api.connections:GuardedHttpToolsProtocol",
             "h11": "service.api.connections:GuardedH11Protocol"}
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", params=sorted(PROTOCOLS))
def server(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    url = f"sqlite:///{tmp_path_factory.mktemp('heads')}/heads.sqlite3"
    migrate_and_seed(url)
    env = {"CQ_DATABASE_URL": url, "CQ_SEARCH_WORKERS": "0", "CQ_LOG_LEVEL": "warning",
           "CQ_HEAD_TIMEOUT_S": str(HEAD_TIMEOUT_S),
           "CQ_MAX_CONNECTIONS_PER_CLIENT": str(PER_CLIENT)}
    with server_process(env, extra_args=("--http", PROTOCOLS[request.param])) as running:
        yield running


def _port(server: ServerProcess) -> int:
    return int(server.url.rsplit(":", 1)[1])


def _trickle(port: int, results: list[tuple[float, bytes]]) -> None:
    """One byte of an endless header every 0.5 s until the server closes the connection;
    records how long it stayed open and what the server answered."""
    head = b"GET /livez HTTP/1.1\r\nHost: test\r\nX-Slow: " + b"a" * 1000
    started = time.monotonic()
    answer = b""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.settimeout(0.5)
        for byte in head:
            if time.monotonic() - started > GIVE_UP_S:
                break
            try:
                sock.sendall(bytes([byte]))
                chunk = sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                break
            if not chunk:
                break
            answer += chunk
    results.append((time.monotonic() - started, answer))


def _answer(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes (or 5 s of silence)."""
    sock.settimeout(5)
    answer = b""
    with contextlib.suppress(OSError):
        while chunk := sock.recv(4096):
            answer += chunk
    return answer


def test_a_trickled_head_is_answered_408_within_the_head_timeout_while_others_are_served(
        server: ServerProcess) -> None:
    results: list[tuple[float, bytes]] = []
    slow = [threading.Thread(target=_trickle, args=(_port(server), results))
            for _ in range(TRICKLERS)]
    for thread in slow:
        thread.start()
    statuses: list[int] = []
    with httpx.Client(base_url=server.url, timeout=10) as client:
        while any(thread.is_alive() for thread in slow):
            statuses.append(client.get("/livez").status_code)
            statuses.append(client.get("/v1/models").status_code)
            time.sleep(0.1)
    for thread in slow:
        thread.join()
    held = sorted(seconds for seconds, _ in results)
    print(f"slow heads: {TRICKLERS} trickling, held {held[0]:.1f}-{held[-1]:.1f} s "
          f"(CQ_HEAD_TIMEOUT_S={HEAD_TIMEOUT_S:g}); {len(statuses)} ordinary requests, "
          f"{sum(s != 200 for s in statuses)} not 200")
    assert statuses
    assert set(statuses) == {200}
    assert len(results) == TRICKLERS
    for seconds, answer in results:
        assert HEAD_TIMEOUT_S - 0.5 <= seconds < HEAD_TIMEOUT_S + MARGIN_S, held
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
        problem = json.loads(answer.split(b"\r\n\r\n", 1)[1])
        assert problem["type"].endswith("/request-timeout")
        assert "CQ_HEAD_TIMEOUT_S" in problem["detail"]


def test_a_kept_alive_connection_idle_past_the_head_timeout_still_serves(
        server: ServerProcess) -> None:
    request = b"GET /livez HTTP/1.1\r\nHost: test\r\n\r\n"
    with socket.create_connection(("127.0.0.1", _port(server)), timeout=10) as sock:
        for _ in range(2):
            sock.sendall(request)
            answer = b""
            while b"\r\n\r\n" not in answer or not answer.endswith(b"}"):
                chunk = sock.recv(4096)
                assert chunk, answer
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
            # Longer than the head timeout, shorter than uvicorn's 5 s keep-alive.
            time.sleep(HEAD_TIMEOUT_S + 1.0)


def test_a_connection_over_the_per_client_limit_is_refused_503(server: ServerProcess) -> None:
    port = _port(server)
    held = [socket.create_connection(("127.0.0.1", port), timeout=5)
            for _ in range(PER_CLIENT)]
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as extra:
            answer = _answer(extra)
    finally:
        for sock in held:
            sock.close()
    assert answer.startswith(b"HTTP/1.1 503 "), answer[:200]
    head, body = answer.split(b"\r\n\r\n", 1)
    assert re.search(rb"(?im)^retry-after: 1\r?$", head), head
    problem = json.loads(body)
    assert problem["type"].endswith("/too-many-connections")
    assert f"{PER_CLIENT} open connections" in problem["detail"]
    assert "CQ_MAX_CONNECTIONS_PER_CLIENT" in problem["detail"]
    # The closed connections no longer count: the address is served again.
    deadline = time.monotonic() + MARGIN_S
    while True:
        try:
            if httpx.get(server.url + "/livez", timeout=5).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "the address was not served again"
        time.sleep(0.1)
    with httpx.Client(base_url=server.url, timeout=5,
                      limits=httpx.Limits(max_connections=PER_CLIENT)) as client:
        assert client.get("/v1/models").status_code == 200


@pytest.mark.parametrize("where", ["Makefile", "deploy/Dockerfile"])
def test_the_server_runs_with_the_bounded_protocol(where: str) -> None:
    """``make run``, the image and ``cq serve`` name the protocol class: without ``--http``
    uvicorn's own protocol runs, with neither bound."""
    text = (ROOT / where).read_text()
    assert re.search(r'--http["\s,]+"?service\.api\.connections:HttpProtocol', text), where
    assert HTTP_PROTOCOL == "service.api.connections:HttpProtocol"
    serve = (ROOT / "service/cli/server.py").read_text()
    assert "http=HTTP_PROTOCOL" in serve
