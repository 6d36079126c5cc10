"""CPU of the pure pricing core: ``python -m benchmarks.pricing_speed``.

Captures the arguments of one ``service.core.quote.price_all`` call made by the real API for
the load benchmark's quote (``benchmarks/load/run.py``'s ``QUOTE_BODY``, on a fresh SQLite
database), then times ``price_all`` (which judges its lines) alone on them: ``fixed`` repeats
that job, ``varied`` gives every call a new ``gpu_hours`` (as ``asgi_cpu quotes-varied``
does), so no line's figures repeat and the memos of repeated work miss. Prints the median of
``--batches`` batches of process CPU per call, in milliseconds (and the fastest batch's, less
disturbed by a shared machine), and the lines per quote.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
from dataclasses import replace
from typing import Any

from benchmarks.asgi_cpu import call, service_app
from benchmarks.load.run import QUOTE_BODY


async def captured() -> dict[str, Any]:
    """The keyword arguments of the API's ``price_all`` call for ``QUOTE_BODY``."""
    from service.core import quote as core_quote

    url = f"sqlite:///{tempfile.mkdtemp()}/pricing_speed.sqlite"
    app, key = service_app(url)
    seen: dict[str, Any] = {}
    original = core_quote.price_all

    def spy(**kwargs: Any) -> Any:
        seen.update(kwargs)
        return original(**kwargs)

    core_quote.price_all = spy  # type: ignore[assignment]
    try:
        async with app.router.lifespan_context(app):
            status, _ = await call(app, "POST", "/v1/quotes", json.dumps(QUOTE_BODY).encode(),
                                   ((b"authorization", f"Bearer {key}".encode()),
                                    (b"idempotency-key", b"pricing-speed")))
    finally:
        core_quote.price_all = original  # type: ignore[assignment]
    if status != 201 or not seen:
        raise SystemExit(f"the quote answered {status}")
    return seen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=9)
    parser.add_argument("--per-batch", type=int, default=40)
    parser.add_argument("--seed", type=int, default=16)
    args = parser.parse_args(argv)
    from service.core import quote as core_quote

    kwargs = asyncio.run(captured())
    (job,) = kwargs["jobs"]
    num_gpus = job.num_gpus
    rng = random.Random(args.seed)

    def varied_job() -> Any:
        # As service/api/quoting.py's size_workload makes a gpu_hours job.
        wall_s = rng.randint(10_000, 2_000_000) / num_gpus * 3600.0
        return replace(job, timing=replace(job.timing, wall_s=wall_s, wall_s_p10=wall_s,
                                           wall_s_p90=wall_s))

    report: dict[str, Any] = {"lines": len(core_quote.price_all(**kwargs).lines)}
    for name in ("fixed", "varied"):
        per_call: list[float] = []
        for _ in range(args.batches + 1):
            jobs = [[job] if name == "fixed" else [varied_job()] for _ in range(args.per_batch)]
            started = time.process_time()
            for batch_jobs in jobs:
                core_quote.price_all(**{**kwargs, "jobs": batch_jobs})
            per_call.append((time.process_time() - started) / args.per_batch)
        report[f"{name}_ms"] = round(statistics.median(per_call[1:]) * 1e3, 3)
        report[f"{name}_min_ms"] = round(min(per_call[1:]) * 1e3, 3)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
