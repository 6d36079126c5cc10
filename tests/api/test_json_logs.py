"""Every log line a real server writes is one JSON object: ours, uvicorn's own (start-up, a
malformed request, shutdown) and, with tracing on, the console exporter's spans; a request's
line carries its request id and trace id. Started as ``make run`` and the image start it
(the uvicorn command) and as ``cq serve`` does."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.api.observability import UVICORN_LOG_CONFIG
from tests.factories import seeded_database_with_key
from tests.live_server import STARTUP_WAIT_S, free_port

LAUNCHERS = {
    # make run and deploy/Dockerfile's CMD (less --proxy-headers and the graceful timeout).
    "uvicorn": lambda port: [sys.executable, "-m", "uvicorn", "--factory",
                             "service.main:create_app", "--host", "127.0.0.1", "--port",
                             str(port), "--no-access-log", "--no-server-header",
                             "--log-config", str(UVICORN_LOG_CONFIG)],
    "cq serve": lambda port: [sys.executable, "-c", "from service.cli import main; main()",
                              "serve", "--host", "127.0.0.1", "--port", str(port)],
}


def _run(command: list[str], env: dict[str, str], log: Path, port: int) -> str:
    """Start the server, send a traced request and a malformed one, stop it; its request id."""
    url = f"http://127.0.0.1:{port}"
    with log.open("ab") as out:
        process = subprocess.Popen(command, env={**os.environ, **env},  # noqa: S603
                                   stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + STARTUP_WAIT_S
            while True:
                assert process.poll() is None, log.read_text()[-2000:]
                try:
                    if httpx.get(f"{url}/livez", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.1)
            answer = httpx.get(f"{url}/v1/accelerators/h100-sxm5-80gb", timeout=10,
                               headers={"X-Request-ID": "json-logs-1"})
            assert answer.status_code == 200
            with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
                raw.sendall(b"NOT HTTP AT ALL\r\n\r\n")
                raw.recv(1024)  # uvicorn answers 400 and logs a warning
        finally:
            process.terminate()
            process.wait(timeout=30)
    return "json-logs-1"


@pytest.fixture(scope="module")
def database_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('logs')}/logs.sqlite3"
    seeded_database_with_key(url, name="logs", scopes=["catalog:read"])
    return url


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_every_line_is_json_with_the_request_and_trace_ids(
    tmp_path: Path, database_url: str, launcher: str
) -> None:
    url = database_url
    env = {"CQ_DATABASE_URL": url, "CQ_SEARCH_WORKERS": "0", "CQ_WARM_UP": "0",
           "CQ_LOG_LEVEL": "info", "OTEL_TRACES_EXPORTER": "console",
           "OTEL_SERVICE_NAME": "computequote-test"}
    log = tmp_path / "server.log"
    port = free_port()
    request_id = _run(LAUNCHERS[launcher](port), env, log, port)

    lines = [line for line in log.read_text().splitlines() if line.strip()]
    entries: list[dict[str, Any]] = []
    for line in lines:
        entry = json.loads(line)  # fails on any plain-text line
        assert isinstance(entry, dict), line
        entries.append(entry)
    logs = [e for e in entries if "logger" in e]
    spans = [e for e in entries if "context" in e and "name" in e]
    assert len(logs) + len(spans) == len(entries), lines

    uvicorn = {e["message"].split(" [")[0].split(" on ")[0]: e for e in logs
               if e["logger"] == "uvicorn.error"}
    for message in ("Started server process", "Waiting for application startup.",
                    "Application startup complete.", "Uvicorn running",
                    "Invalid HTTP request received.", "Shutting down",
                    "Finished server process"):
        assert message in uvicorn, sorted(uvicorn)
        assert set(uvicorn[message]) >= {"ts", "level", "logger", "message"}
    assert uvicorn["Invalid HTTP request received."]["level"] == "warning"
    assert uvicorn["Started server process"]["level"] == "info"

    access = next(e for e in logs if e["logger"] == "service.access"
                  and e.get("request_id") == request_id)
    assert access["route"] == "/v1/accelerators/{accelerator_id}"
    assert len(access["trace_id"]) == 32
    int(access["trace_id"], 16)
    server = next(s for s in spans if s["name"] == "GET /v1/accelerators/{accelerator_id}")
    assert server["context"]["trace_id"] == f"0x{access['trace_id']}"
    assert server["resource"]["attributes"]["service.name"] == "computequote-test"


def _json_lines(text: str) -> list[dict[str, Any]]:
    entries = [json.loads(line) for line in text.splitlines() if line.strip()]
    assert all(isinstance(e, dict) and {"ts", "level", "logger", "message"} <= set(e)
               for e in entries), text
    return entries


def test_a_factory_that_fails_still_logs_json(tmp_path: Path) -> None:
    """uvicorn logs "Error loading ASGI app factory" before the application exists, so only
    the log config, not ``configure_logging``, can make that line JSON."""
    command = [*LAUNCHERS["uvicorn"](free_port())]
    command[command.index("service.main:create_app")] = "service.main:no_such_factory"
    done = subprocess.run(command, capture_output=True, text=True, timeout=STARTUP_WAIT_S,  # noqa: S603
                          env={**os.environ, "CQ_WARM_UP": "0"}, check=False)
    assert done.returncode != 0
    entries = _json_lines(done.stdout + done.stderr)
    error = next(e for e in entries if e["level"] == "error")
    assert "no_such_factory" in error["message"], entries


def test_the_workers_supervisor_logs_json(tmp_path: Path, database_url: str) -> None:
    """With ``--workers 2`` the parent process logs before any worker has built the app."""
    port = free_port()
    command = [*LAUNCHERS["uvicorn"](port), "--workers", "2"]
    env = {"CQ_DATABASE_URL": database_url, "CQ_SEARCH_WORKERS": "0", "CQ_WARM_UP": "0"}
    log = tmp_path / "server.log"
    _run(command, env, log, port)
    entries = _json_lines(log.read_text())
    messages = [e["message"] for e in entries]
    assert any(m.startswith("Started parent process") for m in messages), messages
    assert any(m.startswith("Stopping parent process") for m in messages), messages


def test_a_line_goes_to_the_process_stream_not_a_captured_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The service's handlers write to the process's own standard streams. Bound at
    configuration to ``sys.stdout`` instead, a process whose first ``configure_logging`` ran
    under a captured stream (an in-process ``cq --local`` command under typer's CliRunner)
    wrote every later line to that closed stream as a "Logging error" traceback, and a test
    that saw one in ``cq``'s output failed or passed by which tests shared its worker; bound to
    the ``sys.stdout`` of the moment, a live server thread's lines landed in a ``cq --json``
    answer captured meanwhile."""
    import io
    import logging

    from service.api import observability

    process = io.StringIO()
    monkeypatch.setattr(sys, "__stdout__", process)
    first = io.StringIO()
    monkeypatch.setattr(sys, "stdout", first)
    handler = observability._json_handler("stdout")
    first.close()  # the capture ends, as CliRunner's does after its command
    another = io.StringIO()
    monkeypatch.setattr(sys, "stdout", another)  # another command's capture, meanwhile
    logger = logging.getLogger("tests.json_logs.stream")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("after the capture")
    finally:
        logger.removeHandler(handler)
    assert another.getvalue() == ""
    line = json.loads(process.getvalue())
    assert line["message"] == "after the capture"
    assert line["level"] == "warning"
