"""A procurement policy's rules and what they judge a quote line by (docs/policies.md).

Pure, as ``service/core/quote.py`` is: a line's figures, the policy, the request's options
and the day (an ordinal) come in, one ``RuleResult`` per rule comes out. Pricing lives in
``core.quote``, which judges its lines with ``evaluate`` (``quote.judge``); this module reads
a line only through its fields, so it does not import the pricing module.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol

from service.core import capacity, pricing
from service.core.units import SECONDS_PER_DAY

if TYPE_CHECKING:
    from service.core.quote import Amounts, Options, Term


class LineFacts(Protocol):
    """What the rules read of a quote line: a ``quote.QuoteLine``, or the facts ``price_all``
    takes from a line's fields before it makes the line, judged."""

    @property
    def provider(self) -> str: ...
    @property
    def region(self) -> str | None: ...
    @property
    def instance_type(self) -> str | None: ...
    @property
    def term(self) -> Term: ...
    @property
    def currency(self) -> str: ...
    @property
    def flags(self) -> tuple[str, ...]: ...
    @property
    def amounts(self) -> Amounts | None: ...
    @property
    def infeasible_reason(self) -> str | None: ...
    @property
    def gpus_per_instance(self) -> float: ...
    @property
    def goodput_basis(self) -> str: ...
    @property
    def price_as_of(self) -> str | None: ...
    @property
    def price_as_of_day(self) -> int | None: ...
    @property
    def price_observed_at(self) -> str | None: ...
    @property
    def price_observed_at_day(self) -> int | None: ...


class Outcome(StrEnum):
    PASS = "pass"  # noqa: S105 - an outcome, not a password
    WARN = "warn"
    FAIL = "fail"


OUTCOME_RANK = MappingProxyType({Outcome.PASS: 0, Outcome.WARN: 1, Outcome.FAIL: 2})
_PASS, _WARN, _FAIL = Outcome.PASS, Outcome.WARN, Outcome.FAIL
"""The outcomes under module names, for the loops that run per line: reading
``Outcome.FAIL`` goes through the enum's metaclass (about 50 ns on CPython 3.11, against 6
for a global), and a quote of new figures reads them thousands of times (issue 16)."""
SEVERITY = MappingProxyType({Outcome.PASS: "info", Outcome.WARN: "warning", Outcome.FAIL: "error"})


class Accounting(StrEnum):
    """What a line's ``total`` is, and so what the budget judges: the cash committed, or
    the job's amortised share (``Options.accounting``)."""

    COMMITMENT = "commitment"
    AMORTISED = "amortised"


SPOT_CAPACITY_UNVERIFIED_GPUS = 64
"""Above this many GPUs of one spot offer in one zone (eight 8-GPU nodes) nothing public says
the capacity exists: AWS publishes no spot capacity figures and its Spot placement score is an
account-specific query. An assumption, documented in docs/pricing.md; the line is flagged
``spot_capacity_unverified`` and the policy decides."""

QUARANTINE_FLAGS = frozenset({"price_outlier", "spot_above_on_demand", "spot_not_discounted",
                              "reserved_above_on_demand", "on_demand_below_committed",
                              "gpu_memory_mismatch"})
"""Data-quality flags (service/catalog/quality.py) that make a price unfit to approve on.
``on_demand_below_committed`` is the other side of ``reserved_above_on_demand``: the seed's
GCP A3 on-demand rows that carry it are Dynamic Workload Scheduler prices, about half the
list price (docs/catalog.md, "GCP A3 on-demand"), so neither side is approved on by default
(decision 339)."""

RULE_CODES = (
    "within_budget", "commitment_over_budget", "job_cost_over_budget", "amortised_accounting",
    "deadline_met", "deadline_missed", "estimate_uncertain", "commitment_over_policy_limit",
    "job_cost_over_policy_limit", "term_not_allowed", "provider_not_allowed",
    "region_not_allowed", "indicative_price", "derived_price", "quarantined_price",
    "stale_price", "undated_price", "price_date_unknown_observed", "observed_price_stale",
    "fx_rate_stale", "fx_rate_too_old", "duration_over_limit",
    "success_probability_below_minimum", "no_offer_fits_plan", "spot_capacity_unverified",
    "capacity_limit_exceeded", "capacity_block_size_exceeded", "assumed_interruption_rate",
    "estimate_unvalidated", "infeasible", "no_feasible_offer")
"""Every stable ``code`` a verdict's reason or a line's rule can carry (the API's ``RuleOut``
documents this list); a client may switch on them."""

@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """A procurement policy's rules (docs/policies.md). ``None`` switches a limit off."""

    name: str = "default"
    revision: int | None = None
    """None for the built-in default."""
    currency: str = "USD"
    max_commitment: Decimal | None = None
    max_job_cost: Decimal | None = None
    allowed_terms: frozenset[str] | None = None
    allowed_providers: frozenset[str] | None = None
    allowed_regions: frozenset[str] | None = None
    forbid_indicative: bool = True
    forbid_quarantined: bool = True
    max_price_age_s: float | None = 180 * SECONDS_PER_DAY
    max_observed_age_days: float | None = 30
    """A price whose publication date (``as_of``) is unknown but that the catalogue read
    (``observed_at``) at most this many days before the quote's day warns
    (``price_date_unknown_observed``) instead of failing ``undated_price``; read longer ago it
    fails (``observed_price_stale``). None: an undated price fails as before. Applies only
    while ``max_price_age_s`` is set (decision dates-7, docs/policies.md)."""
    fx_rate_warn_age_days: float | None = 7
    """A quote that converts money (a budget not in USD) warns ``fx_rate_stale`` when its ECB
    fixing is more than this many days before the quote's day (rule ``fx_rate_age``; the ECB
    fixes every TARGET business day, so a week covers holidays). None: never warns."""
    fx_rate_fail_age_days: float | None = 35
    """... and fails ``fx_rate_too_old`` past this many days (a month of fixings missed; EUR/USD
    moved up to 5 % within a month in 2022-2025, ECB reference rates). None: never fails. A
    quote that converts nothing is not judged (decision fx-3, docs/policies.md)."""
    max_duration_s: float | None = None
    min_success_probability: float | None = None
    require_node_fit: bool = True
    max_on_demand_gpus_per_region: int | None = capacity.SELF_SERVICE_MAX_GPUS_PER_REGION
    """Most GPUs of one instance type in one region that an on-demand line may count on (rule
    ``max_gpus_per_region_by_term``, code ``capacity_limit_exceeded``); set it to the quota
    the organisation's accounts hold. None: not judged."""
    max_reserved_gpus_per_region: int | None = capacity.SELF_SERVICE_MAX_GPUS_PER_REGION
    """The same for reserved and committed-use lines (``reserved_1y``, ``reserved_3y``)."""
    max_capacity_block_instances: int | None = capacity.CAPACITY_BLOCK_MAX_INSTANCES
    """Most instances a capacity-block line may need (rule ``max_capacity_block_instances``,
    code ``capacity_block_size_exceeded``): AWS sells at most 64 instances a block, placed
    together, and 256 across an account's blocks. None: not judged."""
    forbid_unverified_spot_capacity: bool = True
    forbid_assumed_interruption_rates: bool = False
    forbid_unvalidated_estimates: bool = True
    """A serving line whose estimate the model marks ``outside_validated_range`` (flag
    ``unvalidated_estimate``: a mixture-of-experts model, a length or running batch beyond
    the validated rows, a band that did not hold out of sample) fails rule
    ``forbid_unvalidated_estimates`` (code ``estimate_unvalidated``), so no verdict rests on
    a figure the model says it cannot stand behind (issue 40); False: it warns."""
    warn_only: frozenset[str] = frozenset()
    """Rules whose failure only warns."""


DEFAULT_POLICY = Policy()
"""The server default when a quote names no policy: strict on price quality and capacity, a
price older than 180 days is stale (cloud GPU prices moved by 10-45 % within 2024-2025, see
service/catalog/seed/prices/README.md), an undated price read more than 30 days ago fails
and one read within 30 days warns (``max_observed_age_days``: a price re-checked about
monthly; the seed's SkyPilot rows were read 2026-11-22/24 and carry no publication date),
nothing approves on an indicative price."""

RULES = ("budget", "deadline", "max_commitment", "max_job_cost", "allowed_terms",
         "allowed_providers", "allowed_regions", "forbid_indicative", "forbid_quarantined",
         "max_price_age_s", "max_observed_age_days", "fx_rate_age", "max_duration_s",
         "min_success_probability", "require_node_fit", "max_gpus_per_region_by_term",
         "max_capacity_block_instances", "forbid_unverified_spot_capacity",
         "forbid_assumed_interruption_rates", "forbid_unvalidated_estimates")
"""Every rule a line is judged by, in report order."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RuleResult:
    rule: str
    outcome: Outcome
    code: str
    message: str
    date: str | None = None
    """The price rules (``max_price_age_s``, ``max_observed_age_days``): the ISO date judged
    (the price's ``as_of`` or, when that is unknown, its ``observed_at``); None when both are
    unknown and for every other rule."""
    age_days: int | None = None
    """Days from ``date`` to the quote's day."""
    limit_days: float | None = None
    """The policy's limit that ``age_days`` is judged against, in days."""
    fix: str | None = None
    """What dates the price, for the price rules that warn or fail."""


def worst(rules: Sequence[RuleResult]) -> Outcome:
    """``max`` of the outcomes by ``OUTCOME_RANK`` (``PASS`` for none), by identity: the three
    outcomes are singletons, so the first worst one is the worst one."""
    worst = _PASS
    for rule in rules:
        outcome = rule.outcome
        if outcome is _FAIL:
            return outcome
        if outcome is _WARN:
            worst = outcome
    return worst


# --- policy --------------------------------------------------------------------------------


def _money(amount: Decimal, currency: str) -> str:
    return f"{pricing.cents(amount):,} {currency}"


def _days(seconds: float) -> str:
    return f"{seconds / SECONDS_PER_DAY:,.1f} days"


def _where(line: LineFacts) -> str:
    parts = [line.provider, line.region or "", line.instance_type or "", line.term.value]
    return " ".join(p for p in parts if p)


def _rule(policy: Policy, rule: str, ok: bool, code: str, message: str, *,
          soft: bool = False) -> RuleResult:
    """A passed rule, or a violated one that fails, or warns when ``soft`` or when the policy
    lists it in ``warn_only``."""
    if ok:
        outcome = _PASS
    elif soft or rule in policy.warn_only:
        outcome = _WARN
    else:
        outcome = _FAIL
    return RuleResult(rule=rule, outcome=outcome, code=code, message=message)


def evaluate(line: LineFacts, policy: Policy, options: Options, today: int,
             node_fit_reason: str | None = None) -> tuple[RuleResult, ...]:
    """Every rule's outcome for one line, in ``RULES`` order. A rule that does not apply
    passes silently (it is not reported); a violated rule fails, or warns when the policy lists
    it in ``warn_only`` (the built-in warnings: amortised accounting, assumed interruption
    rates, a wide band). The rules on the line's money and time (``_money_rules``) come around
    those on the offer, the policy and the day (``_fixed_rules``)."""
    a = line.amounts
    if a is None:
        return (RuleResult(rule="feasible", outcome=Outcome.FAIL, code="infeasible",
                           message=f"{_where(line)}: {line.infeasible_reason}"),)
    where, first, last = _fixed_rules(line, policy, today, a.instances, node_fit_reason)
    head, tail = _money_rules(a, where, line.currency, policy, options)
    if options.fx_fixing_day is not None:
        aged = _fx_rule(policy, options, today, where)
        if aged is not None:
            first = (*first, aged)
    return head + first + tail + last


FX_FIX = ("import the ECB's latest reference rates: POST the CSV of "
          "https://www.ecb.europa.eu/stats/eurofxref/eurofxref-hist.zip (or eurofxref.zip) to "
          "/v1/fx-rates/imports with Content-Type: text/csv (scope catalog:write), then quote "
          "again")
"""How to refresh the FX table (service/api/routes/fx.py); the seed's latest fixing is
2025-05-09, so a fresh install needs this before a budget in another currency approves."""


def _fx_rule(policy: Policy, options: Options, today: int, where: str) -> RuleResult | None:
    """``fx_rate_age``: the age of the quote's one ECB fixing (``options.fx_fixing_day``)
    against the quote's day: over ``fx_rate_warn_age_days`` it warns, over
    ``fx_rate_fail_age_days`` it fails; None within both (or both off)."""
    assert options.fx_fixing_day is not None  # noqa: S101 - the caller checks
    age = today - options.fx_fixing_day
    warn, fail = policy.fx_rate_warn_age_days, policy.fx_rate_fail_age_days
    limits = (f"the policy warns after {'never' if warn is None else f'{warn:,g} days'} and "
              f"fails after {'never' if fail is None else f'{fail:,g} days'} "
              "(fx_rate_warn_age_days, fx_rate_fail_age_days)")
    head = (f"{where}: the money is converted at the ECB fixing of {options.fx_fixing_date}, "
            f"{age:,} days before the quote's day; {limits}; {FX_FIX}")
    if fail is not None and age > fail:
        result = _rule(policy, "fx_rate_age", False, "fx_rate_too_old", head)
        limit = fail
    elif warn is not None and age > warn:
        result = _rule(policy, "fx_rate_age", False, "fx_rate_stale", head, soft=True)
        limit = warn
    else:
        return None
    return replace(result, date=options.fx_fixing_date, age_days=age,
                   limit_days=float(limit), fix=FX_FIX)


def _money_rules(a: Amounts, where: str, cur: str, policy: Policy, options: Options,
                 ) -> tuple[tuple[RuleResult, ...], tuple[RuleResult, ...]]:
    """The rules that read a feasible line's amounts: (budget, deadline, max_commitment,
    max_job_cost) and (max_duration_s, min_success_probability), ``cur`` being the line's
    currency."""
    results: list[RuleResult] = []
    append = results.append
    amortised = options.accounting is Accounting.AMORTISED
    if amortised:
        append(RuleResult(
            rule="budget", outcome=Outcome.WARN, code="amortised_accounting",
            message=f"{where}: judged on the job's amortised share {_money(a.total, cur)} at "
                    f"{options.utilisation_fraction} utilisation of reserved or owned "
                    f"capacity, not on the {_money(a.commitment_total, cur)} committed"))
    if options.budget is not None:
        label = "amortised cost" if amortised else "commitment"
        code = "job_cost_over_budget" if amortised else "commitment_over_budget"
        over = a.total - options.budget
        stated = _money(options.budget, cur) + (
            f" ({options.budget_basis})" if options.budget_basis else "")
        append(_rule(
            policy, "budget", over <= 0, code if over > 0 else "within_budget",
            f"{where}: {label} {_money(a.total, cur)} "
            + (f"exceeds the budget of {stated} by {_money(over, cur)}"
               if over > 0 else f"is within the budget of {stated}")))
        high = a.commitment_band.p90 if not amortised else a.job_cost_band.p90
        if over <= 0 and isinstance(high, Decimal) and high > options.budget:
            append(_rule(
                policy, "budget", False, "estimate_uncertain",
                f"{where}: at the slow end of the estimate's 80 % band the {label} is "
                f"{_money(high, cur)}, over the budget", soft=True))
    if options.deadline_s is not None:
        meets = a.wall_clock_s <= options.deadline_s
        append(_rule(
            policy, "deadline", meets, "deadline_met" if meets else "deadline_missed",
            f"{where}: {_days(a.wall_clock_s)} {'meets' if meets else 'misses'} the deadline "
            f"of {_days(options.deadline_s)}"))
        p = a.deadline_probability
        if meets and p is not None and float(a.wall_clock_band_s.p90) > options.deadline_s:
            append(_rule(
                policy, "deadline", False, "estimate_uncertain",
                f"{where}: {p:.0%} likely to finish before the deadline (slow end of the "
                f"band: {_days(float(a.wall_clock_band_s.p90))})", soft=True))
    mismatch = policy.currency != cur
    if policy.max_commitment is not None:
        append(_rule(
            policy, "max_commitment",
            not mismatch and a.commitment_total <= policy.max_commitment,
            "commitment_over_policy_limit",
            f"{where}: commitment {_money(a.commitment_total, cur)} against the policy's "
            f"limit of {_money(policy.max_commitment, policy.currency)}"))
    if policy.max_job_cost is not None:
        append(_rule(
            policy, "max_job_cost", not mismatch and a.job_cost_total <= policy.max_job_cost,
            "job_cost_over_policy_limit",
            f"{where}: job cost {_money(a.job_cost_total, cur)} against the policy's limit of "
            f"{_money(policy.max_job_cost, policy.currency)}"))
    head = tuple(results)
    results.clear()
    if policy.max_duration_s is not None:
        append(_rule(
            policy, "max_duration_s", a.wall_clock_s <= policy.max_duration_s,
            "duration_over_limit",
            f"{where}: {_days(a.wall_clock_s)} against the policy's limit of "
            f"{_days(policy.max_duration_s)}"))
    if policy.min_success_probability is not None and a.deadline_probability is not None:
        ok = a.deadline_probability >= policy.min_success_probability
        append(_rule(
            policy, "min_success_probability", ok, "success_probability_below_minimum",
            f"{where}: {a.deadline_probability:.1%} likely to meet the deadline; the policy "
            f"needs {policy.min_success_probability:.0%}"))
    return head, tuple(results)


REFRESH_COMMANDS = MappingProxyType({
    "aws": ("cq catalog refresh --provider aws --from-file index.json", "the region's AWS "
            "offer file"),
    "azure": ("cq catalog refresh --provider azure", "the Azure Retail Prices API"),
    "gcp": ("cq catalog refresh --provider gcp --from-file skus.json", "the Cloud Billing "
            "Catalog's Compute Engine SKUs"),
})
"""How ``cq catalog refresh`` reads each provider's own price list (service/cli/catalog.py,
docs/catalog.md); another provider is refreshed from SkyPilot's catalogue."""


def _fix(line: LineFacts) -> str:
    """How to date a line's price: a refresh from the provider's price list, or an import of
    a dated one (``POST /v1/catalog/refreshes`` and ``/v1/catalog/imports``)."""
    command, source = REFRESH_COMMANDS.get(line.provider, (
        f"cq catalog refresh --provider {line.provider} --format skypilot",
        "SkyPilot's catalogue"))
    return (f"to date it, run `{command}` ({source}) or `cq catalog import` a price list "
            "that states as_of")


def _date_rule(line: LineFacts, policy: Policy, max_age_s: float, today: int,
               where: str) -> RuleResult | None:
    """The price-date rules, on the price's publication date when it has one (``as_of``,
    ``max_price_age_s``), else on the day the catalogue read it (``observed_at``,
    ``max_observed_age_days``): a recent reading warns, an old one fails, and a price with
    neither date fails. None when the price is within its limit (on-prem lines have no
    date and are not judged: their price is the request's or the hardware catalogue's)."""
    limit_days = max_age_s / SECONDS_PER_DAY
    if "undated_price" not in line.flags:
        if line.price_as_of_day is None:
            return None
        age = today - line.price_as_of_day
        if age * SECONDS_PER_DAY <= max_age_s:
            return None
        result = _rule(
            policy, "max_price_age_s", False, "stale_price",
            f"{where}: the price is dated {line.price_as_of}, {age:,} days old; the policy "
            f"allows {limit_days:,.1f} days (max_price_age_s); {_fix(line)}")
        return replace(result, date=line.price_as_of, age_days=age, limit_days=limit_days,
                       fix=_fix(line))
    observed_limit = policy.max_observed_age_days
    if observed_limit is None or line.price_observed_at_day is None:
        read = ("" if observed_limit is None
                else " and the day it was read was not recorded")
        result = _rule(
            policy, "max_price_age_s", False, "undated_price",
            f"{where}: the price's source gives no date{read}, so it cannot be shown to be "
            f"within the policy's {limit_days:,.1f} days (max_price_age_s); {_fix(line)}")
        return replace(result, limit_days=limit_days, fix=_fix(line))
    age = today - line.price_observed_at_day
    read = (f"{where}: the provider's date for the price is unknown; it was read on "
            f"{line.price_observed_at}, {age:,} days ago")
    if age <= observed_limit:
        result = _rule(
            policy, "max_observed_age_days", False, "price_date_unknown_observed",
            f"{read}, within the policy's {observed_limit:,g} days for an undated price "
            f"(max_observed_age_days); {_fix(line)}", soft=True)
    else:
        result = _rule(
            policy, "max_observed_age_days", False, "observed_price_stale",
            f"{read}; the policy allows {observed_limit:,g} days for an undated price "
            f"(max_observed_age_days); {_fix(line)}")
    return replace(result, date=line.price_observed_at, age_days=age,
                   limit_days=float(observed_limit), fix=_fix(line))


def _fixed_rules(line: LineFacts, policy: Policy, today: int, instances: int,
                 node_fit_reason: str | None,
                 ) -> tuple[str, tuple[RuleResult, ...], tuple[RuleResult, ...]]:
    """The rules that read no money or time of a feasible line, only its offer, the policy,
    the day and the line's instance count: (where, (allowed_terms ... max_price_age_s),
    (require_node_fit, the capacity rules, forbid_unverified_spot_capacity,
    forbid_assumed_interruption_rates))."""
    results: list[RuleResult] = []
    append = results.append
    where = _where(line)
    if policy.allowed_terms is not None:
        append(_rule(
            policy, "allowed_terms", line.term.value in policy.allowed_terms,
            "term_not_allowed",
            f"{where}: term {line.term.value} is "
            f"{'' if line.term.value in policy.allowed_terms else 'not '}allowed by the policy"))
    if policy.allowed_providers is not None:
        ok = line.provider in policy.allowed_providers
        append(_rule(
            policy, "allowed_providers", ok, "provider_not_allowed",
            f"{where}: provider {line.provider} is {'' if ok else 'not '}allowed by the "
            "policy"))
    if policy.allowed_regions is not None and line.region is not None:
        ok = line.region in policy.allowed_regions
        append(_rule(
            policy, "allowed_regions", ok, "region_not_allowed",
            f"{where}: region {line.region} is {'' if ok else 'not '}allowed by the policy"))
    if "indicative_price" in line.flags or "derived_price" in line.flags:
        kind = ("a derived (synthetic) price" if "derived_price" in line.flags
                else "an indicative price")
        append(_rule(
            policy, "forbid_indicative", False,
            "derived_price" if "derived_price" in line.flags else "indicative_price",
            f"{where}: rests on {kind}, not a seller's firm figure",
            soft=not policy.forbid_indicative))
    quarantined = sorted(QUARANTINE_FLAGS.intersection(line.flags))
    if quarantined:
        append(_rule(
            policy, "forbid_quarantined", False, "quarantined_price",
            f"{where}: the price is quarantined by data-quality checks "
            f"({', '.join(quarantined)})", soft=not policy.forbid_quarantined))
    if policy.max_price_age_s is not None:
        dated = _date_rule(line, policy, policy.max_price_age_s, today, where)
        if dated is not None:
            append(dated)
    first = tuple(results)
    results.clear()
    if node_fit_reason is not None:
        append(_rule(
            policy, "require_node_fit", False, "no_offer_fits_plan",
            f"{where}: priced although it cannot host the plan ({node_fit_reason})",
            soft=not policy.require_node_fit))
    limited = _capacity_rule(line, policy, instances, where)
    if limited is not None:
        append(limited)
    if "spot_capacity_unverified" in line.flags:
        append(_rule(
            policy, "forbid_unverified_spot_capacity", False, "spot_capacity_unverified",
            f"{where}: {instances * line.gpus_per_instance:g} spot GPUs in one zone; nothing "
            f"public shows that capacity (more than {SPOT_CAPACITY_UNVERIFIED_GPUS})",
            soft=not policy.forbid_unverified_spot_capacity))
    if "assumed_interruption_rate" in line.flags:
        append(_rule(
            policy, "forbid_assumed_interruption_rates", False, "assumed_interruption_rate",
            f"{where}: the spot interruption rate is an assumption ({line.goodput_basis})",
            soft=not policy.forbid_assumed_interruption_rates))
    if "unvalidated_estimate" in line.flags:
        append(unvalidated_estimate_rule(policy, where))
    return where, first, tuple(results)


def unvalidated_estimate_rule(policy: Policy, where: str) -> RuleResult:
    """Rule ``forbid_unvalidated_estimates`` (code ``estimate_unvalidated``) for a serving
    fleet sized on an estimate that carries ``outside_validated_range`` (issue 40): it fails,
    or warns when the policy sets the rule false or lists it in ``warn_only``. A quote line
    (flag ``unvalidated_estimate``) and a portfolio's fleet are judged by this one rule."""
    return _rule(
        policy, "forbid_unvalidated_estimates", False, "estimate_unvalidated",
        f"{where}: the serving estimate this fleet is sized on is outside what the "
        "model's published rows validate (its warning_details, code "
        "outside_validated_range); no verdict rests on it unless the policy sets "
        "forbid_unvalidated_estimates false or lists it in warn_only",
        soft=not policy.forbid_unvalidated_estimates)


_REGION_LIMITS = MappingProxyType({
    "on_demand": "max_on_demand_gpus_per_region", "reserved_1y": "max_reserved_gpus_per_region",
    "reserved_3y": "max_reserved_gpus_per_region"})
"""The policy field that limits each term's GPUs in one region (rule
``max_gpus_per_region_by_term``); spot is judged per zone (``forbid_unverified_spot_capacity``)
and capacity blocks by their instances (``max_capacity_block_instances``)."""


def _capacity_rule(line: LineFacts, policy: Policy, instances: int,
                   where: str) -> RuleResult | None:
    """The term's capacity limit on a cloud line (``service/core/capacity.py``): a capacity
    block of more instances than ``max_capacity_block_instances`` fails
    ``capacity_block_size_exceeded``; an on-demand or reserved line of more GPUs of one
    instance type in one region than the term's ``max_*_gpus_per_region`` fails
    ``capacity_limit_exceeded``. Each reason names the limit, its policy field, the source of
    the built-in figure, where the provider publishes its quotas, and the fix. None within
    the limit, for on-prem lines and for terms without one."""
    if line.provider == "onprem" or line.region is None:
        return None
    term = line.term.value
    gpus = instances * line.gpus_per_instance
    if term == "capacity_block":
        limit = policy.max_capacity_block_instances
        if limit is None or instances <= limit:
            return None
        fix = ("split the job into jobs of at most "
               f"{capacity.CAPACITY_BLOCK_MAX_INSTANCES} instances, quote another term, or "
               "set max_capacity_block_instances in the policy when several blocks (at most "
               f"{capacity.CAPACITY_BLOCK_MAX_INSTANCES_PER_ACCOUNT} instances across an "
               "account's blocks) placed apart will do")
        message = (
            f"{where}: {instances:,} instances ({gpus:,g} GPUs) in capacity blocks; the policy "
            f"allows {limit:,} (max_capacity_block_instances); AWS sells at most "
            f"{capacity.CAPACITY_BLOCK_MAX_INSTANCES} instances a block, placed together in one "
            f"UltraCluster, and {capacity.CAPACITY_BLOCK_MAX_INSTANCES_PER_ACCOUNT} across an "
            "account's blocks (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/"
            f"capacity-blocks-purchase.html); {fix}")
        result = _rule(policy, "max_capacity_block_instances", False,
                       "capacity_block_size_exceeded", message)
        return replace(result, fix=fix)
    name = _REGION_LIMITS.get(term)
    if name is None:
        return None
    limit = getattr(policy, name)
    if limit is None or gpus <= limit:
        return None
    fix = (f"set {name} in the policy to the quota your account holds in {line.region} "
           "(and ask the provider for it), split the job across regions, or reserve the "
           "capacity under an agreement")
    message = (
        f"{where}: {gpus:,g} GPUs ({instances:,} instances) of one instance type in one "
        f"region on {term}; the policy allows {limit:,} ({name}, rule "
        f"max_gpus_per_region_by_term; {capacity.LIMIT_SOURCE}); "
        f"{capacity.quota_source(line.provider)}; {fix}")
    result = _rule(policy, "max_gpus_per_region_by_term", False, "capacity_limit_exceeded",
                   message)
    return replace(result, fix=fix)
