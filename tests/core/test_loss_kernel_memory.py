"""Loss kernels, 8-bit AdamW and the allocated peak in the memory model (issue 43)."""

from __future__ import annotations

import pytest

from service.core.calibration import DEFAULT_CALIBRATION
from service.core.estimate import Estimate, estimate
from service.core.memory import (
    ADAMW_8BIT_MOMENT_BYTES_PER_PARAM,
    LOSS_KERNELS,
    XLA_RUNTIME_BYTES,
    state_layout,
)
from service.core.specs import (
    Framework,
    LoraSpec,
    LossKernel,
    Optimizer,
    ParallelismPlan,
    RecomputeMode,
    TrainingMethod,
)
from tests.factories import cluster, model, plan, training

SEQ, MICRO = 4096, 2


def _one_gpu(**overrides: object) -> ParallelismPlan:
    values: dict[str, object] = {"tp": 1, "pp": 1, "dp": 1, "cp": 1, "vp": 1,
                                 "recompute": RecomputeMode.NONE, "micro_batch": MICRO}
    values.update(overrides)
    return plan(**values)


def _estimate(framework: Framework = Framework.MEGATRON, **overrides: object) -> Estimate:
    t = training(seq_len=SEQ, global_batch_seqs=MICRO * 4, tokens=1e8, framework=framework,
                 **overrides)
    return estimate(model("llama3.1-8b"), cluster(1, gpus_per_node=1), _one_gpu(), t)


def test_no_loss_kernel_keeps_the_stacks_own_figures() -> None:
    for framework in (Framework.MEGATRON, Framework.FSDP, Framework.TORCHTITAN):
        default = state_layout(training(framework=framework))
        assert default.loss_working_bytes_per_hidden == 0.0
        stated = state_layout(training(framework=framework, loss_kernel=LossKernel.CHUNKED))
        assert stated.logits_bytes_per_entry == LOSS_KERNELS[LossKernel.CHUNKED]\
            .logits_bytes_per_entry
        assert stated.logits_bytes_per_entry < default.logits_bytes_per_entry


def test_each_kernel_holds_its_bytes_per_logit_at_the_loss() -> None:
    """Megatron (persistent gradients, no recompute): the activations differ by exactly the
    loss's live bytes, per logit or, fused, per token and hidden unit."""
    m = model("llama3.1-8b")
    entries = SEQ * MICRO * m.vocab_size
    standard = _estimate(loss_kernel=LossKernel.STANDARD).memory
    chunked = _estimate(loss_kernel=LossKernel.CHUNKED).memory
    fused = _estimate(loss_kernel=LossKernel.FUSED).memory
    # standard: bf16 logits 2 + fp32 copy 4 + fp32 log-softmax 4; chunked: 2 + (4 + 4) / 8.
    assert standard.activations_bytes - chunked.activations_bytes == pytest.approx(
        (10.0 - 3.0) * entries, rel=1e-9)
    assert chunked.activations_bytes - fused.activations_bytes == pytest.approx(
        3.0 * entries - 6.0 * SEQ * MICRO * m.hidden_size, rel=1e-9)
    assert fused.peak_bytes < chunked.peak_bytes < standard.peak_bytes
    # Megatron's own fused vocab-parallel loss (6 B per logit) lies between.
    own = _estimate().memory
    assert chunked.peak_bytes < own.peak_bytes < standard.peak_bytes


def test_loss_kernel_does_not_change_the_step_time() -> None:
    a = _estimate(loss_kernel=LossKernel.STANDARD).throughput.step.step_s
    b = _estimate(loss_kernel=LossKernel.FUSED).throughput.step.step_s
    assert a == b


def test_eight_bit_adamw_keeps_about_two_bytes_of_moments_per_parameter() -> None:
    """bitsandbytes AdamW8bit (Dettmers et al. 2022): m and v at one byte each plus an fp32
    absmax per block of 2,048; fp32 master weights unchanged."""
    assert pytest.approx(2.0 + 8.0 / 2048) == ADAMW_8BIT_MOMENT_BYTES_PER_PARAM
    adam = _estimate(optimizer=Optimizer.ADAMW).memory.optimizer_bytes
    eight = _estimate(optimizer=Optimizer.ADAMW_8BIT).memory.optimizer_bytes
    sgd = _estimate(optimizer=Optimizer.SGD).memory.optimizer_bytes
    # Megatron: fp32 master 4 B + moments (8 B Adam, ~2 B 8-bit, 0 SGD).
    assert eight / adam == pytest.approx((4.0 + ADAMW_8BIT_MOMENT_BYTES_PER_PARAM) / 12.0)
    assert sgd < eight < adam


def test_eight_bit_adamw_on_lora_applies_to_the_adapters_only() -> None:
    adam = _estimate(optimizer=Optimizer.ADAMW, method=TrainingMethod.LORA,
                     lora=LoraSpec(rank=16))
    eight = _estimate(optimizer=Optimizer.ADAMW_8BIT, method=TrainingMethod.LORA,
                      lora=LoraSpec(rank=16))
    adapters = adam.trainable_params
    assert adam.memory.optimizer_bytes - eight.memory.optimizer_bytes == pytest.approx(
        (8.0 - ADAMW_8BIT_MOMENT_BYTES_PER_PARAM) * adapters, rel=1e-9)


def test_allocated_is_the_peak_without_what_the_allocator_holds_beside_tensors() -> None:
    mem = _estimate(framework=Framework.FSDP).memory
    cal = DEFAULT_CALIBRATION
    assert 0 < mem.allocated_bytes < mem.peak_bytes
    outside = mem.peak_bytes - mem.allocated_bytes
    # CUDA context, NCCL and workspaces, the fragmentation share and one largest block.
    assert outside > cal.memory_overhead_bytes + cal.memory_fragmentation_fraction * (
        mem.activations_bytes)
    tensors = (mem.weights_bytes + mem.gradients_bytes + mem.optimizer_bytes
               + mem.activations_bytes)
    assert mem.allocated_bytes >= tensors  # plus gather buffers, never less than the tensors


def test_allocated_on_xla_is_the_peak_without_the_runtime_reserve() -> None:
    t = training(seq_len=SEQ, global_batch_seqs=MICRO * 4, tokens=1e8,
                 framework=Framework.MAXTEXT)
    mem = estimate(model("llama3.1-8b"), cluster(1, gpus_per_node=1), _one_gpu(), t).memory
    assert mem.peak_bytes - mem.allocated_bytes == pytest.approx(XLA_RUNTIME_BYTES)
