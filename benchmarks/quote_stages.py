"""Where a quote's server CPU goes: ``python -m benchmarks.quote_stages``.

Two views of ``POST /v1/quotes`` driven through the real application in process (as
``benchmarks.asgi_cpu`` does: every middleware, dependency, the model, the store):

- **stages**: the load benchmark's quote (``QUOTE_BODY``, 197 lines), with the request path's
  main steps wrapped in timers: the Idempotency-Key lookup, pricing (``price_all``), the
  answer and stored lines (``quote_body``: plausibility, the lines' text), building the row
  (answer validation, compression) and storing it (insert, commit). What no stage covers is
  the framework, the middlewares, the dependencies and the request's validation. Timers read
  the CPU time of the one thread that runs the request (``time.thread_time``), so a commit's
  wait for the disk counts nothing, only its CPU. ``--varied`` gives every quote a new
  workload size (``benchmarks.asgi_cpu``'s ``quotes-varied``), so no line's figures repeat.
- **lines**: the same workload narrowed by provider and term to fewer lines, and the least
  squares line through (lines, CPU per quote): a fixed cost per quote and a cost per line.

Runs on a fresh SQLite database, or on PostgreSQL with ``--database-url`` (an empty
database). The figures are medians of batches of process CPU per quote.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from benchmarks.asgi_cpu import call, measure, service_app, varied_quote
from benchmarks.load.run import QUOTE_BODY

NARROWED = ((["aws"], ["on_demand"]), (["aws"], ["on_demand", "spot"]),
            (["aws", "gcp"], ["on_demand"]), (["aws", "gcp"], ["on_demand", "spot",
                                                               "reserved_1y"]))
"""(providers, terms) of the ``lines`` view, from fewest lines to ``QUOTE_BODY``'s own."""


def _timed(owner: Any, name: str, label: str, spent: collections.Counter[str]) -> None:
    function: Callable[..., Any] = getattr(owner, name)

    @functools.wraps(function)
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.thread_time()
        try:
            return function(*args, **kwargs)
        finally:
            spent[label] += time.thread_time() - started

    setattr(owner, name, timed)


def _instrument(spent: collections.Counter[str]) -> None:
    from service.api import quoting
    from service.api.routes import quotes as route
    from service.catalog import quotes as store
    from service.core import quote as core_quote

    for name in ("compute_text", "_new_quote", "_store"):
        _timed(route, name, name, spent)
    _timed(quoting, "quote_body", "compute_text: quote_body", spent)
    _timed(core_quote, "price_all", "compute_text: price_all", spent)
    _timed(quoting, "plausibility_warnings", "quote_body: plausibility", spent)
    _timed(quoting, "lines_text", "quote_body: stored lines' text", spent)
    _timed(route.QuoteOut, "model_validate", "_new_quote: answer validation", spent)
    _timed(store, "pack_lines", "_new_quote: compression", spent)
    _timed(store, "insert_quote", "_store: insert", spent)
    _timed(route, "commit_before_answer", "_store: commit", spent)
    _timed(store, "find_by_key", "Idempotency-Key lookup", spent)


async def run(url: str, count: int, varied: bool = False) -> dict[str, Any]:
    spent: collections.Counter[str] = collections.Counter()
    _instrument(spent)
    app, key = service_app(url)
    auth = ((b"authorization", f"Bearer {key}".encode()),)
    report: dict[str, Any] = {"database": url.split(":")[0]}
    async with app.router.lifespan_context(app):
        body: bytes | Callable[[], bytes] = (varied_quote if varied
                                              else json.dumps(QUOTE_BODY).encode())
        await measure(app, "POST", "/v1/quotes", body, max(20, count // 10), auth, True)
        spent.clear()
        started = time.process_time()
        per_quote, status, _ = await measure(app, "POST", "/v1/quotes", body, count, auth, True)
        total_s = (time.process_time() - started) / count
        report["stages_ms"] = {"total (process CPU)": round(total_s * 1e3, 3), **{
            label: round(seconds / count * 1e3, 3) for label, seconds in spent.most_common()}}
        report["body"] = "varied" if varied else "fixed"
        report["stages_ms"]["outside every stage"] = round(
            (total_s - sum(spent[k] for k in ("compute_text", "_new_quote", "_store",
                                              "Idempotency-Key lookup")) / count) * 1e3, 3)
        points: list[tuple[int, float]] = []
        for providers, terms in NARROWED:
            narrowed = {**QUOTE_BODY, "providers": providers, "terms": terms}
            content = json.dumps(narrowed).encode()
            await measure(app, "POST", "/v1/quotes", content, max(20, count // 10), auth, True)
            per_quote, status, _ = await measure(app, "POST", "/v1/quotes", content, count,
                                                 auth, True)
            status, answer = await call(app, "POST", "/v1/quotes", content, (
                *auth, (b"idempotency-key", f"lines-{len(points)}".encode())))
            assert status == 201, answer[:300]
            points.append((json.loads(answer)["lines_total"], statistics.median(per_quote)))
        slope, intercept = statistics.linear_regression([float(n) for n, _ in points],
                                                        [s for _, s in points])
        report["lines"] = [{"lines": n, "cpu_ms": round(s * 1e3, 3)} for n, s in points]
        report["fixed_ms"] = round(intercept * 1e3, 3)
        report["per_line_us"] = round(slope * 1e6, 2)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=400, help="quotes per measurement")
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--varied", action="store_true",
                        help="stages of quotes with a new workload size each (every line's "
                             "figures new, as benchmarks.asgi_cpu's quotes-varied)")
    args = parser.parse_args(argv)
    url = args.database_url or f"sqlite:///{tempfile.mkdtemp()}/quote_stages.sqlite"
    report = asyncio.run(run(url, args.count, args.varied))
    for label, ms in report["stages_ms"].items():
        print(f"{label:40s} {ms:8.3f} ms")
    for point in report["lines"]:
        print(f"{point['lines']:4d} lines  {point['cpu_ms']:7.3f} ms per quote")
    print(f"fixed {report['fixed_ms']:.2f} ms per quote + {report['per_line_us']:.1f} us per line")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
