"""Start-up to ``/readyz``: ``python -m benchmarks.startup``.

What ``make run`` does, timed from the first command to the first ``/readyz`` 200 (issue 38's
targets: at most 10 s on an existing data dir, 20 s on a fresh one):

1. ``python -m service.catalog.migrate`` (Alembic to the head, then the catalogue seed);
2. ``python -m compileall -q service migrations``;
3. ``uvicorn --factory service.main:create_app`` (two search workers, the warm-up on), polled
   every 50 ms until ``/readyz`` answers 200.

``--rounds`` alternates a fresh data dir (a new SQLite file) and the existing one (the same
file again). Each phase is printed in wall seconds and in the CPU seconds of the processes it
ran (children included), so a busy machine shows as wall well above CPU. Also printed: the
migrate phase's own split (``--split``: interpreter and imports, Alembic, seed).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.live_server import free_port

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
POLL_S = 0.05
READY_WAIT_S = 180.0


@dataclass
class Phases:
    migrate_s: float
    compile_s: float
    ready_s: float
    cpu_s: float

    @property
    def total_s(self) -> float:
        return self.migrate_s + self.compile_s + self.ready_s


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, cwd=ROOT, env=env, check=True,  # noqa: S603 - our commands
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def _serve_until_ready(env: dict[str, str]) -> tuple[float, float]:
    """Seconds from starting uvicorn to the first /readyz 200, and the server's CPU seconds
    up to then (its workers included: read from /proc before it is stopped)."""
    port = free_port()
    started = time.perf_counter()
    process = subprocess.Popen(  # noqa: S603 - our own command line
        [str(BIN / "uvicorn"), "--factory", "service.main:create_app", "--no-access-log",
         "--host", "127.0.0.1", "--port", str(port)],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
            while True:
                if process.poll() is not None:
                    raise RuntimeError("the server exited before it was ready")
                if time.perf_counter() - started > READY_WAIT_S:
                    raise RuntimeError("the server was not ready in time")
                try:
                    if client.get("/readyz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(POLL_S)
        ready_s = time.perf_counter() - started
        cpu_s = _tree_cpu_s(process.pid)
    finally:
        process.terminate()
        process.wait(timeout=30)
    return ready_s, cpu_s


def _tree_cpu_s(pid: int) -> float:
    """CPU seconds of ``pid`` and its living descendants (Linux /proc)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    pending = [pid]
    while pending:
        current = pending.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        pending += [int(c) for c in children]
    return total


def one_start(url: str) -> Phases:
    env = {**os.environ, "CQ_DATABASE_URL": url, "CQ_LOG_LEVEL": "warning",
           "CQ_SEARCH_WORKERS": "2"}
    before = _children_cpu_s()
    migrate_s = _run([sys.executable, "-m", "service.catalog.migrate"], env)
    compile_s = _run([sys.executable, "-m", "compileall", "-q", "service", "migrations"], env)
    ready_s, server_cpu_s = _serve_until_ready(env)
    return Phases(migrate_s, compile_s, ready_s, _children_cpu_s() - before + server_cpu_s)


def migrate_split(url: str) -> dict[str, float]:
    """Wall seconds of the migrate command's parts, each in a fresh interpreter."""
    env = {**os.environ, "CQ_DATABASE_URL": url, "CQ_LOG_LEVEL": "warning"}
    steps = {
        "interpreter + imports": "import service.catalog.migrate",
        "alembic upgrade (at head)": ("import service.catalog.migrate as m, "
                                      "service.settings as s; "
                                      "m.upgrade(s.Settings().resolved_database_url)"),
        "full migrate command": "import service.catalog.migrate as m; m.main([])",
    }
    return {name: _run([sys.executable, "-c", code], env) for name, code in steps.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--split", action="store_true")
    args = parser.parse_args(argv)
    results: dict[str, list[Phases]] = {"fresh": [], "existing": []}
    with tempfile.TemporaryDirectory() as folder:
        existing = f"sqlite:///{folder}/existing/cq.sqlite3"
        one_start(existing)  # the existing data dir: made once, then reused
        for round_ in range(args.rounds):
            fresh = f"sqlite:///{folder}/fresh-{round_}/cq.sqlite3"
            for kind, url in (("fresh", fresh), ("existing", existing)):
                phases = one_start(url)
                results[kind].append(phases)
                print(f"{kind:8} migrate {phases.migrate_s:5.2f} s  compileall "
                      f"{phases.compile_s:5.2f} s  server to /readyz {phases.ready_s:5.2f} s  "
                      f"total {phases.total_s:5.2f} s wall, {phases.cpu_s:5.2f} s CPU",
                      flush=True)
        if args.split:
            for name, seconds in migrate_split(existing).items():
                print(f"  existing data dir, {name}: {seconds:.2f} s wall")
    load = os.getloadavg()[0]
    for kind, runs in results.items():
        median_s = statistics.median(r.total_s for r in runs)
        worst_s = max(r.total_s for r in runs)
        print(f"{kind} data dir: /readyz after a median {median_s:.2f} s wall (max "
              f"{worst_s:.2f} s), "
              f"{statistics.median(r.cpu_s for r in runs):.2f} s CPU, over {len(runs)} starts")
    print(f"load average at the end: {load:.1f} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
