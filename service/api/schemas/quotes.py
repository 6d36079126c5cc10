"""``POST /v1/quotes`` and ``POST /v1/budget-plans``: request and response bodies."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal, Self, get_args

from pydantic import BaseModel, Field, StringConstraints, model_validator

from service.api.schemas.common import RequestModel
from service.api.schemas.estimate import (
    Count,
    EnergyIn,
    EstimateRequest,
    ModelIn,
)
from service.api.schemas.plans import CandidateClusterIn, ConstraintsIn, PlanTrainingIn
from service.api.schemas.prices import DecimalString
from service.catalog.quoting import ALL_TERMS
from service.core import pricing

TermName = Literal["on_demand", "spot", "reserved_1y", "reserved_3y", "capacity_block", "onprem"]
ALL_TERM_NAMES: tuple[TermName, ...] = get_args(TermName)
assert set(ALL_TERM_NAMES) == set(ALL_TERMS)  # noqa: S101 - the catalogue's terms, plus onprem
Slug = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
Fraction = Annotated[str, StringConstraints(pattern=r"^(0(\.\d{1,6})?|1(\.0{1,6})?)$")]

QUOTE_EXAMPLE: dict[str, Any] = {
    "workload": {"estimate": {
        "model": {"preset": "llama3.1-70b"},
        "cluster": {"accelerator": "h100-sxm5-80gb", "num_gpus": 256},
        "parallelism": {"tp": 8, "pp": 4, "dp": 8},
        "training": {"seq_len": 8192, "global_batch_seqs": 512, "tokens": 2e12,
                     "precision": "bf16"},
    }},
    "terms": ["on_demand", "spot", "reserved_1y", "reserved_3y", "capacity_block", "onprem"],
    "providers": ["aws", "gcp", "onprem"],
    "budget": {"amount": "5000000.00", "currency": "USD"},
    "deadline_s": 2592000,
}


class GpuHoursWorkload(RequestModel):
    accelerator: str = Field(max_length=64, examples=["h100-sxm5-80gb"])
    gpu_hours: float = Field(strict=True, gt=0, le=1e12, examples=[250000])
    num_gpus: Count = Field(examples=[512], description="GPUs at once (sets the wall-clock).")
    checkpoint_bytes: float = Field(
        strict=True, default=0.0, ge=0, le=1e16,
        description="Checkpoint size for the goodput model; 0 ignores checkpoint writes.")


class OptimiseWorkload(RequestModel):
    model: ModelIn
    training: PlanTrainingIn
    clusters: list[CandidateClusterIn] = Field(min_length=1, max_length=16)
    constraints: ConstraintsIn = Field(default_factory=ConstraintsIn)


class WorkloadIn(RequestModel):
    """Exactly one of estimate, optimise and gpu_hours."""

    estimate: EstimateRequest | None = None
    optimise: OptimiseWorkload | None = None
    gpu_hours: GpuHoursWorkload | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        if sum(x is not None for x in (self.estimate, self.optimise, self.gpu_hours)) != 1:
            raise ValueError("give exactly one of estimate, optimise and gpu_hours")
        return self


class MoneyIn(RequestModel):
    amount: DecimalString = Field(examples=["5000000.00"])
    currency: str = Field(pattern=r"^[A-Z]{3}$", examples=["USD"])


class ReliabilityIn(RequestModel):
    failure_rate_per_gpu_hour: float = Field(
        strict=True, default=pricing.DEFAULT_FAILURE_RATE_PER_GPU_HOUR, ge=0, le=1,
        description="Hardware interruptions per GPU-hour (default: Llama 3 405B's 2.2e-5).")
    restart_s: float = Field(strict=True, default=pricing.DEFAULT_RESTART_S, ge=0, le=86_400)
    checkpoint_bytes_per_s: float = Field(
        strict=True, default=pricing.DEFAULT_CHECKPOINT_BYTES_PER_S, gt=0, le=1e13,
        description="Storage write bandwidth for checkpoints.")


class OnPremIn(RequestModel):
    purchase_price_per_gpu: DecimalString | dict[str, DecimalString] | None = Field(
        default=None, description="One price, or one per accelerator id. Default: the "
                                  "accelerator's indicative price from the catalogue.")
    overhead_fraction: Fraction = Field(default=str(pricing.DEFAULT_ONPREM_OVERHEAD_FRACTION))
    depreciation_years: int = Field(strict=True, default=pricing.DEFAULT_DEPRECIATION_YEARS,
                                    ge=1, le=15)
    electricity_per_kwh: DecimalString = Field(
        default=str(pricing.DEFAULT_ELECTRICITY_USD_PER_KWH))
    pue: Annotated[str, StringConstraints(pattern=r"^[1-4](\.\d{1,3})?$")] = Field(
        default=str(pricing.DEFAULT_ONPREM_PUE))
    operations_fraction_per_year: Fraction = Field(
        default=str(pricing.DEFAULT_OPERATIONS_FRACTION))

    @model_validator(mode="after")
    def _few_prices(self) -> Self:
        if isinstance(self.purchase_price_per_gpu, dict) and len(
            self.purchase_price_per_gpu) > 64:
            raise ValueError("purchase_price_per_gpu may name at most 64 accelerators")
        return self


class QuoteRequest(RequestModel):
    workload: WorkloadIn
    terms: list[TermName] = Field(default_factory=lambda: list(ALL_TERM_NAMES), min_length=1,
                                  max_length=6)
    providers: list[Slug] = Field(default_factory=list, max_length=32,
                                  description="Only these providers ('onprem' included).")
    regions: list[Slug] = Field(default_factory=list, max_length=64)
    budget: MoneyIn | None = None
    deadline_s: float | None = Field(strict=True, default=None, gt=0, le=1e10,
                                     description="Wall-clock limit for the run, seconds.")
    catalog_version: str | None = Field(default=None, pattern=r"^cv_\d{6}$",
                                        description="Default: the current version.")
    reliability: ReliabilityIn = Field(default_factory=ReliabilityIn)
    reserved_utilisation_fraction: Fraction = Field(
        default="1", description="Share of a reservation's term that is put to use; the "
                                 "amortised reserved total divides by it.")
    onprem: OnPremIn = Field(default_factory=OnPremIn)
    energy: EnergyIn = Field(default_factory=EnergyIn)

    @model_validator(mode="after")
    def _checks(self) -> Self:
        if len(set(self.terms)) != len(self.terms):
            raise ValueError("terms lists a term twice")
        if float(self.reserved_utilisation_fraction) <= 0:
            raise ValueError("reserved_utilisation_fraction must be > 0")
        return self


class BudgetPlanRequest(RequestModel):
    """Which accelerator, GPU count, term and plan finish soonest within the budget, and which
    finish cheapest before the deadline?"""

    model: ModelIn
    training: PlanTrainingIn
    clusters: list[CandidateClusterIn] = Field(min_length=1, max_length=16)
    constraints: ConstraintsIn = Field(default_factory=ConstraintsIn)
    budget: MoneyIn
    deadline_s: float | None = Field(strict=True, default=None, gt=0, le=1e10)
    terms: list[TermName] = Field(default_factory=lambda: list(ALL_TERM_NAMES), min_length=1,
                                  max_length=6)
    providers: list[Slug] = Field(default_factory=list, max_length=32)
    regions: list[Slug] = Field(default_factory=list, max_length=64)
    catalog_version: str | None = Field(default=None, pattern=r"^cv_\d{6}$")
    reliability: ReliabilityIn = Field(default_factory=ReliabilityIn)
    reserved_utilisation_fraction: Fraction = "1"
    onprem: OnPremIn = Field(default_factory=OnPremIn)
    energy: EnergyIn = Field(default_factory=EnergyIn)
    top_k: int = Field(strict=True, default=10, ge=1, le=100)


BUDGET_PLAN_EXAMPLE: dict[str, Any] = {
    "model": {"preset": "llama3.1-70b"},
    "training": {"seq_len": 8192, "global_batch_seqs": 512, "tokens": 2e12},
    "clusters": [{"accelerator": "h100-sxm5-80gb", "num_gpus_range": {"start": 128,
                                                                      "stop": 512,
                                                                      "step": 128}},
                 {"accelerator": "a100-sxm4-80gb", "num_gpus": 256}],
    "budget": {"amount": "3000000.00", "currency": "USD"},
    "deadline_s": 5184000,
    "terms": ["on_demand", "spot", "reserved_1y"],
}


class ReservedOut(BaseModel):
    dedicated_total: str
    amortised_total: str
    terms_bought: int
    utilisation_fraction: str
    break_even_utilisation_fraction: str | None


class QuoteLineOut(BaseModel):
    """One way to buy the run. ``total`` is a decimal string in ``currency``."""

    provider: str
    region: str | None
    zone: str | None
    instance_type: str | None
    term: str
    payment_option: str | None
    accelerator: str
    num_gpus: int
    gpus_per_instance: float
    instances: int
    rounded_up: bool | None = Field(description="GPUs were rounded up to whole instances.")
    wall_clock_s: float | None
    billed_hours: str | None
    gpu_hours: str | None
    unit_price: str | None
    unit: str
    total: str | None
    currency: str
    goodput_loss_fraction: float | None
    checkpoint_interval_s: float | None
    goodput_basis: str
    energy_kwh: str | None
    co2e_kg: str | None
    flags: list[str]
    feasible: bool
    infeasible_reason: str | None
    within_budget: bool | None
    meets_deadline: bool | None
    reserved: ReservedOut | None
    onprem: dict[str, Any] | None
    offer_id: str | None
    catalog_version: str
    plan: dict[str, Any] | None
    global_batch_seqs: int | None


class SummaryOut(BaseModel):
    lines: int
    feasible_lines: int
    min_total: str | None
    median_total: str | None
    max_total: str | None
    currency: str


class QuoteOut(BaseModel):
    id: str
    created_at: dt.datetime
    expires_at: dt.datetime
    principal: str
    request_id: str
    catalog_version: str
    catalog_content_hash: str
    estimator_version: str
    requote_of: str | None
    lines: list[QuoteLineOut]
    cheapest: QuoteLineOut | None
    cheapest_per_term: dict[str, QuoteLineOut]
    fastest: QuoteLineOut | None
    recommended: QuoteLineOut | None
    summary: SummaryOut
    budget: dict[str, str] | None
    deadline_s: float | None
    verdict: Literal["approve", "reject"] | None
    reasons: list[str]


class QuoteSummaryOut(BaseModel):
    id: str
    created_at: dt.datetime
    expires_at: dt.datetime
    principal: str
    verdict: str | None
    catalog_version: str
    requote_of: str | None


class VerifyDifference(BaseModel):
    path: str
    stored: Any
    recomputed: Any


class VerifyOut(BaseModel):
    matches: bool
    differences: list[VerifyDifference]
    catalog_version: str
    estimator_version: str
    stored_estimator_version: str


class BudgetPlanOut(BaseModel):
    soonest_within_budget: list[QuoteLineOut] = Field(
        description="Lines within the budget, fastest first.")
    cheapest_before_deadline: list[QuoteLineOut] = Field(
        description="Lines that meet the deadline (all feasible lines without one), cheapest "
                    "first.")
    catalog_version: str
    budget: dict[str, str]
    deadline_s: float | None
