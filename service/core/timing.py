"""Step time with a breakdown (docs/model.md section 4).

Per micro-batch, on the slowest pipeline stage, one GPU spends:
- **compute**: GEMM FLOPs / (peak x efficiency(shape)), FlashAttention FLOPs / (peak x the
  stack's kernel fraction from ``attention.KERNEL_PEAK_FRACTION`` x a fitted scale, or x GEMM
  efficiency x the fitted attention fraction where no kernel is tabled), and memory-bound
  elementwise work, bytes / HBM bandwidth.
  GEMM efficiency follows a roofline-shaped curve of the per-GPU GEMM dimensions (see
  ``Calibration.gemm_shape_ridge_multiple``). FP8 runs the linear layers at the FP8 peak and
  its own efficiency; attention and logits stay 16-bit (Transformer Engine's FP8 recipe,
  Micikevicius et al. 2022, arXiv 2209.05433).
- **tensor-parallel** collectives: 4 all-reduces (or reduce-scatter + all-gather pairs with
  sequence parallelism, same volume) of b*s*h 16-bit activations per layer, 2 more with full
  recomputation (Narayanan et al. 2021 section 3.2; Korthikanti et al. 2022 section 4.2.2).
- **context-parallel** ring exchange of K and V, c-1 hops forward and twice that backward,
  each hop paying the collective latency, hidden behind the attention compute where it can be
  (Liu et al. 2023, Ring Attention).
- **expert-parallel** all-to-alls: dispatch and combine, forward and backward (Lepikhin et al.
  2021, GShard; Megatron-Core MoE), with FP8 dispatch, node-limited routing and an overlap
  mode (``specs.MoeOverlap``).
- **pipeline** point-to-point sends of b*s*h per stage boundary, each way, v times with
  interleaving.

Collective times follow nccl-tests PERFORMANCE.md: all-reduce alpha + 2(n-1)/n * S/B,
reduce-scatter and all-gather alpha + (n-1)/n * S/B, all-to-all alpha + (n-1)/n * S/B, with B
the achieved bandwidth of the tier the group spans. For all-reduce, reduce-scatter and
all-gather, alpha is NCCL's own latency by algorithm, protocol and ring size
(``collectives``); all-to-all, point-to-point and context-parallel hops keep the fixed
``Calibration.collective_latency_s``. On a stated fabric (``ClusterSpec.fabric``) the
network share of each of them follows ``fabric``: the protocol's latency and bandwidth, packet
loss, and oversubscription for groups that cross the spine; gradient compression scales the
data-parallel gradient bytes (``fabric.gradient_bytes_fraction``).

The step is m x (micro-batch time) + the pipeline bubble ((p-1)/v micro-batch times;
Narayanan et al. 2021 eq. 1) + exposed data-parallel traffic + the optimizer step +
exposed host-offload time + FSDP2's parameter and gradient copies (``fsdp2_copy_s``) + a
per-step overhead that grows with the number of GPUs (``step_overhead_s``: a fixed part, a
synchronisation latency per doubling and stragglers). Data-parallel
gradient reduce-scatter (or all-reduce) and parameter all-gather overlap with one micro-batch of
compute (Megatron-LM --overlap-grad-reduce/--overlap-param-gather); with ZeRO-3 (FSDP) the
gathers and reduce-scatters recur every micro-batch and overlap with that micro-batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType

from service.core.attention import kernel_peak_fraction
from service.core.calibration import Calibration
from service.core.collectives import collective_s
from service.core.fabric import (
    FabricTerms,
    compresses,
    gradient_bytes_fraction,
    powersgd_s,
    terms_of,
)
from service.core.geometry import Geometry, PlanVars
from service.core.memory import (
    ACTIVATION_BYTES,
    StateLayout,
    adapter_params_per_gpu,
    dequantises,
    frozen_base_bytes_per_param,
    quantized_head,
    state_layout,
)
from service.core.ops import SCALAR, Num
from service.core.params import ParameterCount, adapter_params_per_layer
from service.core.specs import (
    AcceleratorSpec,
    ClusterSpec,
    CompressionMethod,
    Framework,
    MlpKind,
    ModelSpec,
    MoeOverlap,
    Precision,
    TrainingSpec,
)

EAGER_ELEMENTWISE_STACKS = frozenset({Framework.TORCHTITAN, Framework.FSDP})
"""Stacks whose elementwise ops run as separate kernels unless ``torch.compile`` fuses them:
torchtitan (``--compile`` off by default; Liang et al. 2024, torchtitan, section 2.2) and
FSDP trainers. Megatron-Core ships fused kernels (RMSNorm, SwiGLU, rotary, bias-dropout-add),
MaxText is always XLA-compiled, and DeepSpeed and unknown stacks are fitted as they come."""


FSDP2_STACKS = frozenset({Framework.TORCHTITAN})
"""Stacks that shard with PyTorch's per-parameter FSDP (FSDP2, ``fully_shard``): torchtitan
(Liang et al. 2024, torchtitan, section 2.1). The ``fsdp`` stack is mostly FSDP1 trainers
(llm-foundry, HF accelerate, IBM fms-fsdp), whose flat parameters are views of the gathered
buffer, so they copy no whole parameters out of it."""
FSDP2_COPY_BYTES_PER_PARAM = 14.0
"""HBM bytes per parameter of the stage that FSDP2 moves per micro-batch outside its
collectives, whatever the shard group (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py
at PyTorch 2.5-2.11, with torchtitan's defaults: bf16 parameters for compute, fp32 gradient
reduction, ``reshard_after_forward``): ``foreach_all_gather_copy_out`` reads and writes the
gathered bf16 parameters (2 + 2 bytes), in the forward and again in the backward (8); and
``foreach_reduce`` copies the bf16 gradients into its fp32 reduce-scatter input (read 2,
write 4: 6)."""
FSDP2_SHARD_COPY_BYTES_PER_PARAM = 24.0
"""The same per parameter of the shard (divided by the shard group): the all-gather copy-in
casts the fp32 shard to bf16 (read 4, write 2) twice (12), and the reduce-scatter output is
added into the fp32 sharded gradient (read 4 + 4, write 4: 12)."""


def fsdp2_copy_s(params: Num, shard_group: Num, experts: Num, expert_shard_group: Num,
                 training: TrainingSpec, zero_stage: Num, hbm_bytes_per_s: float,
                 xp: Num = SCALAR) -> Num:
    """Seconds per micro-batch of FSDP2's copies around its collectives (ZeRO-3 on
    ``FSDP2_STACKS``): bytes ``FSDP2_COPY_BYTES_PER_PARAM`` x P
    + ``FSDP2_SHARD_COPY_BYTES_PER_PARAM`` x P / shard group, at the HBM bandwidth
    (datasheet), on the step's critical path. These copies run on one GPU as on thousands; on
    the project's lent H200 they were most of what single-GPU FSDP2 steps took beyond the
    model (docs/validation.md). With pipeline
    parallelism ``step_time`` counts them once per step: torchtitan then turns
    ``reshard_after_forward`` off (torchtitan ``apply_fsdp``: "to avoid per-microbatch
    all-gathers") and PyTorch's pipeline stages sync gradients on the last backward only
    (``torch.distributed.pipelining.PipelineStage``); the per-micro-batch bytes stand for the
    step's, a slight overcount."""
    if training.framework not in FSDP2_STACKS:
        return 0.0
    moved = (FSDP2_COPY_BYTES_PER_PARAM * (params + experts)
             + FSDP2_SHARD_COPY_BYTES_PER_PARAM * (params / shard_group
                                                   + experts / expert_shard_group))
    return xp.where(zero_stage == 3, moved / hbm_bytes_per_s, 0.0)


def runs_eager(training: TrainingSpec) -> bool:
    """Whether the step's elementwise work is unfused: ``torch_compile`` stated False on a stack
    of ``EAGER_ELEMENTWISE_STACKS`` (its passes times ``eager_elementwise_multiplier``)."""
    return training.torch_compile is False and training.framework in EAGER_ELEMENTWISE_STACKS


ACTIVATION_COMM_BYTES = 2.0
"""Activations and their gradients travel in bf16 (also in FP8 recipes)."""
FP8_DISPATCH_BYTES = 1.0 + 4.0 / 128
"""FP8 token dispatch: one byte per element plus an fp32 scale per 128-element tile
(DeepSeek-V3, arXiv 2412.19437, section 3.3.2, 1 x 128 activation tiles)."""
ATTENTION_BACKWARD_MULTIPLIER = 2.5
"""FlashAttention-2 backward does 2.5x the forward matmul work (Dao 2023, section 3.1.2)."""
UNFUSED_BACKWARD_MULTIPLIER = 2.0
"""Standard attention's backward runs four GEMMs (dV = P^T dO, dP = dO V^T, dQ = dS K,
dK = dS^T Q) to the forward's two (Dao et al. 2022, Algorithm 0 and appendix B.2): twice the
forward; FlashAttention's 2.5 adds the recomputed S."""
CAUSAL_FRACTION = 0.5
"""Causal masking halves the executed attention-score work (Dao 2023, section 3.1.1)."""
UNFUSED_SCORE_BYTES = MappingProxyType({
    # PyTorch eager attention as FlashAttention's own baseline writes it (Dao-AILab/
    # flash-attention flash_attn/modules/mha.py ``SelfAttention``, the ``use_flash_attn=False``
    # path; PyTorch's SDPA math backend runs the same ops), per element of the s x s score
    # matrix. Forward: QK^T writes S (2), the causal mask is added (read and write, 4),
    # softmax in 16-bit in and out (4), dropout reads, writes and stores a 1-byte mask (5),
    # PV reads P (2): 17 bytes. Backward: P read for dV and dP written (4), dropout (5),
    # softmax backward reads the gradient and the output and writes dS (6), dS read for dQ
    # and for dK (4): 19 bytes. Dao et al. 2022 (FlashAttention, arXiv 2205.14135) Algorithm
    # 0 and section 3.2 count the same materialised S and P. Older code that upcasts the
    # softmax to fp32 (HF transformers' GPT2Attention) makes more passes than this.
    "eager": (17.0, 19.0),
    # Megatron-LM's FusedScaleMaskSoftmax (megatron/model/fused_softmax.py, the
    # scaled_masked_softmax CUDA kernel): scale, mask and softmax in one pass, 16-bit in and
    # out. Forward: S written (2), softmax read and write (4), dropout (5), PV reads P (2):
    # 13. Backward as above: 19.
    "fused_softmax": (13.0, 19.0),
})
"""HBM bytes per score element (forward, backward) of attention without a fused kernel
(``TrainingSpec.flash_attention`` False): the materialised score and probability matrices,
read and written once per op. ``fused_softmax`` on Megatron, ``eager`` elsewhere."""
OPTIMIZER_BYTES_TOUCHED_PER_PARAM = 30.0
"""Adam step: read fp32 grad, master, m, v (16 B); write master, m, v (12 B), bf16 weight (2 B)."""
LN_2 = math.log(2.0)
"""ln 2, for the base-2 logarithm of the GPU count."""
HOST_LINK_BYTES_PER_S = 32e9
"""Host-to-device bandwidth per GPU, each way, where ``HOST_LINK_BY_ACCELERATOR`` has no entry:
PCIe 4.0 x16, 16 GT/s x 16 lanes with 128b/130b coding, about 31.5 GB/s (PCI-SIG PCIe 4.0
base specification), the link of A100 and TPU v4/v5 hosts."""
HOST_LINK_BY_ACCELERATOR = MappingProxyType({
    "h100-sxm5-80gb": 64e9, "h100-pcie-80gb": 64e9, "h100-nvl-94gb": 64e9,
    "h100-96gb-500w": 64e9, "h800-sxm5-80gb": 64e9, "h200-sxm-141gb": 64e9,
    "b200-sxm-180gb": 64e9,
    "gb200-nvl72": 450e9,
})
"""PCIe 5.0 x16, about 63 GB/s each way (PCI-SIG PCIe 5.0; NVIDIA H100, H200 and B200
datasheets: PCIe Gen5); GB200: NVLink-C2C to the Grace CPU, 900 GB/s both ways (NVIDIA GB200
NVL72 datasheet)."""
HOST_MEMORY_BYTES_PER_S_PER_GPU = 2 * 204.8e9 / 8
"""CPU memory bandwidth per GPU for an offloaded optimizer step: two sockets of 8-channel
DDR4-3200 (204.8 GB/s each; AMD EPYC 7002 datasheet) shared by 8 GPUs, as in the DGX A100
(NVIDIA DGX A100 datasheet); the CPU Adam of ZeRO-Offload is bandwidth-bound (Ren et al.
2021, arXiv 2101.06840, section 4.2)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StepTime:
    """Seconds per optimizer step, by where the time goes."""

    compute_s: Num
    tp_comm_s: Num
    cp_comm_s: Num
    ep_comm_s: Num
    pp_comm_s: Num
    pp_bubble_s: Num
    dp_comm_exposed_s: Num
    optimizer_s: Num
    host_offload_s: Num = 0.0
    """Exposed host-link and CPU time of offloaded state (``specs.Offload``)."""
    fsdp_copy_s: Num = 0.0
    """FSDP2's copies of parameters and gradients around its collectives (``fsdp2_copy_s``),
    every micro-batch (once per step with pipeline stages)."""
    overhead_s: Num = 0.0
    """Per-step time outside the modelled work (``step_overhead_s``): fixed, synchronisation
    latency and stragglers."""

    @property
    def step_s(self) -> Num:
        return _total(self.compute_s, self.tp_comm_s, self.cp_comm_s, self.ep_comm_s,
                      self.pp_comm_s, self.pp_bubble_s, self.dp_comm_exposed_s,
                      self.optimizer_s, self.host_offload_s, self.fsdp_copy_s,
                      self.overhead_s)


def _total(first: Num, *rest: Num) -> Num:
    """``first + rest[0] + rest[1] + ...``, left to right, without the terms that are one
    Python 0.0 (no offload, no FSDP2 copies, a dense model's expert traffic): x + 0.0 is x
    for every x but -0.0, and these sums of times start with a positive compute time, so
    the result is the same, bit for bit, without a pass over a search's arrays per zero
    (issue 38). A Python int total keeps its additions (int + 0.0 would become a float)."""
    total = first
    for term in rest:
        if not (isinstance(term, float) and term == 0.0 and not isinstance(total, int)):
            total = total + term
    return total


def _times(count: Num, seconds: Num) -> Num:
    """``count * seconds``, or one 0.0 when ``seconds`` is one Python 0.0 (what a positive
    count times 0.0 gives)."""
    if isinstance(seconds, float) and seconds == 0.0 and math.copysign(1.0, seconds) > 0:
        return 0.0
    return count * seconds


def gemm_intensity(m: Num, k: Num, n: Num) -> Num:
    """Arithmetic intensity of an (m x k)(k x n) GEMM in 16-bit, FLOP per byte:
    2mkn / (2(mk + kn + mn)) = 1 / (1/m + 1/k + 1/n) (Williams et al. 2009, roofline)."""
    return 1.0 / (1.0 / m + 1.0 / k + 1.0 / n)


def gemm_efficiency(
    max_efficiency: float, intensity: Num, ridge_flops_per_byte: float, cal: Calibration
) -> Num:
    """Peak fraction of a GEMM of the given intensity: max * I / (I + k * ridge)."""
    half_point = cal.gemm_shape_ridge_multiple * ridge_flops_per_byte
    return max_efficiency * intensity / (intensity + half_point)


def unfused_attention_s(model: ModelSpec, training: TrainingSpec, tokens: Num, t: Num,
                        layers: Num, half_peak_flops_per_s: float, half_max: float,
                        hbm_bytes_per_s: float, full: Num, selective: Num,
                        xp: Num = SCALAR) -> Num:
    """Seconds per micro-batch of attention without a fused kernel, on one GPU's ``layers``:
    the two batched GEMMs (QK^T and PV, 2 x 2 x s x head width FLOPs per token and head,
    the full matrix: nothing is skipped for the causal mask) at the large-GEMM efficiency,
    plus the score matrices' HBM traffic (``UNFUSED_SCORE_BYTES``, which counts the GEMMs'
    reads and writes of S and P, so the GEMMs are charged only their arithmetic: a roofline
    split, Williams et al. 2009), the two in series: the softmax cannot start before QK^T
    ends. The forward runs again
    under full or selective recomputation (Korthikanti et al. 2022 recompute exactly this
    part selectively)."""
    heads = model.num_heads / t
    width = model.attention_head_dim + model.value_head_dim
    seq = training.seq_len
    matmul_flops = 2.0 * seq * heads * width * tokens * layers
    recompute = xp.where(full | selective, 1.0, 0.0)
    matmul_s = (matmul_flops * (1.0 + UNFUSED_BACKWARD_MULTIPLIER + recompute)
                / (half_peak_flops_per_s * half_max))
    forward_bytes, backward_bytes = UNFUSED_SCORE_BYTES[
        "fused_softmax" if training.framework == Framework.MEGATRON else "eager"]
    elements = tokens * heads * seq * layers
    traffic_s = elements * (forward_bytes * (1.0 + recompute) + backward_bytes) / hbm_bytes_per_s
    return matmul_s + traffic_s


def _collective_s(volume_bytes: Num, group: Num, per_node: Num, bandwidth: Num,
                  all_reduce: bool, xp: Num, net: FabricTerms | None = None,
                  scaleup: Num = None) -> Num:
    """An all-reduce (``all_reduce``), reduce-scatter or all-gather at the ring's achieved bus
    bandwidth: NCCL's cost model, latency by algorithm, protocol and ring size
    (``collectives.collective_s``: 2(n-1)/n x S/B for an all-reduce, (n-1)/n x S/B for the
    others, plus the fastest pair's latency); 0 for a group of one or nothing to send.
    ``scaleup``: the scale-up link's achieved bandwidth (``scaleup_bandwidth``), the cap of
    NCCL's two-node tree (``collectives.tree_bus_bytes_per_s``)."""
    if _same_for_all(group, 1) or _same_for_all(volume_bytes, 0):
        return 0.0
    return collective_s(volume_bytes, group, per_node, bandwidth, all_reduce, xp,
                        0.0 if net is None else net.hop_extra_s, scaleup_bytes_per_s=scaleup)


def _same_for_all(value: Num, at_most: float) -> bool:
    """Whether ``value`` is one Python number at most ``at_most`` (a group of one or nothing to
    send, the same for every plan of a search: a dense model's expert state, unreplicated
    shards): the collective is then 0 without computing it, as ``collective_s`` would answer
    (issue 38: the search built those arrays only to zero them)."""
    return isinstance(value, (int, float)) and value <= at_most


def scaleup_bandwidth(acc: AcceleratorSpec, cal: Calibration) -> float:
    """The scale-up link's achieved bandwidth (``ring_bandwidth`` inside one node)."""
    return acc.scaleup_bytes_per_s * cal.scaleup_efficiency_fraction


def ring_bandwidth(
    acc: AcceleratorSpec, group: Num, per_node: Num, cal: Calibration, xp: Num = SCALAR,
    net: FabricTerms | None = None,
) -> Num:
    """Achieved bus bandwidth of a ring collective over ``group`` ranks, ``per_node`` per node.

    Inside one node it is the scale-up link. Across nodes NCCL runs one ring per NIC, so the
    ring's bus bandwidth is the node's aggregate NIC bandwidth for the group's members
    (per_node x per-GPU scale-out), capped by the scale-up link (nccl-tests PERFORMANCE.md:
    multi-node bus bandwidth approaches the per-node network bandwidth).

    On a stated fabric (``net``) the network share runs at ``net.bandwidth_fraction`` of it
    (protocol and loss), divided by the oversubscription ratio when the group spans more
    than one leaf (``fabric.FabricTerms.spine_factor``): a ring runs at its slowest link.
    """
    scaleup = scaleup_bandwidth(acc, cal)
    network = per_node * acc.scaleout_bytes_per_s * cal.scaleout_efficiency_fraction
    if net is not None:
        network = network * net.bandwidth_fraction / net.spine_factor(
            group / xp.maximum(per_node, 1), xp)
    across = xp.minimum(scaleup, network)
    return xp.where(per_node >= group, scaleup, across)


def all_to_all_s(
    volume_bytes: Num, group: Num, per_node: Num, acc: AcceleratorSpec, cal: Calibration,
    xp: Num = SCALAR, inter_node_share: float = 1.0, net: FabricTerms | None = None,
) -> Num:
    """All-to-all of ``volume_bytes`` per rank: (per_node-1)/group of it stays on the scale-up
    link, (group-per_node)/group crosses the rank's own NIC; the two run concurrently.
    ``inter_node_share`` scales the cross-node part (node-limited routing). On a stated
    fabric (``net``) the cross-node part runs at ``net.bandwidth_fraction``, the share of it
    bound for other leaves (``FabricTerms.off_leaf_share``) at 1/oversubscription of that,
    and a group that crosses nodes pays the fabric's extra latency once."""
    intra = (per_node - 1) / group * volume_bytes / (
        acc.scaleup_bytes_per_s * cal.scaleup_efficiency_fraction
    )
    inter = inter_node_share * (group - per_node) / group * volume_bytes / (
        acc.scaleout_bytes_per_s * cal.scaleout_efficiency_fraction
    )
    latency = cal.collective_latency_s
    if net is not None:
        nodes = group / xp.maximum(per_node, 1)
        inter = inter / net.bandwidth_fraction * (
            1.0 + net.off_leaf_share(nodes, xp) * (net.oversubscription - 1.0))
        latency = latency + xp.where(group > per_node, net.hop_extra_s, 0.0)
    seconds = latency + xp.maximum(intra, inter)
    return xp.where((group > 1) & (volume_bytes > 0), seconds, 0.0)


def point_to_point_bandwidth(
    acc: AcceleratorSpec, in_scaleup: Num, cal: Calibration, xp: Num = SCALAR,
    net: FabricTerms | None = None, nodes: Num = 1,
) -> Num:
    """A send's bandwidth: the scale-up link inside the domain, else the GPU's NIC; on a
    stated fabric the NIC at ``net.bandwidth_fraction``, over the spine (the pipeline spans
    ``nodes`` nodes) at 1/oversubscription of it."""
    network = acc.scaleout_bytes_per_s * cal.scaleout_efficiency_fraction
    if net is not None:
        network = network * net.bandwidth_fraction / net.spine_factor(nodes, xp)
    return xp.where(
        in_scaleup,
        acc.scaleup_bytes_per_s * cal.scaleup_efficiency_fraction,
        network,
    )


def group_nodes(plan: PlanVars, geo: Geometry, gpus_per_node: int, xp: Num = SCALAR,
                ) -> dict[str, Num]:
    """Nodes each parallel group spans, for the oversubscription rule (``fabric``), in
    Megatron's rank order (tensor innermost, then context, data, pipeline; consecutive nodes):
    a group of g ranks with k per node spans g/k nodes; a pipeline spans from its first
    stage's node to its last's, (p-1) x t x c x d / (GPUs per node) + 1."""
    nodes = {
        "tp": plan.tp / xp.maximum(geo.tp_per_node, 1),
        "cp": plan.cp / xp.maximum(geo.cp_per_node, 1),
        "dp": geo.shard_group_size / xp.maximum(geo.shard_per_node, 1),
        "dp replicas": plan.dp_replicas / xp.maximum(geo.replica_per_node, 1),
        "ep": plan.ep / xp.maximum(geo.ep_per_node, 1),
        "pp": pipeline_nodes(plan, geo, gpus_per_node, xp),
    }
    return nodes


def pipeline_nodes(plan: PlanVars, geo: Geometry, gpus_per_node: int, xp: Num = SCALAR) -> Num:
    """Nodes a pipeline spans (``group_nodes``'s "pp"): one inside the scale-up domain, else
    from its first stage's node to its last's, (p-1) x t x c x d / (GPUs per node) + 1."""
    return xp.where(geo.pp_in_scaleup, 1.0,
                    (plan.pp - 1) * plan.tp * plan.cp * plan.dp / gpus_per_node + 1.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class _MicroBatch:
    compute_s: Num
    attention_s: Num
    tp_s: Num
    cp_s: Num
    ep_s: Num
    pp_s: Num


def _micro_batch_time(
    model: ModelSpec,
    counts: ParameterCount,
    cluster: ClusterSpec,
    plan: PlanVars,
    training: TrainingSpec,
    geo: Geometry,
    cal: Calibration,
    per_micro_batch_bytes: Num,
    xp: Num,
    net: FabricTerms | None = None,
) -> _MicroBatch:
    acc = cluster.accelerator
    t, h = plan.tp, model.hidden_size
    tokens = geo.tokens_per_micro_batch
    precision = training.precision
    half_precision = Precision.BF16 if precision == Precision.FP8 else precision
    linear_peak = acc.peak_for(precision)
    half_peak = acc.peak_for(_half(precision, acc))
    linear_max = cal.gemm_efficiency_for(acc.id, precision)
    half_max = cal.gemm_efficiency_for(acc.id, half_precision)
    ridge = half_peak / acc.hbm_bytes_per_s

    full = plan.full_recompute
    passes = 3.0 + xp.where(full, 1.0, 0.0)
    # A frozen base computes no weight gradients: forward + input gradient (+ the recomputed
    # forward) for its matmuls (flops.FROZEN_FORWARD_BACKWARD_MULTIPLIER).
    frozen = training.adapters
    elementwise_passes = passes
    if frozen:
        passes = passes - 1.0
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
        # Token-dropping MoE computes capacity-padded expert buffers (specs: capacity factor).
        cf = plan.moe_capacity_factor
        expert_flops = 2.0 * k * cf * counts.expert_mlp / t * geo.moe_layers_per_stage
        shared_flops = (
            2.0 * (counts.shared_experts_per_layer + counts.router_per_layer) / t
            * geo.moe_layers_per_stage
        )
        tokens_per_expert = cf * tokens * k * plan.ep / model.num_experts * (t / geo.expert_tp)
        eff_expert = cal.moe_expert_efficiency_fraction * gemm_efficiency(
            linear_max,
            gemm_intensity(
                xp.maximum(tokens_per_expert, 1.0), h,
                gated * model.expert_ffn_hidden_size / geo.expert_tp,
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
    logits_s = tokens * (2.0 if frozen else 3.0) * logits_flops / (half_peak * eff_logits)
    if frozen:
        # The adapters train fully (3 passes, + 1 recomputed), as skinny GEMMs of width r, in
        # bf16; a quantised base is dequantised per matmul use (forward, input gradient,
        # recomputed forward), counted as HBM traffic: read the stored weight, write bf16.
        rank = training.lora_spec.rank
        adapter_flops = (2.0 * adapter_params_per_layer(model, training.lora_spec) / t
                         * geo.layers_per_stage)
        eff_adapter = gemm_efficiency(half_max, gemm_intensity(tokens, h, rank), ridge, cal)
        linear_s = linear_s + tokens * (passes + 1.0) * adapter_flops / (
            half_peak * eff_adapter)
        if dequantises(training):
            linear_s = linear_s + passes * geo.layer_params_per_gpu * (
                frozen_base_bytes_per_param(training) + ACTIVATION_BYTES) / acc.hbm_bytes_per_s
        if quantized_head(training):
            # A quantised head (LoraSpec.quantize_head) is dequantised for its forward and
            # its input gradient, as the layers' matmuls are.
            logits_s = logits_s + 2.0 * geo.head_params_per_gpu * (
                frozen_base_bytes_per_param(training) + ACTIVATION_BYTES) / acc.hbm_bytes_per_s

    # FlashAttention: causal half of the full score work, per GPU. Without it the full
    # matrix is computed and masked (Dao et al. 2022, Algorithm 0).
    causal = CAUSAL_FRACTION if training.flash_attention else 1.0
    attn_core_per_token = (
        2.0 * training.seq_len * model.num_heads
        * (model.attention_head_dim + model.value_head_dim) / t * causal
    )
    attn_passes = 1.0 + ATTENTION_BACKWARD_MULTIPLIER + xp.where(
        full | plan.selective_recompute, 1.0, 0.0
    )
    kernel_fraction = kernel_peak_fraction(training.framework, acc.id,
                                           training.attention_kernel,
                                           training.framework_version)
    if training.flash_attention:
        attention_peak_fraction = (
            half_max * cal.attention_efficiency_fraction if kernel_fraction is None
            else kernel_fraction * cal.attention_kernel_scale
        )
        attention_s = (
            tokens * geo.layers_per_stage * attn_core_per_token * attn_passes
            / (half_peak * attention_peak_fraction)
        )
    else:
        attention_s = unfused_attention_s(model, training, tokens, t, geo.layers_per_stage,
                                          half_peak, half_max, acc.hbm_bytes_per_s,
                                          full, plan.selective_recompute, xp)

    # Memory-bound elementwise work over the stored activations (forward, backward, and the
    # recomputed forward under full recomputation).
    elementwise_s = (
        cal.elementwise_passes * per_micro_batch_bytes * elementwise_passes / 3.0
        / acc.hbm_bytes_per_s
    )
    if runs_eager(training):
        elementwise_s = elementwise_s * cal.eager_elementwise_multiplier
    compute_s = (linear_s + logits_s + attention_s + elementwise_s) / cal.stack_efficiency_for(
        training.framework)

    # Tensor parallel: 4 collectives per layer (+2 with full recompute) of tokens*h bf16.
    tp_volume = tokens * h * ACTIVATION_COMM_BYTES
    tp_count = (4.0 + xp.where(full, 2.0, 0.0)) * geo.layers_per_stage
    tp_s = tp_count * _collective_s(
        tp_volume, t, geo.tp_per_node, ring_bandwidth(acc, t, geo.tp_per_node, cal, xp, net),
        True, xp, net, scaleup_bandwidth(acc, cal),
    ) * cal.tp_comm_exposed_fraction

    # Context parallel: ring exchange of local K and V, hidden behind attention where possible.
    kv_heads = model.num_heads if model.mla is not None else model.num_kv_heads
    kv_bytes = tokens * kv_heads * (model.attention_head_dim + model.value_head_dim) * (
        ACTIVATION_COMM_BYTES
    ) / xp.minimum(t, kv_heads)
    # Each of the c-1 ring steps is a send/receive with its own launch latency.
    cp_latency = cal.collective_latency_s
    if net is not None:
        cp_latency = cp_latency + xp.where(plan.cp > geo.cp_per_node, net.hop_extra_s, 0.0)
    cp_per_layer = 3.0 * (plan.cp - 1) * (cp_latency + kv_bytes / ring_bandwidth(
        acc, plan.cp, geo.cp_per_node, cal, xp, net
    ))
    attention_per_layer = attention_s / geo.layers_per_stage
    cp_s = xp.where(
        plan.cp > 1,
        geo.layers_per_stage * xp.maximum(0.0, cp_per_layer - attention_per_layer),
        0.0,
    )

    # Expert parallel: dispatch + combine, forward and backward (+ forward again on recompute).
    ep_s: Num = 0.0
    if model.is_moe:
        sp_divisor = xp.where(plan.sequence_parallel, t, 1)
        a2a_volume = tokens * model.experts_per_token * h * ACTIVATION_COMM_BYTES / sp_divisor
        # Forward dispatch, forward combine, and their two backward counterparts (+ a forward
        # pair again under full recompute). FP8 dispatch halves the forward dispatches only:
        # combine and every backward all-to-all stay bf16 (DeepSeek-V3 section 3.3).
        dispatch_share = (FP8_DISPATCH_BYTES / ACTIVATION_COMM_BYTES
                          if plan.moe_dispatch_fp8 else 1.0)
        forward_pairs = 1.0 + xp.where(full, 1.0, 0.0)
        a2a_count = forward_pairs * (dispatch_share + 1.0) + 2.0
        # Node-limited routing: a token's copies cross the network once per remote node it
        # visits, at most M of them, instead of once per remote expert (k).
        k = model.experts_per_token
        inter_node_share = (min(1.0, plan.moe_max_nodes_per_token / k)
                            if plan.moe_max_nodes_per_token else 1.0)
        raw_s = geo.moe_layers_per_stage * a2a_count * all_to_all_s(
            a2a_volume, plan.ep, geo.ep_per_node, acc, cal, xp, inter_node_share, net)
        if plan.moe_overlap == MoeOverlap.NONE:
            exposed = raw_s
        elif plan.moe_overlap == MoeOverlap.DUALPIPE:
            exposed = xp.maximum(0.0, raw_s - (linear_s + attention_s))
        else:
            exposed = cal.ep_comm_exposed_fraction * raw_s
        ep_s = xp.where(plan.ep > 1, exposed, 0.0)

    # Pipeline: activations and their gradients cross each stage boundary, v times each.
    pp_s = xp.where(plan.pp > 1, _pipeline_p2p_s(tokens, h, plan, geo, training, compute_s,
                                                 acc, cal, xp, net,
                                                 cluster.gpus_per_node), 0.0)

    return _MicroBatch(
        compute_s=compute_s,
        attention_s=attention_s,
        tp_s=tp_s,
        cp_s=cp_s,
        ep_s=ep_s,
        pp_s=pp_s,
    )


def _pipeline_p2p_s(tokens: Num, h: int, plan: PlanVars, geo: Geometry,
                    training: TrainingSpec, compute_s: Num, acc: AcceleratorSpec,
                    cal: Calibration, xp: Num, net: FabricTerms | None = None,
                    gpus_per_node: int = 1) -> Num:
    """Exposed seconds per micro-batch of the pipeline's point-to-point sends: b*s*h 16-bit
    activations forward and their gradients backward at each stage boundary, v times with
    interleaving, each send paying the point-to-point latency.

    - Sequence parallelism leaves each tensor-parallel rank 1/t of the activations to send.
      Without it Megatron-LM still sends 1/t per rank and all-gathers the rest inside the
      node (the scatter/gather optimisation, Narayanan et al. 2021 section 4.1;
      ``--no-scatter-gather-tensors-in-pipeline`` turns it off, on by default).
    - Megatron overlaps the sends with the next chunk's compute under the interleaved
      schedule (``overlap_p2p_comm``, on unless ``--no-overlap-p2p-communication``; it acts
      only with virtual stages, megatron/training/arguments.py), so only what outlasts the
      micro-batch's compute is exposed there. Other stacks and the plain 1F1B schedule wait
      for each send."""
    megatron = training.framework == Framework.MEGATRON
    split = xp.where(plan.sequence_parallel, plan.tp, plan.tp if megatron else 1)
    p2p_bytes = tokens * h * ACTIVATION_COMM_BYTES / split
    latency = cal.collective_latency_s
    nodes: Num = 1
    if net is not None:
        latency = latency + xp.where(geo.pp_in_scaleup, 0.0, net.hop_extra_s)
        nodes = pipeline_nodes(plan, geo, gpus_per_node, xp)
    bandwidth = point_to_point_bandwidth(acc, geo.pp_in_scaleup, cal, xp, net, nodes)
    send_s = latency + p2p_bytes / bandwidth
    if megatron:
        # The all-gather of the other t-1 slices over the scale-up link (no SP only).
        gather = (plan.tp - 1) / plan.tp * tokens * h * ACTIVATION_COMM_BYTES / (
            acc.scaleup_bytes_per_s * cal.scaleup_efficiency_fraction)
        send_s = send_s + xp.where(plan.sequence_parallel | (plan.tp == 1), 0.0, gather)
    raw_s = 2.0 * plan.vp * send_s
    if megatron:
        return xp.where(plan.vp > 1, xp.maximum(0.0, raw_s - compute_s), raw_s)
    return raw_s


def step_time(
    model: ModelSpec,
    counts: ParameterCount,
    cluster: ClusterSpec,
    plan: PlanVars,
    training: TrainingSpec,
    geo: Geometry,
    cal: Calibration,
    per_micro_batch_bytes: Num,
    xp: Num = SCALAR,
) -> StepTime:
    """Seconds per optimizer step on the slowest stage, with the breakdown.
    ``per_micro_batch_bytes`` is the stage's activations of one micro-batch (from
    ``memory.stage_activation_bytes``), which sets the elementwise work."""
    acc = cluster.accelerator
    net = terms_of(cluster)
    mb = _micro_batch_time(model, counts, cluster, plan, training, geo, cal,
                           per_micro_batch_bytes, xp, net)
    m = geo.num_micro_batches
    micro_batch_s = _total(mb.compute_s, mb.tp_s, mb.cp_s, mb.ep_s, mb.pp_s)
    bubble_s = (plan.pp - 1) / plan.vp * micro_batch_s

    params = geo.layer_params_per_gpu + xp.maximum(
        geo.embedding_params_per_gpu, geo.head_params_per_gpu
    )
    experts = geo.expert_params_per_gpu
    frozen_params = params
    if training.adapters:
        # Only the adapters have gradients and optimizer state: the gradient traffic, the
        # optimizer step and the states' sharding concern them alone. Under ZeRO-3 the frozen
        # base is sharded too, so its weights are all-gathered at their stored precision,
        # forward and backward (the backward needs them for the input gradients), below.
        params = adapter_params_per_gpu(model, training, geo, plan.tp)
    shard = xp.where(plan.zero_stage >= 1, geo.shard_group_size, 1)
    expert_shard = xp.where(plan.zero_stage >= 1, geo.expert_shard_group_size, 1)
    shard_params = params / shard + experts / expert_shard
    dp_bw = ring_bandwidth(acc, geo.shard_group_size, geo.shard_per_node, cal, xp, net)
    layout = state_layout(training)
    grads = _GradientTraffic.of(training, model, plan, layout, net, xp)
    # Replicas imply ZeRO >= 1 (specs), so their all-reduce moves the sharded gradients.
    scaleup = scaleup_bandwidth(acc, cal)
    dp_comm = (_dp_traffic_s(params, geo.shard_group_size, geo.shard_per_node, plan.zero_stage,
                             dp_bw, layout, xp, grads, scaleup)
               + _dp_traffic_s(experts, geo.expert_shard_group_size, geo.shard_per_node,
                               plan.zero_stage, dp_bw, layout, xp, grads, scaleup)
               + _replica_all_reduce_s(shard_params, plan.dp_replicas, geo.replica_per_node,
                                       acc, layout, cal, xp, grads))
    if training.adapters:
        frozen_bytes = frozen_params * frozen_base_bytes_per_param(training)
        gathers = 2.0 * _collective_s(frozen_bytes, geo.shard_group_size, geo.shard_per_node,
                                      dp_bw, False, xp, net)
        dp_comm = dp_comm + xp.where((plan.zero_stage == 3) & (geo.shard_group_size > 1),
                                     gathers, 0.0)
    exposed = xp.maximum(dp_comm - micro_batch_s,
                         cal.dp_exposed_fraction_for(training.framework) * dp_comm)
    # FSDP (ZeRO-3 without PP) gathers and reduces every micro-batch, overlapping with it;
    # with pipeline stages the parameters stay gathered across micro-batches and the gradients
    # are reduced once per step (torchtitan; PyTorch's pipeline stages). Its traffic and
    # FSDP2's copies around it recur alike.
    zero3_rounds = xp.where((plan.zero_stage == 3) & (plan.pp == 1), m, 1)
    dp_exposed = zero3_rounds * exposed

    optimizer_s = (0.0 if plan.offload_optimizer
                   else OPTIMIZER_BYTES_TOUCHED_PER_PARAM * shard_params / acc.hbm_bytes_per_s)
    if grads.powersgd:
        # PowerSGD's matmuls and error feedback over the local gradient, once per step
        # (``fabric.powersgd_s``), counted with the optimizer step.
        optimizer_s = optimizer_s + powersgd_s(
            training, params + experts, acc.peak_for(_half(training.precision, acc)),
            acc.hbm_bytes_per_s, xp)
    host_offload_s = _host_offload_s(model, plan, geo, layout, shard_params, micro_batch_s,
                                     per_micro_batch_bytes, acc.id, cal, xp)

    fsdp_copy_s = _times(zero3_rounds, fsdp2_copy_s(
        params, geo.shard_group_size, experts, geo.expert_shard_group_size, training,
        plan.zero_stage, acc.hbm_bytes_per_s, xp))

    work_s = _total(m * micro_batch_s, bubble_s, dp_exposed, optimizer_s, host_offload_s,
                    fsdp_copy_s)
    return StepTime(
        compute_s=m * mb.compute_s,
        tp_comm_s=_times(m, mb.tp_s),
        cp_comm_s=_times(m, mb.cp_s),
        ep_comm_s=_times(m, mb.ep_s),
        pp_comm_s=_times(m, mb.pp_s),
        pp_bubble_s=bubble_s,
        dp_comm_exposed_s=dp_exposed,
        optimizer_s=optimizer_s,
        host_offload_s=host_offload_s,
        fsdp_copy_s=fsdp_copy_s,
        # tp*pp*dp*cp = num_gpus for every plan (specs.validate_plan), so one scalar serves
        # every candidate of a bulk search.
        overhead_s=step_overhead_s(cluster.num_gpus, work_s, cal),
    )


def step_overhead_s(world: int, work_s: Num, cal: Calibration) -> Num:
    """Per-step time outside the modelled work, on ``world`` GPUs whose modelled step is
    ``work_s`` seconds:

    - ``cal.step_overhead_s``, the same at any scale: the optimizer's and gradient clipping's
      kernel launches, the loss read-back, the data loader's hand-off. The single-GPU steps
      measured on this project's H200 (benchmarks/device, 1 to 8 micro-batches per step)
      put it at about 10 ms.
    - ``cal.step_sync_s_per_doubling * log2(world)``: the latency of the per-step global
      synchronisations (loss and gradient-norm all-reduces, the barrier before the
      optimizer step), which grows with the number of ranks as a tree's depth does: the
      alpha * ceil(log2 p) term of binomial-tree and recursive-doubling collectives (Thakur,
      Rabenseifner and Gropp 2005, "Optimization of Collective Communication Operations in
      MPICH", IJHPCA 19(1), section 2) and of NCCL's double binary trees (Sanders, Speck and
      Traeff 2009).
    - ``cal.straggler_fraction * sqrt(2 ln world) * work_s``: a synchronous step ends when
      its slowest rank does. With per-rank step times of mean mu and standard deviation
      sigma = straggler_fraction * mu, the expected maximum of ``world`` of them is at most
      mu + sigma * sqrt(2 ln world) (the Gaussian extreme-value bound; David and Nagaraja,
      Order Statistics, 3rd ed. 2003, section 4.2). Stragglers are the mechanism Dean and
      Barroso (2013, "The Tail at Scale", CACM 56(2)) describe and MegaScale measures at
      LLM scale (Jiang et al. 2024, arXiv 2402.15627, section 5).

    Both scale terms vanish on one GPU. The three constants are fitted (benchmarks/
    calibrate.py); issue 15 asked for a sourced efficiency loss with scale, and a single
    fixed overhead fitted to many-node sweeps overstated one GPU's step by 0.1 s."""
    log_world = math.log(world)
    return (cal.step_overhead_s
            + cal.step_sync_s_per_doubling * log_world / LN_2
            + cal.straggler_fraction * math.sqrt(2.0 * log_world) * work_s)


def _host_offload_s(
    model: ModelSpec, plan: PlanVars, geo: Geometry, layout: StateLayout, shard_params: Num,
    micro_batch_s: Num, per_micro_batch_bytes: Num, accelerator_id: str, cal: Calibration,
    xp: Num,
) -> Num:
    """Exposed time of offloaded state per step.

    - optimizer (ZeRO-Offload, Ren et al. 2021, sections 4.2-4.3): the gradient shards go to
      the host during backward (hidden), the CPU runs the optimizer over the shard, and the
      updated 16-bit weights come back: the CPU step and the upload are exposed;
    - weights (ZeRO-Infinity; FSDP CPU offload): every micro-batch fetches the weight shards
      for forward and again for backward, overlapped with that micro-batch;
    - activations: what backward needs goes to the host and back once per micro-batch,
      overlapped with it (MaxText and Megatron-Core offload asynchronously).
    """
    if not (plan.offload_optimizer or plan.offload_weights or plan.offload_activations):
        return 0.0  # one Python bool for every candidate: nothing to compute
    m = plan.num_micro_batches
    host_link = HOST_LINK_BY_ACCELERATOR.get(accelerator_id, HOST_LINK_BYTES_PER_S)
    cpu_step_s = OPTIMIZER_BYTES_TOUCHED_PER_PARAM * shard_params / HOST_MEMORY_BYTES_PER_S_PER_GPU
    upload_s = layout.gather_bytes_per_param * shard_params / host_link
    optimizer_s = xp.where(plan.offload_optimizer, cpu_step_s + upload_s, 0.0)
    fetch_s = 2.0 * layout.gather_bytes_per_param * shard_params / host_link
    weights_s = xp.where(plan.offload_weights, m * xp.maximum(0.0, fetch_s - micro_batch_s), 0.0)
    boundary = ACTIVATION_COMM_BYTES * model.hidden_size * geo.tokens_per_micro_batch / xp.where(
        plan.sequence_parallel, plan.tp, 1) * geo.layers_per_stage
    stored = xp.where(
        plan.full_recompute, boundary,
        xp.where(plan.selective_recompute,
                 cal.selective_activation_fraction * per_micro_batch_bytes,
                 per_micro_batch_bytes),
    )
    activations_s = xp.where(
        plan.offload_activations,
        m * xp.maximum(0.0, 2.0 * stored / host_link - micro_batch_s), 0.0,
    )
    return optimizer_s + weights_s + activations_s


@dataclass(frozen=True, slots=True, kw_only=True)
class _GradientTraffic:
    """How the data-parallel gradients travel: the fabric (None: today's links), the byte
    fraction of gradient compression (``fabric.gradient_bytes_fraction``) and whether it is
    PowerSGD (all-reduced factors)."""

    net: FabricTerms | None
    fraction: Num
    powersgd: bool

    @classmethod
    def of(cls, training: TrainingSpec, model: ModelSpec, plan: PlanVars, layout: StateLayout,
           net: FabricTerms | None, xp: Num) -> _GradientTraffic:
        compression = training.gradient_compression
        powersgd = (compression is not None
                    and compression.method == CompressionMethod.POWERSGD)
        fraction: Num = (gradient_bytes_fraction(training, model, plan.tp,
                                                 layout.grad_bytes_per_param, xp)
                         if compresses(training) else 1.0)
        return cls(net=net, fraction=fraction, powersgd=powersgd)


def _half(precision: Precision, acc: AcceleratorSpec) -> Precision:
    """The 16-bit precision the step's non-linear-layer matmuls run in."""
    half = Precision.BF16 if precision == Precision.FP8 else precision
    return half if half in acc.peak_flops_per_s else precision


def _replica_all_reduce_s(
    shard_params: Num, replicas: Num, per_node: Num, acc: AcceleratorSpec,
    layout: StateLayout, cal: Calibration, xp: Num, grads: _GradientTraffic | None = None,
) -> Num:
    """Hybrid sharding's all-reduce of each rank's gradient shard across the ``replicas``
    ranks that hold the same shard, after the reduce-scatter inside its shard group: PyTorch
    FSDP ``HYBRID_SHARD`` (Zhao et al. 2023, "PyTorch FSDP", VLDB 16(12), section 3.2.2:
    reduce-scatter within the shard group, then all-reduce across groups), MiCS's
    hierarchical synchronisation (Zhang et al. 2022, arXiv 2205.00119, section 3.3). A ring
    all-reduce (factor 2) at the replica group's ring bandwidth; it happens wherever the
    shard group's reduce-scatter does (every micro-batch under ZeRO-3), and overlaps the
    backward like the rest of the data-parallel traffic."""
    if _same_for_all(replicas, 1):
        return 0.0
    # Without a fabric or compression (``grads`` None, or net None and fraction 1.0, an exact
    # product) this is the arithmetic of before.
    net = None if grads is None else grads.net
    fraction = 1.0 if grads is None else grads.fraction
    gradient_bytes = shard_params * layout.grad_bytes_per_param * fraction
    bandwidth = ring_bandwidth(acc, replicas, per_node, cal, xp, net)
    return _collective_s(gradient_bytes, replicas, per_node, bandwidth, True, xp, net,
                         scaleup_bandwidth(acc, cal))


def _dp_traffic_s(
    params: Num, group: Num, per_node: Num, zero_stage: Num, bandwidth: Num,
    layout: StateLayout, xp: Num, grads: _GradientTraffic | None = None,
    scaleup: Num = None,
) -> Num:
    """Data-parallel traffic per step (ZeRO 0-2) or per micro-batch (ZeRO-3): all-reduce of
    the gradients (ZeRO-0), or their reduce-scatter plus one all-gather of the weights
    (ZeRO-1/2), or plus two (ZeRO-3: forward and backward). Gradients travel in the stack's
    gradient precision, weights in their working precision (``memory.state_layout``).

    Under gradient compression (``grads``) the gradient bytes are ``grads.fraction`` of
    that; PowerSGD's factors cannot be reduce-scattered, so its gradients are all-reduced
    at every ZeRO stage (Vogels et al. 2019, Algorithm 1: all-reduce P, then Q) and each
    rank keeps its shard of the decompressed result."""
    if _same_for_all(params, 0) or _same_for_all(group, 1):
        return 0.0
    net = None if grads is None else grads.net
    fraction = 1.0 if grads is None else grads.fraction
    gradient_bytes = params * layout.grad_bytes_per_param * fraction
    weights = params * layout.gather_bytes_per_param
    all_reduce = _collective_s(gradient_bytes, group, per_node, bandwidth, True, xp, net,
                               scaleup)
    reduce_scatter = (all_reduce if grads is not None and grads.powersgd else _collective_s(
        gradient_bytes, group, per_node, bandwidth, False, xp, net))
    all_gather = _collective_s(weights, group, per_node, bandwidth, False, xp, net)
    seconds = xp.where(
        zero_stage == 0, all_reduce,
        xp.where(zero_stage == 3, reduce_scatter + 2.0 * all_gather, reduce_scatter + all_gather),
    )
    return xp.where((group > 1) & (params > 0), seconds, 0.0)
