"""A fork server for the tests' replica processes (``tests/live_server.py``).

Starting a replica as ``python -m uvicorn --factory service.main:create_app`` costs the
interpreter's start and the imports of uvicorn, FastAPI, SQLAlchemy, pydantic, numpy and the
service itself: about 2.5 s of CPU, 15 s of wall time on a loaded 2-core machine, paid about
fifty times a run (killed replicas, shutdown faults). This process pays the imports once and
forks a child per replica; the child sets the environment and working directory it was
given, points its stdout and stderr at the log, and runs uvicorn's own command line
(``uvicorn.main.main``) with the arguments it was given, so the replica is configured,
started, served and stopped exactly as the subprocess was. Only modules are imported here:
no app, no settings, no database connection, no thread and no pool exist before the fork
(``create_app`` runs in the child, from the environment the test passed).

A replica is a real process of its own: SIGKILL ends it with whatever it had not written,
as for the subprocess. It is this process's child, not the test's: the exit status comes
back over stdout.

Protocol (one line each way, JSON requests on stdin): ``{"args": [...], "env": {...},
"cwd": "...", "log": "..."}`` -> ``pid N``; when a child ends: ``exit N CODE`` (CODE as
``subprocess`` gives it: negative for a signal). At EOF on stdin the children left are
killed and the server exits.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import select
import signal
import sys

PRELOADED = ("uvicorn.main", "uvicorn.config", "uvicorn.server", "uvicorn.lifespan.on",
             "uvicorn.loops.auto", "uvloop", "uvicorn.protocols.http.h11_impl",
             "uvicorn.protocols.http.httptools_impl", "uvicorn.protocols.websockets.auto",
             "service.main", "service.api.connections", "service.catalog.migrate")
"""Imported once here, before any fork: module code only (none of them reads the
environment, opens a connection or starts a thread at import)."""


def _child(request: dict[str, object], wakeup: tuple[int, int]) -> None:
    """In the forked child: become the replica ``python -m uvicorn ARGS`` would be."""
    code: object = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in wakeup:
            os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        log = os.open(str(request["log"]), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(null)
        os.close(log)
        os.chdir(str(request["cwd"]))
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in dict(request["env"]).items()})  # type: ignore[call-overload]
        args = [str(a) for a in request["args"]]  # type: ignore[attr-defined]
        sys.argv = [sys.argv[0], *args]
        import uvicorn.main

        uvicorn.main.main(args, prog_name="uvicorn")
        code = 0
    except SystemExit as exit_:
        code = exit_.code
    except BaseException:  # reported in the replica's log, as python would report it
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code if isinstance(code, int) else (0 if code is None else 1))


def main() -> None:
    # What every replica imports before it serves (the factory's module pulls in the rest).
    for name in PRELOADED:
        with contextlib.suppress(ImportError):  # an optional one (uvloop, httptools)
            importlib.import_module(name)
    # A fork copies only the forking thread: a thread started at import would be missing (and
    # any lock it held, held for ever) in every replica.
    import threading

    if threading.active_count() != 1:
        raise SystemExit(f"an import started threads: {threading.enumerate()}")

    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_write)
    children: set[int] = set()
    pending = b""

    def say(line: str) -> None:
        os.write(1, (line + "\n").encode())

    def reap() -> None:
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            children.discard(pid)
            say(f"exit {pid} {os.waitstatus_to_exitcode(status)}")

    while True:
        try:
            ready, _, _ = select.select([0, wake_read], [], [])
        except InterruptedError:  # pragma: no cover - PEP 475 retries select itself
            continue
        if wake_read in ready:
            try:
                while os.read(wake_read, 512):
                    pass
            except BlockingIOError:
                pass
            reap()
        if 0 not in ready:
            continue
        data = os.read(0, 65536)
        if not data:
            break
        pending += data
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            request = json.loads(line)
            pid = os.fork()
            if pid == 0:
                _child(request, (wake_read, wake_write))
            children.add(pid)
            say(f"pid {pid}")
        reap()
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


if __name__ == "__main__":
    main()
