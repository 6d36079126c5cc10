"""Step time with a breakdown (docs/model.md section 4).

Per micro-batch, on the slowest pipeline stage, one GPU spends:
- **compute**: GEMM FLOPs / (peak x efficiency(shape)), FlashAttention FLOPs / (peak x GEMM
  efficiency x attention fraction), and memory-bound elementwise work, bytes / HBM bandwidth.
  GEMM efficiency follows a roofline-shaped curve of the per-GPU GEMM dimensions (see
  ``Calibration.gemm_shape_ridge_multiple``). FP8 runs the linear layers at the FP8 peak and
  its own efficiency; attention and logits stay 16-bit (Transformer Engine's FP8 recipe,
  Micikevicius et al. 2022, arXiv 2209.05433).
- **tensor-parallel** collectives: 4 all-reduces (or reduce-scatter + all-gather pairs with
  sequence parallelism, same volume) of b*s*h 16-bit activations per layer, 2 more with full
  recomputation (Narayanan et al. 2021 section 3.2; Korthikanti et al. 2022 section 4.2.2).
- **context-parallel** ring exchange of K and V, c-1 hops forward and twice that backward,
  hidden behind the attention compute where it can be (Liu et al. 2023, Ring Attention).
- **expert-parallel** all-to-alls: dispatch and combine, forward and backward (Lepikhin et al.
  2021, GShard; Megatron-Core MoE).
- **pipeline** point-to-point sends of b*s*h per stage boundary, each way, v times with
  interleaving.

Collective times follow nccl-tests PERFORMANCE.md: all-reduce alpha + 2(n-1)/n * S/B,
reduce-scatter and all-gather alpha + (n-1)/n * S/B, all-to-all alpha + (n-1)/n * S/B, with B
the achieved bandwidth of the tier the group spans.

The step is m x (micro-batch time) + the pipeline bubble ((p-1)/v micro-batch times;
Narayanan et al. 2021 eq. 1) + exposed data-parallel traffic + the optimizer step. Data-parallel
gradient reduce-scatter (or all-reduce) and parameter all-gather overlap with one micro-batch of
compute (Megatron-LM --overlap-grad-reduce/--overlap-param-gather); with ZeRO-3 (FSDP) the
gathers and reduce-scatters recur every micro-batch and overlap with that micro-batch.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.core.calibration import Calibration
from service.core.geometry import Geometry
from service.core.memory import (
    GRAD_BYTES_PER_PARAM,
    WEIGHT_BYTES_PER_PARAM,
    stage_activation_bytes,
)
from service.core.params import ParameterCount
from service.core.specs import (
    AcceleratorSpec,
    ClusterSpec,
    MlpKind,
    ModelSpec,
    ParallelismPlan,
    Precision,
    RecomputeMode,
    TrainingSpec,
)

ACTIVATION_COMM_BYTES = 2.0
"""Activations and their gradients travel in bf16 (also in FP8 recipes)."""
ATTENTION_BACKWARD_MULTIPLIER = 2.5
"""FlashAttention-2 backward does 2.5x the forward matmul work (Dao 2023, section 3.1.2)."""
CAUSAL_FRACTION = 0.5
"""Causal masking halves the executed attention-score work (Dao 2023, section 3.1.1)."""
OPTIMIZER_BYTES_TOUCHED_PER_PARAM = 30.0
"""Adam step: read fp32 grad, master, m, v (16 B); write master, m, v (12 B), bf16 weight (2 B)."""
DP_GRADIENT_BYTES = GRAD_BYTES_PER_PARAM
"""Gradients are reduced in fp32 (Megatron-LM default; FSDP2 reduce_dtype in torchtitan)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StepTime:
    """Seconds per optimizer step, by where the time goes."""

    compute_s: float
    tp_comm_s: float
    cp_comm_s: float
    ep_comm_s: float
    pp_comm_s: float
    pp_bubble_s: float
    dp_comm_exposed_s: float
    optimizer_s: float

    @property
    def step_s(self) -> float:
        return (
            self.compute_s
            + self.tp_comm_s
            + self.cp_comm_s
            + self.ep_comm_s
            + self.pp_comm_s
            + self.pp_bubble_s
            + self.dp_comm_exposed_s
            + self.optimizer_s
        )


def gemm_intensity(m: float, k: float, n: float) -> float:
    """Arithmetic intensity of an (m x k)(k x n) GEMM in 16-bit, FLOP per byte:
    2mkn / (2(mk + kn + mn)) = 1 / (1/m + 1/k + 1/n) (Williams et al. 2009, roofline)."""
    return 1.0 / (1.0 / m + 1.0 / k + 1.0 / n)


def gemm_efficiency(
    max_efficiency: float, intensity: float, ridge_flops_per_byte: float, cal: Calibration
) -> float:
    """Peak fraction of a GEMM of the given intensity: max * I / (I + k * ridge)."""
    half_point = cal.gemm_shape_ridge_multiple * ridge_flops_per_byte
    return max_efficiency * intensity / (intensity + half_point)


def _collective_s(volume_bytes: float, group: int, bandwidth: float, factor: float,
                  cal: Calibration) -> float:
    """alpha + factor*(n-1)/n * S/B; factor 2 for all-reduce, 1 for the others."""
    if group <= 1 or volume_bytes <= 0:
        return 0.0
    return cal.collective_latency_s + factor * (group - 1) / group * volume_bytes / bandwidth


def ring_bandwidth(
    acc: AcceleratorSpec, group: int, per_node: int, cal: Calibration
) -> float:
    """Achieved bus bandwidth of a ring collective over ``group`` ranks, ``per_node`` per node.

    Inside one node it is the scale-up link. Across nodes NCCL runs one ring per NIC, so the
    ring's bus bandwidth is the node's aggregate NIC bandwidth for the group's members
    (per_node x per-GPU scale-out), capped by the scale-up link (nccl-tests PERFORMANCE.md:
    multi-node bus bandwidth approaches the per-node network bandwidth).
    """
    scaleup = acc.scaleup_bytes_per_s * cal.scaleup_efficiency_fraction
    if per_node >= group:
        return scaleup
    return min(scaleup, per_node * acc.scaleout_bytes_per_s * cal.scaleout_efficiency_fraction)


def all_to_all_s(
    volume_bytes: float, group: int, per_node: int, acc: AcceleratorSpec, cal: Calibration
) -> float:
    """All-to-all of ``volume_bytes`` per rank: (per_node-1)/group of it stays on the scale-up
    link, (group-per_node)/group crosses the rank's own NIC; the two run concurrently."""
    if group <= 1 or volume_bytes <= 0:
        return 0.0
    intra = (per_node - 1) / group * volume_bytes / (
        acc.scaleup_bytes_per_s * cal.scaleup_efficiency_fraction
    )
    inter = (group - per_node) / group * volume_bytes / (
        acc.scaleout_bytes_per_s * cal.scaleout_efficiency_fraction
    )
    return cal.collective_latency_s + max(intra, inter)


def point_to_point_bandwidth(acc: AcceleratorSpec, in_scaleup: bool, cal: Calibration) -> float:
    if in_scaleup:
        return acc.scaleup_bytes_per_s * cal.scaleup_efficiency_fraction
    return acc.scaleout_bytes_per_s * cal.scaleout_efficiency_fraction


@dataclass(frozen=True, slots=True, kw_only=True)
class _MicroBatch:
    compute_s: float
    attention_s: float
    tp_s: float
    cp_s: float
    ep_s: float
    pp_s: float


def _micro_batch_time(
    model: ModelSpec,
    counts: ParameterCount,
    cluster: ClusterSpec,
    plan: ParallelismPlan,
    training: TrainingSpec,
    geo: Geometry,
    cal: Calibration,
) -> _MicroBatch:
    acc = cluster.accelerator
    t, h = plan.tp, model.hidden_size
    tokens = geo.tokens_per_micro_batch
    precision = training.precision
    half_precision = Precision.BF16 if precision == Precision.FP8 else precision
    linear_peak = acc.peak_for(precision)
    half_peak = acc.peak_for(half_precision) if half_precision in acc.peak_flops_per_s else (
        linear_peak
    )
    linear_max = cal.gemm_efficiency_for(acc.id, precision)
    half_max = cal.gemm_efficiency_for(acc.id, half_precision)
    ridge = half_peak / acc.hbm_bytes_per_s

    passes = 3.0 + (1.0 if plan.recompute == RecomputeMode.FULL else 0.0)
    q_width = model.num_heads * model.attention_head_dim
    gated = 2.0 if model.mlp == MlpKind.SWIGLU else 1.0

    # Attention projections and dense MLPs, per GPU: 2 * params/t FLOPs per token.
    attention_flops = 2.0 * counts.attention_per_layer / t * geo.layers_per_stage
    eff_attention_proj = gemm_efficiency(
        linear_max, gemm_intensity(tokens, h, q_width / t), ridge, cal
    )
    dense_mlp_flops = 2.0 * counts.dense_mlp_per_layer / t * geo.dense_layers_per_stage
    eff_dense_mlp = gemm_efficiency(
        linear_max, gemm_intensity(tokens, h, gated * model.ffn_hidden_size / t), ridge, cal
    )
    linear_s = tokens * passes * (
        attention_flops / (linear_peak * eff_attention_proj)
        + dense_mlp_flops / (linear_peak * eff_dense_mlp)
    )

    if model.is_moe:
        k = model.experts_per_token
        # Balanced routing spreads the routed-expert work evenly over the stage's GPUs.
        expert_flops = 2.0 * k * counts.expert_mlp / t * geo.moe_layers_per_stage
        shared_flops = (
            2.0 * (counts.shared_experts_per_layer + counts.router_per_layer) / t
            * geo.moe_layers_per_stage
        )
        tokens_per_expert = tokens * k * plan.ep / model.num_experts * (t / geo.expert_tp)
        eff_expert = cal.moe_expert_efficiency_fraction * gemm_efficiency(
            linear_max,
            gemm_intensity(
                max(tokens_per_expert, 1.0), h, gated * model.expert_ffn_hidden_size / geo.expert_tp
            ),
            ridge,
            cal,
        )
        linear_s += tokens * passes * (
            expert_flops / (linear_peak * eff_expert)
            + shared_flops / (linear_peak * eff_dense_mlp)
        )

    # Logits on the last stage, 16-bit.
    logits_flops = 2.0 * model.vocab_size * h / t
    eff_logits = gemm_efficiency(
        half_max, gemm_intensity(tokens, h, model.vocab_size / t), ridge, cal
    )
    logits_s = tokens * 3.0 * logits_flops / (half_peak * eff_logits)

    # FlashAttention: causal half of the full score work, per GPU.
    causal = CAUSAL_FRACTION if training.flash_attention else 1.0
    attn_core_per_token = (
        2.0 * training.seq_len * model.num_heads
        * (model.attention_head_dim + model.value_head_dim) / t * causal
    )
    attn_passes = 1.0 + ATTENTION_BACKWARD_MULTIPLIER + (
        1.0 if plan.recompute != RecomputeMode.NONE else 0.0
    )
    attention_s = (
        tokens * geo.layers_per_stage * attn_core_per_token * attn_passes
        / (half_peak * half_max * cal.attention_efficiency_fraction)
    )

    # Memory-bound elementwise work over the stored activations (forward, backward, and the
    # recomputed forward under full recomputation).
    per_micro_batch_bytes, _ = stage_activation_bytes(model, plan, training, geo)
    elementwise_s = (
        cal.elementwise_passes * per_micro_batch_bytes * passes / 3.0 / acc.hbm_bytes_per_s
    )
    compute_s = linear_s + logits_s + attention_s + elementwise_s

    # Tensor parallel: 4 collectives per layer (+2 with full recompute) of tokens*h bf16.
    tp_volume = tokens * h * ACTIVATION_COMM_BYTES
    tp_count = (4.0 + (2.0 if plan.recompute == RecomputeMode.FULL else 0.0)) * (
        geo.layers_per_stage
    )
    tp_s = tp_count * _collective_s(
        tp_volume, t, ring_bandwidth(acc, t, geo.tp_per_node, cal), 2.0, cal
    ) * cal.tp_comm_exposed_fraction

    # Context parallel: ring exchange of local K and V, hidden behind attention where possible.
    cp_s = 0.0
    if plan.cp > 1:
        kv_heads = model.num_heads if model.mla is not None else model.num_kv_heads
        kv_bytes = tokens * kv_heads * (model.attention_head_dim + model.value_head_dim) * (
            ACTIVATION_COMM_BYTES
        ) / min(t, kv_heads)
        per_layer = 3.0 * (plan.cp - 1) * kv_bytes / ring_bandwidth(
            acc, plan.cp, geo.cp_per_node, cal
        )
        attention_per_layer = attention_s / geo.layers_per_stage
        cp_s = geo.layers_per_stage * max(0.0, per_layer - attention_per_layer)

    # Expert parallel: dispatch + combine, forward and backward (+ forward again on recompute).
    ep_s = 0.0
    if model.is_moe and plan.ep > 1:
        sp_divisor = t if plan.sequence_parallel else 1
        a2a_volume = tokens * model.experts_per_token * h * ACTIVATION_COMM_BYTES / sp_divisor
        a2a_count = 4.0 + (2.0 if plan.recompute == RecomputeMode.FULL else 0.0)
        ep_s = cal.ep_comm_exposed_fraction * geo.moe_layers_per_stage * a2a_count * (
            all_to_all_s(a2a_volume, plan.ep, geo.ep_per_node, acc, cal)
        )

    # Pipeline: activations and their gradients cross each stage boundary, v times each.
    pp_s = 0.0
    if plan.pp > 1:
        p2p_bytes = tokens * h * ACTIVATION_COMM_BYTES / (t if plan.sequence_parallel else 1)
        bandwidth = point_to_point_bandwidth(acc, geo.pp_in_scaleup, cal)
        pp_s = 2.0 * plan.vp * (cal.collective_latency_s + p2p_bytes / bandwidth)

    return _MicroBatch(
        compute_s=compute_s,
        attention_s=attention_s,
        tp_s=tp_s,
        cp_s=cp_s,
        ep_s=ep_s,
        pp_s=pp_s,
    )


def step_time(
    model: ModelSpec,
    counts: ParameterCount,
    cluster: ClusterSpec,
    plan: ParallelismPlan,
    training: TrainingSpec,
    geo: Geometry,
    cal: Calibration,
) -> StepTime:
    """Seconds per optimizer step on the slowest stage, with the breakdown."""
    acc = cluster.accelerator
    mb = _micro_batch_time(model, counts, cluster, plan, training, geo, cal)
    m = geo.num_micro_batches
    micro_batch_s = mb.compute_s + mb.tp_s + mb.cp_s + mb.ep_s + mb.pp_s
    bubble_s = (plan.pp - 1) / plan.vp * micro_batch_s

    params = geo.layer_params_per_gpu + max(geo.embedding_params_per_gpu, geo.head_params_per_gpu)
    experts = geo.expert_params_per_gpu
    dp_bw = ring_bandwidth(acc, geo.dp_group_size, geo.dp_per_node, cal)
    dp_comm = _dp_traffic_s(params, geo.dp_group_size, plan.zero_stage, dp_bw, cal) + (
        _dp_traffic_s(experts, geo.expert_dp_group_size, plan.zero_stage, dp_bw, cal)
    )
    floor = cal.dp_comm_min_exposed_fraction
    if plan.zero_stage == 3 and plan.pp == 1:
        # FSDP gathers and reduces every micro-batch, overlapping with that micro-batch.
        per_mb = max(dp_comm - micro_batch_s, floor * dp_comm)
        dp_exposed = m * per_mb
    else:
        dp_exposed = max(dp_comm - micro_batch_s, floor * dp_comm)

    shard = geo.dp_group_size if plan.zero_stage >= 1 else 1
    expert_shard = geo.expert_dp_group_size if plan.zero_stage >= 1 else 1
    optimizer_s = OPTIMIZER_BYTES_TOUCHED_PER_PARAM * (
        params / shard + experts / expert_shard
    ) / acc.hbm_bytes_per_s

    return StepTime(
        compute_s=m * mb.compute_s,
        tp_comm_s=m * mb.tp_s,
        cp_comm_s=m * mb.cp_s,
        ep_comm_s=m * mb.ep_s,
        pp_comm_s=m * mb.pp_s,
        pp_bubble_s=bubble_s,
        dp_comm_exposed_s=dp_exposed,
        optimizer_s=optimizer_s,
    )


def _dp_traffic_s(
    params: float, group: int, zero_stage: int, bandwidth: float, cal: Calibration
) -> float:
    """Data-parallel traffic per step (ZeRO 0-2) or per micro-batch (ZeRO-3)."""
    if group <= 1 or params <= 0:
        return 0.0
    grads = params * DP_GRADIENT_BYTES
    weights = params * WEIGHT_BYTES_PER_PARAM
    if zero_stage == 0:
        return _collective_s(grads, group, bandwidth, 2.0, cal)
    if zero_stage in (1, 2):
        return _collective_s(grads, group, bandwidth, 1.0, cal) + _collective_s(
            weights, group, bandwidth, 1.0, cal
        )
    return _collective_s(grads, group, bandwidth, 1.0, cal) + 2.0 * _collective_s(
        weights, group, bandwidth, 1.0, cal
    )
