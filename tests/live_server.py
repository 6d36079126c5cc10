"""A real uvicorn server in a background thread, for tests that need concurrent HTTP clients
on separate database connections."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

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


FORK_SERVERS = False
"""Start ``server_process`` replicas of the service's app by forking them from one process
that imported it already (``tests/forkserver.py``) instead of a fresh interpreter each.
tests/conftest.py turns it on for the suite; benchmarks that import this module outside
pytest get fresh interpreters."""

REPO_ROOT = Path(__file__).resolve().parents[1]


class ProcessHandle(Protocol):
    """What the tests use of a replica's process (``subprocess.Popen``'s names)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, sig: int) -> None: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...


class ForkedProcess:
    """A replica forked by the fork server: ``Popen``'s interface, its exit status read from
    the fork server (the replica is that process's child, not this one's)."""

    def __init__(self, server: _ForkServer, pid: int) -> None:
        self._server, self.pid = server, pid

    @property
    def returncode(self) -> int | None:
        return self._server.exit_code(self.pid)

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        code = self._server.wait_exit(self.pid, timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"forked replica {self.pid}", timeout or 0.0)
        return code

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):  # ended; its exit line is on the way
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class _ForkServer:
    """This test process's ``tests/forkserver.py``, started at the first forked replica."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.forkserver"], cwd=REPO_ROOT,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=dict(os.environ))
        self._lock = threading.Lock()
        self._started: queue.Queue[int | None] = queue.Queue()
        self._exits: dict[int, int] = {}
        self._ended = threading.Condition()
        self._gone = False
        threading.Thread(target=self._read, daemon=True, name="forkserver-reader").start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            what, *fields = raw.decode().split()
            if what == "pid":
                self._started.put(int(fields[0]))
            elif what == "exit":
                with self._ended:
                    self._exits[int(fields[0])] = int(fields[1])
                    self._ended.notify_all()
        with self._ended:
            self._gone = True
            self._ended.notify_all()
        self._started.put(None)

    def spawn(self, args: list[str], env: dict[str, str], log_path: str) -> ForkedProcess:
        request = {"args": args, "env": env, "cwd": os.getcwd(), "log": log_path}
        with self._lock:
            if self._gone or self.process.stdin is None:
                raise RuntimeError("the fork server has ended")
            self.process.stdin.write((json.dumps(request) + "\n").encode())
            self.process.stdin.flush()
            pid = self._started.get(timeout=STARTUP_WAIT_S)
        if pid is None:
            raise RuntimeError("the fork server ended before forking a replica")
        return ForkedProcess(self, pid)

    def exit_code(self, pid: int) -> int | None:
        with self._ended:
            if pid in self._exits:
                return self._exits[pid]
            if self._gone and not _exists(pid):
                return -signal.SIGKILL  # its parent died (and killed it): status unknown
            return None

    def wait_exit(self, pid: int, timeout: float | None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._ended:
            while True:
                code = self.exit_code(pid)
                if code is not None:
                    return code
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._ended.wait(0.5 if left is None else min(left, 0.5))

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()  # the fork server kills the replicas left and exits
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


_fork_server: _ForkServer | None = None
_fork_lock = threading.Lock()


def _forked(args: list[str], env: dict[str, str], log_path: str) -> ForkedProcess:
    global _fork_server
    with _fork_lock:
        if _fork_server is None or _fork_server.process.poll() is not None:
            _fork_server = _ForkServer()
            atexit.register(_fork_server.close)
        server = _fork_server
    return server.spawn(args, env, log_path)


@contextmanager
def server_process(env: dict[str, str], *, app: str = "service.main:create_app",
                   factory: bool = True, ready_path: str = "/livez", port: int | None = None,
                   log_path: str | None = None,
                   extra_args: tuple[str, ...] = ()) -> Iterator[ServerProcess]:
    """A real uvicorn server in its own process (one event loop, as each replica runs), for
    load benchmarks and for faults that kill a replica. Stops it (kill -9 if need be).

    Under the suite (``FORK_SERVERS``) the service's replicas are forked from the fork
    server, which has the modules imported already; the command line, environment and
    working directory are the same as the subprocess's."""
    port = port or free_port()
    args = [*(["--factory"] if factory else []), app, "--no-server-header",
            "--host", "127.0.0.1", "--port", str(port), "--no-access-log",
            "--log-level", "warning", *extra_args]
    command = [sys.executable, "-m", "uvicorn", *args]
    process: ProcessHandle
    log = None
    if FORK_SERVERS and app == "service.main:create_app":
        process = _forked(args, {**os.environ, **env}, log_path or os.devnull)
    else:
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
        if log is not None:
            log.close()


@dataclass
class ServerProcess:
    url: str
    process: ProcessHandle

    def kill9(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait()
