"""Two checkouts' ``benchmarks.asgi_cpu`` figures, alternated: ``python -m benchmarks.alternate``.

On a shared machine one run of each tree is not a comparison: the other tenants' load moves a
run's figures by a quarter. This runs ``asgi_cpu`` in each checkout in turn (ABBA order), for
``--rounds`` rounds, each on a fresh database (SQLite, or a new PostgreSQL database per run
with ``--postgres``), and prints per tree and scenario the median and the minimum of the
runs' medians, and the database's own CPU where it is measured. A checkout made with
``git worktree add`` needs the project's ``.venv`` (a symlink will do).

    python -m benchmarks.alternate --rounds 6 --scenarios quotes,quotes-varied \\
        --postgres /tmp/before .
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import uuid
from pathlib import Path

POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/"


def one_run(tree: Path, scenarios: list[str], count: int, postgres: bool) -> dict[str, object]:
    command = [str(tree / ".venv/bin/python"), "-m", "benchmarks.asgi_cpu", *scenarios,
               "--count", str(count)]
    if postgres:
        name = f"alternate_{uuid.uuid4().hex[:12]}"
        subprocess.run(["psql", "-qh", "127.0.0.1", "-U", "postgres", "-c",  # noqa: S603, S607
                        f"CREATE DATABASE {name}"], check=True)
        command += ["--database-url", POSTGRES + name]
    done = subprocess.run(command, cwd=tree, capture_output=True, text=True,  # noqa: S603
                          check=True)
    report: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs=2, type=Path, help="the two checkouts (before, after)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--scenarios", default="quotes,quotes-varied")
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--postgres", action="store_true")
    args = parser.parse_args(argv)
    scenarios = args.scenarios.split(",")
    service: dict[tuple[Path, str], list[float]] = {
        (t, s): [] for t in args.trees for s in scenarios}
    database: dict[tuple[Path, str], list[float]] = {key: [] for key in service}
    for index in range(args.rounds):
        for tree in args.trees if index % 2 == 0 else args.trees[::-1]:
            report = one_run(tree, scenarios, args.count, args.postgres)
            for name in scenarios:
                figures = report[name]
                assert isinstance(figures, dict)
                service[tree, name].append(figures["service_cpu_ms"])
                if figures["database_cpu_ms"] is not None:
                    database[tree, name].append(figures["database_cpu_ms"])
    for (tree, name), runs in service.items():
        extra = ""
        if database[tree, name]:
            extra = f"  database median {statistics.median(database[tree, name]):6.2f} ms"
        print(f"{tree!s:24s} {name:16s} service median {statistics.median(runs):7.2f} ms"
              f"  min {min(runs):7.2f} ms{extra}  runs {' '.join(f'{x:.1f}' for x in runs)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
