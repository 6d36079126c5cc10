"""Per-GPU shapes of a parallel layout, shared by the memory and timing models.

Megatron-LM places ranks in the order tp, cp, dp, pp (tp innermost; Narayanan et al. 2021
section 3.3 keeps tensor parallelism inside a node), shards the embedding and output layer
over tp ("vocab parallel"), and places them on the first and last pipeline stages. Expert
parameters are divided over ep, and over tp unless ep folds over it (Megatron-Core MoE
parallel folding, Liu et al. 2025, arXiv 2504.14960).
"""

from __future__ import annotations

from dataclasses import dataclass

from service.core.params import ParameterCount
from service.core.specs import ClusterSpec, ModelSpec, ParallelismPlan, PlanLayout, TrainingSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class Geometry:
    """Per-GPU quantities for the slowest (most loaded) pipeline stage."""

    tokens_per_micro_batch: float
    """Tokens one GPU handles per micro-batch: b*s/c (CP splits the sequence)."""
    num_micro_batches: int
    layers_per_stage: int
    dense_layers_per_stage: float
    moe_layers_per_stage: float
    layer_params_per_gpu: float
    """Non-expert parameters of the stage's layers on one GPU (divided by tp)."""
    expert_params_per_gpu: float
    """Routed-expert parameters of the stage's layers on one GPU (divided by ep and expert tp)."""
    embedding_params_per_gpu: float
    """Input embedding on the first stage, divided by tp."""
    head_params_per_gpu: float
    """Output layer on the last stage, divided by tp (a tied copy when pp > 1)."""
    dp_group_size: int
    """Ranks sharing the non-expert parameters: dp*cp (Megatron shards the optimizer over both)."""
    expert_dp_group_size: int
    """Ranks sharing one expert shard: tp*dp*cp / (ep*expert_tp)."""
    expert_tp: int
    tp_per_node: int
    """Members of one tensor-parallel group inside a node (stride 1)."""
    cp_per_node: int
    """Members of one context-parallel group inside a node (stride tp)."""
    dp_per_node: int
    """Members of one data-parallel (dp*cp) group inside a node (stride tp)."""
    ep_per_node: int
    """Members of one expert-parallel group inside a node (stride expert tp)."""
    pp_in_scaleup: bool
    """Whether neighbouring pipeline stages share a node (stride tp*cp*dp)."""


def build_geometry(
    model: ModelSpec,
    counts: ParameterCount,
    cluster: ClusterSpec,
    plan: ParallelismPlan,
    training: TrainingSpec,
    layout: PlanLayout,
) -> Geometry:
    """Derive the per-GPU shapes of ``plan``; the stage with the most layers is modelled."""
    t, c = plan.tp, plan.cp
    ls = layout.layers_per_stage
    moe_share = counts.num_moe_layers / model.num_layers
    moe_layers = ls * moe_share
    dense_layers = ls - moe_layers
    non_expert_moe_layer = counts.moe_layer - counts.routed_experts_per_layer
    layer_params = (dense_layers * counts.dense_layer + moe_layers * non_expert_moe_layer) / t
    expert_params = moe_layers * counts.routed_experts_per_layer / (plan.ep * layout.expert_tp)
    head = counts.output_head if not model.tied_embeddings else counts.embedding
    if plan.pp == 1 and model.tied_embeddings:
        head = 0
    node = cluster.gpus_per_node
    return Geometry(
        tokens_per_micro_batch=plan.micro_batch * training.seq_len / c,
        num_micro_batches=layout.num_micro_batches,
        layers_per_stage=ls,
        dense_layers_per_stage=dense_layers,
        moe_layers_per_stage=moe_layers,
        layer_params_per_gpu=layer_params,
        expert_params_per_gpu=expert_params,
        embedding_params_per_gpu=counts.embedding / t,
        head_params_per_gpu=head / t,
        dp_group_size=plan.dp * c,
        expert_dp_group_size=max(1, (t * plan.dp * c) // (plan.ep * layout.expert_tp)),
        expert_tp=layout.expert_tp,
        tp_per_node=_members_per_node(t, 1, node),
        cp_per_node=_members_per_node(c, t, node),
        dp_per_node=_members_per_node(plan.dp * c, t, node),
        ep_per_node=_members_per_node(plan.ep, layout.expert_tp, node),
        pp_in_scaleup=t * c * plan.dp * plan.pp <= node,
    )


def _members_per_node(group: int, stride: int, gpus_per_node: int) -> int:
    """How many ranks of a group whose members are ``stride`` ranks apart share one node."""
    return max(1, min(group, gpus_per_node // stride))
