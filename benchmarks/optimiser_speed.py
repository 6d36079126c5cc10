"""Speed of the parallelism search: ``make bench-optimiser``.

Two cases from issue 4, each run ``--repeats`` times in process (the core search, no HTTP):
- GPT-3 175B on 1,024 A100-80GB, seq 2048, global batch 1536, every dimension free;
- Llama 3.1 405B on 512 to 16,384 GPUs in steps of 512, on H100, H200 and B200.
The baseline, measured in the same run, is the scalar ``estimate()`` on 300 candidates of the
first case: the ratio says how much faster one bulk candidate is than one scalar estimate.
``cpu s`` is the median process CPU time, steadier than wall time on a shared machine.
``--split`` adds where the 405B sweep's CPU time goes, by phase of ``core.search``.
``--workers N`` adds the 12-accelerator 405B sweep (384 clusters, 31.4 M candidates) as the
API runs it: its groups spread across N search worker processes (``api.plan_search``), in
wall seconds (issue 38's target: 2 s with 2 workers).
``--worker-allocator`` first sets this process's C allocator as a search worker's
(``service.api.allocator``), so the in-process cases measure the core search as the API runs
it; without it they run on glibc's defaults (page faults are then up to half of the CPU).
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import service.core.search as search_module
from service.core.estimate import estimate
from service.core.search import (
    Objective,
    SearchRequest,
    SearchSpace,
    _columns,
    _inner,
    _skeletons,
    plan_at,
    search,
)
from service.core.specs import ClusterSpec, TrainingSpec
from tests.factories import accelerator, model


def gpt3_request() -> SearchRequest:
    return SearchRequest(
        model=model("gpt3-175b"),
        clusters=(ClusterSpec(accelerator=accelerator("a100-sxm4-80gb"), num_gpus=1024,
                              gpus_per_node=8),),
        training=TrainingSpec(seq_len=2048, global_batch_seqs=1536, tokens=300e9),
        deadline_s=600.0,
    )


def llama405b_sweep_request() -> SearchRequest:
    clusters = tuple(
        ClusterSpec(accelerator=accelerator(acc), num_gpus=n, gpus_per_node=8)
        for acc in ("h100-sxm5-80gb", "h200-sxm-141gb", "b200-sxm-180gb")
        for n in range(512, 16_385, 512)
    )
    return SearchRequest(
        model=model("llama3.1-405b"), clusters=clusters,
        training=TrainingSpec(seq_len=8192, global_batch_seqs=2048, tokens=15.6e12),
        deadline_s=600.0,
    )


TWELVE = ("gaudi2-96gb", "a100-sxm4-40gb", "a100-sxm4-80gb", "h100-sxm5-80gb",
          "h100-96gb-500w", "h800-sxm5-80gb", "h200-sxm-141gb", "b200-sxm-180gb", "l40s-48gb",
          "mi300x-192gb", "mi325x-256gb", "gaudi3-128gb")
"""The catalogue's 12 accelerators with 8-GPU nodes."""


def twelve_accelerator_request() -> SearchRequest:
    clusters = tuple(ClusterSpec(accelerator=accelerator(acc), num_gpus=n, gpus_per_node=8)
                     for acc in TWELVE for n in range(512, 16_385, 512))
    return SearchRequest(
        model=model("llama3.1-405b"), clusters=clusters,
        training=TrainingSpec(seq_len=8192, global_batch_seqs=2048, tokens=15.6e12),
        space=SearchSpace(memory_headroom_fraction=0.05), objective=Objective.PARETO,
        max_candidates=40_000_000, deadline_s=600.0)


def spread_sweep(workers: int, repeats: int) -> None:
    """The 12-accelerator sweep through ``api.plan_search`` on ``workers`` processes."""
    from service.api.plan_search import plan_search
    from service.api.workers import prestart

    for future in prestart(workers):
        future.result()
    request = twelve_accelerator_request()
    times, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), _children_cpu_s()
        result = plan_search(request, workers=workers, ends_at=time.monotonic() + 600)
        times.append(time.perf_counter() - start)
        cpu.append(_children_cpu_s() - start_cpu)
    print(f"12-accelerator 405B sweep, {workers} workers: "
          f"{result.stats.candidates_evaluated:,} candidates, median "
          f"{statistics.median(times):.2f} s wall (max {max(times):.2f} s), "
          f"{statistics.median(cpu):.2f} s CPU in the workers "
          f"(load average {os.getloadavg()[0]:.1f}: wall is about CPU / {workers} only when "
          f"{workers} cores are free)")


def _children_cpu_s() -> float:
    """CPU seconds so far of this process's live children (the search workers), from
    /proc (0 where there is none)."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid():
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def scalar_seconds_per_candidate(request: SearchRequest, samples: int = 300) -> float:
    cluster = request.clusters[0]
    space = SearchSpace()
    skeletons = list(_skeletons(request.model, cluster, request.training.global_batch_seqs,
                                request.training.seq_len, space, {}))
    zeros, codes = _inner(space, request.training.framework)
    columns = _columns(skeletons, zeros, codes, request.training.global_batch_seqs)
    size = columns["tp"].size
    plans = [plan_at(columns, (i * 7919) % size) for i in range(samples)]
    start = time.perf_counter()
    for plan in plans:
        estimate(request.model, cluster, plan, request.training)
    return (time.perf_counter() - start) / samples


SPLIT_PHASES = ("_skeletons", "_grid", "plan_vars", "build_geometry", "stage_activation_bytes",
                "memory_breakdown", "step_time", "job_figures", "_flat_figures", "_top",
                "_pareto_indices", "_rank")
"""Functions of ``core.search`` (or imported into it) timed by ``--split``: each is called about
once per chunk, so timing them costs little."""


def phase_split(request: SearchRequest, repeats: int) -> tuple[float, dict[str, float]]:
    """Median CPU seconds of ``search`` and of each phase in ``SPLIT_PHASES``."""
    spent: collections.defaultdict[str, float] = collections.defaultdict(float)
    originals = {name: getattr(search_module, name) for name in SPLIT_PHASES}

    def timed(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.process_time()
            result = function(*args, **kwargs)
            if name == "_skeletons":
                result = iter(list(result))  # a generator: time its whole enumeration
            spent[name] += time.process_time() - start
            return result
        return wrapper

    totals: list[float] = []
    phases: dict[str, list[float]] = {name: [] for name in SPLIT_PHASES}
    try:
        for name, function in originals.items():
            setattr(search_module, name, timed(name, function))
        for _ in range(repeats):
            spent.clear()
            start = time.process_time()
            search(request, clock=time.perf_counter)
            totals.append(time.process_time() - start)
            for name in SPLIT_PHASES:
                phases[name].append(spent[name])
    finally:
        for name, function in originals.items():
            setattr(search_module, name, function)
    return statistics.median(totals), {k: statistics.median(v) for k, v in phases.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--split", action="store_true",
                        help="also print the 405B sweep's CPU time by phase")
    parser.add_argument("--workers", type=int, default=0,
                        help="also time the 12-accelerator sweep on this many workers")
    parser.add_argument("--worker-allocator", action="store_true",
                        help="set the C allocator as a search worker does")
    args = parser.parse_args(argv)
    if args.worker_allocator:
        from service.api.allocator import set_thresholds

        print(f"C allocator as in a search worker: {'set' if set_thresholds() else 'n/a'}")
    if args.workers:
        spread_sweep(args.workers, args.repeats)
    scalar = scalar_seconds_per_candidate(gpt3_request())
    print(f"baseline: scalar estimate() {scalar * 1e6:.1f} us per candidate "
          f"({1 / scalar:,.0f} candidates/s)")
    print(f"{'case':34} {'candidates':>11} {'feasible':>9} {'median s':>9} {'max s':>7} "
          f"{'cpu s':>6} {'cand/s':>11} {'x scalar':>9}")
    for name, make in (("gpt3-175b, 1024 A100, full space", gpt3_request),
                       ("llama3.1-405b, 96 clusters", llama405b_sweep_request)):
        request = make()
        times, cpu = [], []
        result = None
        for _ in range(args.repeats):
            start, start_cpu = time.perf_counter(), time.process_time()
            result = search(request, clock=time.perf_counter)
            times.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
        assert result is not None
        median = statistics.median(times)
        per_s = result.stats.candidates_evaluated / median
        print(f"{name:34} {result.stats.candidates_evaluated:11,} {result.stats.feasible:9,} "
              f"{median:9.3f} {max(times):7.3f} {statistics.median(cpu):6.3f} {per_s:11,.0f} "
              f"{per_s * scalar:9.0f}")
        best = result.plans[0]
        print(f"  best: {best.cluster.accelerator.id} x{best.cluster.num_gpus} {best.plan}, "
              f"{best.estimate.throughput.tokens_per_s_per_gpu:,.0f} tokens/s/GPU, "
              f"MFU {best.estimate.throughput.mfu_fraction:.1%}")
    if args.split:
        total, phases = phase_split(llama405b_sweep_request(), args.repeats)
        print(f"llama3.1-405b sweep, CPU s by phase (median of {args.repeats}): "
              f"search {total:.3f}")
        for name, seconds in sorted(phases.items(), key=lambda kv: -kv[1]):
            print(f"  {name:24} {seconds:6.3f} {seconds / total:6.1%}")
        rest = total - sum(phases.values())
        print(f"  {'rest of search()':24} {rest:6.3f} {rest / total:6.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
