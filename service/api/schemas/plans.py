"""``POST /v1/parallelism-plans``: request and response bodies."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from decimal import Decimal
from typing import Annotated, Any, Self

from pydantic import BaseModel, Field, model_validator

from service.api.schemas.calibration_ref import CalibrationIdField
from service.api.schemas.common import AcceleratorRef, RequestModel, TextRule
from service.api.schemas.estimate import (
    FRAMEWORK_DESCRIPTION,
    FRAMEWORK_VERSION_DESCRIPTION,
    WARNING_DETAILS_DESCRIPTION,
    ClusterIn,
    Count,
    EnergyIn,
    EnergyOut,
    EstimateResponse,
    FabricIn,
    LoraIn,
    MemoryOut,
    ModelIn,
    ParallelismIn,
    RlIn,
    TimeOut,
    TrainingIn,
    WarningDetailOut,
    details_out,
)
from service.api.schemas.prices import DecimalString, PricePerGpuHour
from service.core import pricing
from service.core.errors import InvalidSpecError
from service.core.failures import CHECKPOINT_BYTES_SOURCE, JobFailures, Reliability
from service.core.plausibility import (
    NO_PROGRESS,
    NO_PROGRESS_PREFIX,
    WarningDetail,
    costly_warnings,
    long_run_warning,
)
from service.core.search import DIMENSIONS, Objective, RankedPlan, SearchResult, SearchSpace
from service.core.specs import (
    AcceleratorSpec,
    AttentionKernel,
    ClusterSpec,
    EnergySpec,
    Framework,
    LossKernel,
    ModelSpec,
    Optimizer,
    Precision,
    StatePrecision,
    TrainingMethod,
    TrainingSpec,
)

Dimension = Annotated[str, Field(pattern="^(" + "|".join(DIMENSIONS) + ")$")]
MAX_CLUSTER_OPTIONS = 1024
"""GPU counts per request across all candidate clusters (each is a separate search group)."""
MAX_BATCH_OPTIONS = 64
MAX_SEARCH_CANDIDATES = 40_000_000
"""Candidates one plan search may hold (CQ_SEARCH_MAX_CANDIDATES may lower it); a request
over it is refused with 422 before any is evaluated. Sized from the measured rate with
headroom (issue 38; benchmarks/optimiser_speed.py, docs/optimiser.md): the search evaluates
the 405B sweep at 6.4 M candidates per CPU-second on the 2-core development machine
(benchmarks/optimiser_speed.py, 2026-12-03), so 40 M candidates are about 6.3 CPU-seconds,
spread across the two search workers: about 3.1 s on a quiet machine and 6.3 s with two
CPU-burning processes beside the server, inside the 10 s CQ_SEARCH_DEADLINE_S (a safety net:
503 with Retry-After, never a partial plan). It admits a 12-accelerator 405B sweep (384
clusters, 31.4 M candidates); the 50 M it replaces did not fit the deadline under load."""
CAP_DESCRIPTION = (
    f"A search holds at most {MAX_SEARCH_CANDIDATES:,} candidates (layouts x micro-batches x "
    "ZeRO stages x recomputation x sequence parallelism, over every cluster, GPU count and "
    "batch; search.max_candidates in the answer, CQ_SEARCH_MAX_CANDIDATES may lower it): a "
    "request over it is refused with 422 naming the field and the limit before any work. "
    "The work is counted in candidates, not seconds, so the same request gets the same "
    "answer however busy the server is.")

PLAN_SEARCH_EXAMPLE: dict[str, Any] = {
    "model": {"preset": "gpt3-175b"},
    "training": {"seq_len": 2048, "global_batch_seqs": 1536, "tokens": 300e9,
                 "precision": "bf16"},
    "cluster": {"accelerator": "a100-sxm4-80gb", "num_gpus": 1024, "gpus_per_node": 8},
    "objective": "time",
    "top_k": 5,
}
SWEEP_EXAMPLE: dict[str, Any] = {
    "model": {"preset": "llama3.1-405b"},
    "training": {"seq_len": 8192, "global_batch_seqs": 2048, "tokens": 15.6e12},
    "clusters": [
        {"accelerator": "h100-sxm5-80gb", "num_gpus_range": {"start": 512, "stop": 16384,
                                                             "step": 512}},
        {"accelerator": "h200-sxm-141gb", "num_gpus_range": {"start": 512, "stop": 16384,
                                                             "step": 512}},
    ],
    # 180 days with failures and checkpoints (issue 39: the 90 days this example once gave
    # held only without them; at the quote's defaults the fastest plan loses 36% to them).
    "constraints": {"memory_headroom_fraction": 0.05, "max_train_s": 15552000,
                    "price_per_gpu_hour_usd": {"h100-sxm5-80gb": "2.50",
                                               "h200-sxm-141gb": "3.20"}},
    "objective": "pareto",
}


class IntRange(RequestModel):
    """start, start+step, ... up to and including stop."""

    start: Count
    stop: Count
    step: Count = 1

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.stop < self.start:
            raise ValueError("stop must be >= start")
        return self

    def size(self) -> int:
        """How many values, counted without making them (a range of a million batches was
        made, 40 MB, only to be refused for holding more than 64: issue 36)."""
        return len(range(self.start, self.stop + 1, self.step))

    def values(self) -> list[int]:
        return list(range(self.start, self.stop + 1, self.step))


class CandidateClusterIn(RequestModel):
    accelerator: AcceleratorRef = Field(examples=["h100-sxm5-80gb"])
    num_gpus: Count | None = Field(default=None, description="One GPU count.")
    num_gpus_range: IntRange | None = Field(default=None, description="Several GPU counts.")
    gpus_per_node: int | None = Field(strict=True, default=None, ge=1, le=100_000)
    scaleout_bytes_per_s_per_gpu: float | None = Field(
        strict=True, default=None, ge=1e8, le=1e13,
        description=ClusterIn.model_fields["scaleout_bytes_per_s_per_gpu"].description)
    scaleup_bytes_per_s_per_gpu: float | None = Field(
        strict=True, default=None, ge=1e8, le=1e13,
        description=ClusterIn.model_fields["scaleup_bytes_per_s_per_gpu"].description)
    grid_gco2e_per_kwh: float | None = Field(
        strict=True, default=None, ge=0, le=2000, examples=[39.32],
        description="Grid carbon intensity where this cluster runs, gCO2e per kWh (for "
                    "example an offer's region_carbon_g_per_kwh from GET /v1/offers). Default: "
                    "energy.grid_gco2e_per_kwh. Sets this cluster's plans' CO2e and what the "
                    "carbon objective ranks, so one request compares regions.")
    fabric: FabricIn | None = Field(
        default=None, description=ClusterIn.model_fields["fabric"].description,
        examples=ClusterIn.model_fields["fabric"].examples)

    @model_validator(mode="after")
    def _one_count(self) -> Self:
        if (self.num_gpus is None) == (self.num_gpus_range is None):
            raise ValueError("give exactly one of num_gpus and num_gpus_range")
        if self.num_gpus_range is not None and (
            len(range(self.num_gpus_range.start, self.num_gpus_range.stop + 1,
                      self.num_gpus_range.step)) > MAX_CLUSTER_OPTIONS
        ):
            raise ValueError(f"num_gpus_range may hold at most {MAX_CLUSTER_OPTIONS} counts")
        return self

    def counts(self) -> list[int]:
        if self.num_gpus is not None:
            return [self.num_gpus]
        assert self.num_gpus_range is not None  # noqa: S101 - checked by the validator
        return self.num_gpus_range.values()

    def to_core(self, accelerator: AcceleratorSpec) -> list[ClusterSpec]:
        """One cluster per GPU count; GPUs per node default as in ``ClusterIn``."""
        return [dataclasses.replace(
                    ClusterIn(accelerator=self.accelerator, num_gpus=count,
                              gpus_per_node=self.gpus_per_node,
                              scaleout_bytes_per_s_per_gpu=self.scaleout_bytes_per_s_per_gpu,
                              scaleup_bytes_per_s_per_gpu=self.scaleup_bytes_per_s_per_gpu,
                              fabric=self.fabric).to_core(accelerator),
                    grid_gco2e_per_kwh=self.grid_gco2e_per_kwh)
                for count in self.counts()]


class PlanTrainingIn(RequestModel):
    seq_len: int = Field(strict=True, ge=1, le=10_000_000, examples=[2048])
    global_batch_seqs: int | None = Field(strict=True, default=None, ge=1, le=100_000_000,
                                          description="One global batch (sequences).")
    global_batch_seqs_options: list[Count] | None = Field(
        default=None, max_length=MAX_BATCH_OPTIONS, description="Allowed global batches.")
    global_batch_range: IntRange | None = Field(default=None,
                                                description="Allowed global batches.")
    tokens: float | None = Field(strict=True, default=None, gt=0, le=1e18, examples=[300e9],
                                 description=(
        "Training tokens. Required, except with method rl, whose tokens are its rollouts "
        "(then a 422 if given)."))
    method: TrainingMethod = Field(default=TrainingMethod.PRETRAIN,
                                   description=TrainingIn.model_fields["method"].description)
    lora: LoraIn | None = Field(default=None,
                                description=TrainingIn.model_fields["lora"].description)
    rl: RlIn | None = Field(default=None, description=(
        TrainingIn.model_fields["rl"].description or "") + (
        " The search ranks layouts by the update's step; the returned plans are then "
        "estimated as RL jobs (rollouts, forward passes, update, weight sync)."))
    precision: Precision = Precision.BF16
    flash_attention: bool = Field(strict=True, default=True)
    framework: Framework = Field(default=Framework.UNKNOWN, description=FRAMEWORK_DESCRIPTION)
    master_weights: StatePrecision = Field(
        default=StatePrecision.FP32,
        description=TrainingIn.model_fields["master_weights"].description)
    gradient_precision: StatePrecision | None = Field(
        default=None, description=TrainingIn.model_fields["gradient_precision"].description)
    optimizer: Optimizer = Field(
        default=Optimizer.ADAMW, description=TrainingIn.model_fields["optimizer"].description)
    loss_kernel: LossKernel | None = Field(
        default=None, description=TrainingIn.model_fields["loss_kernel"].description)
    fp8_params: bool = Field(strict=True, default=False,
                             description=TrainingIn.model_fields["fp8_params"].description)
    attention_kernel: AttentionKernel | None = Field(
        default=None, description=TrainingIn.model_fields["attention_kernel"].description)
    torch_compile: bool | None = Field(
        strict=True, default=None,
        description=TrainingIn.model_fields["torch_compile"].description)
    framework_version: Annotated[str, TextRule(max_length=64, min_length=1)] | None = Field(
        default=None, description=FRAMEWORK_VERSION_DESCRIPTION, examples=["2024-12"])

    @model_validator(mode="after")
    def _one_batch(self) -> Self:
        given = [x is not None for x in (self.global_batch_seqs, self.global_batch_seqs_options,
                                         self.global_batch_range)]
        if sum(given) != 1:
            raise ValueError("give exactly one of global_batch_seqs, global_batch_seqs_options "
                             "and global_batch_range")
        if self.global_batch_range is not None and self.global_batch_range.size() > (
            MAX_BATCH_OPTIONS
        ):
            raise ValueError(f"global_batch_range may hold at most {MAX_BATCH_OPTIONS} values")
        return self

    def to_core(self, global_batch_seqs: int) -> TrainingSpec:
        rl = None if self.rl is None else self.rl.to_core()
        if self.method == TrainingMethod.RL and rl is None:
            raise InvalidSpecError("training.method rl needs training.rl", field="training.rl")
        if rl is not None and self.tokens is not None:
            raise InvalidSpecError("training.tokens cannot be given with training.rl: an RL "
                                   "job's tokens are its rollouts", field="training.tokens")
        if rl is not None:
            tokens = rl.total_tokens
        elif self.tokens is None:
            raise InvalidSpecError("training.tokens is required", field="training.tokens")
        else:
            tokens = self.tokens
        return TrainingSpec(seq_len=self.seq_len, global_batch_seqs=global_batch_seqs,
                            tokens=tokens, method=self.method,
                            lora=None if self.lora is None else self.lora.to_core(), rl=rl,
                            precision=self.precision,
                            flash_attention=self.flash_attention, framework=self.framework,
                            master_weights=self.master_weights,
                            gradient_precision=self.gradient_precision,
                            optimizer=self.optimizer, loss_kernel=self.loss_kernel,
                            fp8_params=self.fp8_params,
                            attention_kernel=self.attention_kernel,
                            torch_compile=self.torch_compile,
                            framework_version=self.framework_version)

    def batches(self) -> list[int]:
        if self.global_batch_seqs is not None:
            return [self.global_batch_seqs]
        if self.global_batch_seqs_options is not None:
            return sorted(set(self.global_batch_seqs_options))
        assert self.global_batch_range is not None  # noqa: S101 - checked by the validator
        return self.global_batch_range.values()


class FixedParallelismIn(ParallelismIn):
    """Values for the dimensions that do not vary (dp is always derived)."""

    @model_validator(mode="after")
    def _no_dp(self) -> Self:
        if self.dp is not None:
            raise ValueError("dp is derived from the GPU count; leave it out")
        if self.auto_dimensions():
            raise ValueError("\"auto\" is for estimates; in a search, list the dimension in "
                             "constraints.vary instead")
        if self.dp_shard is not None:
            raise ValueError("dp_shard is for estimates: dp is derived per candidate, and the "
                             "search shards over every data-parallel rank")
        return self


class ConstraintsIn(RequestModel):
    vary: list[Dimension] = Field(
        default_factory=lambda: list(DIMENSIONS), max_length=len(DIMENSIONS),
        description=(
            "Dimensions the search may vary; the others take their value from fixed. A varied "
            "zero_stage tries only the stages training.framework runs (torchtitan 0 and 3, "
            "fsdp 0, 2 and 3, maxtext 0 and 3; the others all four); a fixed one is kept."))
    fixed: FixedParallelismIn = Field(default_factory=FixedParallelismIn)
    max_tp: Count | None = Field(default=None,
                                 description="Largest tp. Default: GPUs per node.")
    memory_headroom_fraction: float = Field(
        strict=True, default=0.0, ge=0.0, le=0.9,
        description="Share of GPU memory kept free: a plan fits when its peak is at most "
                    "capacity x (1 - headroom).")
    max_train_s: float | None = Field(strict=True, default=None, gt=0, le=1e11,
                                      description="Deadline for the training run, seconds.")
    budget_usd: DecimalString | None = Field(
        default=None, description="Largest cost; needs price_per_gpu_hour_usd.")
    price_per_gpu_hour_usd: PricePerGpuHour | dict[AcceleratorRef, PricePerGpuHour] | None = Field(
        default=None, description="One price for every accelerator, or one per accelerator "
                                  "id, at most 1,000,000 per GPU-hour. Until quotes land this "
                                  "is how cost is known.")

    def to_space(self) -> SearchSpace:
        """The search space; ``fixed`` gives the dimensions that do not vary (dp is derived,
        so the GPU count passed to ``to_core`` does not matter)."""
        return SearchSpace(vary=frozenset(self.vary), base=self.fixed.to_core(1),
                           max_tp=self.max_tp,
                           memory_headroom_fraction=self.memory_headroom_fraction)

    @model_validator(mode="after")
    def _fixed_fields_fit_every_candidate(self) -> Self:
        if self.fixed.etp not in (None, 1) and "tp" in self.vary:
            raise ValueError("constraints.fixed.etp other than 1 needs tp fixed (leave tp out "
                             "of constraints.vary): it must divide every candidate's tp")
        if self.fixed.offload and "zero_stage" in self.vary:
            raise ValueError("constraints.fixed.offload needs zero_stage fixed (leave "
                             "zero_stage out of constraints.vary): offload needs ZeRO >= 1")
        return self

    @model_validator(mode="after")
    def _unique(self) -> Self:
        if len(set(self.vary)) != len(self.vary):
            raise ValueError("vary lists a dimension twice")
        if isinstance(self.price_per_gpu_hour_usd, dict) and len(
            self.price_per_gpu_hour_usd) > 64:
            raise ValueError("price_per_gpu_hour_usd may name at most 64 accelerators")
        return self


class PlanReliabilityIn(RequestModel):
    """The failure assumptions of the plans: the quote's ``reliability`` (the same names,
    defaults and limits, tests/api/test_plans_goodput.py), so a plan's wall-clock is the
    quote's."""

    failure_rate_per_gpu_hour: float = Field(
        strict=True, default=pricing.DEFAULT_FAILURE_RATE_PER_GPU_HOUR, ge=0, le=1,
        description="Hardware interruptions per GPU-hour (default: Llama 3 405B's 2.2e-5).")
    restart_s: float = Field(strict=True, default=pricing.DEFAULT_RESTART_S, ge=0, le=86_400)
    checkpoint_bytes_per_s: float = Field(
        strict=True, default=pricing.DEFAULT_CHECKPOINT_BYTES_PER_S, gt=0, le=1e13,
        description="Storage write bandwidth for checkpoints.")

    def to_core(self) -> Reliability:
        return Reliability(failure_rate_per_gpu_hour=self.failure_rate_per_gpu_hour,
                           restart_s=self.restart_s,
                           checkpoint_bytes_per_s=self.checkpoint_bytes_per_s,
                           given=frozenset(self.model_fields_set))


class PlanSearchRequest(RequestModel):
    model: ModelIn
    training: PlanTrainingIn
    cluster: CandidateClusterIn | None = Field(default=None, description="One cluster.")
    clusters: list[CandidateClusterIn] | None = Field(
        default=None, max_length=16, description=(
            "Candidate accelerators and GPU counts (at most "
            f"{MAX_CLUSTER_OPTIONS:,} (accelerator, GPU count) pairs). " + CAP_DESCRIPTION))
    constraints: ConstraintsIn = Field(
        default_factory=ConstraintsIn, description=(
            "What the search may vary and must meet. " + CAP_DESCRIPTION))
    objective: Objective = Field(default=Objective.TIME, description=(
        "What ranks the plans: time (training wall-clock), gpu_hours, cost (needs "
        "constraints.price_per_gpu_hour_usd), energy (kWh with PUE), carbon (kWh x each "
        "cluster's grid_gco2e_per_kwh) or pareto (the time/cost front). Every objective, "
        "constraints.max_train_s and constraints.budget_usd count the time lost to hardware "
        "failures and checkpoints (each plan's failures block, the quote's goodput model); "
        "a plan whose job cannot make progress ranks after every plan that can."))
    top_k: int = Field(strict=True, default=10, ge=1, le=100)
    energy: EnergyIn = Field(default_factory=EnergyIn)
    reliability: PlanReliabilityIn = Field(
        default_factory=PlanReliabilityIn, description=(
            "Failure and checkpoint assumptions: the quote's reliability, with its defaults."))
    calibration_id: CalibrationIdField = None

    @model_validator(mode="after")
    def _one_cluster_form(self) -> Self:
        if (self.cluster is None) == (self.clusters is None):
            raise ValueError("give exactly one of cluster and clusters")
        total = sum(len(c.counts()) for c in self.candidate_clusters())
        if total > MAX_CLUSTER_OPTIONS:
            raise ValueError(f"at most {MAX_CLUSTER_OPTIONS} (accelerator, GPU count) pairs")
        return self

    def candidate_clusters(self) -> list[CandidateClusterIn]:
        return [self.cluster] if self.cluster is not None else list(self.clusters or [])


class SearchOut(BaseModel):
    candidates_total: int = Field(description="Valid layouts enumerated.")
    candidates_evaluated: int
    feasible: int = Field(description="Candidates that fit in memory, the deadline and budget.")
    pruned_by_rule: dict[str, int] = Field(
        description="Layouts dropped by each enumeration rule (counted where the rule "
                    "applies), and candidates dropped by memory, deadline and budget.")
    max_candidates: int = Field(
        default=MAX_SEARCH_CANDIDATES, description=(
            "The cap this search ran under: a request whose space holds more candidates is "
            "refused with 422 before any work (issue 38). " + CAP_DESCRIPTION))
    elapsed_s: float = Field(description=(
        "How long the search took on this server: a measure of the run, not part of the "
        "answer (it varies with load; everything else is the same for the same request)."))
    candidates_per_s: float = Field(description="candidates_evaluated / elapsed_s (a measure "
                                                "of the run, like elapsed_s).")
    truncated: bool = Field(description=(
        "Always false (issue 38): every candidate is evaluated. A search that cannot finish "
        "within CQ_SEARCH_DEADLINE_S, a safety net, is refused with 503 and Retry-After, "
        "never answered from part of the space."), json_schema_extra={"deprecated": True})
    covered_fraction: float = Field(default=1.0, description=(
        "Share of candidates_total that was evaluated: always 1 (issue 38; see truncated)."),
        json_schema_extra={"deprecated": True})


class FailureAssumptionOut(BaseModel):
    value: float
    source: str = Field(description="Where the value comes from: the default's published "
                                    "source or assumption, or the request.")


class FailuresOut(BaseModel):
    """What hardware failures and checkpoints do to the run: the quote's goodput model
    (Young/Daly, service/core/failures.py), with the quote's defaults. A job stalls when any
    of its GPUs fails; time.train_s is the failure-free wall-clock, train_s_with_failures
    the quote's (its line's wall_clock_s on the same node)."""

    progresses: bool = Field(description="False when restarts and checkpoints outpace the "
                                          "time between failures: the job never finishes.")
    reason: str | None = Field(description="Why the job cannot make progress (as the quote "
                                           "says it), or null.")
    goodput_fraction: float = Field(description=(
        "Useful work over wall-clock time, 1 / (1 + lost_fraction); 0 when the job cannot "
        "make progress."))
    lost_fraction: float | None = Field(description=(
        "Time lost to checkpoints and restarts over failure-free time (the quote's "
        "goodput_loss_fraction); null when the job cannot make progress."))
    train_s_with_failures: float | None = Field(description=(
        "time.train_s x (1 + lost_fraction): the wall-clock the quote bills; null when the "
        "job cannot make progress."))
    gpu_hours_with_failures: float | None = Field(
        description="time.gpu_hours x (1 + lost_fraction); null when the job cannot progress.")
    cost_with_failures_usd: str | None = Field(description=(
        "cost_usd x (1 + lost_fraction), half-even to the cent; null without a price or when "
        "the job cannot make progress."))
    checkpoint_interval_s: float | None = Field(description=(
        "Young/Daly optimal checkpoint interval sqrt(2 C / rate); null when nothing fails or "
        "the job cannot progress."))
    interruptions_per_hour: float = Field(description=(
        "Job interruptions per hour: failure_rate_per_gpu_hour x num_gpus."))
    checkpoint_s: float = Field(description="checkpoint_bytes / checkpoint_bytes_per_s.")
    failure_rate_per_gpu_hour: FailureAssumptionOut
    restart_s: FailureAssumptionOut
    checkpoint_bytes_per_s: FailureAssumptionOut
    checkpoint_bytes: FailureAssumptionOut
    basis: str = Field(description="The assumptions in one sentence (the quote's "
                                   "goodput_basis, with the GPU count and checkpoint).")

    @classmethod
    def from_core(cls, failures: JobFailures, train_s: float, gpu_hours: float,
                  cost_with_failures_usd: Decimal | None) -> FailuresOut:
        g, r = failures.goodput, failures.reliability
        ok = failures.progresses
        return cls(
            progresses=ok, reason=g.reason, goodput_fraction=failures.goodput_fraction,
            lost_fraction=g.lost_fraction if ok else None,
            train_s_with_failures=train_s * failures.factor if ok else None,
            gpu_hours_with_failures=gpu_hours * failures.factor if ok else None,
            cost_with_failures_usd=(None if cost_with_failures_usd is None
                                    else str(cost_with_failures_usd)),
            checkpoint_interval_s=g.interval_s if ok else None,
            interruptions_per_hour=failures.interruptions_per_s * 3600.0,
            checkpoint_s=failures.checkpoint_s,
            failure_rate_per_gpu_hour=FailureAssumptionOut(
                value=r.failure_rate_per_gpu_hour, source=r.source("failure_rate_per_gpu_hour")),
            restart_s=FailureAssumptionOut(value=r.restart_s, source=r.source("restart_s")),
            checkpoint_bytes_per_s=FailureAssumptionOut(
                value=r.checkpoint_bytes_per_s, source=r.source("checkpoint_bytes_per_s")),
            checkpoint_bytes=FailureAssumptionOut(value=failures.checkpoint_bytes,
                                                  source=CHECKPOINT_BYTES_SOURCE),
            basis=failures.basis,
        )


def no_progress_detail(failures: JobFailures) -> WarningDetail | None:
    """The coded warning of a plan whose job cannot make progress, or None."""
    if failures.progresses:
        return None
    return WarningDetail(NO_PROGRESS, "reliability",
                         f"{NO_PROGRESS_PREFIX}: {failures.goodput.reason} ({failures.basis}); "
                         "time.train_s leaves failures out and is no training time")


class PlanOut(BaseModel):
    rank: int
    accelerator: str
    num_gpus: int
    gpus_per_node: int
    global_batch_seqs: int
    parallelism: dict[str, int | bool | str]
    cost_usd: str | None = Field(description="GPU-hours x price, when a price was given "
                                             "(without failures: failures.cost_with_failures_"
                                             "usd has them).")
    memory: MemoryOut
    time: TimeOut
    energy: EnergyOut
    failures: FailuresOut
    warnings: list[str]
    warning_details: list[WarningDetailOut] = Field(
        default_factory=list, description=WARNING_DETAILS_DESCRIPTION)

    @classmethod
    def from_core(cls, rank: int, ranked: RankedPlan, model: ModelSpec,
                  energy: EnergySpec, defaulted: Sequence[WarningDetail] = ()) -> PlanOut:
        blocks = EstimateResponse.from_core(
            ranked.estimate, model=model, cluster=ranked.cluster,
            plan=ranked.plan, energy=energy)
        stuck = no_progress_detail(ranked.failures)
        throughput = ranked.estimate.throughput
        return cls(
            rank=rank, accelerator=ranked.cluster.accelerator.id,
            num_gpus=ranked.cluster.num_gpus, gpus_per_node=ranked.cluster.gpus_per_node,
            global_batch_seqs=ranked.global_batch_seqs,
            parallelism=blocks.resolved.parallelism,
            cost_usd=str(ranked.cost_usd) if ranked.cost_usd is not None else None,
            memory=blocks.memory, time=blocks.time, energy=blocks.energy,
            failures=FailuresOut.from_core(ranked.failures, throughput.train_s,
                                           throughput.gpu_hours, ranked.cost_with_failures_usd),
            warnings=[*blocks.warnings, *([stuck.message] if stuck else [])],
            warning_details=[*blocks.warning_details, *details_out(defaulted),
                             *details_out([stuck] if stuck else [])],
        )


def _empty(value: list[str]) -> bool:
    return not value


class PlanSearchResponse(BaseModel):
    objective: Objective
    cost_basis: str = Field(description="usd when prices were given; otherwise gpu_hours, "
                                        "and the Pareto front is time against GPU-hours.")
    plans: list[PlanOut]
    pareto: list[PlanOut] = Field(description="The time/cost front, fastest first (at most "
                                              "50 points, evenly spread).")
    search: SearchOut
    calibration_version: str
    assumptions: list[str] = Field(
        default_factory=list, exclude_if=_empty, description=(
            "Present with calibration_id: the user calibration's id and revision and what it "
            "changed (issue 37)."))

    @classmethod
    def from_core(cls, result: SearchResult, objective: Objective, model: ModelSpec,
                  calibration_version: str, *,
                  max_reasonable_train_s: float | None = None,
                  defaulted: Sequence[WarningDetail] = ()) -> PlanSearchResponse:
        """``max_reasonable_train_s`` (the service's setting) marks plans nobody would run;
        plans costing over 10x the cheapest of this answer are marked too. ``defaulted``:
        the request's ``defaulted_input`` warnings, on every plan."""
        stats = result.stats
        plans = [PlanOut.from_core(i + 1, p, model, p.energy, defaulted)
                 for i, p in enumerate(result.plans)]
        pareto = [PlanOut.from_core(i + 1, p, model, p.energy, defaulted)
                  for i, p in enumerate(result.pareto)]
        _mark_impractical([*plans, *pareto], result.cost_basis, max_reasonable_train_s)
        return cls(
            objective=objective, cost_basis=result.cost_basis,
            plans=plans, pareto=pareto,
            search=SearchOut(
                candidates_total=stats.candidates_total,
                candidates_evaluated=stats.candidates_evaluated, feasible=stats.feasible,
                pruned_by_rule=stats.pruned_by_rule, max_candidates=stats.max_candidates,
                elapsed_s=stats.elapsed_s,
                candidates_per_s=stats.candidates_per_s, truncated=stats.truncated,
                covered_fraction=stats.covered_fraction),
            calibration_version=calibration_version,
        )


def _mark_impractical(plans: list[PlanOut], cost_basis: str,
                      max_reasonable_train_s: float | None) -> None:
    """Add the plausibility warnings (service/core/plausibility.py) to each plan: a run over
    the wall-clock limit, and a cost (USD when priced, else GPU-hours) over 10x the cheapest
    plan of the same answer (the ranked plans and the Pareto front together), both with
    failures and checkpoints (a plan whose job cannot progress has its own warning,
    no_progress, and takes no part)."""
    priced = cost_basis == "usd"
    costs: list[Decimal | float | None] = [
        (Decimal(p.failures.cost_with_failures_usd)
         if p.failures.cost_with_failures_usd is not None else None) if priced
        else p.failures.gpu_hours_with_failures for p in plans]
    costly = costly_warnings(costs, "USD" if priced else "GPU-hours")
    for plan, ratio_warning in zip(plans, costly, strict=True):
        train_s = plan.failures.train_s_with_failures
        extra = [w for w in (None if train_s is None
                             else long_run_warning(train_s, max_reasonable_train_s),
                             ratio_warning) if w]
        plan.warnings = [*plan.warnings, *extra]
        plan.warning_details = [*plan.warning_details, *details_out((), extra)]
