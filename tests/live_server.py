"""A real uvicorn server in a background thread, for tests that need concurrent HTTP clients
on separate database connections."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx
import uvicorn

from service.main import create_app, dispose
from service.settings import Settings

STARTUP_WAIT_S = 180.0
"""How long a test waits for a server to start: a wait, not a speed test, so generous enough
for a loaded 2-core machine (a replica took 27 s to start there with five other processes
busy)."""


@contextmanager
def live_server(settings: Settings) -> Iterator[str]:
    """Yields the base URL of a server running ``create_app(settings)``."""
    app = create_app(settings)
    # A browser's keep-alive connections would hold a graceful shutdown open: 2 s at most.
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                            lifespan="off", timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + STARTUP_WAIT_S
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        dispose(app)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def server_process(env: dict[str, str], *, app: str = "service.main:create_app",
                   factory: bool = True, ready_path: str = "/livez", port: int | None = None,
                   log_path: str | None = None,
                   extra_args: tuple[str, ...] = ()) -> Iterator[ServerProcess]:
    """A real uvicorn server in its own process (one event loop, as each replica runs), for
    load benchmarks and for faults that kill a replica. Stops it (kill -9 if need be)."""
    port = port or free_port()
    command = [sys.executable, "-m", "uvicorn", *(["--factory"] if factory else []), app,
               "--no-server-header",
               "--host", "127.0.0.1", "--port", str(port), "--no-access-log",
               "--log-level", "warning", *extra_args]
    log = open(log_path or os.devnull, "ab")  # noqa: SIM115 - closed below
    process = subprocess.Popen(command, env={**os.environ, **env}, stdout=log,  # noqa: S603
                               stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_WAIT_S
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"server exited with {process.returncode}: {command}")
            try:
                if httpx.get(url + ready_path, timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the server process did not start")
            time.sleep(0.1)
        yield ServerProcess(url=url, process=process)
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        log.close()


@dataclass
class ServerProcess:
    url: str
    process: subprocess.Popen[bytes]

    def kill9(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait()
