"""``POST /v1/serving-estimates``: request and response bodies (issue 19)."""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Annotated, Any, Self

from pydantic import BaseModel, Field, model_validator

from service.api.schemas.common import AcceleratorRef, RequestModel, TextRule
from service.api.schemas.estimate import EnergyIn, ModelIn, WarningDetailOut
from service.api.schemas.prices import PricePerGpuHour
from service.core import serving
from service.core.estimate import average_power_w_per_gpu
from service.core.specs import AcceleratorSpec, EnergySpec
from service.core.units import JOULES_PER_KWH, SECONDS_PER_HOUR

HOUR_S = Decimal(int(SECONDS_PER_HOUR))

SERVING_EXAMPLE: dict[str, Any] = {
    "model": {"preset": "llama3.1-70b"},
    "deployment": {"accelerator": "h100-sxm5-80gb", "gpus_per_replica": 4, "tp": 4, "pp": 1,
                   "weight_precision": "fp8", "kv_cache_precision": "fp8", "engine": "trtllm",
                   "max_batch": 256},
    "traffic": {"mode": "online", "prompt_tokens": {"mean": 1024},
                "output_tokens": {"mean": 256}, "requests_per_s": 10,
                "slo": {"ttft_p99_s": 2.0, "tpot_p99_s": 0.1}},
}

Tokens = float
MIN_REQUESTS_PER_S = 1e-6
"""One request in about 11.6 days. A fleet held for a slower load serves nothing a cost per
token could describe; 1e-300 overflowed the cost per million tokens (issue 36)."""
MAX_COST_FIGURE_USD = Decimal(10) ** 15
"""The largest cost figure a serving estimate states (10^15 USD, about ten times the world's
yearly output): a larger one is null, with a warning, rather than a number past the 28 digits
of Decimal arithmetic (issue 36: an idle fleet's cost per million tokens overflowed)."""


class SpeculativeIn(RequestModel):
    acceptance_rate: float = Field(strict=True, ge=0.0, lt=1.0,
                                   description="Share of draft tokens the target accepts.")
    draft_tokens: int = Field(strict=True, default=serving.DEFAULT_DRAFT_TOKENS, ge=1, le=16,
                              description="Draft tokens proposed per step.")


class DeploymentIn(RequestModel):
    accelerator: AcceleratorRef = Field(examples=["h100-sxm5-80gb"])
    gpus_per_replica: int = Field(strict=True, ge=1, le=1024)
    tp: int = Field(strict=True, default=1, ge=1, le=1024, description="Tensor parallelism.")
    pp: int = Field(strict=True, default=1, ge=1, le=1024, description="Pipeline stages.")
    weight_precision: serving.WeightPrecision = serving.WeightPrecision.BF16
    kv_cache_precision: serving.KvPrecision = serving.KvPrecision.BF16
    engine: serving.Engine = Field(
        default=serving.Engine.UNKNOWN,
        description="vllm, sglang, trtllm or unknown: each has its documented efficiency "
                    "(docs/serving.md); unknown takes the most conservative.")
    max_batch: int | None = Field(
        strict=True, default=None, ge=1, le=100_000,
        description="Largest running batch (max_num_seqs); default: the engine version's "
                    "documented limit (vLLM max_num_seqs, TensorRT-LLM max_batch_size, "
                    "SGLang max_running_requests), named in assumptions.")
    engine_version: Annotated[str, TextRule(min_length=1, max_length=64)] | None = Field(
        default=None,
        description="The engine's release, as the engine numbers it (PEP 440, optionally "
                    "v-prefixed: 0.6.3, v0.4.1, 0.6.4.dev4+gc9fc1608). It takes the newest "
                    "documented defaults at or below it (named in assumptions); documented: "
                    + "; ".join(f"{engine}: {', '.join(x.version for x in known)}"
                                for engine, known in serving.ENGINE_LIMITS.items() if known)
                    + ". A malformed release, one older than the engine's oldest documented "
                      "one, or any release of unknown is refused (422 on this field). vLLM "
                      "before 0.8 runs the V0 engine, which the fit holds no row of: such an "
                      "answer carries outside_validated_range on this field and the V0 band. "
                      "Default: the engine's latest (a defaulted_input warning detail). It "
                      "selects the documented defaults that apply where max_batch is not "
                      "given.")
    replicas: int | None = Field(
        strict=True, default=None, ge=1, le=serving.MAX_REPLICAS,
        description="Pin the replica count: online traffic is not sized but served by "
                    "these replicas; past their capacity the answer is saturated (the "
                    "saturated warning detail, sizing.queue_growth_requests_per_s, and null "
                    "TTFT and end-to-end latency). Default: sized for the load.")
    prefix_caching: bool = Field(strict=True, default=False)
    prefix_cache_hit_fraction: float | None = Field(
        strict=True, default=None, ge=0.0, lt=1.0,
        description="Share of prompt tokens found in the prefix cache; required when "
                    "prefix_caching is true (a hit rate depends on the traffic, so none is "
                    "assumed).")
    speculative: SpeculativeIn | None = Field(default=None,
                                              description="Speculative decoding, optional.")
    price_per_gpu_hour_usd: PricePerGpuHour | None = Field(
        default=None, description="Price of one GPU-hour, for the cost block (at most "
                                  "1,000,000).")

    @model_validator(mode="after")
    def _prefix(self) -> Self:
        if self.prefix_caching and self.prefix_cache_hit_fraction is None:
            raise ValueError("prefix_caching needs prefix_cache_hit_fraction (the share of "
                             "prompt tokens served from the cache)")
        if not self.prefix_caching and self.prefix_cache_hit_fraction:
            raise ValueError("prefix_cache_hit_fraction needs prefix_caching: true")
        return self

    def to_core(self, accelerator: AcceleratorSpec) -> serving.Deployment:
        return serving.Deployment(
            accelerator=accelerator, gpus_per_replica=self.gpus_per_replica, tp=self.tp,
            pp=self.pp, weight_precision=self.weight_precision,
            kv_cache_precision=self.kv_cache_precision, engine=self.engine,
            max_batch=self.max_batch,
            prefix_cache_hit_fraction=self.prefix_cache_hit_fraction or 0.0,
            speculative_acceptance_rate=(self.speculative.acceptance_rate if self.speculative
                                         else None),
            speculative_draft_tokens=(self.speculative.draft_tokens if self.speculative
                                      else serving.DEFAULT_DRAFT_TOKENS),
            engine_version=self.engine_version, replicas=self.replicas)


class LengthIn(RequestModel):
    """A length distribution: a mean, or p50 and p99, or samples (a list of lengths)."""

    mean: Tokens | None = Field(strict=True, default=None, ge=1, le=10_000_000)
    p50: Tokens | None = Field(strict=True, default=None, ge=1, le=10_000_000)
    p99: Tokens | None = Field(strict=True, default=None, ge=1, le=10_000_000)
    samples: list[Tokens] | None = Field(default=None, min_length=1, max_length=10_000)

    @model_validator(mode="after")
    def _one_form(self) -> Self:
        forms = [self.mean is not None, self.p50 is not None or self.p99 is not None,
                 self.samples is not None]
        if sum(forms) != 1:
            raise ValueError("give exactly one of mean, p50 with p99, or samples")
        if forms[1] and (self.p50 is None or self.p99 is None):
            raise ValueError("give p50 and p99 together")
        if forms[1] and self.p99 < self.p50:  # type: ignore[operator]
            raise ValueError("p99 must be at least p50")
        if self.samples is not None and any(
                not (1 <= x <= 10_000_000) for x in self.samples):
            raise ValueError("each sample must be in [1, 10000000]")
        return self

    def to_core(self) -> serving.Lengths:
        return serving.Lengths.of(mean=self.mean, p50=self.p50, p99=self.p99,
                                  samples=tuple(self.samples or ()))


class SloIn(RequestModel):
    ttft_p50_s: float | None = Field(strict=True, default=None, gt=0, le=3600)
    ttft_p99_s: float | None = Field(strict=True, default=None, gt=0, le=3600)
    tpot_p50_s: float | None = Field(strict=True, default=None, gt=0, le=60)
    tpot_p99_s: float | None = Field(strict=True, default=None, gt=0, le=60)


class TrafficIn(RequestModel):
    mode: serving.TrafficMode = Field(description=(
        "offline: the largest batch that fits (or max_batch); fixed_batch: batch_size "
        "sequences in lock-step; online: requests_per_s (open loop, sized into replicas) or "
        "concurrency (closed loop)."))
    prompt_tokens: LengthIn
    output_tokens: LengthIn
    requests_per_s: float | None = Field(
        strict=True, default=None, ge=MIN_REQUESTS_PER_S, le=1e6,
        description="Open-loop arrival rate, requests per second (at least 1e-6: one request "
                    "in 11.6 days).")
    concurrency: int | None = Field(strict=True, default=None, ge=1, le=1_000_000)
    batch_size: int | None = Field(strict=True, default=None, ge=1, le=100_000)
    slo: SloIn = Field(default_factory=SloIn)

    @model_validator(mode="after")
    def _mode_fields(self) -> Self:
        if self.mode is serving.TrafficMode.ONLINE and (
                (self.requests_per_s is None) == (self.concurrency is None)):
            raise ValueError("online traffic needs exactly one of requests_per_s and "
                             "concurrency")
        if self.mode is serving.TrafficMode.FIXED_BATCH and self.batch_size is None:
            raise ValueError("fixed_batch traffic needs batch_size")
        if self.mode is not serving.TrafficMode.ONLINE and (
                self.requests_per_s is not None or self.concurrency is not None):
            raise ValueError("requests_per_s and concurrency are for online traffic")
        if self.mode is not serving.TrafficMode.FIXED_BATCH and self.batch_size is not None:
            raise ValueError("batch_size is for fixed_batch traffic")
        return self

    def to_core(self) -> serving.Traffic:
        slo = self.slo
        return serving.Traffic(
            mode=self.mode, prompt=self.prompt_tokens.to_core(),
            output=self.output_tokens.to_core(), requests_per_s=self.requests_per_s,
            concurrency=self.concurrency, batch_size=self.batch_size,
            slo=serving.Slo(ttft_p50_s=slo.ttft_p50_s, ttft_p99_s=slo.ttft_p99_s,
                            tpot_p50_s=slo.tpot_p50_s, tpot_p99_s=slo.tpot_p99_s))


class ServingRequest(RequestModel):
    model: ModelIn
    deployment: DeploymentIn
    traffic: TrafficIn
    energy: EnergyIn = Field(default_factory=EnergyIn)


class QuantilesOut(BaseModel):
    p50: float
    p99: float


class ServingMemoryOut(BaseModel):
    weights_bytes_per_gpu: float
    kv_cache_bytes_per_token: float = Field(description="Per GPU, one token of one sequence.")
    kv_cache_bytes_per_sequence: float = Field(
        description=("Per GPU, one running sequence at steady state: the mean prompt plus half "
                     "the mean output (a paged KV cache holds only the tokens so far, and a "
                     "running sequence is on average half-way through its output)."))
    workspace_bytes_per_gpu: float
    usable_bytes_per_gpu: float = Field(description="The share of memory the engine takes.")
    kv_budget_bytes_per_gpu: float
    max_concurrency: int = Field(description=(
        "Sequences whose KV cache fits per replica at steady state (the KV budget divided by "
        "kv_cache_bytes_per_sequence): engines with a paged KV cache admit new sequences while "
        "blocks are free."))
    fits: bool = Field(description=(
        "Whether one sequence's KV cache fits at its full length (mean prompt + mean output) "
        "beside the weights and workspace."))


class DecodeOut(BaseModel):
    step_s: float = Field(description="One decode step at the running batch.")
    memory_bound_s: float = Field(description="The step's HBM term (weights + KV read).")
    compute_bound_s: float = Field(description="The step's FLOP term.")
    crossover_batch: float | None = Field(
        description="Batch above which decode is compute-bound; null if it never is.")
    batch: float = Field(description="Running batch per replica.")


BAND_DESCRIPTION = (
    "the band: where the measured figure is expected to lie, from out-of-sample residuals "
    "(measured / model) of published serving rows in the answer's regime (engine, dense or "
    "mixture of experts, closed or open loop) on a calibrated engine x accelerator pair, "
    "else the wide band; the 10th-90th percentile, widened until it held 80% of rows of "
    "documents left out of it (assumptions gives its basis; a band that did not hold carries "
    "outside_validated_range on deployment.engine). It need not contain the point figure")


class ThroughputOut(BaseModel):
    output_tokens_per_s: float = Field(description="Per replica, at the load served.")
    output_tokens_per_s_low: float = Field(description=(
        "Low end of " + BAND_DESCRIPTION + ". At a request rate, the smaller of the load and "
        "the capacity at the band's low ratio."))
    output_tokens_per_s_high: float = Field(description="High end of the band.")
    output_tokens_per_s_per_gpu: float
    input_tokens_per_s: float = Field(description="Per replica.")
    requests_per_s: float = Field(description="Per replica, served.")
    capacity_requests_per_s: float = Field(
        description="Per replica at the largest batch that fits (or max_batch).")


class LatencyOut(BaseModel):
    ttft_s: QuantilesOut | None = Field(description=(
        "Null when pinned replicas are saturated at a request rate: the queue grows without "
        "bound, so there is no steady-state time to first token."))
    tpot_s: QuantilesOut
    e2e_s: QuantilesOut | None = Field(description="Null where ttft_s is.")
    ttft_p50_s_low: float | None = Field(description=(
        "Low end of the TTFT p50's band (" + BAND_DESCRIPTION + "); null where ttft_s is."))
    ttft_p50_s_high: float | None = Field(description="High end; null where ttft_s is.")
    tpot_p50_s_low: float = Field(description="Low end of the TPOT p50's band.")
    tpot_p50_s_high: float = Field(description="High end of the TPOT p50's band.")
    prefill_s: QuantilesOut = Field(description="Unloaded prefill of the p50 and p99 prompt.")
    queueing_model: str


class SizingOut(BaseModel):
    replicas: int
    num_gpus: int
    meets_slo: bool | None = Field(description="null when no SLO was given.")
    saturated: bool
    queue_growth_requests_per_s: float | None = Field(default=None, description=(
        "Saturated at a request rate: how fast the queue grows over all replicas (the "
        "offered load less what the replicas complete), requests per second; null "
        "otherwise."))
    band_slow_end_factor: float | None = Field(default=None, description=(
        "At a request rate: how much slower than the model the band's slow end is (1 / the "
        "throughput band's low ratio); null otherwise."))
    replicas_at_band_slow_end: int | None = Field(default=None, description=(
        "At a request rate: the replicas sizing gives when every time on the replica is "
        "band_slow_end_factor times longer (the model at that factor times the load, each "
        "SLO divided by it; the pinned count when deployment.replicas is given); null "
        "otherwise. replicas is the model's own figure."))
    meets_slo_at_band_slow_end: bool | None = Field(default=None, description=(
        "Whether the SLOs hold at the band's slow end on replicas_at_band_slow_end "
        "replicas; null without an SLO or a request rate."))


class ServingCostOut(BaseModel):
    usd_per_hour: str | None = Field(description=(
        "All replicas, at the given price; null (with a warning) over 10^15 USD, as each "
        "figure here."))
    usd_per_million_output_tokens: str | None
    usd_per_million_total_tokens: str | None
    usd_per_hour_at_band_slow_end: str | None = Field(default=None, description=(
        "Online at a request rate: the replicas the load needs at the band's slow end "
        "(sizing.replicas_at_band_slow_end) at the given price, what a budget is judged at "
        "(a serving quote's cost band p90 is this fleet); null otherwise."))


def _cost_figure(value: Decimal, exponent: Decimal) -> str | None:
    """``value`` rounded to ``exponent``, or None past ``MAX_COST_FIGURE_USD`` (or not
    finite): bounded before ``quantize``, which fails past 28 significant digits."""
    if not value.is_finite() or value > MAX_COST_FIGURE_USD:
        return None
    return str(value.quantize(exponent))


def _serving_cost(price: str, num_gpus: int, output_per_s: float,
                  tokens_per_s: float, slow_end_num_gpus: int | None = None,
                  ) -> tuple[ServingCostOut, list[str]]:
    """The cost block and the warnings of figures left out."""
    per_hour = Decimal(price) * num_gpus
    cents = Decimal("0.0001")

    def per_million(rate: float) -> str | None:
        if not math.isfinite(rate) or rate <= 0:
            return None
        return _cost_figure(per_hour * Decimal(1_000_000) / (Decimal(repr(rate)) * HOUR_S),
                            cents)

    figures = {"usd_per_hour": _cost_figure(per_hour, Decimal("0.01")),
               "usd_per_million_output_tokens": per_million(output_per_s),
               "usd_per_million_total_tokens": per_million(tokens_per_s)}
    if slow_end_num_gpus is not None:
        figures["usd_per_hour_at_band_slow_end"] = _cost_figure(
            Decimal(price) * slow_end_num_gpus, Decimal("0.01"))
    cost = ServingCostOut(**figures)
    missing = [name for name, value in figures.items() if value is None]
    warnings = [f"cost: {', '.join(missing)} not given: over {MAX_COST_FIGURE_USD:.0E} USD "
                "(the load is far below what the fleet serves, or the fleet is very large)"
                ] if missing else []
    return cost, warnings


class ServingEnergyOut(BaseModel):
    average_power_w: float = Field(description="All replicas, with PUE.")
    kwh_per_million_output_tokens: float
    co2e_kg_per_million_output_tokens: float
    pue: float
    grid_gco2e_per_kwh: float


class ServingResponse(BaseModel):
    memory: ServingMemoryOut
    decode: DecodeOut
    throughput: ThroughputOut
    latency: LatencyOut
    sizing: SizingOut
    cost: ServingCostOut | None = Field(
        description="Null unless deployment.price_per_gpu_hour_usd is given.")
    energy: ServingEnergyOut
    warnings: list[str] = Field(description=(
        "What the answer cannot promise, in sentences: a deployment that does not fit, a "
        "batch or concurrency beyond what fits, saturation, and the measured gaps where the "
        "model is not validated: every mixture-of-experts model, and TTFT judged against an "
        "SLO at a request rate (docs/serving.md, Validation)."))
    assumptions: list[str] = Field(description=(
        "What the figures rest on: the engine's efficiency and the rows it was fitted on, "
        "the engine version's documented limits (and whether they applied), the queueing "
        "model, the KV-cache occupancy, and at a request rate the measured TTFT gap when no "
        "TTFT SLO is given."))
    warning_details: list[WarningDetailOut] = Field(default_factory=list, description=(
        "Coded warnings, each {code, field, message}: defaulted_input (field "
        "deployment.engine_version: not given, the latest documented version assumed); "
        "saturated (field traffic.requests_per_s, or deployment.replicas when pinned: the "
        "load exceeds what the replicas serve; the message gives the queue growth); "
        "uncalibrated_engine (field deployment.engine: no published row of this engine on "
        "this accelerator was fitted, so the efficiencies are a prior); "
        "outside_validated_range (field model for a mixture-of-experts model; "
        "traffic.prompt_tokens or traffic.output_tokens for a mean length beyond the "
        "validated serving rows; traffic.concurrency or traffic.batch_size for a closed-loop "
        "running batch beyond them; deployment.engine for a band that did not hold 80% of "
        "published rows of documents left out of it, even widened 3 times; "
        "deployment.engine_version for a release of an earlier engine core the fit holds no "
        "row of: vLLM before 0.8, V0)."))

    @classmethod
    def from_core(cls, e: serving.ServingEstimate, deployment: DeploymentIn,
                  energy: EnergySpec, tdp_w: float) -> ServingResponse:
        gpus = deployment.gpus_per_replica
        num_gpus = e.replicas * gpus
        total_output_per_s = e.output_tokens_per_s * e.replicas
        total_tokens_per_s = (e.output_tokens_per_s + e.input_tokens_per_s) * e.replicas
        power_w = num_gpus * average_power_w_per_gpu(tdp_w, energy) * energy.pue
        kwh_per_million = (power_w * 1e6 / total_output_per_s / JOULES_PER_KWH
                           if total_output_per_s > 0 else 0.0)
        cost: ServingCostOut | None = None
        cost_warnings: list[str] = []
        if deployment.price_per_gpu_hour_usd is not None and total_output_per_s > 0:
            cost, cost_warnings = _serving_cost(
                deployment.price_per_gpu_hour_usd, num_gpus, total_output_per_s,
                total_tokens_per_s, slow_end_num_gpus=(
                    None if e.slow_end is None
                    else e.slow_end.replicas * deployment.gpus_per_replica))
        m = e.memory
        unbounded = e.saturated and deployment.replicas is not None
        band = e.band
        assert band is not None  # noqa: S101 - serve() always gives one
        return cls(
            memory=ServingMemoryOut(
                weights_bytes_per_gpu=m.weights_bytes_per_gpu,
                kv_cache_bytes_per_token=m.kv_cache_bytes_per_token,
                kv_cache_bytes_per_sequence=m.kv_cache_bytes_per_sequence,
                workspace_bytes_per_gpu=m.workspace_bytes_per_gpu,
                usable_bytes_per_gpu=m.usable_bytes_per_gpu,
                kv_budget_bytes_per_gpu=m.kv_budget_bytes_per_gpu,
                max_concurrency=m.max_concurrency, fits=m.fits),
            decode=DecodeOut(step_s=e.decode_step_s, memory_bound_s=e.decode_step_memory_s,
                             compute_bound_s=e.decode_step_compute_s,
                             crossover_batch=e.crossover_batch, batch=e.batch),
            throughput=ThroughputOut(
                output_tokens_per_s=e.output_tokens_per_s,
                output_tokens_per_s_low=band.output_tokens_per_s[0],
                output_tokens_per_s_high=band.output_tokens_per_s[1],
                output_tokens_per_s_per_gpu=e.output_tokens_per_s / gpus,
                input_tokens_per_s=e.input_tokens_per_s, requests_per_s=e.requests_per_s,
                capacity_requests_per_s=e.capacity_requests_per_s),
            latency=LatencyOut(
                ttft_s=None if unbounded else QuantilesOut(p50=e.ttft_s.p50, p99=e.ttft_s.p99),
                tpot_s=QuantilesOut(p50=e.tpot_s.p50, p99=e.tpot_s.p99),
                e2e_s=None if unbounded else QuantilesOut(p50=e.e2e_s.p50, p99=e.e2e_s.p99),
                prefill_s=QuantilesOut(p50=e.prefill_s.p50, p99=e.prefill_s.p99),
                ttft_p50_s_low=None if unbounded or band.ttft_p50_s is None
                else band.ttft_p50_s[0],
                ttft_p50_s_high=None if unbounded or band.ttft_p50_s is None
                else band.ttft_p50_s[1],
                tpot_p50_s_low=band.tpot_p50_s[0], tpot_p50_s_high=band.tpot_p50_s[1],
                queueing_model=QUEUEING_MODEL),
            sizing=SizingOut(replicas=e.replicas, num_gpus=num_gpus, meets_slo=e.meets_slo,
                             saturated=e.saturated,
                             queue_growth_requests_per_s=(e.queue_growth_requests_per_s
                                                          if e.saturated else None),
                             band_slow_end_factor=(None if e.slow_end is None
                                                   else e.slow_end.factor),
                             replicas_at_band_slow_end=(None if e.slow_end is None
                                                        else e.slow_end.replicas),
                             meets_slo_at_band_slow_end=(None if e.slow_end is None
                                                         else e.slow_end.meets_slo)),
            cost=cost,
            energy=ServingEnergyOut(
                average_power_w=power_w, kwh_per_million_output_tokens=kwh_per_million,
                co2e_kg_per_million_output_tokens=(
                    kwh_per_million * energy.grid_gco2e_per_kwh / 1000.0),
                pue=energy.pue, grid_gco2e_per_kwh=energy.grid_gco2e_per_kwh),
            warnings=[*e.warnings, *cost_warnings], assumptions=list(e.assumptions),
            warning_details=[WarningDetailOut(code=d.code, field=d.field, message=d.message)
                             for d in e.warning_details])


QUEUEING_MODEL = (
    "analytic, per replica: continuous batching with prefill and decode time-sharing the "
    "GPUs; the running batch by Little's law; prefill waits as an M/G/1 queue "
    "(Pollaczek-Khinchine mean, exponential tail); not a simulation")


SERVING_PLAN_EXAMPLE: dict[str, Any] = {
    "model": {"preset": "llama3.1-70b"},
    "accelerators": ["h100-sxm5-80gb", "h200-sxm-141gb", "a100-sxm4-80gb"],
    "engine": "vllm",
    "weight_precisions": ["bf16", "fp8"],
    "kv_cache_precisions": ["bf16", "fp8"],
    "price_per_gpu_hour_usd": {"h100-sxm5-80gb": "2.50", "h200-sxm-141gb": "3.20",
                               "a100-sxm4-80gb": "1.40"},
    "traffic": {"mode": "online", "prompt_tokens": {"mean": 1024},
                "output_tokens": {"mean": 256}, "requests_per_s": 20,
                "slo": {"ttft_p99_s": 2.0, "tpot_p99_s": 0.1}},
}


MAX_TP_OPTIONS = 8
"""tp sizes tried per accelerator at most (1, 2, 4, ... up to its NVLink domain)."""
MAX_PLAN_CANDIDATES = 100_000
"""Candidates per serving-plan request. They are evaluated in bulk
(``service/core/serving_search.py``): 110,592 candidates (106,496 evaluable) took a median
0.27-0.35 s for Llama 3.1 70B and 0.48-0.80 s for Mixtral 8x7B on the 2-core development
machine under load (130,000-400,000 a second, against 1,500-3,800 a second one by one with
``serve()``; ``python -m benchmarks.serving_plans_speed``, benchmarks/RESULTS.md), with under
100 MiB of arrays. A request at the cap therefore takes about a second, a tenth of the 10 s
search deadline (``CQ_SEARCH_DEADLINE_S``), leaving room for the re-estimate of the plans
returned and a busier machine."""
MAX_PLAN_MAX_BATCHES = 64
"""max_batch values per request (8 before the bulk evaluation)."""


class ServingPlanRequest(RequestModel):
    model: ModelIn
    accelerators: list[AcceleratorRef] = Field(min_length=1, max_length=8,
                                    description="Accelerator ids to consider.")
    engine: serving.Engine = Field(
        default=serving.Engine.UNKNOWN,
        description="The serving engine, when engines is not given.")
    engines: list[serving.Engine] | None = Field(
        default=None, min_length=1, max_length=4,
        description="Serving engines to try (each with its efficiency, docs/serving.md); "
                    "default: [engine].")
    weight_precisions: list[serving.WeightPrecision] = Field(
        default_factory=lambda: [serving.WeightPrecision.BF16], min_length=1, max_length=3)
    kv_cache_precisions: list[serving.KvPrecision] = Field(
        default_factory=lambda: [serving.KvPrecision.BF16], min_length=1, max_length=2)
    max_batches: list[Annotated[int, Field(strict=True, ge=1, le=100_000)]] | None = Field(
        default=None, min_length=1, max_length=MAX_PLAN_MAX_BATCHES,
        description=(
            f"max_batch values to try (up to {MAX_PLAN_MAX_BATCHES}); default: the engine's "
            f"documented running-batch limit (its latest version), or the largest batch that "
            f"fits where smaller. The search evaluates every accelerator x tp x precision x "
            f"engine x max_batch candidate in bulk, up to {MAX_PLAN_CANDIDATES:,} per request "
            f"(110,592 measured in a median 0.27-0.35 s for a dense 70B model and 0.48-0.80 "
            f"s for an MoE one on a loaded 2-core machine)."))
    max_tp: int | None = Field(strict=True, default=None, ge=1, le=1024)
    price_per_gpu_hour_usd: PricePerGpuHour | dict[AcceleratorRef, PricePerGpuHour] | None = Field(
        default=None, description="One price for every accelerator, or one per id (at most "
                                  "1,000,000 per GPU-hour); without prices plans are ranked "
                                  "by GPUs.")
    traffic: TrafficIn
    top_k: int = Field(strict=True, default=10, ge=1, le=100)
    energy: EnergyIn = Field(default_factory=EnergyIn)

    @model_validator(mode="after")
    def _checks(self) -> Self:
        if self.traffic.requests_per_s is None:
            raise ValueError("a serving plan sizes an online load: give traffic.mode online "
                             "with requests_per_s")
        bound = (len(self.accelerators) * MAX_TP_OPTIONS * len(self.weight_precisions)
                 * len(self.kv_cache_precisions) * len(self.engines or [self.engine])
                 * len(self.max_batches or [None]))
        if bound > MAX_PLAN_CANDIDATES:
            raise ValueError(
                f"up to {bound} candidates (accelerators x {MAX_TP_OPTIONS} tp sizes x "
                f"precisions x engines x max_batches); the limit is {MAX_PLAN_CANDIDATES}: "
                "list fewer accelerators, precisions, engines or max_batches")
        if self.engines is not None and len(set(self.engines)) != len(self.engines):
            raise ValueError("engines lists an engine twice")
        if isinstance(self.price_per_gpu_hour_usd, dict):
            unknown = set(self.price_per_gpu_hour_usd) - set(self.accelerators)
            if unknown:
                raise ValueError(f"price_per_gpu_hour_usd names accelerators not in "
                                 f"accelerators: {sorted(unknown)}")
        return self

    def prices(self) -> dict[str, float]:
        p = self.price_per_gpu_hour_usd
        if p is None:
            return {}
        if isinstance(p, str):
            return {a: float(p) for a in self.accelerators}
        return {k: float(v) for k, v in p.items()}


class ServingPlanOut(BaseModel):
    rank: int
    deployment: dict[str, Any] = Field(description="The deployment, in the request's names.")
    estimate: ServingResponse


class ServingPlanSearchOut(BaseModel):
    candidates_total: int
    feasible: int = Field(description="Candidates that fit and meet the SLOs at the load.")


class ServingPlansResponse(BaseModel):
    plans: list[ServingPlanOut] = Field(description="Cheapest first.")
    pareto: list[ServingPlanOut] = Field(
        description="Cost against p99 TTFT: cheapest first, each faster than the last.")
    closest: list[ServingPlanOut] = Field(
        description="When nothing meets the SLOs, the candidates that missed by the least.")
    search: ServingPlanSearchOut

    @classmethod
    def from_core(cls, result: serving.ServingPlans, request: ServingPlanRequest,
                  energy: EnergySpec) -> ServingPlansResponse:
        prices = request.prices()

        def out(rank: int, c: serving.PlanCandidate) -> ServingPlanOut:
            d = c.deployment
            given = DeploymentIn(
                accelerator=d.accelerator.id, gpus_per_replica=d.gpus_per_replica, tp=d.tp,
                pp=d.pp, weight_precision=d.weight_precision,
                kv_cache_precision=d.kv_cache_precision, engine=d.engine,
                max_batch=d.max_batch,
                price_per_gpu_hour_usd=(None if d.accelerator.id not in prices else
                                        _price_text(request, d.accelerator.id)))
            return ServingPlanOut(
                rank=rank, deployment=given.model_dump(mode="json", exclude_none=True),
                estimate=ServingResponse.from_core(c.estimate, given, energy,
                                                   d.accelerator.tdp_w))

        return cls(plans=[out(i + 1, c) for i, c in enumerate(result.plans)],
                   pareto=[out(i + 1, c) for i, c in enumerate(result.pareto)],
                   closest=[out(i + 1, c) for i, c in enumerate(result.closest)],
                   search=ServingPlanSearchOut(candidates_total=result.candidates_total,
                                               feasible=result.feasible))


def _price_text(request: ServingPlanRequest, accelerator: str) -> str:
    p = request.price_per_gpu_hour_usd
    assert p is not None  # noqa: S101 - called only for priced accelerators
    return p if isinstance(p, str) else p[accelerator]
