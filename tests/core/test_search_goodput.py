"""Plans carry the quote's failure and checkpoint goodput (issue 39, item 6): every plan's
failures are the quote's Young/Daly model with the quote's defaults, the objective ranks the
wall-clock with failures, and a job that cannot progress ranks after every job that can."""

from __future__ import annotations

import dataclasses
import math

import pytest

from service.core import pricing
from service.core.failures import (
    DEFAULT_RELIABILITY,
    Reliability,
    checkpoint_bytes,
    job_failures,
    training_goodput,
)
from service.core.params import count_parameters
from service.core.search import SearchRequest, SearchSpace, frozen_clock, search, search_part
from service.core.specs import ClusterSpec, TrainingSpec
from tests.factories import accelerator, model


def _request(*counts: int, **changes: object) -> SearchRequest:
    h100 = accelerator("h100-sxm5-80gb")
    request = SearchRequest(
        model=model("llama3.1-8b"),
        clusters=tuple(ClusterSpec(accelerator=h100, num_gpus=n, gpus_per_node=8)
                       for n in counts),
        training=TrainingSpec(seq_len=8192, global_batch_seqs=512, tokens=1e12),
        space=SearchSpace(vary=frozenset({"tp", "pp", "micro_batch"})), top_k=5)
    return dataclasses.replace(request, **changes)  # type: ignore[arg-type]


def test_the_defaults_are_the_quotes() -> None:
    assert DEFAULT_RELIABILITY.failure_rate_per_gpu_hour == 2.2e-5
    assert DEFAULT_RELIABILITY.restart_s == pricing.DEFAULT_RESTART_S == 600.0
    assert DEFAULT_RELIABILITY.checkpoint_bytes_per_s == 10e9
    assert "Dubey et al. 2024" in DEFAULT_RELIABILITY.source("failure_rate_per_gpu_hour")
    given = Reliability(restart_s=60.0, given=frozenset({"restart_s"}))
    assert given.source("restart_s") == "request (reliability.restart_s)"


def test_a_small_plans_time_is_step_time_times_steps_over_goodput_by_hand() -> None:
    result = search(_request(64), frozen_clock)
    best = result.plans[0]
    throughput = best.estimate.throughput
    steps = 1e12 / (512 * 8192)
    assert throughput.num_steps == pytest.approx(steps, rel=1e-12)
    assert throughput.train_s == pytest.approx(throughput.step.step_s * steps, rel=1e-9)
    # By hand: 64 GPUs fail 2.2e-5 × 64 = 1.408e-3 times an hour; an 8B checkpoint of 14 B a
    # parameter at 10 GB/s; a restart of 600 s (the quote's defaults).
    rate = 2.2e-5 * 64 / 3600
    c = count_parameters(model("llama3.1-8b")).total * 14 / 10e9
    assert 11 < c < 11.5  # 8.03 B parameters, 112 GB: about 11.2 s
    tau = math.sqrt(2 * c / rate)
    lost = c / tau + rate * (tau / 2 + 600)
    goodput_fraction = 1 / (1 + lost)
    assert 0.99 < goodput_fraction < 0.999  # not a no-op: about 0.3% lost
    failures = best.failures
    assert failures.progresses
    assert failures.goodput.lost_fraction == pytest.approx(lost, rel=1e-12)
    assert failures.goodput.interval_s == pytest.approx(tau, rel=1e-12)
    assert failures.goodput_fraction == pytest.approx(goodput_fraction, rel=1e-12)
    with_failures = throughput.train_s * failures.factor
    assert with_failures == pytest.approx(
        throughput.step.step_s * steps / goodput_fraction, rel=1e-9)


def test_the_shared_function_is_the_quotes_formula() -> None:
    # The quote's cloud line: rate × instances × GPUs per instance / 3,600 (core/quote.py).
    reliability = Reliability(failure_rate_per_gpu_hour=3e-5, restart_s=300.0,
                              checkpoint_bytes_per_s=5e9)
    shared = training_goodput(units=128, gpus_per_unit=8.0, checkpoint_bytes=1e12,
                              reliability=reliability)
    quote = pricing.goodput(3e-5 * 128 * 8.0 / 3600, 1e12 / 5e9, 300.0)
    assert shared == quote
    job = job_failures(1024, 1e12, reliability)
    assert job.goodput.lost_fraction == pytest.approx(quote.lost_fraction, rel=1e-15)
    assert checkpoint_bytes(model("llama3.1-8b")) == (
        count_parameters(model("llama3.1-8b")).total * pricing.CHECKPOINT_BYTES_PER_PARAM)


def test_time_ranks_with_failures_so_a_job_that_cannot_progress_ranks_last() -> None:
    # 2e-3 failures per GPU-hour and 1 h restarts: 512 GPUs are interrupted every 59 min,
    # less than a restart (Λ·R = 1.02): no progress. 64 GPUs lose about 16%.
    reliability = Reliability(failure_rate_per_gpu_hour=2e-3, restart_s=3600.0)
    without = search(_request(64, 512, reliability=Reliability(failure_rate_per_gpu_hour=0.0)),
                     frozen_clock)
    assert without.plans[0].cluster.num_gpus == 512  # failure-free, the bigger job is faster
    result = search(_request(64, 512, reliability=reliability, top_k=10_000), frozen_clock)
    counts = [p.cluster.num_gpus for p in result.plans]
    assert counts[0] == 64
    stuck = [p for p in result.plans if p.cluster.num_gpus == 512]
    assert stuck
    assert all(not p.failures.progresses for p in stuck)
    assert counts == sorted(counts)  # every 64-GPU plan first
    assert "cannot make progress" in (stuck[0].failures.goodput.reason or "")
    assert result.pareto
    assert all(p.cluster.num_gpus == 64 for p in result.pareto)


def test_a_deadline_counts_the_failures() -> None:
    free = search(_request(64, reliability=Reliability(failure_rate_per_gpu_hour=0.0)),
                  frozen_clock).plans[0]
    failing = search(_request(64), frozen_clock).plans[0]
    assert failing.plan == free.plan  # one GPU count: the same order
    raw = free.estimate.throughput.train_s
    with_failures = raw * failing.failures.factor
    deadline = (raw + with_failures) / 2  # met without failures, missed with them
    met = search_part(_request(64, max_train_s=deadline,
                               reliability=Reliability(failure_rate_per_gpu_hour=0.0)),
                      frozen_clock)
    assert free.plan in [c.plan for c in met.kept]
    part = search_part(_request(64, max_train_s=deadline), frozen_clock)
    assert dict(part.pruned_by_rule)["deadline"] > dict(met.pruned_by_rule).get("deadline", 0)
    assert all(c.train_s <= deadline for c in part.kept)
    assert free.plan not in [c.plan for c in part.kept]


def test_nothing_fails_means_the_ranking_of_before() -> None:
    # With no failures the factor is 1 and every key is the failure-free one.
    free = search(_request(64, 128, reliability=Reliability(failure_rate_per_gpu_hour=0.0)),
                  frozen_clock)
    for plan in free.plans:
        assert plan.failures.factor == 1.0
        assert plan.failures.goodput_fraction == 1.0
    times = [p.estimate.throughput.train_s for p in free.plans]
    assert times == sorted(times)
