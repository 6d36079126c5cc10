"""Speed of the parallelism search: ``make bench-optimiser``.

Two cases from issue 4, each run ``--repeats`` times in process (the core search, no HTTP):
- GPT-3 175B on 1,024 A100-80GB, seq 2048, global batch 1536, every dimension free;
- Llama 3.1 405B on 512 to 16,384 GPUs in steps of 512, on H100, H200 and B200.
The baseline, measured in the same run, is the scalar ``estimate()`` on 300 candidates of the
first case: the ratio says how much faster one bulk candidate is than one scalar estimate.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from service.core.estimate import estimate
from service.core.search import (
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


def scalar_seconds_per_candidate(request: SearchRequest, samples: int = 300) -> float:
    cluster = request.clusters[0]
    space = SearchSpace()
    skeletons = list(_skeletons(request.model, cluster, request.training.global_batch_seqs,
                                request.training.seq_len, space, {}))
    zeros, codes = _inner(space)
    columns = _columns(skeletons, zeros, codes, request.training.global_batch_seqs)
    size = columns["tp"].size
    plans = [plan_at(columns, (i * 7919) % size) for i in range(samples)]
    start = time.perf_counter()
    for plan in plans:
        estimate(request.model, cluster, plan, request.training)
    return (time.perf_counter() - start) / samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    scalar = scalar_seconds_per_candidate(gpt3_request())
    print(f"baseline: scalar estimate() {scalar * 1e6:.1f} us per candidate "
          f"({1 / scalar:,.0f} candidates/s)")
    print(f"{'case':34} {'candidates':>11} {'feasible':>9} {'median s':>9} {'max s':>7} "
          f"{'cand/s':>11} {'x scalar':>9}")
    for name, make in (("gpt3-175b, 1024 A100, full space", gpt3_request),
                       ("llama3.1-405b, 96 clusters", llama405b_sweep_request)):
        request = make()
        times = []
        result = None
        for _ in range(args.repeats):
            start = time.perf_counter()
            result = search(request, clock=time.perf_counter)
            times.append(time.perf_counter() - start)
        assert result is not None
        median = statistics.median(times)
        per_s = result.stats.candidates_evaluated / median
        print(f"{name:34} {result.stats.candidates_evaluated:11,} {result.stats.feasible:9,} "
              f"{median:9.3f} {max(times):7.3f} {per_s:11,.0f} {per_s * scalar:9.0f}")
        best = result.plans[0]
        print(f"  best: {best.cluster.accelerator.id} x{best.cluster.num_gpus} {best.plan}, "
              f"{best.estimate.throughput.tokens_per_s_per_gpu:,.0f} tokens/s/GPU, "
              f"MFU {best.estimate.throughput.mfu_fraction:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
