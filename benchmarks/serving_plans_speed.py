"""Speed of the serving-plan search (issue 19): ``python -m benchmarks.serving_plans_speed``.

- **Before**: candidates evaluated one by one with ``serve()`` (what ``plan_serving`` did
  until the bulk evaluation), on ``--scalar`` candidates drawn evenly from the grid below.
- **After**: ``serving_search.plan_search`` on the whole grid (enumeration, bulk evaluation,
  ranking, front), and ``plan_serving`` (that, plus ``serve()`` on the plans it returns).

The grid: 8 accelerators (H100 SXM, H200, B200, GB200 NVL72, A100 80GB, MI300X, L40S,
H100 96GB) x every tp inside their NVLink domain x bf16/fp8/int4 weights x bf16/fp8 KV x
4 engines x 128 max-batch values (none, 8, 16, ... 1,016) = 110,592 candidates; traffic 20
requests/s, prompts p50 1,000 / p99 4,000 tokens, 256 output tokens, SLO TTFT p99 2 s and
TPOT p99 0.1 s. Each case is run ``--repeats`` times in process; the median is reported, in
wall seconds and in the process's CPU seconds (``time.process_time``: what a loaded machine
does not inflate).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable

from benchmarks.accuracy import seed_accelerators
from service.core import serving as s
from service.core import serving_search as ss
from service.core.presets import PRESETS
from service.core.specs import AcceleratorSpec

ACCELERATORS = ("h100-sxm5-80gb", "h200-sxm-141gb", "b200-sxm-180gb", "gb200-nvl72",
                "a100-sxm4-80gb", "mi300x-192gb", "l40s-48gb", "h100-96gb-500w")
MAX_BATCHES: tuple[int | None, ...] = (None, *range(8, 1024, 8))
TRAFFIC = s.Traffic(mode=s.TrafficMode.ONLINE, prompt=s.Lengths.of(p50=1000, p99=4000),
                    output=s.Lengths.of(mean=256), requests_per_s=20.0,
                    slo=s.Slo(ttft_p99_s=2.0, tpot_p99_s=0.1))


def grid() -> tuple[list[AcceleratorSpec], ss.Grid]:
    catalogue = seed_accelerators()
    accelerators = [catalogue[a] for a in ACCELERATORS]
    return accelerators, ss.grid(
        accelerators, [s._tp_options(a, None) for a in accelerators], tuple(s.WeightPrecision),
        tuple(s.KvPrecision), tuple(s.Engine), MAX_BATCHES)


def timed(repeats: int, run: Callable[[], object]) -> tuple[float, list[float], float]:
    """(median wall s, every wall s, median CPU s)."""
    times, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        run()
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return statistics.median(times), times, statistics.median(cpu)


def case(name: str, accelerators: list[AcceleratorSpec], candidates: ss.Grid,
         positions: list[int], repeats: int, scalar: int) -> None:
    model = PRESETS[name].model
    prices = {a.id: 2.0 for a in accelerators}
    stride = max(1, len(positions) // scalar)
    sample = [candidates.deployment(p) for p in positions[::stride][:scalar]]
    scalar_s, _, scalar_cpu = timed(1, lambda: [s.serve(model, d, TRAFFIC) for d in sample])
    bulk_s, bulk_all, bulk_cpu = timed(repeats, lambda: ss.plan_search(
        model, candidates, TRAFFIC, price_per_gpu_hour_usd=prices, top_k=10))
    full_s, _, full_cpu = timed(repeats, lambda: s.plan_serving(
        model, accelerators, TRAFFIC, weight_precisions=tuple(s.WeightPrecision),
        kv_cache_precisions=tuple(s.KvPrecision), engines=tuple(s.Engine),
        max_batches=MAX_BATCHES, price_per_gpu_hour_usd=prices, top_k=10))
    tracemalloc.start()
    ranking = ss.plan_search(model, candidates, TRAFFIC, price_per_gpu_hour_usd=prices,
                             top_k=10)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    evaluated = ranking.evaluated
    before_rate, after_rate = len(sample) / scalar_s, evaluated / bulk_s
    print(f"\n{name}: {evaluated:,} candidates evaluated, {ranking.feasible:,} feasible, "
          f"front {len(ranking.pareto)} points")
    print(f"  before, serve() one by one: {before_rate:,.0f} candidates/s ({len(sample)} in "
          f"{scalar_s:.2f} s, {scalar_cpu / len(sample) * 1e3:.3f} ms CPU per serve(); "
          f"{evaluated / before_rate:,.0f} s projected for the grid)")
    print(f"  after, bulk plan_search:    {after_rate:,.0f} candidates/s (median "
          f"{bulk_s:.3f} s of {repeats}: {', '.join(f'{t:.3f}' for t in bulk_all)}; CPU "
          f"{bulk_cpu:.3f} s); peak "
          f"traced memory {peak / 2**20:.0f} MiB")
    print(f"  plan_serving, with serve() on the plans returned: median {full_s:.3f} s "
          f"(CPU {full_cpu:.3f} s)")
    print(f"  speed-up per candidate: {after_rate / before_rate:,.0f}x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--scalar", type=int, default=1000,
                        help="candidates evaluated one by one for the before figure")
    args = parser.parse_args(argv)
    accelerators, candidates = grid()
    _, positions = candidates.columns()
    print(f"grid: {candidates.total:,} candidates, {len(positions):,} with the matmul "
          "precision (the others are skipped, as serve() refuses them)")
    for name in ("llama3.1-70b", "mixtral-8x7b"):
        case(name, accelerators, candidates, positions.tolist(), args.repeats, args.scalar)
    return 0


if __name__ == "__main__":
    sys.exit(main())
