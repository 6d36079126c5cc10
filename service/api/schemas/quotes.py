"""``POST /v1/quotes`` and ``POST /v1/budget-plans``: request and response bodies."""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Sequence
from dataclasses import fields
from decimal import Decimal
from typing import Annotated, Any, Literal, Self, cast

from pydantic import (
    AfterValidator,
    BaseModel,
    Field,
    StringConstraints,
    ValidationInfo,
    field_validator,
    model_validator,
)
from typing_extensions import TypeAliasType

from service.api.schemas.calibration_ref import CalibrationIdField
from service.api.schemas.common import AcceleratorRef, IsoDate, RequestModel, TextRule
from service.api.schemas.estimate import (
    Count,
    EnergyIn,
    EstimateRequest,
    ModelIn,
    WarningDetailOut,
)
from service.api.schemas.fx import FxConversionOut, MoneyOut
from service.api.schemas.plans import CandidateClusterIn, ConstraintsIn, PlanTrainingIn
from service.api.schemas.prices import DecimalString, ElectricityPrice, PurchasePrice
from service.api.schemas.serving import ServingPlanRequest, ServingRequest
from service.catalog.currencies import is_currency
from service.catalog.fx import Conversion
from service.core import pricing
from service.core.plausibility import details_of
from service.core.policy import RULE_CODES, SEVERITY, Outcome, Policy, RuleResult
from service.core.quote import TERM_NAMES, Band, QuoteLine, TermValue
from service.core.specs import RecomputeMode


def _iso_4217(code: str) -> str:
    if not is_currency(code):
        raise ValueError("must be an ISO 4217 currency code in use (XXX and XTS are not)")
    return code


CurrencyCode = Annotated[str, StringConstraints(pattern=r"^[A-Z]{3}$"),
                         AfterValidator(_iso_4217)]
# Closed sets of strings are named type aliases: each is one named schema in the OpenAPI
# document (a named enum in generated clients), while the values stay plain strings here.
Accounting = TypeAliasType("Accounting", Literal["commitment", "amortised"])
AccountingName = Accounting
ACCOUNTING_DESCRIPTION = (
    "How lines are ranked and the budget is judged. 'commitment' (default): the cash signed "
    "for (every hour of a reservation term or capacity block, the purchase of on-premises "
    "GPUs, the job's own cost on demand and spot). 'amortised': the job's share, reserved and "
    "owned capacity divided by reservation_utilisation_fraction (which must then be given); "
    "the verdict's reasons say that amortised accounting was used.")
PolicyName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$")]
AccountingField = Annotated[AccountingName, Field(description=ACCOUNTING_DESCRIPTION)]
PolicyField = Annotated[PolicyName | None, Field(
    description="A stored policy (GET /v1/policies) to judge by; default: the server's "
                "default policy.", examples=["finance-2027"])]

QuoteTerm = TypeAliasType("QuoteTerm", TermValue)
"""A term a quote can price: an offer's term (the schema ``Term``) or ``onprem``
(``service.core.quote.TermValue``, the one list)."""
TermName = QuoteTerm
ALL_TERM_NAMES: tuple[TermName, ...] = TERM_NAMES
Slug = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
Fraction = Annotated[str, StringConstraints(pattern=r"^(0(\.\d{1,6})?|1(\.0{1,6})?)$")]
UtilisationField = Annotated[Fraction | None, Field(
    description="Amortised accounting only (then required): the share of reserved or owned "
                "capacity's term put to use by all work.")]
RankBy = TypeAliasType("RankBy", Literal["total", "co2e"])
QuoteObjective = TypeAliasType("QuoteObjective", Literal["cost", "carbon"])
BudgetPlanObjective = TypeAliasType("BudgetPlanObjective", Literal["soonest", "largest_model"])
RuleOutcome = TypeAliasType("RuleOutcome", Literal["pass", "warn", "fail"])
Severity = TypeAliasType("Severity", Literal["info", "warning", "error"])
LinesShown = TypeAliasType("LinesShown", Literal["all", "best_per_provider_term"])
Verdict = TypeAliasType("Verdict", Literal["approve", "reject"])

QUOTE_EXAMPLE: dict[str, Any] = {
    "workload": {"estimate": {
        "model": {"preset": "llama3.1-70b"},
        "cluster": {"accelerator": "h100-sxm5-80gb", "num_gpus": 256},
        "parallelism": {"tp": 8, "pp": 4, "dp": 8},
        "training": {"seq_len": 8192, "global_batch_seqs": 512, "tokens": 2e12,
                     "precision": "bf16"},
    }},
    "terms": list(TERM_NAMES),
    "providers": ["aws", "gcp", "onprem"],
    "budget": {"amount": "5000000.00", "currency": "USD"},
    "deadline_s": 2592000,
}


class GpuHoursWorkload(RequestModel):
    accelerator: AcceleratorRef = Field(examples=["h100-sxm5-80gb"])
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


MAX_SERVING_DURATION_S = 10 * 365.25 * 86_400
"""Ten years: longer than any reservation term (3 years) or GPU's depreciation."""


class ServingWorkload(RequestModel):
    """A serving fleet held for ``duration_s`` (issue 19): sized by a serving estimate (its
    deployment, replicas for its online load) or by a serving plan (per accelerator, the
    deployment with the fewest GPUs that meets the SLOs at the load). The fleet is sized for
    the given requests_per_s, the peak, and held for the whole duration: reservations and
    on-premises GPUs do not shrink off-peak (autoscaling is not modelled)."""

    estimate: ServingRequest | None = Field(
        default=None, description="A serving estimate's model, deployment and traffic.")
    plan: ServingPlanRequest | None = Field(
        default=None, description="A serving plan's search; each accelerator's deployment "
                                  "with the fewest GPUs is quoted.")
    replicas: int | None = Field(
        strict=True, default=None, ge=1, le=100_000,
        description="With estimate: replicas to hold instead of those sized for the load "
                    "(offline and fixed-batch traffic are one replica by default).")
    duration_s: float = Field(
        strict=True, gt=0, le=MAX_SERVING_DURATION_S, examples=[31_557_600],
        description="How long the fleet serves, seconds (12 months: 31,557,600).")

    @model_validator(mode="after")
    def _one(self) -> Self:
        if (self.estimate is None) == (self.plan is None):
            raise ValueError("give exactly one of estimate and plan")
        if self.replicas is not None and self.estimate is None:
            raise ValueError("replicas applies to estimate (a plan sizes its replicas)")
        given = self.estimate if self.estimate is not None else self.plan
        assert given is not None  # noqa: S101 - checked above
        if given.energy != EnergyIn():
            raise ValueError("give energy at the quote's top level (it prices every line)")
        prices = (self.estimate.deployment.price_per_gpu_hour_usd if self.estimate
                  else self.plan.price_per_gpu_hour_usd if self.plan else None)
        if prices is not None:
            raise ValueError("a quote prices from the catalogue: leave out "
                             "price_per_gpu_hour_usd")
        return self


class WorkloadIn(RequestModel):
    """Exactly one of estimate, optimise, gpu_hours and serving."""

    estimate: EstimateRequest | None = None
    optimise: OptimiseWorkload | None = None
    gpu_hours: GpuHoursWorkload | None = None
    serving: ServingWorkload | None = Field(
        default=None, description="A serving fleet for a duration (docs/serving.md).")

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        if sum(x is not None for x in (self.estimate, self.optimise, self.gpu_hours,
                                       self.serving)) != 1:
            raise ValueError("give exactly one of estimate, optimise, gpu_hours and serving")
        return self


class MoneyIn(RequestModel):
    amount: DecimalString = Field(examples=["5000000.00"])
    currency: CurrencyCode = Field(examples=["USD"])


class ReliabilityIn(RequestModel):
    failure_rate_per_gpu_hour: float = Field(
        strict=True, default=pricing.DEFAULT_FAILURE_RATE_PER_GPU_HOUR, ge=0, le=1,
        description="Hardware interruptions per GPU-hour (default: Llama 3 405B's 2.2e-5).")
    restart_s: float = Field(strict=True, default=pricing.DEFAULT_RESTART_S, ge=0, le=86_400)
    checkpoint_bytes_per_s: float = Field(
        strict=True, default=pricing.DEFAULT_CHECKPOINT_BYTES_PER_S, gt=0, le=1e13,
        description="Storage write bandwidth for checkpoints.")


class OnPremIn(RequestModel):
    purchase_price_per_gpu: PurchasePrice | dict[AcceleratorRef, PurchasePrice] | None = Field(
        default=None, description="One price, or one per accelerator id, at most 10,000,000 "
                                  "per GPU, in USD (the pricing currency). Default: the "
                                  "accelerator's indicative price from the catalogue (USD).")
    overhead_fraction: Fraction = Field(default=str(pricing.DEFAULT_ONPREM_OVERHEAD_FRACTION))
    depreciation_years: int = Field(strict=True, default=pricing.DEFAULT_DEPRECIATION_YEARS,
                                    ge=1, le=15)
    electricity_per_kwh: ElectricityPrice = Field(
        default=str(pricing.DEFAULT_ELECTRICITY_USD_PER_KWH),
        description="Per kWh, in USD (the pricing currency, as purchase_price_per_gpu); at "
                    "most 1,000. The on-prem line is converted into a budget's currency with "
                    "the quote's fx rate, as every line is.")
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


FxDateField = Annotated[IsoDate | None, Field(
    description="When the budget's currency is not one the catalogue prices in: the day whose "
                "ECB reference rates convert it (the latest fixing on or before it). Default: "
                "the quote's date (UTC).")]
FxVersionField = Annotated[str | None, Field(pattern=r"^fx_\d{6}$",
                                             description="FX table version; default the "
                                                         "newest.")]
DiscountBookField = Annotated[str | None, Field(
    pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$",
    description="A discount book (POST /v1/discount-books) whose entries turn list prices into "
                "the organisation's net prices; its newest revision is used and named in the "
                "answer.")]


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
    fx_date: FxDateField = None
    fx_version: FxVersionField = None
    discount_book: DiscountBookField = None
    reliability: ReliabilityIn = Field(default_factory=ReliabilityIn)
    reserved_utilisation_fraction: Fraction = Field(
        default="1", description="Deprecated: shapes only reserved.amortised_total; use "
                                 "accounting and reservation_utilisation_fraction.")
    accounting: AccountingField = "commitment"
    reservation_utilisation_fraction: UtilisationField = None
    policy: PolicyField = None
    onprem: OnPremIn = Field(default_factory=OnPremIn)
    energy: EnergyIn = Field(default_factory=EnergyIn)
    rank_by: RankBy = Field(
        default="total",
        description="What orders the lines and picks the recommendation among lines of the "
                    "same policy outcome: total money, or CO2e (energy × PUE × each region's "
                    "grid intensity, else energy.grid_gco2e_per_kwh): one request compares "
                    "regions by carbon. cheapest and cheapest_per_term stay the cheapest.")
    objective: QuoteObjective | None = Field(
        default=None,
        description="The optimiser's word for rank_by: cost is rank_by total, carbon is "
                    "rank_by co2e. Give one of the two; both must agree.")
    calibration_id: CalibrationIdField = None

    @field_validator("deadline_s")
    @classmethod
    def _no_serving_deadline(cls, value: float | None, info: ValidationInfo) -> float | None:
        workload = info.data.get("workload")
        if value is not None and workload is not None and workload.serving is not None:
            raise ValueError("deadline_s is a training run's limit; a serving fleet runs for "
                             "workload.serving.duration_s")
        return value

    @model_validator(mode="after")
    def _checks(self) -> Self:
        _check_pricing_fields(self.terms, self.reserved_utilisation_fraction, self.accounting,
                              self.reservation_utilisation_fraction)
        if self.objective is not None:
            implied: RankBy = (
                "co2e" if self.objective == "carbon" else "total")
            if "rank_by" in self.model_fields_set and self.rank_by != implied:
                raise ValueError(f"objective {self.objective} means rank_by {implied}, but "
                                 f"rank_by is {self.rank_by}: give one of them")
            self.rank_by = implied
        return self


def _check_pricing_fields(terms: list[TermName], legacy: str, accounting: str,
                          fraction: str | None) -> None:
    if len(set(terms)) != len(terms):
        raise ValueError("terms lists a term twice")
    if float(legacy) <= 0:
        raise ValueError("reserved_utilisation_fraction must be > 0")
    if accounting == "amortised":
        if fraction is None:
            raise ValueError("accounting 'amortised' needs reservation_utilisation_fraction "
                             "(the share of the reservation's term put to use, > 0 and <= 1)")
        if float(fraction) <= 0:
            raise ValueError("reservation_utilisation_fraction must be > 0")
    elif fraction is not None:
        raise ValueError("reservation_utilisation_fraction applies only to accounting "
                         "'amortised'")


class BudgetPlanTrainingIn(PlanTrainingIn):
    """The plan's training, with ``tokens`` optional: objective 'largest_model' trains each
    size on tokens_per_param × its parameters (issue 39: it needed a dummy tokens)."""

    tokens: float | None = Field(
        strict=True, default=None, gt=0, le=1e18, examples=[300e9],
        description="Training tokens; required for objective 'soonest'. 'largest_model' "
                    "ignores it (tokens = tokens_per_param × each size's parameters).")


LargestModelBound = TypeAliasType("LargestModelBound", Literal[
    "budget", "deadline", "memory", "policy", "no_offer", "search_range", "work_budget"])
LARGEST_BOUND_DESCRIPTION = (
    "objective 'largest_model': what bound the answer, i.e. why the next larger size has no "
    "line: 'budget' (no line the policy allows is within the budget), 'deadline' (lines "
    "within the budget, none before the deadline), 'memory' (it fits no candidate cluster), "
    "'policy' (a rule other than the budget and deadline fails every line; the explanation "
    "names it), 'no_offer' (no offer can run it), 'search_range' (the largest size searched "
    "fits), 'work_budget' (the request's candidate budget, CQ_SEARCH_MAX_CANDIDATES, ended "
    "the search first).")


class BudgetPlanRequest(RequestModel):
    """Which accelerator, GPU count, term and plan finish soonest within the budget, and which
    finish cheapest before the deadline?"""

    model: ModelIn | None = Field(
        default=None, description="Required for objective 'soonest'; 'largest_model' tries "
                                  "candidate_models instead.")
    training: BudgetPlanTrainingIn
    clusters: list[CandidateClusterIn] = Field(min_length=1, max_length=16)
    constraints: ConstraintsIn = Field(default_factory=ConstraintsIn)
    budget: MoneyIn
    deadline_s: float | None = Field(strict=True, default=None, gt=0, le=1e10)
    objective: BudgetPlanObjective = Field(
        default="soonest", description=(
            "'soonest': the lines for model within the budget, soonest first. "
            "'largest_model': the largest compute-optimal model (trained on tokens_per_param "
            "× its parameters; training.tokens is optional and ignored) with a line within "
            "the budget and deadline that no policy rule fails. Without candidate_models the "
            "sizes are searched continuously: a bisection on parameter count over a generated "
            "Llama-style family (service/core/scaling.py; the architecture and rule are in the "
            "answer), at most 12 sizes priced, within the request's candidate budget."))
    candidate_models: list[Annotated[str, TextRule(max_length=64)]] | None = Field(
        default=None, min_length=1, max_length=16,
        description="Presets for 'largest_model', tried smallest first (default: none, the "
                    "generated family is searched instead).")
    tokens_per_param: float = Field(
        strict=True, default=20.0, gt=0, le=10_000,
        description="Training tokens per parameter for 'largest_model' (Chinchilla, Hoffmann "
                    "et al. 2022: about 20).")
    terms: list[TermName] = Field(default_factory=lambda: list(ALL_TERM_NAMES), min_length=1,
                                  max_length=6)
    providers: list[Slug] = Field(default_factory=list, max_length=32)
    regions: list[Slug] = Field(default_factory=list, max_length=64)
    catalog_version: str | None = Field(default=None, pattern=r"^cv_\d{6}$")
    fx_date: FxDateField = None
    fx_version: FxVersionField = None
    discount_book: DiscountBookField = None
    reliability: ReliabilityIn = Field(default_factory=ReliabilityIn)
    reserved_utilisation_fraction: Fraction = "1"
    accounting: AccountingField = "commitment"
    reservation_utilisation_fraction: UtilisationField = None
    policy: PolicyField = None
    onprem: OnPremIn = Field(default_factory=OnPremIn)
    energy: EnergyIn = Field(default_factory=EnergyIn)
    top_k: int = Field(strict=True, default=10, ge=1, le=100)

    @model_validator(mode="after")
    def _checks(self) -> Self:
        _check_pricing_fields(self.terms, self.reserved_utilisation_fraction, self.accounting,
                              self.reservation_utilisation_fraction)
        if self.objective == "soonest" and self.model is None:
            raise ValueError("model is required for objective 'soonest'")
        if self.objective == "soonest" and self.training.tokens is None:
            raise ValueError("training.tokens is required for objective 'soonest'")
        return self


BUDGET_PLAN_EXAMPLE: dict[str, Any] = {
    "model": {"preset": "llama3.1-70b"},
    "training": {"seq_len": 8192, "global_batch_seqs": 512, "tokens": 2e12,
                 "framework": "megatron"},
    "clusters": [{"accelerator": "h100-sxm5-80gb", "num_gpus_range": {"start": 128,
                                                                      "stop": 512,
                                                                      "step": 128}},
                 {"accelerator": "a100-sxm4-80gb", "num_gpus": 256}],
    "budget": {"amount": "3500000.00", "currency": "USD"},
    "deadline_s": 5184000,
    "terms": ["on_demand", "spot", "reserved_1y"],
}


class InBudgetCurrencyOut(BaseModel):
    """A line's amounts in the budget's currency, when the budget was converted (see ``fx``):
    divided by ``fx.rate`` and rounded up to the currency's minor unit, so a line the verdict
    finds within budget never shows more than the budget, and a cost is never shown smaller."""

    currency: str = Field(examples=["EUR"], description=(
        "The budget's currency. FOCUS has no column for a reporting currency: the line's own "
        "currency is its BillingCurrency, and these amounts are its BilledCost and "
        "EffectiveCost converted (docs/focus.md)."))
    rate: str | None = Field(default=None, examples=["1.1373"], description=(
        "The rate the amounts were converted with: units of the line's currency (the "
        "pricing currency, USD) per 1 unit of this currency, the quote's fx.rate (absent on "
        "quotes stored before 2026-12-02)."))
    total: str = Field(description=(
        "The line's total in this currency: FOCUS BilledCost under accounting 'commitment', "
        "EffectiveCost under 'amortised'."))
    commitment_total: str = Field(
        description="The line's commitment_total in this currency (FOCUS BilledCost).")
    job_cost_total: str = Field(
        description="The line's job_cost_total in this currency (FOCUS EffectiveCost).")


class ReservedOut(BaseModel):
    dedicated_total: str = Field(description=(
        "Every hour of every term bought × the reserved rate, as commitment_total: FOCUS "
        "BilledCost of the commitment, summed over the billing periods it spans."))
    amortised_total: str = Field(description=(
        "Deprecated: job_cost_total ÷ the request's reserved_utilisation_fraction (default "
        "1): FOCUS EffectiveCost with the commitment's unused share (CommitmentDiscountStatus "
        "'Unused') spread over the job."))
    terms_bought: int
    utilisation_fraction: str
    break_even_utilisation_fraction: str | None


class Parallelism(BaseModel):
    """The parallel layout a quote line was sized with (POST /v1/estimates takes the same
    fields): the degrees multiply to the line's GPU count."""

    tp: int = Field(description="Tensor-parallel degree.")
    pp: int = Field(description="Pipeline-parallel degree.")
    dp: int = Field(description="Data-parallel degree.")
    cp: int = Field(description="Context-parallel degree.")
    ep: int = Field(description="Expert-parallel degree.")
    vp: int = Field(description="Virtual pipeline stages per pipeline rank.")
    micro_batch: int = Field(description="Sequences per micro-batch.")
    sequence_parallel: bool
    zero_stage: int = Field(description="ZeRO stage; 3 = FSDP.")
    recompute: RecomputeMode


def _absent(value: object) -> bool:
    """A field left out of the JSON, not written null (``exclude_if``): a price-date field a
    rule does not have, as ``rule_json`` leaves it out (so stored quotes, their lines and
    ``verify`` agree), and the optional references below."""
    return value is None


class RuleOut(BaseModel):
    """One rule's outcome, or one reason of the verdict."""

    rule: str = Field(description="The policy rule (or 'budget', 'deadline', 'feasible').")
    outcome: RuleOutcome
    code: str = Field(examples=["commitment_over_budget"], description=(
        f"Stable code: {', '.join(RULE_CODES)}."))
    severity: Severity
    message: str
    date: dt.date | None = Field(default=None, exclude_if=_absent, examples=["2026-11-22"],
                                 description=(
        "Price-date rules only (max_price_age_s, max_observed_age_days; absent otherwise): "
        "the date judged, the price's as_of, or its observed_at when as_of is unknown; for "
        "fx_rate_age, the ECB fixing the quote converted with."))
    age_days: int | None = Field(default=None, exclude_if=_absent, examples=[9], description=(
        "Price-date rules only: days from date to the quote's day."))
    limit_days: float | None = Field(default=None, exclude_if=_absent, examples=[30.0],
                                     description=(
        "Price-date rules only: the policy's limit in days (max_price_age_s ÷ 86,400, or "
        "max_observed_age_days; fx_rate_age: fx_rate_warn_age_days or "
        "fx_rate_fail_age_days, whichever fired)."))
    fix: str | None = Field(default=None, exclude_if=_absent, examples=[
        "to date it, run `cq catalog refresh --provider azure` (the Azure Retail Prices API) "
        "or `cq catalog import` a price list that states as_of"],
        description="Price-date rules only: what dates the price.")


class BandOut(BaseModel):
    p10: float
    p50: float
    p90: float


class MoneyBandOut(BaseModel):
    p10: str
    p50: str
    p90: str


class UncertaintyOut(BaseModel):
    """The estimate's 80 % band carried into time and money (p10 fast, p90 slow)."""

    wall_clock_s: BandOut
    job_cost_total: MoneyBandOut = Field(
        description="The line's job_cost_total (FOCUS EffectiveCost) at p10, p50 and p90.")
    commitment_total: MoneyBandOut = Field(
        description="The line's commitment_total (FOCUS BilledCost) at p10, p50 and p90.")
    deadline_probability: float | None = Field(
        description="P(finishing before deadline_s): the wall-clock taken as log-normal with "
                    "the band as its 10th and 90th percentiles.")
    basis: str


class ServingFleetOut(BaseModel):
    """The deployment a serving line prices: replicas × gpus_per_replica GPUs."""

    accelerator: str
    replicas: int
    gpus_per_replica: int
    tp: int
    pp: int
    weight_precision: str
    kv_cache_precision: str
    engine: str
    max_batch: int | None
    requests_per_s: float | None = Field(
        description="Requests/s the fleet serves: the online load it is sized for; offline "
                    "and fixed-batch, its capacity.")
    capacity_requests_per_s: float = Field(description="Per replica, at the largest batch.")
    ttft_p99_s: float
    tpot_p99_s: float
    meets_slo: bool | None
    duration_s: float
    band_slow_end_factor: float | None = Field(default=None, description=(
        "Online at a request rate: how much slower than the model the serving band's slow "
        "end is (1 / its throughput low ratio; the serving estimate's "
        "sizing.band_slow_end_factor). None offline and at a fixed batch."))
    replicas_at_band_slow_end: int | None = Field(default=None, description=(
        "The replicas the load needs at the band's slow end. The line is priced on "
        "`replicas`; the p90 of its uncertainty.job_cost_total and commitment_total is "
        "priced on these for the same duration, so a budget is judged at the slow end "
        "(rule budget, code estimate_uncertain)."))
    meets_slo_at_band_slow_end: bool | None = Field(default=None, description=(
        "Whether the SLOs hold at the band's slow end on replicas_at_band_slow_end; None "
        "without an SLO or offline."))


class QuoteLineOut(BaseModel):
    """One way to buy the run. Amounts are decimal strings in ``currency``. ``total`` is what
    ranking and the budget use: ``commitment_total`` by default, the amortised job cost under
    ``accounting: amortised``. Each amount's FinOps FOCUS column is in its description and in
    docs/focus.md."""

    provider: str
    region: str | None
    zone: str | None
    instance_type: str | None
    term: str = Field(description=(
        "What is bought. FOCUS PricingCategory: on_demand 'Standard', spot 'Dynamic', "
        "reserved_1y and reserved_3y 'Committed' (a commitment discount: CommitmentDiscountType "
        "is the provider's label, CommitmentDiscountCategory 'Usage'), capacity_block and "
        "onprem 'Other'."))
    payment_option: str | None = Field(description=(
        "How a commitment is paid. FOCUS ChargeFrequency of the purchase: all_upfront "
        "'One-Time', no_upfront and savings plans 'Recurring', partial_upfront both; null "
        "(on demand, spot) is 'Usage-Based'."))
    accelerator: str
    num_gpus: int
    gpus_per_instance: float
    nvlink_domain: int | None = Field(description="GPUs of one instance sharing NVLink.")
    inter_node_gbps: float | None = Field(
        description="One instance's network for GPU traffic between instances, Gbit/s.")
    fabric_source: str | None
    instances: int
    rounded_up: bool | None = Field(description="GPUs were rounded up to whole instances.")
    wall_clock_s: float | None
    billed_hours: str | None = Field(description=(
        "Hours each instance is billed: the wall clock plus the goodput loss. FOCUS "
        "PricingQuantity is instances × billed_hours instance-hours (gpu_hours on onprem "
        "lines)."))
    gpu_hours: str | None = Field(description=(
        "Instances × GPUs per instance × billed_hours: FOCUS ConsumedQuantity in GPU-hours "
        "(ConsumedUnit), and the PricingQuantity of onprem lines."))
    unit_price: str | None = Field(description=(
        "The price per unit, in currency. FOCUS ContractedUnitPrice: net of the discount "
        "book's negotiated discount when one priced the line, else the published price (FOCUS "
        "ContractedUnitPrice then equals ListUnitPrice). On reserved and capacity_block lines "
        "it is the commitment's rate, the commitment discount included (FOCUS would show it "
        "as EffectiveCost ÷ PricingQuantity); on onprem lines the TCO per GPU-hour."))
    list_unit_price: str | None = Field(
        default=None, description="FOCUS ListUnitPrice: the seller's list price per unit when a "
                                  "discount book priced the line; unit_price and every amount "
                                  "are net. Null otherwise: unit_price is then the list price.")
    discount: str | None = Field(default=None, description=(
        "The discount book entry that gave the net price: a FOCUS negotiated discount, the "
        "gap between ListUnitPrice and ContractedUnitPrice."))
    unit: str = Field(description=(
        "FOCUS PricingUnit of unit_price: instance-hour (cloud lines) or gpu-hour (onprem)."))
    accounting: AccountingName
    commitment_total: str | None = Field(
        description="Cash signed for: the whole reservation terms or capacity blocks bought, "
                    "the on-premises purchase plus running costs, or the job's cost. FOCUS "
                    "BilledCost, summed over every billing period of term_s: what the "
                    "invoices add up to, nothing amortised.")
    job_cost_total: str | None = Field(description=(
        "The job's own share. FOCUS EffectiveCost: the cost recognised for the hours the job "
        "uses (the amortised share of a reservation, block or owned GPUs, "
        "CommitmentDiscountStatus 'Used'); on on_demand and spot lines it equals BilledCost "
        "(commitment_total)."))
    total: str | None = Field(description=(
        "The amount ranked and judged (see accounting): under 'commitment', commitment_total "
        "(FOCUS BilledCost); under 'amortised', FOCUS EffectiveCost with reserved and owned "
        "capacity's unused share (CommitmentDiscountStatus 'Unused') spread over the work "
        "(job_cost_total ÷ reservation_utilisation_fraction)."))
    term_s: float | None = Field(description="Length of what is committed: the reservation "
                                             "terms or blocks bought, the depreciation "
                                             "period, or the job's billed time (FOCUS: from "
                                             "the first ChargePeriodStart to the last "
                                             "ChargePeriodEnd of its charges).")
    terms_bought: int | None
    currency: str = Field(description=(
        "The currency of every amount of the line (the catalogue's pricing currency): FOCUS "
        "BillingCurrency. in_budget_currency converts them."))
    goodput_loss_fraction: float | None
    checkpoint_interval_s: float | None
    goodput_basis: str
    timing_basis: str
    energy_kwh: str | None
    co2e_kg: str | None
    carbon_basis: str | None
    flags: list[str]
    feasible: bool
    infeasible_reason: str | None
    within_budget: bool | None
    meets_deadline: bool | None
    policy_outcome: RuleOutcome
    rules: list[RuleOut] = Field(description="Every rule that warned or failed on this line.")
    uncertainty: UncertaintyOut | None = Field(description=(
        "The estimate's band: job_cost_total (FOCUS EffectiveCost) and commitment_total "
        "(BilledCost) at p10, p50 and p90; null for an infeasible line."))
    price_as_of: dt.date | None = Field(description=(
        "The date the line's price held; null for on-prem lines and for prices whose source "
        "gives no date (those lines carry the flag undated_price)."))
    price_observed_at: dt.date | None = Field(default=None, examples=["2026-11-22"],
                                              description=(
        "The day the catalogue read the line's price (the offer's observed_at), apart from "
        "price_as_of; null for on-prem lines and for prices whose reading day was not "
        "recorded. An undated price read within the policy's max_observed_age_days warns "
        "price_date_unknown_observed."))
    reserved: ReservedOut | None = Field(description=(
        "Reserved terms only: dedicated_total (FOCUS BilledCost of the commitment) and the "
        "deprecated amortised_total (EffectiveCost over a utilisation)."))
    onprem: dict[str, Any] | None = Field(description=(
        "How an onprem line was priced: the purchase price per GPU, the TCO parts per "
        "GPU-hour and capex_total. No cloud bill: capex_total is a one-time purchase (FOCUS "
        "ChargeCategory 'Purchase', its BilledCost), the per-GPU-hour parts add up to "
        "unit_price (ContractedUnitPrice). Null on cloud lines."))
    in_budget_currency: InBudgetCurrencyOut | None = Field(
        default=None, description="The amounts in the budget's currency when the budget was "
                                  "converted with an ECB rate (fx): the same FOCUS columns, "
                                  "converted; null otherwise.")
    offer_id: str | None
    catalog_version: str
    plan: Parallelism | None
    global_batch_seqs: int | None
    serving: ServingFleetOut | None = Field(
        default=None, description="A serving fleet's deployment (workload.serving); null "
                                  "for training.")
    warnings: list[str] = Field(default_factory=list, description=(
        "Plans nobody would run: 'impractical wall-clock' when the line's wall clock is over "
        "the service's limit (CQ_MAX_REASONABLE_TRAIN_DAYS, 365 days by default), "
        "'impractical cost' when its total is over ten times the cheapest feasible line of "
        "the same answer. Advisory (verify does not compare them); absent on quotes stored "
        "before 2026-11-26."))
    warning_details: list[WarningDetailOut] = Field(default_factory=list, description=(
        "The coded warnings of the estimate that sized the line's job (as an estimate's "
        "warning_details: defaulted_input, outside_validated_range, uncalibrated_accelerator, "
        "...), then one per sentence of warnings (impractical_wall_clock, impractical_cost, "
        "unvalidated_serving). Advisory, like warnings: verify does not compare them; absent "
        "on quotes stored before 2026-12-02."))


class CalibrationRef(BaseModel):
    id: str
    name: str
    revision: int


class DiscountBookRef(BaseModel):
    """A discount book's revision, as a quote was priced with it."""

    name: str
    revision: int


class SummaryOut(BaseModel):
    lines: int
    feasible_lines: int
    min_total: str | None
    median_total: str | None
    max_total: str | None
    currency: str


class RejectedGroupOut(BaseModel):
    provider: str
    instance_type: str
    code: str = Field(examples=["nvlink_domain_too_small"], description=(
        "fractional_gpu_instance, nvlink_domain_unknown, nvlink_domain_too_small, "
        "interconnect_unknown, or currency_not_converted (priced in another currency than the "
        "quote's, USD: listed, never priced)."))
    reason: str
    offers: int


class RejectedOffersOut(BaseModel):
    """Offers whose instance cannot host the plan, or priced in a currency the quote does not
    convert: not priced."""

    count: int
    groups: list[RejectedGroupOut]


class PolicyResultOut(BaseModel):
    name: str
    revision: int | None = Field(description="Null for the built-in default policy.")
    builtin: bool
    outcome: RuleOutcome
    rules: list[RuleOut] = Field(description="Every rule's outcome on the recommended line.")
    policy: dict[str, Any] = Field(description="The rules judged by, as stored.")


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
    accounting: AccountingName
    lines: list[QuoteLineOut] = Field(description="The best line per provider and term; every "
                                                  "line: GET /v1/quotes/{id}/lines.")
    lines_total: int
    lines_shown: LinesShown
    rejected_offers: RejectedOffersOut
    cheapest: QuoteLineOut | None
    cheapest_per_term: dict[str, QuoteLineOut]
    fastest: QuoteLineOut | None
    recommended: QuoteLineOut | None
    summary: SummaryOut
    budget: MoneyOut | None
    deadline_s: float | None
    verdict: Verdict | None = Field(
        description="approve unless a rule fails on the recommended line.")
    reasons: list[str] = Field(description="reason_details' messages.")
    reason_details: list[RuleOut]
    policy_result: PolicyResultOut
    fx: FxConversionOut | None = Field(
        default=None, description="How a budget in another currency was converted (null when "
                                  "none was): the rate, its ECB fixing date and FX table "
                                  "version; verify reproduces it.")
    discount_book: DiscountBookRef | None = Field(
        default=None, description="The discount book and revision the lines were priced "
                                  "with; null when none.")
    calibration: CalibrationRef | None = Field(
        default=None, exclude_if=_absent, description=(
            "The user calibration (calibration_id) the jobs were sized with: its id, name and "
            "revision; verify reproduces it with the same stored calibration. Absent when "
            "none (issue 37)."))


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


class QuoteLinesPage(BaseModel):
    items: list[QuoteLineOut]
    next_page_token: str | None


class BudgetPlanOut(BaseModel):
    soonest_within_budget: list[QuoteLineOut] = Field(
        description="Lines within the budget, fastest first.")
    cheapest_before_deadline: list[QuoteLineOut] = Field(
        description="Lines that meet the deadline (all feasible lines without one), cheapest "
                    "first.")
    catalog_version: str
    budget: MoneyOut
    deadline_s: float | None
    accounting: AccountingName
    policy: dict[str, Any] = Field(description="The policy's name and revision (null: built-in).")
    explanation: str = Field(description="Why a list is empty (empty when neither is).")
    objective: BudgetPlanObjective = "soonest"
    largest_model: LargestModelOut | None = Field(
        default=None, description="objective 'largest_model': the largest candidate with a "
                                  "line within the budget and deadline (the lists are its).")
    models_tried: list[ModelTriedOut] = Field(default_factory=list)
    binding_constraint: LargestModelBound | None = Field(
        default=None, description=LARGEST_BOUND_DESCRIPTION + " Null for 'soonest'.")
    fx: FxConversionOut | None = Field(
        default=None, description="How a budget in another currency was converted (null when "
                                  "none was).")


class GeneratedArchitectureOut(BaseModel):
    """A size of the generated Llama-style family (service/core/scaling.py)."""

    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    ffn_hidden_size: int
    vocab_size: int
    mlp: str


class ModelTriedOut(BaseModel):
    preset: str = Field(description="The preset, or the generated size's name.")
    params: int
    tokens: float
    lines_within: int = Field(description="Lines within the budget and deadline that no "
                                          "policy rule fails.")
    note: str
    architecture: GeneratedArchitectureOut | None = Field(
        default=None, description="A generated size's architecture (null for a preset).")
    bound: LargestModelBound | None = Field(
        default=None, description="Why this size has no line (null when it has one).")


class LargestModelOut(BaseModel):
    preset: str = Field(description="The preset, or the generated size's name.")
    params: int
    tokens: float
    line: QuoteLineOut
    architecture: GeneratedArchitectureOut | None = Field(
        default=None, description="The generated architecture (null for a preset).")
    shape_rule: str | None = Field(
        default=None, description="The documented rules the architecture was generated by "
                                  "(null for a preset).")
    tokens_rule: str = Field(default="", description="How tokens were chosen, with the source.")
    share_of_budget: float | None = Field(
        default=None, description="The line's total (under the accounting) over the budget.")

BudgetPlanOut.model_rebuild()


# --- a quote line's JSON: the one writer of QuoteLineOut's fields ---------------------------


def cents_text(amount: Decimal | None) -> str | None:
    """An amount of money as its decimal string to the cent (None stays None)."""
    return None if amount is None else str(pricing.cents(amount))


def _in_budget_currency(line: QuoteLine, conversion: Conversion | None,
                        ) -> dict[str, Any] | None:
    a = line.amounts
    if conversion is None or a is None or line.currency != conversion.into:
        return None
    back = conversion.in_budget_currency
    return {"currency": conversion.currency, "rate": f"{conversion.rate:f}",
            "total": f"{back(a.total):f}",
            "commitment_total": f"{back(a.commitment_total):f}",
            "job_cost_total": f"{back(a.job_cost_total):f}"}


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def rule_json(rule: RuleResult) -> dict[str, Any]:
    """One rule as RuleOut; each price-date field only where the rule has it (every other
    rule's JSON is as before, so stored quotes verify)."""
    out: dict[str, Any] = {"rule": rule.rule, "outcome": rule.outcome.value,
                           "code": rule.code, "severity": SEVERITY[rule.outcome],
                           "message": rule.message}
    for name, value in (("date", rule.date), ("age_days", rule.age_days),
                        ("limit_days", rule.limit_days), ("fix", rule.fix)):
        if value is not None:
            out[name] = value
    return out


def line_json(line: QuoteLine, legacy_fraction: Decimal,
              conversion: Conversion | None = None,
              warnings: Sequence[str] = ()) -> dict[str, Any]:
    """One line in the documented shape (QuoteLineOut), in its key order; with the budget's
    ``conversion``, its amounts also in the budget's currency (``in_budget_currency``);
    ``warnings`` from ``plausibility_warnings``. The one writer of a line: the answer's
    lines and the stored lines are these dicts."""
    a = line.amounts
    reserved = None
    uncertainty = None
    commitment = job_cost = total = None
    if a is not None:
        commitment, job_cost = cents_text(a.commitment_total), cents_text(a.job_cost_total)
        total = (commitment if a.total is a.commitment_total
                 else job_cost if a.total is a.job_cost_total else cents_text(a.total))
        if a.reserved is not None:
            r = a.reserved
            even = r.break_even_utilisation_fraction
            reserved = {
                "dedicated_total": cents_text(r.dedicated_total),
                "amortised_total": cents_text(pricing.cents(a.job_cost_total / legacy_fraction)),
                "terms_bought": r.terms_bought, "utilisation_fraction": str(legacy_fraction),
                "break_even_utilisation_fraction": None if even is None else str(even),
            }
        w = a.wall_clock_band_s
        uncertainty = {
            "wall_clock_s": {"p10": float(w.p10), "p50": float(w.p50), "p90": float(w.p90)},
            "job_cost_total": _money_band(a.job_cost_band, a.job_cost_total, job_cost),
            "commitment_total": _money_band(a.commitment_band, a.commitment_total,
                                            commitment),
            "deadline_probability": a.deadline_probability,
            "basis": line.timing_basis,
        }
    return {
        "provider": line.provider, "region": line.region, "zone": line.zone,
        "instance_type": line.instance_type, "term": line.term.value,
        "payment_option": line.payment_option, "accelerator": line.accelerator,
        "num_gpus": line.num_gpus, "gpus_per_instance": line.gpus_per_instance,
        "nvlink_domain": line.nvlink_domain, "inter_node_gbps": line.inter_node_gbps,
        "fabric_source": line.fabric_source,
        "instances": a.instances if a else _instances(line),
        "rounded_up": a.rounded_up if a else None,
        "wall_clock_s": a.wall_clock_s if a else None,
        "billed_hours": str(a.billed_hours.quantize(_HOURS)) if a else None,
        "gpu_hours": str(a.gpu_hours.quantize(_HOURS)) if a else None,
        "unit_price": None if line.unit_price is None else str(line.unit_price),
        "list_unit_price": None if line.list_unit_price is None else str(line.list_unit_price),
        "discount": line.discount, "unit": line.unit,
        "accounting": line.accounting.value,
        "commitment_total": commitment, "job_cost_total": job_cost, "total": total,
        "term_s": a.term_s if a else None,
        "terms_bought": a.terms_bought if a else None,
        "currency": line.currency,
        "goodput_loss_fraction": _finite(a.goodput_loss_fraction) if a else None,
        "checkpoint_interval_s": a.checkpoint_interval_s if a else None,
        "goodput_basis": line.goodput_basis, "timing_basis": line.timing_basis,
        "energy_kwh": str(a.energy_kwh) if a else None,
        "co2e_kg": str(a.co2e_kg) if a else None,
        "carbon_basis": line.carbon_basis,
        "flags": list(line.flags), "feasible": line.feasible,
        "infeasible_reason": line.infeasible_reason,
        "within_budget": line.within_budget, "meets_deadline": line.meets_deadline,
        "policy_outcome": line.outcome.value,
        "rules": [rule_json(r) for r in line.rules if r.outcome is not Outcome.PASS],
        "uncertainty": uncertainty,
        "price_as_of": line.price_as_of, "price_observed_at": line.price_observed_at,
        "reserved": reserved, "onprem": dict(line.onprem) if line.onprem else None,
        "in_budget_currency": _in_budget_currency(line, conversion),
        "offer_id": line.offer_id, "catalog_version": line.catalog_version,
        "plan": dict(line.plan) if line.plan else None,
        "global_batch_seqs": line.global_batch_seqs,
        "serving": dict(line.serving) if line.serving else None,
        "warnings": list(warnings),
        "warning_details": _details_json(line, warnings),
    }


def _money_band(band: Band, point: Decimal, text: str | None) -> dict[str, str | None]:
    """A band of money (its points are Decimals) to the cent; a point that is ``point``
    itself (the p50, and every point of a band without width) is its ``text``."""
    low, mid, high = band.p10, band.p50, band.p90
    return {"p10": text if low is point else cents_text(cast(Decimal, low)),
            "p50": text if mid is point else cents_text(cast(Decimal, mid)),
            "p90": text if high is point else cents_text(cast(Decimal, high))}


_HOURS = Decimal("0.0001")
"""Billed hours and GPU-hours are shown to a ten-thousandth of an hour."""


def lines_text(lines: Sequence[dict[str, Any]]) -> str:
    """Every line as the stored JSON text ``{"lines":[...]}``: the standard library's
    encoder with compact separators, other characters escaped (decision 169: an ASCII text is
    held at one byte a character; one "×" in one warning made Python hold the whole 525 KB
    text at two)."""
    return json.dumps({"lines": lines}, separators=(",", ":"))


def _details_json(line: QuoteLine, warnings: Sequence[str]) -> list[dict[str, Any]]:
    """The line's coded warnings: its job's (``SizedJob.warning_details``), then one per
    sentence of its own ``warnings``. Advisory, like them: ``verify`` does not compare them,
    and quotes stored before 2026-12-02 have none."""
    return [{"code": d.code, "field": d.field, "message": d.message}
            for d in (*line.warning_details, *details_of(warnings))]


def _instances(line: QuoteLine) -> int:
    return pricing.instances_for(line.num_gpus, line.gpus_per_instance)[0] if (
        line.gpus_per_instance > 0) else line.num_gpus


def policy_json(policy: Policy) -> dict[str, Any]:
    """A policy's rules as JSON (the stored and answered form)."""
    out: dict[str, Any] = {}
    for f in fields(Policy):
        if f.name in ("name", "revision"):
            continue
        value = getattr(policy, f.name)
        if isinstance(value, frozenset):
            value = sorted(value)
        elif isinstance(value, Decimal):
            value = str(value)
        out[f.name] = value
    return out
