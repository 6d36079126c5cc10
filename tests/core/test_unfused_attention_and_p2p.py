"""Attention without a fused kernel, and the pipeline's point-to-point sends (issue 37, items
2 and 5), against hand computations."""

from __future__ import annotations

import pytest

from service.core.estimate import estimate
from service.core.ops import SCALAR
from service.core.specs import Framework
from service.core.timing import UNFUSED_SCORE_BYTES, unfused_attention_s
from tests.factories import cluster, model, plan, training


def test_unfused_attention_is_its_gemms_plus_the_score_traffic() -> None:
    """Llama 2 7B (32 heads of 128), 2,048 tokens of context, 8,192 tokens a micro-batch, one
    layer, no recomputation, an eager stack: GEMMs 2 x 2048 x 32 x 256 FLOPs per token, x3
    for forward and backward, at the large-GEMM efficiency; traffic 36 bytes per score
    element (17 forward + 19 backward), 8192 x 32 x 2048 elements."""
    llama = model("llama2-7b")
    spec = training(seq_len=2048, framework=Framework.FSDP, flash_attention=False)
    peak, efficiency, hbm = 312e12, 0.65, 2.039e12
    seconds = unfused_attention_s(llama, spec, 8192, 1, 1, peak, efficiency, hbm, False,
                                  False, SCALAR)
    flops = 2 * 2048 * 32 * 256 * 8192 * 3
    traffic = 8192 * 32 * 2048 * 36
    assert seconds == pytest.approx(flops / (peak * efficiency) + traffic / hbm)
    assert UNFUSED_SCORE_BYTES["eager"] == (17.0, 19.0)


def test_recomputation_runs_the_forward_again_and_megatron_fuses_the_softmax() -> None:
    llama = model("llama2-7b")
    peak, efficiency, hbm = 312e12, 0.65, 2.039e12
    eager = training(seq_len=2048, framework=Framework.FSDP, flash_attention=False)
    base = unfused_attention_s(llama, eager, 8192, 1, 1, peak, efficiency, hbm, False, False)
    again = unfused_attention_s(llama, eager, 8192, 1, 1, peak, efficiency, hbm, True, False)
    elements = 8192 * 32 * 2048
    assert again - base == pytest.approx(2 * 2048 * 32 * 256 * 8192 / (peak * efficiency)
                                         + elements * 17 / hbm)
    megatron = training(seq_len=2048, framework=Framework.MEGATRON, flash_attention=False)
    fused = unfused_attention_s(llama, megatron, 8192, 1, 1, peak, efficiency, hbm, False,
                                False)
    assert base - fused == pytest.approx(elements * 4 / hbm)


def test_without_flash_attention_a_long_context_step_is_much_slower() -> None:
    """FlashAttention-2's paper (Table 1) measured 1.4x at 2k and 3.1x at 8k for GPT3-1.3B;
    the model's ratio must at least grow with the context."""
    gpt = model("llama2-7b")
    single = cluster(8, "a100-sxm4-80gb")
    def ratio(seq_len: int) -> float:
        times = []
        for flash in (True, False):
            spec = training(seq_len=seq_len, global_batch_seqs=64, framework=Framework.FSDP,
                            flash_attention=flash)
            result = estimate(gpt, single, plan(tp=1, pp=1, dp=8, cp=1, vp=1, zero_stage=3,
                                                micro_batch=1), spec)
            times.append(result.throughput.step.compute_s)
        return times[1] / times[0]
    assert 1.0 < ratio(2048) < ratio(8192)


def _pp_seconds(framework: Framework, **changes: object) -> float:
    values: dict[str, object] = {"tp": 8, "pp": 4, "dp": 1, "cp": 1, "vp": 1,
                                 "micro_batch": 1, "sequence_parallel": False}
    values.update(changes)
    result = estimate(model("llama3.1-70b"), cluster(32), plan(**values),
                      training(seq_len=4096, global_batch_seqs=64, framework=framework))
    return float(result.throughput.step.pp_comm_s)


def test_megatron_scatters_the_pipeline_sends_over_the_tensor_parallel_ranks() -> None:
    """Narayanan et al. 2021 section 4.1: without sequence parallelism Megatron sends 1/t of
    the activations per rank across nodes and all-gathers the rest on NVLink; a stack
    without the optimisation sends all of it."""
    assert _pp_seconds(Framework.MEGATRON) < _pp_seconds(Framework.TORCHTITAN)
    assert _pp_seconds(Framework.MEGATRON, sequence_parallel=True) == pytest.approx(
        _pp_seconds(Framework.TORCHTITAN, sequence_parallel=True))


def test_megatron_hides_the_sends_under_the_interleaved_schedule() -> None:
    """``overlap_p2p_comm`` is on by default and acts with virtual stages only."""
    assert _pp_seconds(Framework.MEGATRON, vp=5) == 0.0
    assert _pp_seconds(Framework.TORCHTITAN, vp=5) > 0.0
    assert _pp_seconds(Framework.MEGATRON, vp=1) > 0.0
