"""Per-GPU shapes of a parallel layout, shared by the memory and timing models.

Megatron-LM places ranks in the order tp, cp, dp, pp (tp innermost; Narayanan et al. 2021
section 3.3 keeps tensor parallelism inside a node), shards the embedding and output layer
over tp ("vocab parallel"), and places them on the first and last pipeline stages. Expert
parameters are divided over ep, and over tp unless ep folds over it (Megatron-Core MoE
parallel folding, Liu et al. 2025, arXiv 2504.14960).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from service.core.ops import SCALAR, Num
from service.core.params import ParameterCount
from service.core.specs import (
    ClusterSpec,
    Framework,
    ModelSpec,
    MoeOverlap,
    Offload,
    ParallelismPlan,
    PlanLayout,
    RecomputeMode,
    ShardUnit,
    TrainingSpec,
)

STACK_SHARD_UNIT = MappingProxyType({Framework.DEEPSPEED: ShardUnit.MATRIX,
                                     Framework.MAXTEXT: ShardUnit.MATRIX})
"""ZeRO-3 gather granularity by stack when the plan does not say; the others gather layers
(``specs.ShardUnit`` gives the sources)."""


def shard_unit(plan: ParallelismPlan, training: TrainingSpec) -> ShardUnit:
    if plan.fsdp_unit is not None:
        return plan.fsdp_unit
    return STACK_SHARD_UNIT.get(training.framework, ShardUnit.LAYER)


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanVars:
    """The plan-dependent inputs of the formulas: one plan as Python numbers, or many plans as
    numpy arrays of equal length (``service/core/ops.py``). Recomputation and sequence
    parallelism are booleans so that arrays can hold them."""

    tp: Num
    pp: Num
    dp: Num
    cp: Num
    ep: Num
    vp: Num
    micro_batch: Num
    zero_stage: Num
    sequence_parallel: Num
    full_recompute: Num
    selective_recompute: Num
    global_batch_seqs: Num
    num_micro_batches: Num
    layers_per_stage: Num
    expert_tp: Num
    offload_optimizer: Num = False
    """Optimizer state and sharded gradients in host memory (also set by weight offload)."""
    offload_weights: Num = False
    offload_activations: Num = False
    gather_matrices: Num = False
    """ZeRO-3 gathers one weight matrix at a time (``specs.ShardUnit.MATRIX``), else a layer."""
    moe_overlap: MoeOverlap = MoeOverlap.MEGATRON
    moe_dispatch_fp8: bool = False
    moe_max_nodes_per_token: int = 0
    """0: unlimited."""
    moe_capacity_factor: float = 1.0
    """Expert buffers relative to the routed tokens (1: dropless)."""
    dp_replicas: Num = 1
    """Replicas of the sharded state under hybrid sharding (``ParallelismPlan.dp_replicas``);
    1: the state is sharded over the whole data-parallel group."""

    @classmethod
    def of(cls, plan: ParallelismPlan, layout: PlanLayout, training: TrainingSpec) -> PlanVars:
        return cls(
            tp=plan.tp, pp=plan.pp, dp=plan.dp, cp=plan.cp, ep=plan.ep, vp=plan.vp,
            micro_batch=plan.micro_batch, zero_stage=plan.zero_stage,
            sequence_parallel=plan.sequence_parallel,
            full_recompute=plan.recompute == RecomputeMode.FULL,
            selective_recompute=plan.recompute == RecomputeMode.SELECTIVE,
            global_batch_seqs=training.global_batch_seqs,
            num_micro_batches=layout.num_micro_batches,
            layers_per_stage=layout.layers_per_stage, expert_tp=layout.expert_tp,
            offload_optimizer=bool(plan.offload & {Offload.OPTIMIZER, Offload.WEIGHTS}),
            offload_weights=Offload.WEIGHTS in plan.offload,
            offload_activations=Offload.ACTIVATIONS in plan.offload,
            gather_matrices=shard_unit(plan, training) == ShardUnit.MATRIX,
            moe_overlap=plan.moe_overlap, moe_dispatch_fp8=plan.moe_dispatch_fp8,
            moe_max_nodes_per_token=plan.moe_max_nodes_per_token or 0,
            moe_capacity_factor=plan.moe_capacity_factor or 1.0,
            dp_replicas=plan.dp_replicas,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Geometry:
    """Per-GPU quantities for the slowest (most loaded) pipeline stage."""

    tokens_per_micro_batch: Num
    """Tokens one GPU handles per micro-batch: b*s/c (CP splits the sequence)."""
    num_micro_batches: Num
    layers_per_stage: Num
    dense_layers_per_stage: Num
    moe_layers_per_stage: Num
    layer_params_per_gpu: Num
    """Non-expert parameters of the stage's layers on one GPU (divided by tp)."""
    expert_params_per_gpu: Num
    """Routed-expert parameters of the stage's layers on one GPU (divided by ep and expert tp)."""
    embedding_params_per_gpu: Num
    """Input embedding on the first stage, divided by tp."""
    head_params_per_gpu: Num
    """Output layer on the last stage, divided by tp (a tied copy when pp > 1)."""
    expert_dp_group_size: Num
    """Ranks sharing one expert shard: tp*dp*cp / (ep*expert_tp)."""
    shard_group_size: Num
    """Ranks the non-expert ZeRO state is sharded over: dp*cp (Megatron shards the optimizer
    over both), or dp_shard*cp under hybrid sharding (``PlanVars.dp_replicas`` replicas)."""
    expert_shard_group_size: Num
    """Ranks the expert ZeRO state is sharded over: the expert data-parallel group divided
    among the replicas."""
    shard_per_node: Num
    """Members of one shard group inside a node (stride tp)."""
    replica_per_node: Num
    """Members of one replica group (the ranks holding the same shard) inside a node (stride
    tp x the shard group)."""
    expert_tp: Num
    tp_per_node: Num
    """Members of one tensor-parallel group inside a node (stride 1)."""
    cp_per_node: Num
    """Members of one context-parallel group inside a node (stride tp)."""
    ep_per_node: Num
    """Members of one expert-parallel group inside a node (stride expert tp)."""
    pp_in_scaleup: Num
    """Whether neighbouring pipeline stages share a node (stride tp*cp*dp)."""


def build_geometry(
    model: ModelSpec,
    counts: ParameterCount,
    cluster: ClusterSpec,
    plan: PlanVars,
    training: TrainingSpec,
    xp: Num = SCALAR,
) -> Geometry:
    """Derive the per-GPU shapes of ``plan``; the stage with the most layers is modelled."""
    t, c = plan.tp, plan.cp
    ls = plan.layers_per_stage
    moe_share = counts.num_moe_layers / model.num_layers
    # A dense model's expert terms are one 0.0 for every plan (what ls x 0.0 gives), so a
    # search does not carry arrays of zeros through the expert state and its traffic.
    moe_layers = ls * moe_share if counts.num_moe_layers else 0.0
    dense_layers = ls - moe_layers
    non_expert_moe_layer = counts.moe_layer - counts.routed_experts_per_layer
    layer_params = (dense_layers * counts.dense_layer + moe_layers * non_expert_moe_layer) / t
    expert_params = (moe_layers * counts.routed_experts_per_layer / (plan.ep * plan.expert_tp)
                     if counts.num_moe_layers else 0.0)
    head = counts.output_head if not model.tied_embeddings else counts.embedding
    if model.tied_embeddings:
        head = xp.where(plan.pp == 1, 0, head)
    node = cluster.gpus_per_node
    expert_dp = xp.maximum(1, (t * plan.dp * c) // (plan.ep * plan.expert_tp))
    # Hybrid sharding: the dp*cp ranks form dp_replicas groups of consecutive shard ranks.
    shard = plan.dp * c // plan.dp_replicas
    return Geometry(
        tokens_per_micro_batch=plan.micro_batch * training.seq_len / c,
        num_micro_batches=plan.num_micro_batches,
        layers_per_stage=ls,
        dense_layers_per_stage=dense_layers,
        moe_layers_per_stage=moe_layers,
        layer_params_per_gpu=layer_params,
        expert_params_per_gpu=expert_params,
        embedding_params_per_gpu=counts.embedding / t,
        head_params_per_gpu=head / t,
        expert_dp_group_size=expert_dp,
        shard_group_size=shard,
        expert_shard_group_size=xp.maximum(1, expert_dp // plan.dp_replicas),
        shard_per_node=_members_per_node(shard, t, node, xp),
        replica_per_node=_members_per_node(plan.dp_replicas, t * shard, node, xp),
        expert_tp=plan.expert_tp,
        tp_per_node=_members_per_node(t, 1, node, xp),
        cp_per_node=_members_per_node(c, t, node, xp),
        ep_per_node=_members_per_node(plan.ep, plan.expert_tp, node, xp),
        pp_in_scaleup=t * c * plan.dp * plan.pp <= node,
    )


def _members_per_node(group: Num, stride: Num, gpus_per_node: int, xp: Num) -> Num:
    """How many ranks of a group whose members are ``stride`` ranks apart share one node."""
    return xp.maximum(1, xp.minimum(group, gpus_per_node // stride))
