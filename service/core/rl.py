"""RL post-training (GRPO/PPO-style, issue 43): the step of ``training.method`` rl, phase by phase.

One step (Sheng et al. 2024, HybridFlow/verl, arXiv 2409.19256, section 2.1 and Figure 1; Hu et
al. 2024, OpenRLHF, arXiv 2405.11143, section 3; Shao et al. 2024, DeepSeekMath, arXiv
2402.03300, section 4.1, GRPO: G samples per prompt, no critic, a KL term to a reference
policy):

- **generation**: the rollout engine generates ``prompts x samples`` responses. It is the
  serving model (``serving.serve``) at the batch the rollouts make: each replica of
  ``rollout_tp`` GPUs (the fastest within a node, or ``RlSpec.rollout_tp``) takes its share
  of the sequences in one fixed batch (all prefills, then ``response_tokens`` decode steps),
  in waves of the batch its KV memory and the engine's
  ``max_num_seqs`` admit (``ROLLOUT_MAX_NUM_SEQS``).
  When ``max_response_tokens`` is given, the step also waits for the longest response, which
  decodes its tail alone (``_tail_s``).
- **forward passes**: the policy's log-probabilities of the rollouts (verl's
  ``compute_log_prob``, OpenRLHF's experience maker, both recompute them with the training
  engine), the reference policy's (``reference_model``) and the reward model's score
  (``reward_model``; None is a rule-based reward on the CPU, not timed). Each is
  2 x (active matmul parameters) + attention FLOPs per token over the step's tokens, at the
  hardware-FLOP efficiency (HFU) the policy update reaches on the same GPUs.
- **policy update**: the training estimate of the same layout on the step's tokens
  (``tokens_per_step / tokens_per_s``); every weight is trained.
- **weight sync**: colocated, each GPU gathers its engine tensor-parallel shard of the bf16
  weights from the ZeRO shards (an all-gather over the shard group; HybridFlow section 5,
  the 3D-HybridEngine's transition) and copies it into the engine at the HBM bandwidth;
  disaggregated, the trainer gathers the weights and broadcasts them to the engines over the
  scale-out network (OpenRLHF section 3.2: NCCL broadcast from the actor to the vLLM engines),
  limited by one sender's NIC.
- **offload**: colocated, when the engine's weights and a useful batch do not fit beside the
  training state, the training state goes to host memory for the rollout and comes back
  (verl's ``param_offload``/``optimizer_offload``; vLLM's sleep mode releases the engine for
  the update): 2 x its bytes over the host link per step. The faster of keeping and
  offloading is taken.

Colocated placement runs the phases in turn on every GPU. Disaggregated placement gives the
rollouts ``rollout_gpus`` of their own and overlaps them with the training GPUs' forward passes
and update one step off-policy (verl's one_step_off_policy recipe; OpenRLHF ``--async_train``):
step = max(generation, forward passes + update) + weight sync. The split is searched: the
layout's tp, pp and cp are kept and the training side takes every data-parallel width below
the layout's.

Memory, colocated: the update's peak plus the reference and reward weights, bf16, sharded over
every GPU (ZeRO-3/FSDP, as verl shards them), must fit; during the rollout the engine takes its
``gpu_memory_fraction`` of what the resident training weights and optimizer state leave
(gradients are freed after the step), or of the whole GPU when the state is offloaded; where
the job sets the engine's share (``RlSpec.rollout_memory_fraction``: vLLM's
``gpu_memory_utilization``, which requests that share of the whole GPU) it takes that share,
at most what the training state leaves, and its KV cache (so the sequences that decode
together, and the waves) follows from it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from service.core.collectives import collective_s
from service.core.errors import InvalidSpecError
from service.core.flops import token_flops
from service.core.params import count_parameters
from service.core.plausibility import DOES_NOT_FIT, OUTSIDE_VALIDATED_RANGE, WarningDetail
from service.core.serving import (
    ENGINE_EFFICIENCY,
    Deployment,
    Engine,
    Lengths,
    Traffic,
    TrafficMode,
    serve,
)
from service.core.specs import (
    ClusterSpec,
    Framework,
    ModelSpec,
    ParallelismPlan,
    RlPlacement,
    RlSpec,
    RlWeightSync,
    TrainingSpec,
)
from service.core.timing import HOST_LINK_BY_ACCELERATOR, HOST_LINK_BYTES_PER_S

if TYPE_CHECKING:
    from service.core.estimate import Estimate

BF16_BYTES = 2.0
"""The rollout engine, the reference and the reward model hold bf16 weights (verl's and
OpenRLHF's defaults: ``dtype: bfloat16``)."""
ROLLOUT_MAX_NUM_SEQS = 1024
"""The running batch the engine admits per replica: verl's rollout default ``max_num_seqs:
1024`` (verl/trainer/config/rollout/rollout.yaml), passed to vLLM/SGLang; the KV memory bounds
it further."""
DEFAULT_ROLLOUT_ENGINE = Engine.VLLM
"""verl's and OpenRLHF's default rollout engine (``rollout.name: vllm``; OpenRLHF
``--vllm_num_engines``)."""
MAX_SPLITS = 12
"""Data-parallel widths tried for the training side of a disaggregated split."""
REFERENCE_SWAP_COPIES = 3.0
"""NeMo RL's reference pass swaps weights through the host (``use_reference_model`` in the
Megatron and DTensor policy workers, NVIDIA-NeMo/RL v0.3.0 ``b1c86a8``): the policy's weights
are copied to the host, the reference's loaded from it, and the policy's loaded back: three
copies of the training weights per GPU."""
ENGINE_COPIES = MappingProxyType({Framework.MEGATRON: 2.0})
"""HBM copies of each full tensor on a GPU during NeMo RL's refit (v0.3.0 ``b1c86a8``): the
Megatron worker packs the gathered tensors into one buffer per dtype (``get_weights_ipc_handles``:
``packed_tensors[dtype][...].copy_``) and vLLM copies each into its parameter
(``load_weights``); the DTensor worker hands the gathered tensors over as they are (one copy,
vLLM's). Each copy reads and writes the bytes."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RlPhases:
    """Seconds per RL step, by phase (module docstring)."""

    generation_s: float
    old_log_prob_s: float
    reference_s: float
    reward_s: float
    policy_update_s: float
    weight_sync_s: float
    offload_s: float

    @property
    def training_side_s(self) -> float:
        """What runs on the training GPUs: forward passes and update."""
        return self.old_log_prob_s + self.reference_s + self.reward_s + self.policy_update_s


@dataclass(frozen=True, slots=True, kw_only=True)
class RlPlacementFigures:
    """One placement of the job: its step, phases, GPUs and memory."""

    placement: RlPlacement
    step_s: float
    phases: RlPhases
    training_gpus: int
    rollout_gpus: int
    rollout_tp: int
    rollout_replicas: int
    rollout_batch: float
    """Sequences decoding together per replica."""
    rollout_waves: float
    """Batches of that size each replica runs per step (its share / the batch)."""
    training_state_offloaded: bool
    training_peak_bytes: float
    """Per GPU during the update: its peak plus the reference and reward weights."""
    rollout_memory_bytes: float
    """Per GPU during generation: the resident training state and the engine's share."""
    capacity_bytes: float
    fits: bool
    update_tokens_per_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class RlEstimate:
    """Both placements, the one asked for, and which is faster."""

    placement: RlPlacement
    faster_placement: RlPlacement
    colocated: RlPlacementFigures
    disaggregated: RlPlacementFigures | None
    """None where the layout cannot be split (data parallelism 1, or no split validates)."""
    rollouts_per_step: int
    tokens_per_step: int
    response_tokens_per_step: int
    updates_per_step: float
    warning_details: tuple[WarningDetail, ...]
    assumptions: tuple[str, ...]

    @property
    def chosen(self) -> RlPlacementFigures:
        if self.placement == RlPlacement.DISAGGREGATED and self.disaggregated is not None:
            return self.disaggregated
        return self.colocated


TrainEstimate = Callable[[ClusterSpec, ParallelismPlan], "Estimate"]
"""``estimate.estimate`` of the update on a cluster and layout (the training side)."""


def forward_s(model: ModelSpec, tokens: float, seq_len: int, num_gpus: int,
              flops_per_s_per_gpu: float) -> float:
    """A forward pass over ``tokens`` tokens: 2 x matmul parameters + attention + logits per
    token (``flops.token_flops``) at ``flops_per_s_per_gpu`` achieved on each of ``num_gpus``."""
    flops = token_flops(model, count_parameters(model), seq_len).model_forward_flops
    return tokens * flops / (num_gpus * flops_per_s_per_gpu)


def weight_bytes(model: ModelSpec) -> float:
    return count_parameters(model).total * BF16_BYTES


def _rollout(model: ModelSpec, cluster: ClusterSpec, rl: RlSpec, gpus: int,
             resident_bytes: float) -> tuple[float, int, float, float, float] | None:
    """(generation s, tp, batch, waves, engine bytes per GPU) of the fastest rollout tp (or of
    ``rl.rollout_tp`` where given) on ``gpus`` GPUs with ``resident_bytes`` per GPU held by
    training state; None if no tp fits."""
    acc = cluster.accelerator
    room = acc.memory_bytes - resident_bytes
    if room <= 0:
        return None
    engine = rl.rollout_engine or DEFAULT_ROLLOUT_ENGINE
    engine_acc = dataclasses.replace(acc, memory_bytes=_engine_memory_bytes(
        acc.memory_bytes, room, rl.rollout_memory_fraction,
        ENGINE_EFFICIENCY[engine].gpu_memory_fraction))
    response = float(rl.response_tokens or 1)
    best: tuple[float, int, float, float, float] | None = None
    tp = 1
    limit = min(acc.scaleup_domain_size, cluster.gpus_per_node, gpus)
    if rl.rollout_tp is not None:
        # The job's own engine tp: only it is tried, within the scale-up (NVLink) domain,
        # which on a rack-scale system (GB200 NVL72: 72 GPUs) spans the trays; none fits
        # past it (the serving model keeps tensor parallelism inside that domain).
        tp = rl.rollout_tp
        limit = tp if tp <= min(acc.scaleup_domain_size, gpus) else 0
    while tp <= limit:
        if gpus % tp == 0 and model.num_heads % tp == 0:
            replicas = gpus // tp
            share = rl.rollouts_per_step / replicas
            deployment = Deployment(accelerator=engine_acc, gpus_per_replica=tp, tp=tp,
                                    engine=engine, max_batch=ROLLOUT_MAX_NUM_SEQS)
            traffic = Traffic(mode=TrafficMode.FIXED_BATCH,
                              prompt=Lengths.of(mean=float(rl.prompt_tokens)),
                              output=Lengths.of(mean=response),
                              batch_size=max(1, math.ceil(share)))
            first = serve(model, deployment, traffic)
            if first.memory.fits and first.memory.max_concurrency >= 1:
                batch = float(min(math.ceil(share), first.memory.max_concurrency,
                                  ROLLOUT_MAX_NUM_SEQS))
                answer = first if batch >= share else serve(
                    model, deployment, dataclasses.replace(traffic, batch_size=int(batch)))
                waves = share / batch
                seconds = answer.e2e_s.p50 * waves + _tail_s(model, deployment, rl)
                if best is None or seconds < best[0]:
                    used = answer.memory.usable_bytes_per_gpu
                    best = (seconds, tp, batch, waves, used)
        tp *= 2
    return best


def _engine_memory_bytes(total_bytes: float, room_bytes: float, fraction: float | None,
                        engine_fraction: float) -> float:
    """The memory to hand the serving model so that the engine uses what the job gives it:
    ``serving`` lets an engine use ``engine_fraction`` of the memory it is given, so with the
    job's ``fraction`` (``RlSpec.rollout_memory_fraction``: vLLM requests total memory x
    ``gpu_memory_utilization``) the engine's share is ``fraction x total``, at most the
    ``room`` the training state leaves, and the memory given is that over ``engine_fraction``;
    without one the engine takes its own fraction of the room, as before."""
    if fraction is None:
        return room_bytes
    return min(fraction * total_bytes, room_bytes) / engine_fraction


def _tail_s(model: ModelSpec, deployment: Deployment, rl: RlSpec) -> float:
    """The straggler: after the mean response, the longest decodes its remaining
    ``max_response_tokens - response_tokens`` tokens at a batch of one (the others have
    ended; the weights are read every step, so the step barely depends on the batch).
    Once per step per replica: with several waves, the engine refills the slots until the
    last."""
    longest, mean = rl.max_response_tokens, rl.response_tokens or 0
    if longest is None or longest <= mean:
        return 0.0
    traffic = Traffic(mode=TrafficMode.FIXED_BATCH,
                      prompt=Lengths.of(mean=float(rl.prompt_tokens + (longest + mean) // 2)),
                      output=Lengths.of(mean=2.0), batch_size=1)
    return (longest - mean) * serve(model, deployment, traffic).tpot_s.p50


def _sync_colocated_s(model: ModelSpec, cluster: ClusterSpec, gpus: int, rollout_tp: int) -> float:
    """Gather the engine's shard (bf16 weights / rollout tp) from the ZeRO shards over all GPUs,
    then copy it into the engine at the HBM bandwidth."""
    acc = cluster.accelerator
    shard = weight_bytes(model) / rollout_tp
    bandwidth = acc.scaleup_bytes_per_s if gpus <= cluster.gpus_per_node else (
        acc.scaleout_bytes_per_s)
    gather = float(collective_s(shard, float(gpus), float(cluster.gpus_per_node), bandwidth,
                                False))
    return gather + 2.0 * shard / acc.hbm_bytes_per_s


def gathered_tensors(model: ModelSpec) -> int:
    """Weight tensors a full-model gather walks, one collective each: per Megatron-Core layer
    the fused QKV, the attention output, fc1 and fc2 and two norms (TransformerLayer's
    ``linear_qkv``, ``linear_proj``, ``linear_fc1``, ``linear_fc2`` and their layer norms);
    a MoE layer has the router and fc1 and fc2 per routed expert (TEGroupedMLP's
    ``weight{i}``) instead of the dense MLP's two, plus its shared experts' two; and the
    embedding, the final norm and the output layer (NVIDIA-NeMo/RL v0.3.0
    ``nemo_rl/models/megatron/refit_utils.py`` ``gather_params``: one all-gather or broadcast
    per key)."""
    moe_layers = model.num_layers - model.num_dense_layers if model.num_experts else 0
    dense_layers = model.num_layers - moe_layers
    per_moe = 4 + 1 + 2 * model.num_experts + (2 if model.num_shared_experts else 0)
    return dense_layers * 6 + moe_layers * per_moe + 3


def full_gather_s(model: ModelSpec, cluster: ClusterSpec, group: int) -> float:
    """Every training GPU materialises every full bf16 tensor of the model, one collective per
    tensor over its model-parallel ``group`` (NeMo RL v0.3.0 ``gather_params``: TP all-gather,
    PP broadcast, EP all-gather; the DTensor worker's ``full_tensor()``): ``gathered_tensors``
    all-gathers of the mean tensor's bytes, each paying NCCL's latency
    (``collectives.collective_s``)."""
    if group <= 1:
        return 0.0
    acc = cluster.accelerator
    count = gathered_tensors(model)
    per_tensor = weight_bytes(model) / count
    bandwidth = acc.scaleup_bytes_per_s if group <= cluster.gpus_per_node else (
        acc.scaleout_bytes_per_s)
    return count * float(collective_s(per_tensor, float(group),
                                      float(min(group, cluster.gpus_per_node)), bandwidth,
                                      False))


@dataclass(frozen=True, slots=True, kw_only=True)
class HostMoves:
    """NeMo RL's colocated protocol per step (``RlWeightSync.OFFLOAD_FULL_GATHER``), seconds
    per GPU, by the timer it falls under."""

    refit_s: float
    """``prepare_for_generation``: the optimizer state to the host (``offload_before_refit``),
    the engine's weights back from it (vLLM ``wake_up(tags=["weights"])``), the full-model
    gather and the copies into the engine, the training weights to the host
    (``offload_after_refit``)."""
    other_s: float
    """The rest, reported as ``offload``: the engine's weights to the host when it sleeps
    (vLLM ``sleep(level=1)`` in ``finish_generation``, which NeMo RL times within
    "generation"), the training weights back for the log-probabilities
    (``prepare_for_lp_inference``, timed as "logprob_inference_prep") and the optimizer state
    back for the update (``prepare_for_training``, "training_prep")."""
    reference_s: float
    """Within the log-probabilities: the reference swap (``REFERENCE_SWAP_COPIES``)."""


def host_moves(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, rl: RlSpec,
               plan: ParallelismPlan, update: Estimate, rollout_tp: int) -> HostMoves:
    """``HostMoves`` of one step: each move is its bytes per GPU over the host link each way
    (``timing.HOST_LINK_BY_ACCELERATOR``); the gather and copies as ``full_gather_s`` and
    ``ENGINE_COPIES``. Gradients are not counted: Megatron-LM's
    ``_ParamAndGradBuffer.offload_to_cpu`` frees the gradient buffer (``storage().resize_(0)``)
    and copies the parameters to pinned host memory (megatron/core/distributed/
    param_and_grad_buffer.py), and the DTensor worker's gradients are None after
    ``zero_grad``. The optimizer state goes to pageable memory (``v.to("cpu")``), which CUDA
    stages through a pinned buffer; that slows it below the link's rate, which is not
    modelled (a lower bound)."""
    acc = cluster.accelerator
    link = HOST_LINK_BY_ACCELERATOR.get(acc.id, HOST_LINK_BYTES_PER_S)
    weights = float(update.memory.weights_bytes)
    optimizer = float(update.memory.optimizer_bytes)
    engine = weight_bytes(model) / rollout_tp
    if training.framework == Framework.MEGATRON:
        # Dense tensors over tp, routed experts over ep (expert tp 1), stages broadcast over
        # pp (gather_params); context parallelism does not shard the weights.
        group = plan.pp * max(plan.tp, plan.ep)
    else:
        # FSDP's full_tensor() gathers over every shard of the mesh.
        group = plan.tp * plan.cp * (plan.dp_shard or plan.dp)
    group = min(group, cluster.num_gpus)
    copies = ENGINE_COPIES.get(training.framework, 1.0)
    copy_s = copies * 2.0 * weight_bytes(model) / acc.hbm_bytes_per_s
    refit = (optimizer + engine + weights) / link + full_gather_s(model, cluster, group) + copy_s
    other = (engine + weights + optimizer) / link
    reference = REFERENCE_SWAP_COPIES * weights / link if rl.reference_model else 0.0
    return HostMoves(refit_s=refit, other_s=other, reference_s=reference)


def _sync_disaggregated_s(model: ModelSpec, cluster: ClusterSpec, training_gpus: int) -> float:
    """Gather the whole bf16 model on the sender, then broadcast it through one NIC."""
    acc = cluster.accelerator
    size = weight_bytes(model)
    bandwidth = acc.scaleup_bytes_per_s if training_gpus <= cluster.gpus_per_node else (
        acc.scaleout_bytes_per_s)
    gather = float(collective_s(size, float(training_gpus), float(cluster.gpus_per_node),
                                bandwidth, False))
    return gather + size / acc.scaleout_bytes_per_s


def _extra_weights_per_gpu(model: ModelSpec, rl: RlSpec, gpus: int) -> float:
    """Reference and reward weights, bf16, sharded over ``gpus``."""
    total = (weight_bytes(model) if rl.reference_model else 0.0) + (
        0.0 if rl.reward_model is None else weight_bytes(rl.reward_model))
    return total / gpus


def _forward_phases(model: ModelSpec, rl: RlSpec, training: TrainingSpec, update: Estimate,
                    gpus: int, peak_flops_per_s: float) -> tuple[float, float, float]:
    """(old log-prob, reference, reward) seconds at the update's HFU."""
    achieved = update.throughput.hfu_fraction * peak_flops_per_s
    tokens = float(rl.tokens_per_step)
    seq = training.seq_len
    policy = forward_s(model, tokens, seq, gpus, achieved)
    reward = 0.0 if rl.reward_model is None else forward_s(rl.reward_model, tokens, seq, gpus,
                                                           achieved)
    return policy, policy if rl.reference_model else 0.0, reward


def _colocated(model: ModelSpec, cluster: ClusterSpec, plan: ParallelismPlan,
               training: TrainingSpec, rl: RlSpec, update: Estimate) -> RlPlacementFigures:
    n = cluster.num_gpus
    acc = cluster.accelerator
    peak = acc.peak_for(training.precision)
    mem = update.memory
    nemo = rl.weight_sync == RlWeightSync.OFFLOAD_FULL_GATHER
    # NeMo RL keeps the reference weights on the host and swaps them into the policy's own
    # buffers for its pass (use_reference_model): no reference shard on the GPU.
    extra = _extra_weights_per_gpu(
        model, dataclasses.replace(rl, reference_model=False) if nemo else rl, n)
    resident = float(mem.weights_bytes + mem.optimizer_bytes) + extra
    host_link = HOST_LINK_BY_ACCELERATOR.get(acc.id, HOST_LINK_BYTES_PER_S)
    # NeMo RL always offloads the training state before generating: the engine beside it
    # (``kept``) is not an option there.
    kept = None if nemo else _rollout(model, cluster, rl, n, resident)
    offloaded = _rollout(model, cluster, rl, n, 0.0)
    offload_s = 2.0 * resident / host_link
    use_offload = kept is None or (offloaded is not None
                                   and offloaded[0] + offload_s < kept[0])
    rollout = offloaded if use_offload else kept
    old, ref, reward = _forward_phases(model, rl, training, update, n, peak)
    tokens_per_s = float(update.throughput.tokens_per_s)
    update_s = rl.tokens_per_step / tokens_per_s
    training_peak = float(mem.peak_bytes) + extra
    if rollout is None:
        gen_s, tp, batch, waves, engine_bytes = math.inf, 1, 0.0, math.inf, 0.0
    else:
        gen_s, tp, batch, waves, engine_bytes = rollout
    sync = _sync_colocated_s(model, cluster, n, tp)
    if nemo:
        moves = host_moves(model, cluster, training, rl, plan, update, tp)
        sync, offload_s, ref = moves.refit_s, moves.other_s, ref + moves.reference_s
    phases = RlPhases(generation_s=gen_s, old_log_prob_s=old, reference_s=ref,
                      reward_s=reward, policy_update_s=update_s, weight_sync_s=sync,
                      offload_s=offload_s if use_offload else 0.0)
    step = (phases.generation_s + phases.training_side_s + phases.weight_sync_s
            + phases.offload_s)
    rollout_memory = (0.0 if use_offload else resident) + engine_bytes
    return RlPlacementFigures(
        placement=RlPlacement.COLOCATED, step_s=step, phases=phases, training_gpus=n,
        rollout_gpus=n, rollout_tp=tp, rollout_replicas=n // tp, rollout_batch=batch,
        rollout_waves=waves, training_state_offloaded=use_offload,
        training_peak_bytes=training_peak, rollout_memory_bytes=rollout_memory,
        capacity_bytes=float(mem.capacity_bytes),
        fits=rollout is not None and training_peak <= float(mem.capacity_bytes),
        update_tokens_per_s=tokens_per_s)


def _splits(plan: ParallelismPlan) -> list[int]:
    """Training-side data-parallel widths to try: 1 .. dp - 1, at most ``MAX_SPLITS``."""
    if plan.dp < 2:
        return []
    widths = list(range(1, plan.dp))
    if len(widths) <= MAX_SPLITS:
        return widths
    step = len(widths) / MAX_SPLITS
    return sorted({widths[int(i * step)] for i in range(MAX_SPLITS)} | {widths[-1]})


def _disaggregated(model: ModelSpec, cluster: ClusterSpec, plan: ParallelismPlan,
                   training: TrainingSpec, rl: RlSpec, train: TrainEstimate,
                   ) -> RlPlacementFigures | None:
    unit = plan.tp * plan.pp * plan.cp
    peak = cluster.accelerator.peak_for(training.precision)
    best: RlPlacementFigures | None = None
    for dp in _splits(plan):
        training_gpus = dp * unit
        rollout_gpus = cluster.num_gpus - training_gpus
        try:
            side_plan = dataclasses.replace(plan, dp=dp, dp_shard=None)
            side = dataclasses.replace(cluster, num_gpus=training_gpus)
            update = train(side, side_plan)
        except InvalidSpecError:
            continue
        rollout = _rollout(model, cluster, rl, rollout_gpus, 0.0)
        if rollout is None:
            continue
        gen_s, tp, batch, waves, engine_bytes = rollout
        old, ref, reward = _forward_phases(model, rl, training, update, training_gpus, peak)
        tokens_per_s = float(update.throughput.tokens_per_s)
        phases = RlPhases(generation_s=gen_s, old_log_prob_s=old, reference_s=ref,
                          reward_s=reward, policy_update_s=rl.tokens_per_step / tokens_per_s,
                          weight_sync_s=_sync_disaggregated_s(model, cluster, training_gpus),
                          offload_s=0.0)
        step = max(phases.generation_s, phases.training_side_s) + phases.weight_sync_s
        training_peak = float(update.memory.peak_bytes) + _extra_weights_per_gpu(
            model, rl, training_gpus)
        figures = RlPlacementFigures(
            placement=RlPlacement.DISAGGREGATED, step_s=step, phases=phases,
            training_gpus=training_gpus, rollout_gpus=rollout_gpus, rollout_tp=tp,
            rollout_replicas=rollout_gpus // tp, rollout_batch=batch, rollout_waves=waves,
            training_state_offloaded=False, training_peak_bytes=training_peak,
            rollout_memory_bytes=engine_bytes,
            capacity_bytes=float(update.memory.capacity_bytes),
            fits=training_peak <= float(update.memory.capacity_bytes),
            update_tokens_per_s=tokens_per_s)
        if best is None or (figures.fits, -figures.step_s) > (best.fits, -best.step_s):
            best = figures
    return best


RL_VALIDATION_NOTE = (
    "no RL run is in the calibration set; benchmarks/rl_validation.py checks the phases "
    "against published step times out of sample (docs/model.md, \"RL post-training\")")


def rl_estimate(model: ModelSpec, cluster: ClusterSpec, plan: ParallelismPlan,
                training: TrainingSpec, update: Estimate, train: TrainEstimate) -> RlEstimate:
    """Both placements of ``training.rl`` (module docstring). ``update`` is the training
    estimate of the whole cluster's layout; ``train`` estimates other splits."""
    rl = training.rl
    if rl is None:
        raise InvalidSpecError("training.method rl needs training.rl", field="training.rl")
    colocated = _colocated(model, cluster, plan, training, rl, update)
    disaggregated = _disaggregated(model, cluster, plan, training, rl, train)
    if rl.placement == RlPlacement.DISAGGREGATED and disaggregated is None:
        raise InvalidSpecError(
            "training.rl.placement disaggregated needs a layout whose data parallelism can be "
            f"split (dp {plan.dp}: no training side of 1 to {max(plan.dp - 1, 0)} replicas "
            "leaves room for a rollout engine that fits)", field="training.rl.placement")
    faster = colocated
    if disaggregated is not None and (disaggregated.fits, -disaggregated.step_s) > (
            colocated.fits, -colocated.step_s):
        faster = disaggregated
    details = [WarningDetail(
        OUTSIDE_VALIDATED_RANGE, "training.method",
        "training.method rl: " + RL_VALIDATION_NOTE + "; the rollout lengths are taken as "
        "all equal to response_tokens (the longest responses of a real batch make the "
        "generation slower)")]
    chosen = disaggregated if (rl.placement == RlPlacement.DISAGGREGATED
                               and disaggregated is not None) else colocated
    if not chosen.fits:
        details.append(WarningDetail(
            DOES_NOT_FIT, "training.rl.placement",
            f"RL {chosen.placement}: the update needs "
            f"{chosen.training_peak_bytes / 2**30:.1f} GiB per GPU with the reference and "
            f"reward weights, of {chosen.capacity_bytes / 2**30:.1f} GiB"
            + ("" if math.isfinite(chosen.phases.generation_s) else
               ", and no rollout engine fits beside it")))
    assumptions: tuple[str, ...] = (
        "rl: one step = generation (the serving model, each rollout replica one fixed batch "
        f"in waves of at most {ROLLOUT_MAX_NUM_SEQS} sequences, verl's max_num_seqs), the "
        "policy's and reference's log-probabilities and the reward model's score (forward "
        "passes at the update's HFU), the update on every generated token (the training "
        "estimate; every weight trained), and the weight sync to the engine (HybridFlow, "
        "arXiv 2409.19256; OpenRLHF, arXiv 2405.11143; GRPO, arXiv 2402.03300)",
        "rl colocated: the phases run in turn on every GPU; the engine takes its memory "
        "fraction of what the training weights and optimizer state leave, or of the whole "
        "GPU with the state offloaded to host over the host link (verl param_offload / "
        "optimizer_offload), whichever is faster; reference and reward weights bf16, "
        "sharded over all GPUs",
        "rl disaggregated: rollouts on GPUs of their own, overlapped one step off-policy "
        "with the training side (step = max(generation, forward passes + update) + weight "
        "broadcast through one NIC); the layout's tp, pp and cp are kept and the split of "
        "data-parallel replicas is searched",
        "rl: no critic (GRPO); a reward_model of null is a rule-based reward, not timed",
    )
    if rl.weight_sync == RlWeightSync.OFFLOAD_FULL_GATHER:
        assumptions += (
            "rl colocated weight sync offload_full_gather (NeMo RL v0.3.0-v0.6.0 "
            "refit_policy_generation): the training weights and optimizer state go to the host "
            "and back every step, the engine sleeps between rollouts, the reference weights are "
            "swapped in from the host, and every GPU gathers each full bf16 tensor for the "
            "engine; host moves at the host link's rate (a lower bound for pageable copies)",)
    response_tokens = rl.rollouts_per_step * (rl.response_tokens or 0)
    return RlEstimate(
        placement=rl.placement, faster_placement=faster.placement, colocated=colocated,
        disaggregated=disaggregated, rollouts_per_step=rl.rollouts_per_step,
        tokens_per_step=rl.tokens_per_step, response_tokens_per_step=response_tokens,
        updates_per_step=rl.tokens_per_step / (training.global_batch_seqs * training.seq_len),
        warning_details=tuple(details), assumptions=assumptions)
