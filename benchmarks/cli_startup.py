"""How long ``cq`` takes to start: ``python -m benchmarks.cli_startup`` (``make bench-cli``).

Times ``cq --help`` and a remote command that fails fast (``cq offers`` against a closed port)
as fresh processes, ``--runs`` times each, and prints the minimum and the median wall time
(the minimum is the figure to compare on a shared machine: noise only ever adds). With
``--baseline DIR`` (a checkout of another commit, e.g. ``git archive HEAD~1 service | tar -x
-C /tmp/base``) both trees run interleaved, so the same load falls on each. Then it lists the
modules ``python -X importtime`` charges most to ``import service.cli`` and fails (exit 1) when
a heavy layer that ``--help`` never needs is imported (the database, pydantic, FastAPI, httpx).
Target: ``cq --help`` under 0.4 s (issue 16, issue 18).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {"cq --help": ["--help"],
            "cq offers (unreachable)": ["offers", "--api", "http://127.0.0.1:9"]}
HEAVY = ("sqlalchemy", "pydantic", "fastapi", "httpx", "alembic", "service.catalog.db",
         "service.settings", "rich.progress")
TARGET_S = 0.4


def run_once(tree: Path, args: list[str]) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one fresh ``cq`` process. CPU time is what the
    process itself spent, so it moves less than wall time when other work shares the CPUs."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "from service.cli import main; main()", *args],  # noqa: S603
                   cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def heavy_imports(tree: Path) -> list[str]:
    """The HEAVY modules that ``import service.cli`` loads (should be none)."""
    probe = ("import sys, service.cli; print(' '.join(m for m in " + repr(HEAVY)
             + " if m in sys.modules))")
    found = subprocess.run([sys.executable, "-c", probe], cwd=tree, capture_output=True,  # noqa: S603
                           text=True, check=True).stdout.split()
    return found


def import_profile(tree: Path, top: int) -> list[tuple[int, str]]:
    """(self µs, module) of the ``top`` most expensive imports of ``import service.cli``."""
    stderr = subprocess.run([sys.executable, "-X", "importtime", "-c", "import service.cli"],
                            cwd=tree, capture_output=True, text=True, check=True).stderr
    rows = []
    for line in stderr.splitlines():
        parts = line.removeprefix("import time:").split("|")
        if len(parts) == 3 and parts[0].strip().isdigit():
            rows.append((int(parts[0]), parts[2].strip()))
    return sorted(rows, reverse=True)[:top]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--baseline", type=Path, help="another tree to compare, interleaved")
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args(argv)
    trees = {"this tree": ROOT, **({"baseline": args.baseline} if args.baseline else {})}
    for label, command in COMMANDS.items():
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
        for _ in range(args.runs):
            for name, tree in trees.items():
                times[name].append(run_once(tree, command))
        for name, values in times.items():
            walls, cpus = [w for w, _ in values], [c for _, c in values]
            print(f"{label:24} {name:9} wall min {min(walls):.3f} s, median "
                  f"{statistics.median(walls):.3f} s; CPU min {min(cpus):.3f} s "
                  f"({args.runs} runs)")
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print(f"\nmost expensive imports of service.cli (self time, {ROOT.name}):")
    for micros, module in import_profile(ROOT, args.top):
        print(f"  {micros / 1000:7.1f} ms  {module}")
    heavy = heavy_imports(ROOT)
    print("\nheavy modules imported by cq --help: " + (", ".join(heavy) or "none"))
    return 1 if heavy else 0


if __name__ == "__main__":
    raise SystemExit(main())
