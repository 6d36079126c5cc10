"""Speed of one estimate in process (pytest-benchmark): ``make bench``.

Reports the median time of ``service.core.estimate`` for a dense and a MoE case, and of a
bare ``count_parameters`` call as the same-run baseline, so machine noise cancels in the ratio.
"""

from __future__ import annotations

from typing import Any

from service.core.estimate import estimate
from service.core.params import count_parameters
from tests.factories import cluster, model, plan, training


def test_baseline_parameter_count(benchmark: Any) -> None:
    m = model()
    result = benchmark(count_parameters, m)
    assert result.total > 0


def test_estimate_dense_llama3_70b(benchmark: Any) -> None:
    args = (model(), cluster(), plan(), training())
    result = benchmark(estimate, *args)
    assert result.throughput.tokens_per_s > 0


def test_estimate_moe_qwen3(benchmark: Any) -> None:
    args = (model("qwen3-235b-a22b"), cluster(256),
            plan(tp=2, pp=8, dp=16, cp=1, ep=32, vp=4), training(global_batch_seqs=512))
    result = benchmark(estimate, *args)
    assert result.throughput.tokens_per_s > 0
