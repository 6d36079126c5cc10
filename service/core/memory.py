"""Memory per GPU with a breakdown (docs/model.md section 3).

Model states (Rajbhandari et al. 2020, ZeRO, section 3.1; Megatron-LM keeps fp32 gradients):
16-bit weights (2 bytes), fp32 gradients (4 bytes) and Adam state (fp32 master weights, m and
v: 12 bytes) per parameter. ZeRO-1 shards the optimizer state over the data-parallel group,
ZeRO-2 also the gradients, ZeRO-3/FSDP also the weights, which then need gather buffers for
two layers (the one computing and the one prefetched).

Activations per token and layer, derived tensor by tensor from Korthikanti et al. 2022
(Table 2 and section 4.1) for GQA, SwiGLU and MoE, with FlashAttention (no s^2 score matrix;
Dao et al. 2022) and no dropout (modern LLM pre-training uses none):
- outside tensor-parallel regions (sharded by tp only with sequence parallelism):
  norm inputs and outputs of the attention and MLP blocks, 4 tensors x 2h bytes = 8h;
- inside (sharded by tp): Q (2*a*d_qk), K and V (2*2*g*d_h), attention output (2*a*d_v),
  softmax statistics (4*a, fp32), and the MLP: 4f for two-matrix MLPs (fc1 output and
  activation output), 6f for SwiGLU (gate, up and their product);
- MoE layers: every routed copy of a token keeps its expert input (2h) and expert MLP
  tensors, plus fp32 router logits (4E).
Without a fused attention kernel each layer also stores 5*a*s/t bytes per token (softmax,
dropout mask and output; Korthikanti et al. 2022, Table 2); with context parallelism each
query still meets all s keys, so the per-token figure keeps the full s. Full recomputation
keeps only each layer's input (2h, sharded with sequence parallelism) plus one layer's working
set. Selective recomputation keeps ``Calibration.selective_activation_fraction`` of the stored
activations:
Megatron's "core attention" variant saves the score matrix (which fused kernels never store),
torchtitan's per-op variant also recomputes the cheap elementwise tensors.

1F1B keeps up to p micro-batches in flight on the first stage, so it holds about L layers'
worth of one micro-batch; interleaving multiplies that by 1 + (p-1)/(p*v) (Korthikanti et al.
2022, section 4.2.3). The last stage holds the logits: bf16 logits plus an fp32 copy for the
loss, 6 bytes per vocabulary entry per token, divided by tp.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.core.calibration import Calibration
from service.core.geometry import Geometry, PlanVars
from service.core.ops import SCALAR, Num
from service.core.specs import MlpKind, ModelSpec, TrainingSpec

WEIGHT_BYTES_PER_PARAM = 2.0
"""bf16/fp16 working weights (Micikevicius et al. 2018, mixed-precision training)."""
GRAD_BYTES_PER_PARAM = 4.0
"""fp32 gradient accumulation buffer (Megatron-LM ``main_grad``; FSDP2 reduce dtype fp32)."""
OPTIMIZER_BYTES_PER_PARAM = 12.0
"""Adam: fp32 master weights, first and second moments (Rajbhandari et al. 2020, K = 12)."""
LOGITS_BYTES_PER_ENTRY = 6.0
"""Peak bytes per logit: the bf16 output of the head (2) while the fused cross-entropy holds
its fp32 copy (4). Megatron-LM's ``VocabParallelCrossEntropy`` (megatron/core/tensor_parallel/
cross_entropy.py) exponentiates the fp32 copy in place, saves it for backward and writes the
gradient into the same buffer, so no third copy exists (issue 15: the constant was 10, which
counted that gradient separately, against this docstring's 6)."""
UNFUSED_ATTENTION_BYTES = 5.0
"""Per token, head and key without a fused kernel: softmax output (2), dropout mask (1) and
dropout output (2) (Korthikanti et al. 2022, Table 2, the 5as/t term)."""
ACTIVATION_BYTES = 2.0
"""16-bit activations (also under FP8 training: Transformer Engine stores bf16 inputs)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryBreakdown:
    """Peak bytes on the most loaded GPU, by kind."""

    weights_bytes: Num
    gradients_bytes: Num
    optimizer_bytes: Num
    activations_bytes: Num
    other_bytes: Num
    capacity_bytes: float

    @property
    def peak_bytes(self) -> Num:
        return (
            self.weights_bytes
            + self.gradients_bytes
            + self.optimizer_bytes
            + self.activations_bytes
            + self.other_bytes
        )

    @property
    def fits(self) -> Num:
        return self.peak_bytes <= self.capacity_bytes


def mlp_activation_bytes(ffn: float, kind: MlpKind) -> float:
    """Stored MLP tensors per token inside the TP region: 4f (two-matrix) or 6f (SwiGLU)."""
    return (6.0 if kind == MlpKind.SWIGLU else 4.0) * ffn


def layer_activation_bytes_per_token(
    model: ModelSpec,
    plan: PlanVars,
    *,
    moe_layer: bool,
    unfused_attention_seq_len: int = 0,
    xp: Num = SCALAR,
) -> Num:
    """Bytes stored per token for one layer without recomputation (see module docstring)."""
    h, t = model.hidden_size, plan.tp
    a, g = model.num_heads, model.num_kv_heads
    d_qk, d_v = model.attention_head_dim, model.value_head_dim
    kv_heads = a if model.mla is not None else g
    outside = 4 * ACTIVATION_BYTES * h
    outside = xp.where(plan.sequence_parallel, outside / t, outside)
    attention = (
        ACTIVATION_BYTES * (a * d_qk + kv_heads * (d_qk + d_v) + a * d_v)
        + 4.0 * a
        + UNFUSED_ATTENTION_BYTES * a * unfused_attention_seq_len
    ) / t
    if not moe_layer:
        return outside + attention + mlp_activation_bytes(model.ffn_hidden_size, model.mlp) / t
    k = model.experts_per_token
    sp_divisor = xp.where(plan.sequence_parallel, t, 1)
    expert = k * (
        ACTIVATION_BYTES * h / sp_divisor
        + mlp_activation_bytes(model.expert_ffn_hidden_size, model.mlp) / plan.expert_tp
    )
    shared = model.num_shared_experts * mlp_activation_bytes(
        model.expert_ffn_hidden_size, model.mlp
    ) / t
    router = 4.0 * model.num_experts / sp_divisor
    return outside + attention + expert + shared + router


def stage_activation_bytes(
    model: ModelSpec, plan: PlanVars, training: TrainingSpec, geometry: Geometry,
    xp: Num = SCALAR,
) -> tuple[Num, Num]:
    """Activation bytes of one micro-batch for the whole stage, and of its largest layer."""
    unfused = 0 if training.flash_attention else training.seq_len
    dense = layer_activation_bytes_per_token(
        model, plan, moe_layer=False, unfused_attention_seq_len=unfused, xp=xp,
    )
    moe = (
        layer_activation_bytes_per_token(
            model, plan, moe_layer=True, unfused_attention_seq_len=unfused, xp=xp,
        )
        if model.is_moe
        else 0.0
    )
    tokens = geometry.tokens_per_micro_batch
    per_micro_batch = tokens * (
        geometry.dense_layers_per_stage * dense + geometry.moe_layers_per_stage * moe
    )
    return per_micro_batch, tokens * xp.maximum(dense, moe)


def in_flight_micro_batches(plan: PlanVars, xp: Num = SCALAR) -> Num:
    """Micro-batches whose activations the first stage holds at once under (interleaved) 1F1B."""
    in_flight = 1.0 * xp.minimum(plan.pp, plan.num_micro_batches)
    in_flight = xp.where(
        plan.vp > 1, in_flight * (1.0 + (plan.pp - 1) / (plan.pp * plan.vp)), in_flight
    )
    return xp.where(plan.pp == 1, 1.0, in_flight)


def memory_breakdown(
    model: ModelSpec,
    plan: PlanVars,
    training: TrainingSpec,
    geometry: Geometry,
    calibration: Calibration,
    capacity_bytes: float,
    xp: Num = SCALAR,
    stage_activations: tuple[Num, Num] | None = None,
) -> MemoryBreakdown:
    """Peak memory of the most loaded GPU: the larger of the first and the last stage.

    ``stage_activations`` is ``stage_activation_bytes(...)`` when the caller has it already."""
    per_micro_batch, largest_layer = stage_activations or stage_activation_bytes(
        model, plan, training, geometry, xp
    )
    tokens = geometry.tokens_per_micro_batch
    boundary = ACTIVATION_BYTES * model.hidden_size * tokens
    boundary = xp.where(plan.sequence_parallel, boundary / plan.tp, boundary)
    selective = per_micro_batch * calibration.selective_activation_fraction
    stored = xp.where(
        plan.full_recompute, boundary * geometry.layers_per_stage,
        xp.where(plan.selective_recompute, selective, per_micro_batch),
    )
    working = xp.where(plan.full_recompute, largest_layer, 0.0)
    in_flight = in_flight_micro_batches(plan, xp)
    first_activations = stored * in_flight + working
    last_activations = stored + working
    logits = LOGITS_BYTES_PER_ENTRY * tokens * model.vocab_size / plan.tp

    single_stage = plan.pp == 1
    first_params = geometry.layer_params_per_gpu + geometry.embedding_params_per_gpu
    last_params = geometry.layer_params_per_gpu + geometry.head_params_per_gpu
    first_params = xp.where(single_stage, first_params + geometry.head_params_per_gpu,
                            first_params)
    last_params = xp.where(single_stage, first_params, last_params)

    first_states = _model_state_bytes(first_params, geometry.expert_params_per_gpu, plan,
                                      geometry, xp)
    last_states = _model_state_bytes(last_params, geometry.expert_params_per_gpu, plan,
                                     geometry, xp)
    first = (*first_states, first_activations + xp.where(single_stage, logits, 0.0))
    last = (*last_states, last_activations + logits)
    # The more loaded stage; the first wins ties (as Python's max does).
    first_is_peak = sum(first) >= sum(last)
    weights, grads, optimizer, activations = (
        xp.where(first_is_peak, f, la) for f, la in zip(first, last, strict=True)
    )

    per_layer = (geometry.layer_params_per_gpu + geometry.expert_params_per_gpu) / xp.maximum(
        1, geometry.layers_per_stage
    )
    gather_buffers = xp.where(
        (plan.zero_stage == 3) & single_stage, 2.0 * WEIGHT_BYTES_PER_PARAM * per_layer, 0.0
    )
    other = (
        calibration.memory_overhead_bytes
        + calibration.memory_fragmentation_fraction * activations
        + gather_buffers
    )
    return MemoryBreakdown(
        weights_bytes=weights,
        gradients_bytes=grads,
        optimizer_bytes=optimizer,
        activations_bytes=activations,
        other_bytes=other,
        capacity_bytes=capacity_bytes,
    )


def _model_state_bytes(
    params: Num, expert_params: Num, plan: PlanVars, geometry: Geometry, xp: Num
) -> tuple[Num, Num, Num]:
    """Weights, gradients and optimizer bytes after ZeRO sharding."""

    # FSDP with pipelining keeps the stage's weights and gradients unsharded across
    # micro-batches instead of re-gathering them each time (torchtitan, reshard_after_forward
    # off under PP; its PP schedule syncs gradients after the last micro-batch).
    held_unsharded = (plan.zero_stage == 3) & (plan.pp > 1)

    def sharded(count: Num, group: Num, stage_needed: int) -> Num:
        divided = xp.where(plan.zero_stage >= stage_needed, count / group, count)
        if stage_needed in (2, 3):
            return xp.where(held_unsharded, count, divided)
        return divided

    groups = ((params, geometry.dp_group_size), (expert_params, geometry.expert_dp_group_size))
    weights = sum(WEIGHT_BYTES_PER_PARAM * sharded(n, g, 3) for n, g in groups)
    grads = sum(GRAD_BYTES_PER_PARAM * sharded(n, g, 2) for n, g in groups)
    optimizer = sum(OPTIMIZER_BYTES_PER_PARAM * sharded(n, g, 1) for n, g in groups)
    return weights, grads, optimizer
