"""A quote as typed values: offers, priced lines and the verdict (docs/pricing.md); the
policy rules the lines are judged by are ``service/core/policy.py``.

The quote vertical in one place, pure: ``PriceOffer`` values come in (built once from catalogue
rows in ``catalog/mapping.py``), a ``SizedJob`` with one ``JobTiming`` per interconnect comes
in (the estimate on that offer's fabric), and ``QuoteLine`` values and a ``QuoteResult`` come
out. Money is ``Decimal``; time is float seconds; the date is an input (``today``, a day
ordinal), so a stored quote re-evaluates to the same verdict years later.

What a line promises (issue 13):
- ``commitment_total`` is the cash the buyer signs for: every hour of every reservation term or
  capacity block bought; the purchase of on-premises GPUs plus the job's running costs; the
  job's own cost for on-demand and spot.
- ``job_cost_total`` is the job's share: hours used × rate (reserved at 100 % use of the rest
  of the term, on-premises TCO per GPU-hour).
- ``total`` is what ranking and the budget use: the commitment by default; with
  ``accounting = amortised`` the job's share divided by the stated utilisation of reserved and
  owned capacity.

The verdict is the recommended line's policy outcome: ``approve`` unless a rule fails.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import ROUND_CEILING, Decimal
from enum import StrEnum
from operator import itemgetter
from types import MappingProxyType
from typing import Any, Literal, NamedTuple, get_args

from service.core import capacity, pricing
from service.core.failures import interruptions_per_s
from service.core.plausibility import WarningDetail, outside_validated
from service.core.policy import (
    OUTCOME_RANK,
    SPOT_CAPACITY_UNVERIFIED_GPUS,
    Accounting,
    LineFacts,
    Outcome,
    Policy,
    RuleResult,
    evaluate,
    worst,
)
from service.core.specs import FabricProtocol
from service.core.units import HOURS_PER_YEAR, SECONDS_PER_DAY, SECONDS_PER_HOUR


class Term(StrEnum):
    ON_DEMAND = "on_demand"
    SPOT = "spot"
    RESERVED_1Y = "reserved_1y"
    RESERVED_3Y = "reserved_3y"
    CAPACITY_BLOCK = "capacity_block"
    ONPREM = "onprem"


TermValue = Literal["on_demand", "spot", "reserved_1y", "reserved_3y", "capacity_block",
                    "onprem"]
"""``Term``'s values as a type (the API's ``QuoteTerm``); checked against ``Term`` below."""
TERM_NAMES: tuple[TermValue, ...] = get_args(TermValue)
"""Every term a quote can price, in ``Term`` order: the one list (the API's ``QuoteTerm``, the
catalogue and the CLI take it from here)."""
if tuple(Term) != TERM_NAMES:  # pragma: no cover - a check at import
    raise AssertionError(f"TermValue {TERM_NAMES} is not Term {tuple(Term)}")
OFFER_TERM_NAMES: tuple[str, ...] = tuple(t.value for t in Term if t is not Term.ONPREM)
"""The terms a catalogue offer can have: every term but ``onprem`` (owned GPUs are no offer)."""

RESERVED_YEARS = MappingProxyType({Term.RESERVED_1Y: 1, Term.RESERVED_3Y: 3})


class Verdict(StrEnum):
    APPROVE = "approve"
    REJECT = "reject"


_TERM_VALUES = MappingProxyType({term: term.value for term in Term})
"""Each term's value, looked up: ``Enum.value`` is a Python property (issue 16)."""
class RankBy(StrEnum):
    """What orders a quote's lines and picks its recommendation among lines of the same policy
    outcome: the money (``total``) or the run's emissions (``co2e``, energy × PUE × the
    region's grid intensity: a carbon-aware comparison of regions). ``cheapest`` and
    ``cheapest_per_term`` stay the cheapest either way."""

    TOTAL = "total"
    CO2E = "co2e"


CAPACITY_BLOCK_MAX_DAYS = 182
"""AWS EC2 Capacity Blocks for ML: 1 to 14 days in 1-day steps, then 7-day steps up to 182 days
(Amazon EC2 User Guide, 'Capacity Blocks for ML', durations)."""
CAPACITY_BLOCK_DAILY_STEP_MAX_DAYS = 14

Z_90 = 1.2815515655446004
"""The standard normal's 90th percentile: p10 and p90 are median × exp(∓1.2816 σ)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Fabric:
    """The interconnect of one instance type (provider documentation, named per offer)."""

    gpus_per_instance: float
    nvlink_domain: int | None
    """GPUs of one instance that share NVLink/NVSwitch; None when not documented."""
    inter_node_gbps: float | None
    """Back-end network of one instance, Gbit/s, for GPU traffic between instances."""
    protocol: FabricProtocol | None = None
    """The protocol of that network where the provider documents it (the offer's
    ``interconnect``): a line is timed on it when the request states no ``cluster.fabric``
    (issue 42). None: the fitted InfiniBand-class network."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PriceOffer:
    """One catalogue offer, as the quote reads it. Money in the offer's currency."""

    offer_id: str
    provider: str
    region: str
    zone: str | None
    instance_type: str
    accelerator: str
    term: Term
    payment_option: str | None
    currency: str
    price_per_instance_hour: Decimal
    """The effective hourly rate (up-front fees spread over the term)."""
    fabric: Fabric
    fabric_source: str | None
    interruption_rate_per_hour: float | None
    interruption_rate_source: str | None
    interruption_rate_assumed: bool
    region_carbon_g_per_kwh: float | None
    as_of: str | None
    """ISO date the price held; None when the source gives no date (flag ``undated_price``)."""
    as_of_day: int | None
    """The same date as a proleptic Gregorian ordinal (``date.toordinal()``): the core reads
    no clock and keeps no date type, so ages are differences of ordinals."""
    indicative: bool
    derived: bool
    """A synthetic price (for example reserved = on-demand × 0.55), not a seller's figure."""
    quality_flags: tuple[str, ...]
    on_demand_rate: Decimal | None = None
    """The on-demand rate of the same instance and region (break-even figures)."""
    list_price_per_instance_hour: Decimal | None = None
    """The seller's list price when a discount book set ``price_per_instance_hour`` to the
    organisation's net price (``service/core/discounts.py``)."""
    discount: str | None = None
    """Which book entry gave the net price."""
    observed_at: str | None = None
    """ISO date the catalogue read the price (issue 39), apart from ``as_of``, the provider's
    date; None when that day was not recorded."""
    observed_at_day: int | None = None
    """The same day as an ordinal (``date.toordinal()``), as ``as_of_day``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobTiming:
    """Wall-clock of a job on one fabric, without failures: the estimate and its 80 % band."""

    wall_s: float
    wall_s_p10: float
    wall_s_p90: float
    basis: str
    warning_details: tuple[WarningDetail, ...] = ()
    """Coded warnings this timing adds to its job's (issue 42): a line timed on its offer's
    protocol carries the ``outside_validated_range`` on ``cluster.fabric`` that an estimate
    stating that protocol carries (``fabric.fabric_details``); () when the request states the
    fabric itself, whose warning the job already carries."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SizedJob:
    """A workload on one accelerator and GPU count, before money."""

    accelerator: str
    num_gpus: int
    timing: JobTiming
    """On the accelerator's reference node (used where the offer's fabric is not modelled)."""
    checkpoint_bytes: float
    power_w_per_gpu: float
    """Average board plus host power per GPU, before PUE."""
    fast_domain: int = 1
    """GPUs that must share one NVLink domain: TP × CP of the plan (1 without a plan)."""
    plan: Mapping[str, object] | None = None
    global_batch_seqs: int | None = None
    serving: Mapping[str, object] | None = None
    """A serving fleet's deployment (issue 19; None for training): independent replicas of
    ``fast_domain`` GPUs each, held for
    the timing's wall clock. Replicas do not talk to each other, so several instances need no
    documented inter-node network; an interruption takes one instance's replicas out while
    it restarts instead of stalling the whole job (``interruption_fraction``)."""
    warning_details: tuple[WarningDetail, ...] = ()
    """The coded warnings of the estimate that sized the job (issue 37), on each of its
    lines: advisory, like the lines' warnings (``verify`` does not compare them)."""
    slow_end_num_gpus: int | None = None
    """A serving fleet sized at its band's slow end (issue 40, ``serving.SlowEnd``): the
    GPUs of the replicas the load needs when every time on a replica is the band's slow-end
    factor longer. The p90 of a line's job-cost and commitment bands is priced on this
    many GPUs for the same wall-clock (its p10 stays the fleet's own: a fleet is not sized
    below the model's figure), so a budget is judged at the slow end like a training job's
    (``policy``'s ``estimate_uncertain``). None: the band is the timing's alone."""


def interruption_fraction(instance_rate_per_s: float, restart_s: float) -> pricing.Goodput:
    """A serving fleet's spare capacity: each instance is interrupted ``instance_rate_per_s``
    times a second and down ``restart_s`` each time, so on average a fraction λ·R of the
    fleet is down (the M/G/∞ mean: Little's law, arrivals λ per instance, each out for R). To
    hold the peak load the fleet carries that fraction as spare replicas, billed as
    ``lost_fraction``; λ·R ≥ 1 means an instance is down more than it is up."""
    down = instance_rate_per_s * restart_s
    if down >= 1:
        return pricing.Goodput(
            interval_s=None, lost_fraction=math.inf, feasible=False,
            reason=f"each instance is interrupted every {1 / instance_rate_per_s:,.0f} s on "
                   f"average, less than the {restart_s:,.0f} s a restart takes: no replica "
                   "would stay up")
    return pricing.Goodput(interval_s=None, lost_fraction=down, feasible=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class OnPremInputs:
    purchase_price_per_gpu: Decimal | None
    basis: str
    tco: pricing.OnPremInputs | None
    indicative: bool = False
    """The purchase price is the catalogue's indicative figure, not the buyer's own."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    """Everything of a request that changes money or the verdict."""

    currency: str = "USD"
    budget: Decimal | None = None
    budget_basis: str | None = None
    """How ``budget`` was made from the request's, when converted (the rate, its date and
    the FX table version); quoted beside the budget in every budget message."""
    fx_fixing_date: str | None = None
    """The ISO date of the ECB fixing the quote converts money with (None: it converts
    nothing); judged by the policy's ``fx_rate_age`` rule against the quote's day."""
    fx_fixing_day: int | None = None
    """The same date as an ordinal (``date.toordinal()``)."""
    deadline_s: float | None = None
    accounting: Accounting = Accounting.COMMITMENT
    utilisation_fraction: Decimal = Decimal(1)
    """Amortised accounting: the share of reserved or owned capacity put to use."""
    failure_rate_per_gpu_hour: float = pricing.DEFAULT_FAILURE_RATE_PER_GPU_HOUR
    restart_s: float = pricing.DEFAULT_RESTART_S
    checkpoint_bytes_per_s: float = pricing.DEFAULT_CHECKPOINT_BYTES_PER_S
    pue: float = 1.2
    grid_gco2e_per_kwh: float = 480.0
    rank_by: RankBy = RankBy.TOTAL


@dataclass(frozen=True, slots=True, kw_only=True)
class Band:
    p10: Decimal | float
    p50: Decimal | float
    p90: Decimal | float


@dataclass(frozen=True, slots=True, kw_only=True)
class Amounts:
    """A feasible line's money and time."""

    instances: int
    rounded_up: bool
    wall_clock_s: float
    billed_hours: Decimal
    gpu_hours: Decimal
    commitment_total: Decimal
    job_cost_total: Decimal
    total: Decimal
    term_s: float
    goodput_loss_fraction: float
    checkpoint_interval_s: float | None
    energy_kwh: Decimal
    co2e_kg: Decimal
    wall_clock_band_s: Band
    job_cost_band: Band
    commitment_band: Band
    deadline_probability: float | None
    reserved: pricing.Reservation | None = None
    terms_bought: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class QuoteLine:
    """One way to buy the run, judged by every rule. Made by its constructor and judged
    copies by ``dataclasses.replace`` (issue 38: it used to be filled through
    ``object.__new__`` and its ``__dict__``, to save about 8 µs a line)."""

    provider: str
    region: str | None
    zone: str | None
    instance_type: str | None
    term: Term
    payment_option: str | None
    accelerator: str
    num_gpus: int
    gpus_per_instance: float
    nvlink_domain: int | None
    inter_node_gbps: float | None
    fabric_source: str | None
    currency: str
    unit_price: Decimal | None
    unit: str
    offer_id: str | None
    catalog_version: str
    flags: tuple[str, ...]
    goodput_basis: str
    timing_basis: str
    carbon_basis: str | None
    plan: Mapping[str, object] | None
    global_batch_seqs: int | None
    accounting: Accounting
    amounts: Amounts | None
    infeasible_reason: str | None
    onprem: Mapping[str, str | int | None] | None
    price_as_of: str | None
    price_as_of_day: int | None
    list_unit_price: Decimal | None = None
    """The list price per unit when a discount book priced the line (unit_price is net)."""
    discount: str | None = None
    rules: tuple[RuleResult, ...] = ()
    within_budget: bool | None = None
    meets_deadline: bool | None = None
    serving: Mapping[str, object] | None = None
    """The serving deployment a serving fleet's line prices (``SizedJob.serving``)."""
    warning_details: tuple[WarningDetail, ...] = ()
    """``SizedJob.warning_details`` of the line's job, then its timing's
    (``JobTiming.warning_details``: the offer's protocol's; advisory)."""
    price_observed_at: str | None = None
    """ISO date the line's price was read (``PriceOffer.observed_at``); None for on-prem
    lines and prices whose reading day was not recorded."""
    price_observed_at_day: int | None = None

    @property
    def feasible(self) -> bool:
        return self.amounts is not None

    @property
    def outcome(self) -> Outcome:
        """The worst of the rules' outcomes (``OUTCOME_RANK``); pass without rules."""
        return worst(self.rules)

    def sort_key(self) -> tuple[object, ...]:
        a = self.amounts
        return (a is None, a.total if a else Decimal(0), a.wall_clock_s if a else 0.0,
                self.provider, self.region or "", self.zone or "", self.instance_type or "",
                self.term, self.payment_option or "", self.num_gpus, self.accelerator)

    def carbon_key(self) -> tuple[object, ...]:
        """Lowest CO2e first, then as ``sort_key`` (``RankBy.CO2E``)."""
        a = self.amounts
        return (a is None, a.co2e_kg if a else Decimal(0), *self.sort_key()[1:])


@dataclass(frozen=True, slots=True, kw_only=True)
class RejectedOffer:
    """An offer whose instance cannot host the plan: listed, never priced."""

    offer_id: str
    provider: str
    instance_type: str
    region: str
    term: Term
    accelerator: str
    num_gpus: int
    code: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class QuoteResult:
    lines: tuple[QuoteLine, ...]
    rejected: tuple[RejectedOffer, ...]
    recommended: QuoteLine | None
    cheapest: QuoteLine | None
    fastest: QuoteLine | None
    cheapest_per_term: Mapping[str, QuoteLine]
    verdict: Verdict | None
    reasons: tuple[RuleResult, ...]
    policy: Policy
    policy_outcome: Outcome
    summary_totals: tuple[Decimal, ...] = field(default=())


# --- node fit ------------------------------------------------------------------------------


def node_fit(job: SizedJob, fabric: Fabric) -> tuple[str, str] | None:
    """Why an instance cannot host the job's plan, as (code, message), or None if it can.

    The plan's tensor- and context-parallel group (TP × CP) must sit inside one NVLink domain
    (Narayanan et al. 2021, section 3.3: tensor parallelism inside a node); a job on more than
    one instance needs a documented inter-node network. Expert parallelism may cross nodes
    (DeepSeek-V3 ran EP 64 over InfiniBand with node-limited routing, arXiv 2412.19437 §3.2),
    so it is not part of the fast domain."""
    if fabric.gpus_per_instance < 1:
        return ("fractional_gpu_instance",
                f"a {fabric.gpus_per_instance:g}-GPU instance shares one GPU: training needs "
                "whole GPUs")
    if job.fast_domain > 1:
        if fabric.nvlink_domain is None:
            return ("nvlink_domain_unknown",
                    f"the plan needs {job.fast_domain} GPUs in one NVLink domain (TP × CP) and "
                    "the instance's NVLink domain is not documented")
        if fabric.nvlink_domain < job.fast_domain:
            return ("nvlink_domain_too_small",
                    f"the plan needs {job.fast_domain} GPUs in one NVLink domain (TP × CP); "
                    f"the instance has {fabric.nvlink_domain}")
    if (job.num_gpus > fabric.gpus_per_instance and fabric.inter_node_gbps is None
            and job.serving is None):
        return ("interconnect_unknown",
                f"{job.num_gpus} GPUs need several instances and the instance's inter-node "
                "network is not documented")
    return None


# --- money ---------------------------------------------------------------------------------


def capacity_block_days(billed_hours: Decimal) -> tuple[int, int]:
    """(days bought, blocks): whole days up to 14, then whole weeks, at most 182 days a block
    (``CAPACITY_BLOCK_MAX_DAYS``); longer jobs buy consecutive blocks."""
    days = int((billed_hours / 24).to_integral_value(rounding=ROUND_CEILING)) or 1
    blocks = -(-days // CAPACITY_BLOCK_MAX_DAYS)
    per_block = -(-days // blocks)
    if per_block > CAPACITY_BLOCK_DAILY_STEP_MAX_DAYS:
        per_block = min(CAPACITY_BLOCK_MAX_DAYS, -(-per_block // 7) * 7)
    return per_block * blocks, blocks


def _commitment(term: Term, instances: int, hours: Decimal, rate: Decimal,
                job_cost: Decimal, hours_s: float) -> tuple[Decimal, float, int | None]:
    """(commitment, term seconds, terms bought) for ``hours`` of use (``hours_s`` in
    seconds): the reservation terms (``pricing.reservation``'s dedicated total) or capacity
    blocks bought, else the job's own cost."""
    years = RESERVED_YEARS.get(term)
    if years is not None:
        terms, dedicated = pricing.dedicated(instances, hours, years, rate)
        return dedicated, terms * years * HOURS_PER_YEAR * SECONDS_PER_HOUR, terms
    if term is Term.CAPACITY_BLOCK:
        days, blocks = capacity_block_days(hours)
        return pricing.cents(instances * days * 24 * rate), days * SECONDS_PER_DAY, blocks
    return job_cost, hours_s, None


def _same(a: float, b: float) -> bool:
    """Equal floats that print the same (0.0 and -0.0 are equal but not the same text)."""
    return a == b and (a != 0 or math.copysign(1.0, a) == math.copysign(1.0, b))


def deadline_probability(band: JobTiming, factor: float, deadline_s: float) -> float:
    """P(wall-clock ≤ deadline), the wall-clock taken as log-normal with median ``wall_s`` and
    the 80 % band as its 10th and 90th percentiles (σ = ln(p90/p10) / (2 × 1.2816)). A job with
    no band (GPU-hours given by the caller) is certain either way."""
    return _deadline_probability(band.wall_s, band.wall_s_p10, band.wall_s_p90, factor,
                                 deadline_s)


def _deadline_probability(wall_s: float, wall_s_p10: float, wall_s_p90: float, factor: float,
                          deadline_s: float) -> float:
    """``deadline_probability`` of a band given by its three wall-clocks."""
    median = wall_s * factor
    if wall_s_p90 <= wall_s_p10:
        return 1.0 if median <= deadline_s else 0.0
    sigma = math.log(wall_s_p90 / wall_s_p10) / (2 * Z_90)
    z = (math.log(deadline_s) - math.log(median)) / sigma
    return 0.5 * (1 + math.erf(z / math.sqrt(2)))


_AmountsContext = tuple[float, float, float, Accounting, Decimal, float | None]
"""What ``_price_amounts`` reads of the timing and of the request's options: (wall-clock,
its 10th and 90th percentiles, accounting, utilisation, deadline)."""


def _amounts_context(timing: JobTiming, options: Options) -> _AmountsContext:
    """What ``_price_amounts`` reads of the timing and the options, as plain values (part of
    ``price_all``'s per-call key, ``_AmountsKey``; the timing's basis and the other options
    are not read)."""
    return (timing.wall_s, timing.wall_s_p10, timing.wall_s_p90, options.accounting,
            options.utilisation_fraction, options.deadline_s)


def price_amounts(
    *, job: SizedJob, timing: JobTiming, term: Term, gpus_per_instance: float, rate: Decimal,
    lost_fraction: float, interval_s: float | None, options: Options, carbon_g_per_kwh: float,
    pue: float, on_demand_rate: Decimal | None = None,
) -> Amounts:
    """A feasible line's amounts at the estimate and at the ends of its band: the job's cost
    is ``pricing.cloud_line`` (instances × billed hours × rate), the commitment what the term
    makes the buyer sign for."""
    return _price_amounts(
        job.num_gpus, job.power_w_per_gpu + 0.0, _amounts_context(timing, options), term,
        gpus_per_instance + 0.0, rate,
        rate.as_tuple().exponent, lost_fraction + 0.0,
        None if interval_s is None else interval_s + 0.0, carbon_g_per_kwh + 0.0,
        pue + 0.0, on_demand_rate,
        None if on_demand_rate is None else on_demand_rate.as_tuple().exponent,
        slow_end_num_gpus=job.slow_end_num_gpus)


def _price_amounts(
    num_gpus: int, power_w_per_gpu: float, context: _AmountsContext, term: Term,
    gpus_per_instance: float, rate: Decimal, _rate_exponent: int | str, lost_fraction: float,
    interval_s: float | None, carbon_g_per_kwh: float, pue: float,
    on_demand_rate: Decimal | None, _on_demand_exponent: int | str | None,
    spares: int = 0, slow_end_num_gpus: int | None = None,
) -> Amounts:
    wall_s, wall_s_p10, wall_s_p90, accounting, utilisation_fraction, deadline_s = context

    instances, rounded_up = pricing.instances_for(num_gpus, gpus_per_instance)
    # An SLO-bound serving fleet's spare instances on spot (``capacity.spare_instances``) are
    # bought and billed like the others.
    instances += spares
    factor_decimal = 1 + pricing.exact(lost_fraction)

    def at(wall_s: float, count: int = instances,
           ) -> tuple[Decimal, Decimal, Decimal, float, int | None, float]:
        """(billed hours, job cost, commitment, term seconds, terms bought, billed seconds)
        at one wall-clock on ``count`` instances: ``pricing.cloud_line``'s hours and total
        (``pricing.billed``)."""
        hours, job_cost = pricing.billed(count, wall_s, factor_decimal, rate)
        hours_s = float(hours * pricing.SECONDS_PER_HOUR_DECIMAL)
        commitment, term_s, terms = _commitment(term, count, hours, rate, job_cost, hours_s)
        return hours, job_cost, commitment, term_s, terms, hours_s

    # A band without width (GPU-hours given by the caller) prices one wall-clock once.
    mid = at(wall_s)
    hours, job_cost, commitment, term_s, terms, hours_s = mid
    low = mid if _same(wall_s_p10, wall_s) else at(wall_s_p10)
    high = mid if _same(wall_s_p90, wall_s) else at(wall_s_p90)
    if slow_end_num_gpus is not None and slow_end_num_gpus > num_gpus:
        # A serving fleet's slow end (``SizedJob.slow_end_num_gpus``): more replicas for the
        # same wall-clock, with the fleet's own spare instances.
        slow = pricing.instances_for(slow_end_num_gpus, gpus_per_instance)[0] + spares
        high = at(wall_s_p90, slow)
    owned = term in RESERVED_YEARS or term is Term.ONPREM
    if accounting is Accounting.AMORTISED:
        total = pricing.cents(job_cost / utilisation_fraction) if owned else job_cost
    else:
        total = commitment
    gpu_hours = hours * instances * pricing.exact(gpus_per_instance)
    kwh = gpu_hours * pricing.exact(power_w_per_gpu) * pricing.exact(pue) / 1000
    co2 = kwh * pricing.exact(carbon_g_per_kwh) / 1000
    reserved = None
    if term in RESERVED_YEARS:
        reserved = pricing.reservation(
            instances=instances, billed_hours=hours, years=RESERVED_YEARS[term],
            effective_rate=rate, on_demand_rate=on_demand_rate,
            utilisation_fraction=utilisation_fraction)
    factor = 1 + lost_fraction
    return Amounts(
        instances=instances, rounded_up=rounded_up, wall_clock_s=hours_s,
        billed_hours=hours, gpu_hours=gpu_hours, commitment_total=commitment,
        job_cost_total=job_cost, total=total, term_s=term_s,
        goodput_loss_fraction=lost_fraction, checkpoint_interval_s=interval_s,
        energy_kwh=kwh.quantize(_MILLI), co2e_kg=co2.quantize(_MILLI),
        wall_clock_band_s=Band(p10=low[5], p50=hours_s, p90=high[5]),
        job_cost_band=Band(p10=low[1], p50=job_cost, p90=high[1]),
        commitment_band=Band(p10=low[2], p50=commitment, p90=high[2]),
        deadline_probability=(None if deadline_s is None else round(
            _deadline_probability(wall_s, wall_s_p10, wall_s_p90, factor, deadline_s), 6)),
        reserved=reserved, terms_bought=terms,
    )


_MILLI = Decimal("0.001")

UNVALIDATED_ESTIMATE = "unvalidated_estimate"
"""The flag of a line whose serving estimate the model marks as outside what its published
rows validate (``job_flags``); policy rule ``forbid_unvalidated_estimates``."""


def job_flags(job: SizedJob) -> tuple[str, ...]:
    """The flags a line takes from its job (issue 40): ``unvalidated_estimate`` for a serving
    fleet whose estimate carries ``outside_validated_range`` (a mixture-of-experts model, a
    length or running batch beyond the validated rows, or a band that did not hold out of
    sample), so that a verdict does not rest on it unless the policy allows it. A training
    job's coded warnings stay advisory: its band is measured per stack family out of sample
    (docs/validation.md)."""
    if job.serving is not None and outside_validated(job.warning_details):
        return (UNVALIDATED_ESTIMATE,)
    return ()


def _flags(offer: PriceOffer, instances: int) -> tuple[str, ...]:
    flags: list[str] = []
    if offer.indicative:
        flags.append("indicative_price")
    if offer.derived:
        flags.append("derived_price")
    if offer.as_of is None:
        flags.append("undated_price")
    flags.extend(offer.quality_flags)
    if offer.term is Term.SPOT:
        if offer.interruption_rate_assumed:
            flags.append("assumed_interruption_rate")
        if instances * offer.fabric.gpus_per_instance > SPOT_CAPACITY_UNVERIFIED_GPUS:
            flags.append("spot_capacity_unverified")
    return tuple(flags)


_OfferFacts = tuple[pricing.Goodput, str, tuple[str, ...], float | None,
                    tuple[Term, float, Decimal, int | str, float, float | None, float,
                          Decimal | None, int | str | None, int] | None]
"""(goodput, goodput basis, flags, carbon intensity, the offer's part of
``_price_amounts``' arguments or None when infeasible): ``_offer_facts``."""


def _offer_facts(job: SizedJob, offer: PriceOffer, options: Options) -> _OfferFacts:
    """What a line takes from the offer, the job's GPU count, checkpoint size and kind
    (training or serving) and the request's reliability options, not from its timing:
    instances, the goodput loss (Young/Daly, ``pricing.goodput``; a serving fleet's spare
    replicas, ``interruption_fraction``), its basis and the flags."""
    gpus = offer.fabric.gpus_per_instance
    instances, _ = pricing.instances_for(job.num_gpus, gpus)
    checkpoint_s = job.checkpoint_bytes / options.checkpoint_bytes_per_s
    # A training job stalls when any instance fails; a serving fleet loses one instance.
    counted = 1 if job.serving is not None else instances
    if offer.term is Term.SPOT:
        rate = offer.interruption_rate_per_hour or 0.0
        rate_per_s = rate * counted / SECONDS_PER_HOUR
        assumed = " (an assumption)" if offer.interruption_rate_assumed else ""
        basis = (f"spot interruptions {rate:g} per instance-hour{assumed} "
                 f"({offer.interruption_rate_source})")
    else:
        rate_per_s = interruptions_per_s(options.failure_rate_per_gpu_hour, counted, gpus)
        basis = f"hardware failures {options.failure_rate_per_gpu_hour:g} per GPU-hour"
    spares = 0
    if job.serving is not None:
        loss = interruption_fraction(rate_per_s, options.restart_s)
        basis += "; spare replicas for the instances restarting"
        if (offer.term is Term.SPOT and loss.feasible
                and job.serving.get("meets_slo") is not None):
            # An SLO-bound fleet on spot (issue 39): an eviction must not take a replica the
            # SLO counts on out of service, so whole spare instances are bought.
            spares = capacity.spare_instances(instances, rate_per_s, options.restart_s)
            basis += (f"; {spares} spare instance{'s' if spares != 1 else ''} bought for the "
                      f"SLO: a fleet of {instances:,} x {rate:g} evictions per instance-hour x "
                      f"{options.restart_s:g} s to replace, short of replicas at most "
                      f"{capacity.SPARE_SHORTFALL_PROBABILITY:.1%} of the time (Poisson, at "
                      f"least {capacity.MIN_SPARE_INSTANCES})")
    else:
        loss = pricing.goodput(rate_per_s, checkpoint_s, options.restart_s)
    carbon = offer.region_carbon_g_per_kwh
    priced = None
    if loss.feasible:
        # ``_price_amounts``' arguments of the offer (``_AmountsKey``).
        price, on_demand = offer.price_per_instance_hour, offer.on_demand_rate
        priced = (offer.term, gpus + 0.0, price, price.as_tuple().exponent,
                  loss.lost_fraction + 0.0,
                  None if loss.interval_s is None else loss.interval_s + 0.0,
                  (carbon if carbon is not None else options.grid_gco2e_per_kwh) + 0.0,
                  on_demand, None if on_demand is None else on_demand.as_tuple().exponent,
                  spares)
    return loss, basis, _flags(offer, instances) + job_flags(job), carbon, priced


def _line_fields_of_offer(offer: PriceOffer) -> dict[str, object]:
    """A cloud line's fields that the offer alone decides (``cloud_line`` adds the facts',
    the job's, the timing basis and the amounts)."""
    fabric = offer.fabric
    return {
        "provider": offer.provider, "region": offer.region, "zone": offer.zone,
        "instance_type": offer.instance_type, "term": offer.term,
        "payment_option": offer.payment_option, "gpus_per_instance": fabric.gpus_per_instance,
        "nvlink_domain": fabric.nvlink_domain, "inter_node_gbps": fabric.inter_node_gbps,
        "fabric_source": offer.fabric_source, "currency": offer.currency,
        "unit_price": offer.price_per_instance_hour, "unit": "instance-hour",
        "offer_id": offer.offer_id, "onprem": None, "price_as_of": offer.as_of,
        "price_as_of_day": offer.as_of_day, "price_observed_at": offer.observed_at,
        "price_observed_at_day": offer.observed_at_day,
        "list_unit_price": offer.list_price_per_instance_hour, "discount": offer.discount,
    }


_Fit = tuple[PriceOffer, tuple[str, str] | None, RejectedOffer | None]


def _fit(job: SizedJob, offer: PriceOffer) -> _Fit:
    """(offer, ``node_fit``'s answer, the offer as rejected when it cannot host the plan)."""
    misfit = node_fit(job, offer.fabric)
    if misfit is None:
        return offer, None, None
    return offer, misfit, RejectedOffer(
        offer_id=offer.offer_id, provider=offer.provider,
        instance_type=offer.instance_type, region=offer.region, term=offer.term,
        accelerator=offer.accelerator, num_gpus=job.num_gpus, code=misfit[0],
        reason=misfit[1])


_AmountsKey = tuple[object, ...]
"""``_price_amounts``' arguments as a key of ``price_all``'s per-call reuse: equal keys must give
identical text, so a Decimal's exponent and a float's sign of zero take part in it (2.5 == 2.50
and 0.0 == -0.0, but they print differently)."""


def cloud_line(job: SizedJob, timing: JobTiming, offer: PriceOffer, options: Options,
               version_id: str, *, amounts_seen: dict[_AmountsKey, Amounts] | None = None,
               job_fields: dict[str, object] | None = None) -> QuoteLine:
    """One offer applied to a job: goodput, amounts, energy (MODEL.md section 7), not yet
    judged. ``amounts_seen`` is ``price_all``'s reuse of amounts within one call (offers in
    many regions share a price); ``job_fields`` the line's fields the job, the request and the
    version decide (``line_fields_of_job``), made once per job by ``price_all``."""
    return QuoteLine(**_cloud_values(job, timing, offer, options, version_id,
                                     amounts_seen=amounts_seen, job_fields=job_fields))


def _cloud_values(job: SizedJob, timing: JobTiming, offer: PriceOffer, options: Options,
                  version_id: str, *, amounts_seen: dict[_AmountsKey, Amounts] | None,
                  job_fields: dict[str, object] | None) -> dict[str, Any]:
    """``cloud_line``'s fields, every one without a default, as keyword arguments."""
    loss, basis, flags, carbon, priced = _offer_facts(job, offer, options)
    amounts = None
    if priced is not None:
        (term, gpus, price, exponent, lost, interval, intensity, on_demand, od_exponent,
         spares) = priced
        key: _AmountsKey = (
            job.num_gpus, job.power_w_per_gpu + 0.0, _amounts_context(timing, options), term,
            gpus, price, exponent, lost, interval, intensity, options.pue + 0.0, on_demand,
            od_exponent, spares, job.slow_end_num_gpus)
        found = None if amounts_seen is None else amounts_seen.get(key)
        if found is None:
            found = _price_amounts(*key)  # type: ignore[arg-type]
            if amounts_seen is not None:
                amounts_seen[key] = found
        amounts = found
    # Its fields from four parts: the offer's, the job's, the facts' and this line's own.
    return {
        **_line_fields_of_offer(offer),
        **(job_fields if job_fields is not None
           else line_fields_of_job(job, options, version_id)),
        "flags": flags, "goodput_basis": basis,
        "carbon_basis": (None if carbon is None and amounts is None
                         else "region" if carbon is not None else "request default"),
        "infeasible_reason": loss.reason, "timing_basis": timing.basis, "amounts": amounts,
        **({"warning_details": (*job.warning_details, *timing.warning_details)}
           if timing.warning_details else {})}


def line_fields_of_job(job: SizedJob, options: Options, version_id: str) -> dict[str, object]:
    """A cloud line's fields that the job, the request's accounting and the catalogue version
    decide (the same for every offer ``price_all`` prices for the job)."""
    return {"accelerator": job.accelerator, "num_gpus": job.num_gpus,
            "catalog_version": version_id, "plan": job.plan, "serving": job.serving,
            "global_batch_seqs": job.global_batch_seqs, "accounting": options.accounting,
            "warning_details": job.warning_details}


def onprem_line(job: SizedJob, inputs: OnPremInputs, options: Options,
                version_id: str) -> QuoteLine:
    """Owned GPUs: TCO per GPU-hour (pricing.onprem_rate); the commitment is the purchase
    (GPUs × price × (1 + overhead)) plus the job's running costs."""
    line = QuoteLine(
        provider="onprem", region=None, zone=None, instance_type=None, term=Term.ONPREM,
        payment_option=None, accelerator=job.accelerator, num_gpus=job.num_gpus,
        gpus_per_instance=1.0, nvlink_domain=None, inter_node_gbps=None, fabric_source=None,
        currency=options.currency, unit_price=None, unit="gpu-hour", offer_id=None,
        catalog_version=version_id, flags=(), timing_basis=job.timing.basis,
        goodput_basis=f"hardware failures {options.failure_rate_per_gpu_hour:g} per GPU-hour",
        carbon_basis=None, plan=job.plan, serving=job.serving,
        global_batch_seqs=job.global_batch_seqs, warning_details=job.warning_details,
        accounting=options.accounting, amounts=None, onprem=None, price_as_of=None,
        price_as_of_day=None,
        infeasible_reason=(f"no purchase price for {job.accelerator}: give "
                           "onprem.purchase_price_per_gpu"),
    )
    if inputs.tco is None or inputs.purchase_price_per_gpu is None:
        return line
    tco = inputs.tco
    rate = pricing.onprem_rate(tco, job.power_w_per_gpu)
    if job.serving is not None:
        loss = interruption_fraction(options.failure_rate_per_gpu_hour / SECONDS_PER_HOUR,
                                     options.restart_s)
    else:
        failures = interruptions_per_s(options.failure_rate_per_gpu_hour, job.num_gpus)
        loss = pricing.goodput(failures, job.checkpoint_bytes / options.checkpoint_bytes_per_s,
                               options.restart_s)
    if not loss.feasible:
        return replace(line, infeasible_reason=loss.reason)
    purchase = inputs.purchase_price_per_gpu
    capex = job.num_gpus * purchase * (1 + tco.overhead_fraction)
    running = rate.per_gpu_hour - rate.capex_per_gpu_hour
    amounts = price_amounts(
        job=job, timing=job.timing, term=Term.ONPREM, gpus_per_instance=1.0,
        rate=rate.per_gpu_hour, lost_fraction=loss.lost_fraction, interval_s=loss.interval_s,
        options=options, carbon_g_per_kwh=options.grid_gco2e_per_kwh, pue=float(tco.pue))
    hours = amounts.billed_hours
    commitment = pricing.cents(capex + job.num_gpus * hours * running)
    term_s = float(tco.depreciation_years * HOURS_PER_YEAR) * SECONDS_PER_HOUR

    def commit_at(band_s: float, gpus: int = job.num_gpus) -> Decimal:
        used = pricing.exact(band_s) / pricing.SECONDS_PER_HOUR_DECIMAL
        bought = gpus * purchase * (1 + tco.overhead_fraction)
        return pricing.cents(bought + gpus * used * running)

    band = amounts.wall_clock_band_s
    slow_gpus = max(job.num_gpus, job.slow_end_num_gpus or 0)
    amounts = replace(
        amounts, commitment_total=commitment, term_s=term_s,
        total=commitment if options.accounting is Accounting.COMMITMENT else amounts.total,
        commitment_band=Band(p10=commit_at(float(band.p10)), p50=commitment,
                             p90=commit_at(float(band.p90), slow_gpus)))
    six = Decimal("0.000001")
    return replace(line, amounts=amounts, infeasible_reason=None, carbon_basis="request default",
                   flags=(("indicative_price",) if inputs.indicative else ()) + job_flags(job),
                   unit_price=rate.per_gpu_hour.quantize(six), onprem={
        "purchase_price_per_gpu": str(inputs.purchase_price_per_gpu),
        "purchase_price_basis": inputs.basis,
        "overhead_fraction": str(tco.overhead_fraction),
        "depreciation_years": tco.depreciation_years,
        "electricity_per_kwh": str(tco.electricity_per_kwh), "pue": str(tco.pue),
        "operations_fraction_per_year": str(tco.operations_fraction_per_year),
        "capex_per_gpu_hour": str(rate.capex_per_gpu_hour.quantize(six)),
        "energy_per_gpu_hour": str(rate.energy_per_gpu_hour.quantize(six)),
        "operations_per_gpu_hour": str(rate.operations_per_gpu_hour.quantize(six)),
        "capex_total": str(pricing.cents(capex)),
    })


# --- assembly ------------------------------------------------------------------------------


class _Facts(NamedTuple):
    """What the policy reads of a line (``policy.LineFacts``), taken from its fields before
    the line is made, so that ``price_all`` makes each line once, judged."""

    provider: str
    region: str | None
    instance_type: str | None
    term: Term
    currency: str
    flags: tuple[str, ...]
    amounts: Amounts | None
    infeasible_reason: str | None
    gpus_per_instance: float
    goodput_basis: str
    price_as_of: str | None
    price_as_of_day: int | None
    price_observed_at: str | None
    price_observed_at_day: int | None


_FACTS = itemgetter(*_Facts._fields)
"""A line's fields that ``_Facts`` holds, from its keyword arguments."""

_Judgement = tuple[tuple[RuleResult, ...], bool | None, bool | None]


def _judgement(line: LineFacts, policy: Policy, options: Options, today: int,
               misfit: str | None) -> _Judgement:
    """(rules, within_budget, meets_deadline) of one line: every rule's outcome
    (``policy.evaluate``), and whether its total is within the budget and its wall clock
    before the deadline (None without one)."""
    a = line.amounts
    rules = evaluate(line, policy, options, today, misfit)
    within = None if options.budget is None else a is not None and a.total <= options.budget
    meets = (None if options.deadline_s is None
             else a is not None and a.wall_clock_s <= options.deadline_s)
    return rules, within, meets


def judge(lines: Sequence[QuoteLine], rejected: Sequence[RejectedOffer], policy: Policy,
          options: Options, today: int, *, gated: bool,
          misfits: Mapping[int, str] | None = None) -> QuoteResult:
    """Judge every line (``misfits``: the node-fit reason of a line priced although it cannot
    host the plan, by index) and assemble the quote (``assemble``). The lines are left as
    they are: the judged lines are copies."""
    misfits = misfits or {}
    judged = []
    for index, line in enumerate(lines):
        rules, within, meets = _judgement(line, policy, options, today, misfits.get(index))
        judged.append(replace(line, rules=rules, within_budget=within, meets_deadline=meets))
    return assemble(judged, rejected, policy, options, gated=gated)


def assemble(judged: Sequence[QuoteLine], rejected: Sequence[RejectedOffer], policy: Policy,
             options: Options, *, gated: bool) -> QuoteResult:
    """Judged lines as a quote: sort by ``total`` (the request's accounting) or, with
    ``RankBy.CO2E``, by CO2e, recommend the line with the best policy outcome and then the
    first in that order, and give the verdict on it."""
    ranks = [OUTCOME_RANK[worst(x.rules)] for x in judged]
    # Sorted by ``sort_key`` (stable: equal keys keep their order), each key made once.
    keys = [x.sort_key() for x in judged]
    order = sorted(range(len(judged)), key=keys.__getitem__)
    judged = [judged[i] for i in order]  # a new list: the caller's is left as it is
    # Feasible lines sort first (``sort_key`` starts with ``amounts is None``).
    feasible = [x for x in judged if x.amounts is not None]
    feasible_ranks = [ranks[i] for i in order[:len(feasible)]]
    cheapest = feasible[0] if feasible else None
    per_term: dict[str, QuoteLine] = {}
    for line in feasible:
        per_term.setdefault(_TERM_VALUES[line.term], line)
    recommended: QuoteLine | None = None
    fastest: QuoteLine | None = None
    if feasible:
        # The best outcome, then the first in ranking order: ``min`` over (outcome rank,
        # ranking key) picks the first of the lines that tie, which in ``sort_key`` order
        # is the first line of the best outcome.
        if options.rank_by is RankBy.CO2E:
            judged.sort(key=QuoteLine.carbon_key)
            recommended = feasible[min(
                range(len(feasible)),
                key=lambda i: (feasible_ranks[i], feasible[i].carbon_key()))]
        else:
            recommended = feasible[feasible_ranks.index(min(feasible_ranks))]
        # The shortest wall-clock, ties to the first in ``sort_key`` order (``min`` over
        # (wall-clock, sort_key) picks the same line).
        walls = [x.amounts.wall_clock_s for x in feasible if x.amounts is not None]
        fastest = feasible[walls.index(min(walls))]
    verdict: Verdict | None = None
    reasons: tuple[RuleResult, ...] = ()
    outcome = Outcome.PASS
    if recommended is None:
        code = "no_offer_fits_plan" if rejected and not judged else "no_feasible_offer"
        message = ("no offer's instance can host the plan (see rejected_offers)"
                   if code == "no_offer_fits_plan" else "no offer can run this workload")
        if code == "no_offer_fits_plan" and all(
                r.code == CURRENCY_NOT_CONVERTED for r in rejected):
            code = "no_offer_in_quote_currency"
            message = (f"no offer is priced in {options.currency}, the quote's currency (see "
                       "rejected_offers)")
        reasons = (RuleResult(rule="feasible", outcome=Outcome.FAIL, code=code,
                              message=message),)
        outcome = Outcome.FAIL
        verdict = Verdict.REJECT if gated else None
    else:
        reasons = tuple(r for r in recommended.rules
                        if r.outcome is not Outcome.PASS or r.rule in ("budget", "deadline"))
        outcome = recommended.outcome
        if gated:
            verdict = Verdict.REJECT if outcome is Outcome.FAIL else Verdict.APPROVE
    return QuoteResult(
        lines=tuple(judged), rejected=tuple(rejected), recommended=recommended,
        cheapest=cheapest, fastest=fastest, cheapest_per_term=per_term,
        verdict=verdict, reasons=reasons, policy=policy, policy_outcome=outcome,
        summary_totals=tuple(x.amounts.total for x in feasible if x.amounts),
    )


def price_all(
    *, jobs: Sequence[SizedJob], offers: Sequence[PriceOffer],
    timings: Mapping[tuple[int, Fabric], JobTiming], onprem: Mapping[str, OnPremInputs],
    options: Options, policy: Policy, today: int, version_id: str, gated: bool,
    unconverted: Sequence[PriceOffer] = (),
) -> QuoteResult:
    """Every offer for every job: offers whose instance cannot host the plan are rejected (or,
    when the policy does not require node fit, priced with a warning); each line is timed on
    its offer's fabric (``timings``, else the job's reference timing). ``unconverted``: offers
    priced in another currency than ``options.currency``, which the quote cannot compare with
    its lines or its budget: each is rejected with ``CURRENCY_NOT_CONVERTED`` (issue 39: they
    used to vanish), never priced, and an unknown amount is never counted as 0."""
    lines: list[QuoteLine] = []
    rejected: list[RejectedOffer] = []
    amounts_seen: dict[_AmountsKey, Amounts] = {}  # this call's own, dropped with it
    for index, job in enumerate(jobs):
        first = len(lines)
        job_fields = line_fields_of_job(job, options, version_id)
        for offer in offers:
            if offer.accelerator != job.accelerator:
                continue
            _, misfit, refusal = _fit(job, offer)
            if refusal is not None and policy.require_node_fit:
                rejected.append(refusal)
                continue
            timing = timings.get((index, offer.fabric), job.timing) if timings else job.timing
            values = _cloud_values(job, timing, offer, options, version_id,
                                   amounts_seen=amounts_seen, job_fields=job_fields)
            # Judged from its fields, then made once (a line is frozen).
            rules, within, meets = _judgement(
                _Facts._make(_FACTS(values)), policy, options, today,
                None if misfit is None else misfit[1])
            lines.append(QuoteLine(**values, rules=rules, within_budget=within,
                                   meets_deadline=meets))
        rejected.extend(_unconverted(job, offer, options.currency) for offer in unconverted
                        if offer.accelerator == job.accelerator)
        if job.accelerator in onprem:
            owned = with_break_even(onprem_line(job, onprem[job.accelerator], options,
                                                version_id), lines[first:], options)
            rules, within, meets = _judgement(owned, policy, options, today, None)
            lines.append(replace(owned, rules=rules, within_budget=within,
                                 meets_deadline=meets))
    return assemble(lines, rejected, policy, options, gated=gated)


CURRENCY_NOT_CONVERTED = "currency_not_converted"
"""The rejection code of an offer priced in another currency than the quote's."""


def _unconverted(job: SizedJob, offer: PriceOffer, currency: str) -> RejectedOffer:
    return RejectedOffer(
        offer_id=offer.offer_id, provider=offer.provider, instance_type=offer.instance_type,
        region=offer.region, term=offer.term, accelerator=offer.accelerator,
        num_gpus=job.num_gpus, code=CURRENCY_NOT_CONVERTED,
        reason=(f"priced in {offer.currency}; the quote prices in {currency} and converts only "
                f"the budget, so this offer is listed, not priced (import the price list in "
                f"{currency} to compare it)"))


HOURS_PER_MONTH = Decimal(HOURS_PER_YEAR) / 12
"""730 hours: a month of continuous use (8,760 h / 12)."""


def with_break_even(owned: QuoteLine, cloud: Sequence[QuoteLine],
                    options: Options) -> QuoteLine:
    """The on-premises line with its buy-versus-rent break-even (issue 17): the months of use
    after which buying the GPUs costs less than renting them on the cheapest feasible
    on-demand line of the same job, at the request's utilisation:

        months = capex / (GPUs x (cloud rate - running rate) x 730 h x utilisation)

    where capex is the purchase with its overhead (``onprem.capex_total``), the running rate
    is the owned GPU-hour's energy and operations (``pricing.onprem_rate`` without its capex
    share) and the cloud rate is the instance-hour price over the GPUs per instance (equal
    rates: the lower offer id). When renting costs no more per GPU-hour than running owned
    GPUs, buying never breaks even."""
    facts = owned.onprem
    if facts is None or owned.amounts is None:
        return owned
    # Like with like (issue 39): only rents in the owned line's currency; every line of a
    # quote is priced in its one pricing currency, so this drops nothing unless a caller
    # mixes currencies.
    rented = [x for x in cloud if x.term is Term.ON_DEMAND and x.amounts is not None
              and x.currency == owned.currency and x.unit_price is not None
              and x.gpus_per_instance > 0]
    if not rented:
        return replace(owned, onprem={**facts, "break_even_months": None,
                                      "break_even_basis": "no feasible on-demand line to "
                                                          "compare with"})

    def per_gpu_hour(line: QuoteLine) -> Decimal:
        assert line.unit_price is not None  # noqa: S101 - filtered above
        return line.unit_price / pricing.exact(line.gpus_per_instance)

    cheapest = min(rented, key=lambda x: (per_gpu_hour(x), x.offer_id or ""))
    rate = per_gpu_hour(cheapest)
    running = (Decimal(str(facts["energy_per_gpu_hour"]))
               + Decimal(str(facts["operations_per_gpu_hour"])))
    capex = Decimal(str(facts["capex_total"]))
    utilisation = options.utilisation_fraction
    saved_per_month = owned.num_gpus * (rate - running) * HOURS_PER_MONTH * utilisation
    against: dict[str, str | int | None] = {
        "break_even_offer_id": cheapest.offer_id, "break_even_provider": cheapest.provider,
        "break_even_region": cheapest.region,
        "break_even_instance_type": cheapest.instance_type,
        "break_even_price_per_gpu_hour": str(rate.quantize(Decimal("0.000001")))}
    if saved_per_month <= 0:
        months = None
        basis = (f"renting at {against['break_even_price_per_gpu_hour']} per GPU-hour costs no "
                 "more than "
                 f"running owned GPUs ({running.quantize(Decimal('0.000001'))}): buying never "
                 "breaks even")
    else:
        months = str((capex / saved_per_month).quantize(Decimal("0.1")))
        basis = (f"capex {capex} {owned.currency} / ({owned.num_gpus} GPUs x "
                 f"({against['break_even_price_per_gpu_hour']} "
                 f"rented - {running.quantize(Decimal('0.000001'))} running) per GPU-hour x "
                 f"730 h x utilisation {utilisation})")
    return replace(owned, onprem={**facts, "break_even_months": months,
                                  "break_even_utilisation_fraction": str(utilisation),
                                  **against, "break_even_basis": basis})
