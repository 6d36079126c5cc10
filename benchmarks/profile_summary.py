"""Where a server's CPU goes, from a py-spy raw profile: ``python -m benchmarks.profile_summary
PROFILE.raw``. Each sample is charged to the first frame, from the innermost outwards, that
belongs to a category below; see ``benchmarks/profile.md`` for how the profile is taken."""

from __future__ import annotations

import collections
import re
import sys

CATEGORIES: tuple[tuple[str, str], ...] = (
    ("model (service/core)", r"service/core/"),
    ("response: build and serialise", r"from_core|model_dump_json|SchemaSerializer|to_json|"
                                      r"_estimate_response"),
    ("request: JSON parse and validation", r"validate_python|model_validate|json/decoder|"
                                           r"json/__init__|request_body_to_args|Request\.body|"
                                           r"Request\.json"),
    ("the fast layer (service/api/fast.py: dispatch, replay)", r"service/api/fast\.py"),
    ("body middleware (size, time, duplicate keys)", r"service/api/limits\.py"),
    ("request-context middleware (id, headers, metrics, log)",
     r"service/api/observability\.py|prometheus_client"),
    ("load-shedding middleware", r"service/api/shedding\.py"),
    ("auth and the change feed's caches", r"service/api/auth\.py|service/catalog/changes\.py"),
    ("dependency injection", r"fastapi/dependencies/"),
    ("routing and framework", r"fastapi/|starlette/"),
    ("uvicorn HTTP protocol (parse, socket writes)", r"uvicorn/protocols|httptools"),
    ("event loop", r"asyncio/|uvloop"),
)


def summarise(lines: list[str]) -> list[tuple[str, float]]:
    counts: collections.Counter[str] = collections.Counter()
    total = 0
    for line in lines:
        stack, _, number = line.rstrip().rpartition(" ")
        if not number.isdigit():
            continue
        samples = int(number)
        total += samples
        for frame in reversed(stack.split(";")):
            name = next((n for n, pattern in CATEGORIES if re.search(pattern, frame)), None)
            if name is not None:
                counts[name] += samples
                break
        else:
            counts["other (interpreter, GC, idle)"] += samples
    return [(name, n / total) for name, n in counts.most_common()] if total else []


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 1:
        print(__doc__)
        return 2
    with open(args[0], encoding="utf-8") as handle:
        for name, share in summarise(handle.readlines()):
            print(f"| {share:6.1%} | {name} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
