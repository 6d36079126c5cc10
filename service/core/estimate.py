"""The training estimate: parameters, FLOPs, memory, step time, throughput, energy.

``estimate()`` is the one entry point the API, the accuracy benchmark and the optimiser share.
Throughput: tokens/s = B*s / step. Utilisation (PaLM, Chowdhery et al. 2022, appendix B):
MFU = model FLOPs per token x tokens/s / (GPUs x dense peak for the precision used); HFU also
counts recomputed FLOPs. Energy: kWh = GPU-hours x (TDP x power fraction + host power) x PUE;
carbon = kWh x grid intensity (docs/model.md, section 7).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from service.core.attention import kernel_for
from service.core.calibration import DEFAULT_CALIBRATION, Band, Calibration
from service.core.envelope import LOCAL_DEFAULTS, VersionEra, outside_details, version_era
from service.core.errors import InvalidSpecError
from service.core.fabric import (
    compression_details,
    compression_notes,
    fabric_details,
    fabric_notes,
)
from service.core.flops import TokenFlops, token_flops
from service.core.geometry import PlanVars, build_geometry
from service.core.memory import (
    ALLOCATOR_HEADROOM_NOTE,
    BASE_BYTES_PER_PARAM,
    DEQUANT_NOTE,
    EDGE_FRACTION,
    GRADIENTS_FREED_NOTE,
    LOSS_KERNELS,
    PAGED_OPTIMIZER_NOTE,
    MemoryBreakdown,
    dequantises,
    memory_breakdown,
    stage_activation_bytes,
    state_layout,
)
from service.core.ops import SCALAR, Num
from service.core.params import ParameterCount, count_parameters, trainable_params
from service.core.plausibility import (
    DEFAULTED_INPUT,
    DOES_NOT_FIT,
    OUTSIDE_VALIDATED_RANGE,
    WarningDetail,
    details_of,
)
from service.core.presets import default_vocab
from service.core.rl import RlEstimate, rl_estimate
from service.core.specs import (
    ClusterSpec,
    EnergySpec,
    LossKernel,
    ModelSpec,
    Optimizer,
    ParallelismPlan,
    Precision,
    RecomputeMode,
    TrainingMethod,
    TrainingSpec,
    validate_lora,
    validate_plan,
)
from service.core.timing import FSDP2_STACKS, StepTime, group_nodes, runs_eager, step_time
from service.core.units import GRAMS_PER_KG, JOULES_PER_KWH, SECONDS_PER_HOUR, bytes_to_gib


@dataclass(frozen=True, slots=True, kw_only=True)
class Throughput:
    """Speed and utilisation figures for the whole job."""

    step: StepTime
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    mfu_fraction: float
    hfu_fraction: float
    train_s: float
    gpu_hours: float
    num_steps: float
    tokens_per_s_low: float
    tokens_per_s_high: float
    """80% band on tokens/s from the calibration residuals (10th to 90th percentile)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobFigures:
    """Whole-job figures from the step time (scalars, or arrays in the plan search)."""

    tokens_per_s: Num
    mfu_fraction: Num
    hfu_fraction: Num
    train_s: Num
    gpu_hours: Num
    num_steps: Num
    kwh: Num


def job_figures(
    step_s: Num, plan: PlanVars, training: TrainingSpec, num_gpus: Num, flops: TokenFlops,
    peak_flops_per_s: float, power_w_per_gpu: float, pue: float, xp: Num = SCALAR,
) -> JobFigures:
    """tokens/s = B*s / step; MFU and HFU against the dense peak (PaLM appendix B); energy
    kWh = GPU-hours x power per GPU x PUE (docs/model.md section 7)."""
    tokens_per_step = plan.global_batch_seqs * training.seq_len
    tokens_per_s = tokens_per_step / step_s
    recompute = xp.where(
        plan.full_recompute, flops.recompute_flops(RecomputeMode.FULL),
        xp.where(plan.selective_recompute, flops.recompute_flops(RecomputeMode.SELECTIVE), 0.0),
    )
    mfu = flops.model_training_flops * tokens_per_s / (num_gpus * peak_flops_per_s)
    hfu = (flops.model_training_flops + recompute) * tokens_per_s / (num_gpus * peak_flops_per_s)
    train_s = training.tokens / tokens_per_s
    gpu_hours = train_s * num_gpus / SECONDS_PER_HOUR
    kwh = gpu_hours * SECONDS_PER_HOUR * power_w_per_gpu * pue / JOULES_PER_KWH
    return JobFigures(tokens_per_s=tokens_per_s, mfu_fraction=mfu, hfu_fraction=hfu,
                      train_s=train_s, gpu_hours=gpu_hours,
                      num_steps=training.tokens / tokens_per_step, kwh=kwh)


def average_power_w_per_gpu(tdp_w: float, energy: EnergySpec) -> float:
    """Board power x utilisation plus host power per GPU, before PUE (docs/model.md §7)."""
    return tdp_w * (energy.gpu_power_fraction + energy.host_power_fraction)


@dataclass(frozen=True, slots=True, kw_only=True)
class Energy:
    kwh: float
    co2e_kg: float
    average_power_w_per_gpu: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Estimate:
    """Everything ``estimate()`` predicts for one model, cluster, plan and workload."""

    params: ParameterCount
    flops: TokenFlops
    total_training_flops: float
    memory: MemoryBreakdown
    throughput: Throughput
    energy: Energy
    num_micro_batches: int
    warnings: tuple[str, ...]
    assumptions: tuple[str, ...]
    calibration_version: str
    trainable_params: int = 0
    """Parameters that receive gradients: the total, or the adapters' (lora, qlora)."""
    rl: RlEstimate | None = None
    """Method ``rl``: both placements phase by phase (``service/core/rl.py``); the throughput
    block is then the RL job's (steps x the chosen placement's step) and ``memory`` the
    update's on the whole cluster's layout."""
    warning_details: tuple[WarningDetail, ...] = ()
    """Every warning as data (``plausibility.WarningDetail``): the coded form of each string
    of ``warnings``, then the ones only coded: inputs outside the calibration's envelope
    (``envelope.outside_details``) and the stack version's standing. The service adds the
    inputs the request left to a default (``defaulted_input``)."""


EAGER_NOTE = ("eager PyTorch (no torch.compile): the elementwise work (norms, activations, "
              "rotary, residuals) makes Calibration.eager_elementwise_multiplier times the "
              "HBM passes of a compiled step")
"""The assumption an eager step on torchtitan or an FSDP trainer states (``timing``)."""
FSDP2_NOTE = ("FSDP2 (torchtitan's fully_shard) copies every parameter out of the all-gather "
              "buffer and every gradient into an fp32 reduce buffer around its collectives: "
              "time.breakdown_s.fsdp_copy, at the HBM bandwidth (timing.fsdp2_copy_s)")
"""The assumption a ZeRO-3 step on an FSDP2 stack states (``timing.fsdp2_copy_s``)."""
MFU_WARNING_FRACTION = 0.8
"""Above any published dense-training MFU at any scale (the calibration set's maximum is below
0.7)."""
LARGE_SCALE_GPUS = 8192
LARGE_SCALE_MFU_FRACTION = 0.552
"""The highest MFU we know published for a run on more than 8,192 GPUs: 55.2% for a 175B
model on 12,288 GPUs (Jiang et al. 2024, MegaScale, arXiv 2402.15627, abstract). The model has
no term for what costs efficiency at that scale (stragglers, failures, jitter), so above it the
estimate warns instead of claiming more."""
LARGEST_PUBLISHED_GPUS = 12_288
LARGEST_SCALE_MFU_FRACTION = 0.412
"""The largest published training scale we may use and the MFU a standard stack reached there:
Megatron-LM on 12,288 GPUs at 55.2% / 1.34 = 41.2% (Jiang et al. 2024, MegaScale, arXiv
2402.15627, abstract: MegaScale's 55.2% MFU on 12,288 GPUs is 1.34x Megatron-LM's). The Llama 3
paper's larger runs are on the list of documents reserved for independent validation (issue 15),
so they set nothing here (decision 444). Beyond this scale no run checks the step's scale terms
(``timing.step_overhead_s``'s stragglers and synchronisation, ``collectives``' ring and tree
latency over the node count), and the model's stacks are Megatron-like rather than MegaScale's,
so an MFU above 41.2% there carries ``outside_validated_range`` on ``cluster.num_gpus``
(``scale_details``)."""


def scale_details(num_gpus: int, mfu_fraction: float) -> tuple[WarningDetail, ...]:
    """``outside_validated_range`` on ``cluster.num_gpus`` for a job beyond the largest
    published training scale whose predicted MFU is above the MFU published at that scale
    (``LARGEST_PUBLISHED_GPUS``, ``LARGEST_SCALE_MFU_FRACTION``); nothing otherwise."""
    if num_gpus <= LARGEST_PUBLISHED_GPUS or mfu_fraction <= LARGEST_SCALE_MFU_FRACTION:
        return ()
    return (WarningDetail(
        OUTSIDE_VALIDATED_RANGE, "cluster.num_gpus",
        f"predicted MFU {mfu_fraction:.1%} on {num_gpus:,} GPUs is above the "
        f"{LARGEST_SCALE_MFU_FRACTION:.1%} a standard stack reached at the largest training "
        f"scale we can check against (Megatron-LM on {LARGEST_PUBLISHED_GPUS:,} GPUs, 55.2% / "
        "1.34 in MegaScale's comparison; arXiv 2402.15627); beyond it the straggler, "
        "synchronisation and collective-latency terms are extrapolated, so treat the time as "
        "optimistic"),)


def estimate(
    model: ModelSpec,
    cluster: ClusterSpec,
    plan: ParallelismPlan,
    training: TrainingSpec,
    *,
    energy: EnergySpec | None = None,
    calibration: Calibration = DEFAULT_CALIBRATION,
) -> Estimate:
    """Estimate a training run. Raises ``InvalidSpecError`` for an impossible layout.

    A layout that does not fit in memory is still estimated; ``memory.fits`` is then false and
    a warning says by how much it overflows. Method ``rl`` adds the rollouts
    (``with_rl``).
    """
    result = _estimate_update(model, cluster, plan, training, energy=energy,
                              calibration=calibration)
    if training.rl is None:
        return result
    return with_rl(result, model, cluster, plan, training, energy or EnergySpec(),
                   calibration)


def with_rl(update: Estimate, model: ModelSpec, cluster: ClusterSpec, plan: ParallelismPlan,
            training: TrainingSpec, energy: EnergySpec, calibration: Calibration) -> Estimate:
    """The RL job from its update's estimate: the step is the chosen placement's, the job
    ``training.rl.steps`` of them; tokens/s counts the tokens trained on (prompt and
    response) per RL step; the band scales the step as it scales the update."""
    rl = training.rl
    assert rl is not None  # noqa: S101 - the caller checks

    def train(side: ClusterSpec, side_plan: ParallelismPlan) -> Estimate:
        return _estimate_update(model, side, side_plan, training, energy=energy,
                                calibration=calibration)

    figures = rl_estimate(model, cluster, plan, training, update, train)
    chosen = figures.chosen
    thr = update.throughput
    n = cluster.num_gpus
    tokens_per_s = figures.tokens_per_step / chosen.step_s
    train_s = rl.steps * chosen.step_s
    gpu_hours = train_s * n / SECONDS_PER_HOUR
    ratio = tokens_per_s / thr.tokens_per_s
    throughput = Throughput(
        step=thr.step, tokens_per_s=tokens_per_s, tokens_per_s_per_gpu=tokens_per_s / n,
        mfu_fraction=thr.mfu_fraction * ratio, hfu_fraction=thr.hfu_fraction * ratio,
        train_s=train_s, gpu_hours=gpu_hours, num_steps=float(rl.steps),
        tokens_per_s_low=thr.tokens_per_s_low * ratio,
        tokens_per_s_high=thr.tokens_per_s_high * ratio)
    power_w = update.energy.average_power_w_per_gpu / energy.pue
    kwh = gpu_hours * SECONDS_PER_HOUR * power_w * energy.pue / JOULES_PER_KWH
    warnings = list(update.warnings)
    for detail in figures.warning_details:
        if detail.code == DOES_NOT_FIT:
            warnings.append(detail.message)
    return dataclasses.replace(
        update, rl=figures, throughput=throughput,
        energy=Energy(kwh=kwh, co2e_kg=kwh * energy.grid_gco2e_per_kwh / GRAMS_PER_KG,
                      average_power_w_per_gpu=update.energy.average_power_w_per_gpu),
        warnings=tuple(warnings),
        warning_details=(*update.warning_details, *figures.warning_details),
        assumptions=(*update.assumptions, *figures.assumptions))


def _estimate_update(
    model: ModelSpec,
    cluster: ClusterSpec,
    plan: ParallelismPlan,
    training: TrainingSpec,
    *,
    energy: EnergySpec | None = None,
    calibration: Calibration = DEFAULT_CALIBRATION,
) -> Estimate:
    """The training estimate proper (every method's update)."""
    energy = energy or EnergySpec()
    acc = cluster.accelerator
    peak = acc.peak_for(training.precision)
    layout = validate_plan(model, cluster, plan, training)
    validate_lora(model, training)
    counts = count_parameters(model)
    flops = token_flops(model, counts, training.seq_len, training)
    plan_vars = PlanVars.of(plan, layout, training)
    geometry = build_geometry(model, counts, cluster, plan_vars, training)
    activations = stage_activation_bytes(model, plan_vars, training, geometry)
    memory = memory_breakdown(model, plan_vars, training, geometry, calibration,
                              acc.memory_bytes, stage_activations=activations)
    step = step_time(model, counts, cluster, plan_vars, training, geometry, calibration,
                     activations[0])

    if not (math.isfinite(step.step_s) and step.step_s > 0):
        raise InvalidSpecError(
            f"the inputs give no finite step time ({step.step_s} s): check the link speeds "
            "and sizes", field="cluster")
    n = cluster.num_gpus
    power_w = average_power_w_per_gpu(acc.tdp_w, energy)
    job = job_figures(step.step_s, plan_vars, training, n, flops, peak, power_w, energy.pue)
    tokens_per_s = job.tokens_per_s
    mfu = job.mfu_fraction
    band = calibration.band_for(framework=training.framework, moe=model.is_moe,
                                accelerator_id=acc.id,
                                framework_version=training.framework_version)
    throughput = Throughput(
        step=step,
        tokens_per_s=tokens_per_s,
        tokens_per_s_per_gpu=tokens_per_s / n,
        mfu_fraction=mfu,
        hfu_fraction=job.hfu_fraction,
        train_s=job.train_s,
        gpu_hours=job.gpu_hours,
        num_steps=job.num_steps,
        # A prediction that ran high by r on out-of-sample rows means truth = predicted/(1+r).
        tokens_per_s_low=tokens_per_s / (1.0 + band.high_fraction),
        tokens_per_s_high=tokens_per_s / (1.0 + band.low_fraction),
    )
    energy_result = Energy(
        kwh=job.kwh,
        co2e_kg=job.kwh * energy.grid_gco2e_per_kwh / GRAMS_PER_KG,
        average_power_w_per_gpu=power_w * energy.pue,
    )

    warnings = list(layout.warnings)
    if not memory.fits:
        warnings.append(
            f"does not fit: needs {bytes_to_gib(memory.peak_bytes):.1f} GiB per GPU, "
            f"{acc.id} has {bytes_to_gib(memory.capacity_bytes):.1f} GiB"
        )
    elif memory.at_edge:
        warnings.append(
            f"fits at the edge: {bytes_to_gib(memory.peak_bytes):.1f} of "
            f"{bytes_to_gib(memory.capacity_bytes):.1f} GiB per GPU, within "
            f"{1 - EDGE_FRACTION:.0%} of the capacity, where measured layouts have both run "
            "and failed with out-of-memory (docs/validation.md); leave more room, or try it"
        )
    if not calibration.is_calibrated_for(acc.id):
        warnings.append(
            f"{acc.id} has no published training runs in the calibration set; its efficiency "
            "uses the default fit, so the uncertainty is larger"
        )
    if model.vocab_size_assumed:
        vocab = default_vocab(model.name, model.mlp, model.num_heads, model.num_kv_heads)
        reason = vocab.reason if vocab.size == model.vocab_size else "the default"
        warnings.append(
            f"vocab_size not given: assumed {model.vocab_size:,} ({reason}); the "
            "logits' compute and memory scale with it")
    if mfu > MFU_WARNING_FRACTION:
        warnings.append(f"predicted MFU {mfu:.0%} is above what published runs reach")
    elif n > LARGE_SCALE_GPUS and mfu > LARGE_SCALE_MFU_FRACTION:
        warnings.append(
            f"predicted MFU {mfu:.0%} on {n:,} GPUs is above the highest published MFU at more "
            f"than {LARGE_SCALE_GPUS:,} GPUs ({LARGE_SCALE_MFU_FRACTION:.1%}, MegaScale, arXiv "
            "2402.15627): stragglers, failures and synchronisation at this scale are not "
            "modelled, so treat the time as optimistic")
    details = [*details_of(warnings), *outside_details(
        framework=training.framework, accelerator_id=acc.id,
        calibrated=calibration.is_calibrated_for(acc.id), num_gpus=n,
        hidden_size=model.hidden_size, seq_len=training.seq_len, moe=model.is_moe),
        *version_details(training, acc.id), *scale_details(n, mfu), *fabric_details(cluster),
        *compression_details(training),
        *method_details(training), *loss_kernel_details(training)]
    network_notes: tuple[str, ...] = ()
    if cluster.fabric is not None:
        network_notes = fabric_notes(cluster, {
            name: float(nodes) for name, nodes in group_nodes(
                plan_vars, geometry, cluster.gpus_per_node).items() if float(nodes) > 1.0})
    network_notes += compression_notes(model, training, plan.tp,
                                       state_layout(training).grad_bytes_per_param)
    return Estimate(
        params=counts,
        flops=flops,
        total_training_flops=flops.model_training_flops * training.tokens,
        memory=memory,
        throughput=throughput,
        energy=energy_result,
        num_micro_batches=layout.num_micro_batches,
        warnings=tuple(warnings),
        assumptions=(*_assumptions(plan, training, layout.num_micro_batches), *network_notes,
                     _band_note(band)),
        calibration_version=calibration.version,
        trainable_params=trainable_params(model, counts, training),
        warning_details=tuple(details),
    )


def version_details(training: TrainingSpec, accelerator_id: str) -> list[WarningDetail]:
    """What ``training.framework_version`` means for a stack whose default kernel and band
    come from this project's own measurements (``envelope.LOCAL_DEFAULTS``): not given, the
    local defaults are assumed (``defaulted_input``); older software takes the published
    runs' kernel (``defaulted_input`` on the kernel, unless stated) and the pooled band; a
    release that cannot be placed in time is ``outside_validated_range``."""
    framework, version = training.framework, training.framework_version
    local = LOCAL_DEFAULTS.get(framework)
    if local is None:
        return []
    era = version_era(framework, version)
    stack = framework.value
    out: list[WarningDetail] = []
    if era == VersionEra.NOT_GIVEN:
        out.append(WarningDetail(
            DEFAULTED_INPUT, "training.framework_version",
            f"training.framework_version not given: the {stack} defaults assumed are those "
            f"of its rows measured here, on software from {local.since[0]}-{local.since[1]:02d} "
            f"on; name the version of an older run. {local.note}"))
    elif era == VersionEra.UNPLACED:
        out.append(WarningDetail(
            OUTSIDE_VALIDATED_RANGE, "training.framework_version",
            f"training.framework_version {version!r} cannot be placed in time (give a date "
            "YYYY-MM or a PyTorch release such as 'torch 2.4'): the published runs' kernel and "
            f"the pooled band are used, not the defaults measured here. {local.note}"))
    if era in (VersionEra.UNPLACED, VersionEra.PUBLISHED) and training.attention_kernel is None:
        kernel = kernel_for(framework, accelerator_id, None, version)
        if kernel is not None:
            out.append(WarningDetail(
                DEFAULTED_INPUT, "training.attention_kernel",
                f"training.attention_kernel not given: {kernel.value}, the {stack} default "
                f"before {local.since[0]}-{local.since[1]:02d} (the version named, "
                f"{version!r}); the band is the pooled one, since the {stack} band rests on "
                "rows measured here"))
    return out


def _band_note(band: Band) -> str:
    return (f"80% band from the '{band.regime}' regime: predictions ran "
            f"{band.low_fraction:+.0%} to {band.high_fraction:+.0%} off on {band.rows} "
            "published runs the model was not fitted on "
            f"({band.coverage_fraction:.0%} covered out of sample)")


def _assumptions(plan: ParallelismPlan, training: TrainingSpec,
                 num_micro_batches: int) -> tuple[str, ...]:
    notes = [
        "model FLOPs count full (non-causal) attention and the logits, as PaLM and Megatron-LM "
        "do; MFU is against the dense peak for the training precision",
        "FlashAttention, no dropout, Adam with fp32 master weights and fp32 gradients",
        "1F1B pipeline schedule; data-parallel traffic overlaps with one micro-batch",
    ]
    if training.precision == Precision.FP8:
        notes.append("fp8: linear layers at the FP8 peak; attention and logits in bf16")
    if plan.recompute == RecomputeMode.SELECTIVE:
        notes.append("selective recomputation repeats the attention core only")
    layout = state_layout(training)
    if layout.gradients_freed and num_micro_batches == 1 and plan.pp == 1:
        notes.append(GRADIENTS_FREED_NOTE)
    if layout.caching_allocator:
        notes.append(ALLOCATOR_HEADROOM_NOTE)
    if training.framework_version is not None:
        notes.append(f"training.framework_version {training.framework_version!r}"
                     + ("" if training.framework in LOCAL_DEFAULTS else
                        ": echoed only (no default of this stack depends on its version)"))
    if runs_eager(training):
        notes.append(EAGER_NOTE)
    if plan.zero_stage == 3 and training.framework in FSDP2_STACKS:
        notes.append(FSDP2_NOTE)
    notes.extend(method_notes(training, plan.zero_stage, plan.pp))
    notes.extend(loss_kernel_notes(training))
    if training.optimizer == Optimizer.ADAMW_8BIT:
        notes.append(ADAMW_8BIT_NOTE)
    if plan.dp_shard is not None and plan.dp_replicas > 1:
        notes.append(
            f"hybrid sharding: the ZeRO state is sharded over {plan.dp_shard * plan.cp} ranks "
            f"(dp_shard x cp) and replicated {plan.dp_replicas} times; the gradient shards "
            "are all-reduced across the replicas wherever they are reduce-scattered")
    return tuple(notes)


FINETUNE_METHODS = (TrainingMethod.FULL_FINETUNE, TrainingMethod.LORA, TrainingMethod.QLORA)
"""The methods whose stacks differ most in their loss kernel (torchtune's chunked loss,
Liger's and Unsloth's fused ones, transformers' standard one): a loss kernel left out there
is named as a ``defaulted_input``."""
LOSS_KERNEL_NOTES: Mapping[LossKernel, str] = MappingProxyType({
    LossKernel.STANDARD: "loss: standard cross-entropy, the micro-batch's logits upcast to "
                         "fp32 and saved with their log-softmax (10 B per logit at the loss)",
    LossKernel.CHUNKED: "loss: chunked cross-entropy (torchtune CEWithChunkedOutputLoss): the "
                        "bf16 logits kept, one chunk of 8 upcast at a time (3 B per logit)",
    LossKernel.FUSED: "loss: fused linear cross-entropy (Liger Kernel, Cut Cross-Entropy): "
                      "the logits never materialised, a chunk's working set only (6 B per "
                      "token and hidden unit)",
})
"""The assumption each named loss kernel adds (``memory.LOSS_KERNELS``); the step time is the
same for all three (the loss's FLOPs do not change)."""
ADAMW_8BIT_NOTE = ("adamw_8bit: bitsandbytes 8-bit AdamW, both moments block-wise quantised "
                   "(about 2 B per trainable parameter instead of 8; Dettmers et al. 2022), "
                   "master weights as master_weights says; its update time is Adam's")


def loss_kernel_notes(training: TrainingSpec) -> list[str]:
    """The named loss kernel, or for a fine-tuning method the stack's own, as an assumption."""
    if training.loss_kernel is not None:
        return [LOSS_KERNEL_NOTES[training.loss_kernel]]
    if training.method in FINETUNE_METHODS:
        layout = state_layout(training)
        return [f"loss: training.loss_kernel not given, the {training.framework.value} "
                f"stack's own ({layout.logits_bytes_per_entry:g} B per logit at the loss)"]
    return []


def loss_kernel_details(training: TrainingSpec) -> list[WarningDetail]:
    """``defaulted_input`` on ``training.loss_kernel`` for a fine-tuning method that leaves it
    out: the logits can be the largest block of a fine-tuning peak (a 128K vocabulary)."""
    if training.loss_kernel is not None or training.method not in FINETUNE_METHODS:
        return []
    layout = state_layout(training)
    return [WarningDetail(
        DEFAULTED_INPUT, "training.loss_kernel",
        f"training.loss_kernel not given: the {training.framework.value} stack's own loss "
        f"assumed ({layout.logits_bytes_per_entry:g} B per logit at the loss; standard is "
        f"{LOSS_KERNELS[LossKernel.STANDARD].logits_bytes_per_entry:g}, chunked "
        f"{LOSS_KERNELS[LossKernel.CHUNKED].logits_bytes_per_entry:g}, fused none)")]


def method_notes(training: TrainingSpec, zero_stage: int = 0, pp: int = 1) -> list[str]:
    """What ``training.method`` and dataset sizing assume (issue 43); none for pretrain.
    ``zero_stage`` and ``pp``: whether the frozen base is sharded (ZeRO-3 without pipeline
    stages, ``memory._adapter_state_bytes``)."""
    notes: list[str] = []
    if training.method == TrainingMethod.RL:
        notes.append("rl: the policy update trains every weight (6N FLOPs per token, the "
                     "same model states as pre-training) on the rollouts, packed into "
                     "seq_len sequences, global_batch_seqs of them per optimizer update")
    if training.method == TrainingMethod.FULL_FINETUNE:
        notes.append("full_finetune: the same computation as pre-training (every weight "
                     "trained, 6N FLOPs per token, the same model states), on fewer tokens")
    elif training.adapters:
        lora = training.lora_spec
        base = training.base_precision
        modules = ",".join(sorted(lora.target_modules))
        notes.append(
            f"{training.method}: frozen base in {base} ({BASE_BYTES_PER_PARAM[base]:g} B per "
            "layer weight; embedding and head bf16), no gradients or optimizer state for it; "
            f"LoRA adapters of rank {lora.rank} on {modules} train with the stack's full "
            "per-parameter state (Hu et al. 2021)")
        notes.append(
            "frozen matmuls compute input gradients only: training FLOPs are 2 x forward for "
            "them (4N per token) plus 3 x forward for attention and the adapters "
            "(6 r (d_in + d_out) per adapted matrix); MFU and model FLOPs count these FLOPs "
            "actually done, not 6N")
        if zero_stage == 3 and pp == 1:
            notes.append("data parallelism reduces only the adapters' gradients; ZeRO-3 shards "
                         "the adapters' states and the frozen base, at its stored precision, "
                         "and all-gathers the base forward and backward every micro-batch")
        else:
            notes.append("ZeRO shards and data parallelism reduces only the adapters' states "
                         "and gradients; the frozen base is whole on every rank")
        if dequantises(training):
            notes.append(DEQUANT_NOTE + "; the dequantisation is HBM traffic (read the stored "
                         "weight, write bf16) per use: forward, input gradient, recompute")
        if training.method == TrainingMethod.QLORA:
            notes.append(PAGED_OPTIMIZER_NOTE)
    if training.examples is not None and training.mean_example_tokens is not None:
        if training.packing:
            notes.append(f"dataset: {training.examples:,} examples x "
                         f"{training.mean_example_tokens:g} mean tokens, packed into full "
                         "sequences (no padding)")
        else:
            real = min(training.mean_example_tokens, training.seq_len)
            waste = 1.0 - real / training.seq_len
            notes.append(f"dataset: {training.examples:,} examples, each padded to seq_len "
                         f"{training.seq_len} (packing off): {waste:.0%} of the tokens "
                         "processed are padding")
    return notes


def method_details(training: TrainingSpec) -> list[WarningDetail]:
    """LoRA and QLoRA estimates rest on the pre-training fit: no fine-tuning run is in the
    calibration set yet, so they carry ``outside_validated_range`` on ``training.method``."""
    if not training.adapters:
        return []
    return [WarningDetail(
        OUTSIDE_VALIDATED_RANGE, "training.method",
        f"training.method {training.method}: the calibration has no published fine-tuning "
        "runs yet; the efficiencies are those fitted on pre-training, and the frozen-base "
        "accounting (docs/model.md, \"Fine-tuning\") is not yet checked against measured peaks "
        "or throughput")]
