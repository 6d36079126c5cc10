"""A commitment portfolio as a mixed-integer programme (issue 44; docs/portfolio.md).

Pure: plain frozen dataclasses in (pools of one instance type in one region, their priced
terms, jobs resolved to instances and billed hours per pool the way a quote resolves them,
serving fleets resolved to replicas per month), numpy arrays out (``formulate``: c, a sparse
A as COO triplets, row bounds, variable bounds, integrality), and a solution vector decoded
back into decisions (``decode``) and priced again in ``Decimal`` (``price_decisions``). The
solver call itself (HiGHS through ``scipy.optimize.milp``) lives outside the core, in
``service/api/portfolio_solver.py``: scipy is no dependency of the core.

Time is in whole months of ``HOURS_PER_MONTH`` (730 h = 8,760 h / 12) each. Within a month
the instance-hours of one pool are fungible: jobs that share a pool in a month share its
committed instances (a monthly bucket, the granularity procurement plans in).

Variables, in column order:
- ``y[c]``: integer count of commitments ``c`` = (a committed offer: reserved_1y, reserved_3y or
  capacity_block, a start month); a commitment holds one instance for ``TERM_MONTHS`` months;
- ``x[a]``: binary placement ``a`` = (job, option: pool and mode base or spot, start month);
- ``n[b]``: integer instances ``b`` = (fleet, option, month) of a serving fleet;
- ``z[p, m]``: continuous on-demand instance-hours of pool ``p`` in month ``m``;
- ``e[j, p]``: continuous instance-hours of job ``j`` on pool ``p`` beyond what the pool's
  commitments can hold in the months it runs (``tighten`` only: docs/portfolio.md
  "Tightening", 5).

Money: float inside the programme (USD per instance-hour from the offers' ``Decimal`` rates);
every figure a plan reports is priced again from the decoded integers in ``Decimal``
(``price_decisions``), so a plan's cents never depend on the solver's floating point.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import ROUND_CEILING, ROUND_HALF_EVEN, Decimal
from enum import StrEnum
from types import MappingProxyType

import numpy as np
from numpy.typing import NDArray

from service.core.errors import InvalidSpecError
from service.core.units import HOURS_PER_YEAR

HOURS_PER_MONTH = Decimal(HOURS_PER_YEAR) / 12
"""730 hours: one month of continuous use (8,760 h / 12), as ``core.quote.HOURS_PER_MONTH``."""
HOURS_PER_MONTH_FLOAT = float(HOURS_PER_MONTH)
CENT = Decimal("0.01")

TERM_MONTHS = MappingProxyType({"reserved_1y": 12, "reserved_3y": 36, "capacity_block": 1})
"""Months one commitment of each committed term holds an instance: a 1- or 3-year
reservation or committed-use discount (AWS, Azure and Google Cloud sell 1 and 3 years), and a
capacity block bought a month at a time (AWS sells blocks of 1-14 days, then 7-day steps up to
182 days: ``core.quote.CAPACITY_BLOCK_MAX_DAYS``; a month of 730 h is this service's bucket,
an approximation of a 28- or 35-day block)."""
COMMITTED_TERMS = frozenset(TERM_MONTHS)
FLEXIBLE_TERMS = frozenset({"on_demand", "spot"})
PORTFOLIO_TERMS = tuple(sorted(COMMITTED_TERMS | FLEXIBLE_TERMS))


class Accounting(StrEnum):
    """What the objective and the budget count: ``commitment`` (default) every cent signed
    for, beyond the horizon included; ``amortised`` each commitment's monthly share inside the
    horizon only (what is committed beyond it is reported apart)."""

    COMMITMENT = "commitment"
    AMORTISED = "amortised"


@dataclass(frozen=True, slots=True, kw_only=True)
class Pool:
    """One instance type in one region (and zone, for zonal spot offers) of one provider."""

    pool_id: str
    provider: str
    region: str
    zone: str | None
    instance_type: str
    accelerator: str
    gpus_per_instance: float


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolOffer:
    """A priced term on a pool: the catalogue offer, its effective rate and how it is paid."""

    offer_id: str
    pool: int
    """Index into ``Problem.pools``."""
    term: str
    rate_usd_per_instance_hour: Decimal
    upfront: bool = False
    """Paid in full in the commitment's first month (``all_upfront``); else monthly."""

    def __post_init__(self) -> None:
        if self.term not in PORTFOLIO_TERMS:
            raise InvalidSpecError(f"unknown term {self.term!r}", field="terms")
        if self.rate_usd_per_instance_hour < 0:
            raise InvalidSpecError("a rate is never negative", field="offers")


@dataclass(frozen=True, slots=True, kw_only=True)
class JobOption:
    """A job on one pool: ``instances`` for ``billed_hours`` each (goodput loss included, as
    the quote's line on that offer bills them); ``spot`` runs it on the pool's spot offer."""

    pool: int
    spot: bool
    instances: int
    billed_hours: Decimal
    spot_offer: int | None = None
    """Index into ``Problem.offers`` of the spot offer (spot options only)."""

    def months(self) -> int:
        return int((self.billed_hours / HOURS_PER_MONTH).to_integral_value(ROUND_CEILING)) or 1

    def hours_in(self, k: int) -> Decimal:
        """Billed hours per instance in the ``k``-th month of the run (0-based)."""
        left = self.billed_hours - HOURS_PER_MONTH * k
        return max(Decimal(0), min(HOURS_PER_MONTH, left))


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    job_id: str
    earliest_month: int
    deadline_month: int
    """The last month the job may run in (inclusive)."""
    must_run: bool
    options: tuple[JobOption, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetOption:
    """A serving fleet on one pool: ``replicas_per_instance`` of the fleet's deployment per
    instance (below 1 when a replica spans instances); on spot divided by 1 + the interrupted
    fraction (``core.quote.interruption_fraction``: spare replicas for instances restarting)."""

    pool: int
    spot: bool
    replicas_per_instance: float
    spot_offer: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Fleet:
    fleet_id: str
    replicas_per_month: tuple[int, ...]
    """Replicas the serving estimate sizes for each month's requests per second."""
    options: tuple[FleetOption, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """The policy's capacity limits (``core.capacity``; ``None``: not limited), per pool."""

    max_on_demand_gpus_per_region: int | None = None
    max_reserved_gpus_per_region: int | None = None
    max_capacity_block_instances: int | None = None
    max_spot_gpus_per_zone: int | None = None
    """``policy.SPOT_CAPACITY_UNVERIFIED_GPUS`` when the policy forbids unverified spot."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetPeriod:
    label: str
    months: tuple[int, ...]
    includes_beyond: bool = False
    """The whole-horizon period under commitment accounting also counts what is committed
    beyond the horizon (the budget is then the commitment's)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Budget:
    amount_usd: Decimal
    periods: tuple[BudgetPeriod, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Problem:
    months: int
    pools: tuple[Pool, ...]
    offers: tuple[PoolOffer, ...]
    jobs: tuple[Job, ...]
    fleets: tuple[Fleet, ...] = ()
    limits: Limits = field(default_factory=Limits)
    budget: Budget | None = None
    accounting: Accounting = Accounting.COMMITMENT
    only_terms: frozenset[str] | None = None
    """Restrict the commitments to these terms (a baseline's restriction); None: all."""
    options_dropped: int = 0
    """Candidate options ``restrict`` left out."""

    def __post_init__(self) -> None:
        if self.months < 1:
            raise InvalidSpecError("a horizon has at least one month", field="horizon.months")
        for job in self.jobs:
            if job.deadline_month < job.earliest_month:
                raise InvalidSpecError(f"job {job.job_id}: deadline before earliest_start",
                                       field="jobs.deadline")
        for fleet in self.fleets:
            if len(fleet.replicas_per_month) != self.months:
                raise InvalidSpecError(
                    f"fleet {fleet.fleet_id}: {len(fleet.replicas_per_month)} months of "
                    f"demand for a {self.months}-month horizon",
                    field="fleets.monthly_requests_per_s")


# --- decisions and their price --------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Decisions:
    """What a solution decides: every other figure follows from these integers."""

    commitments: Mapping[tuple[int, int], int]
    """(offer index, start month) -> count."""
    placements: Mapping[int, tuple[int, int]]
    """job index -> (option index, start month); a job absent is not run."""
    fleet_instances: Mapping[tuple[int, int, int], int]
    """(fleet index, option index, month) -> instances."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Charge:
    """One priced line of a plan: what it buys, and its cash and amortised cost per month."""

    kind: str
    """``commitment``, ``on_demand``, ``spot_job`` or ``spot_fleet``."""
    offer: int
    start_month: int
    count: int
    """Instances (commitments, spot fleets) or instances of the job (spot jobs)."""
    hours: Decimal
    """Instance-hours bought (on-demand, spot) or held (commitments, term included)."""
    billed_usd: tuple[Decimal, ...]
    """Cash paid in each month of the horizon (up-front fees in the month paid)."""
    effective_usd: tuple[Decimal, ...]
    """Amortised cost in each month of the horizon."""
    billed_beyond_usd: Decimal
    effective_beyond_usd: Decimal
    job: int | None = None
    fleet: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Priced:
    charges: tuple[Charge, ...]
    billed_usd: tuple[Decimal, ...]
    effective_usd: tuple[Decimal, ...]
    billed_beyond_usd: Decimal
    effective_beyond_usd: Decimal
    objective_usd: Decimal
    """What the programme minimises under the problem's accounting, in Decimal."""
    on_demand_hours: Mapping[tuple[int, int], Decimal]
    committed_instances: Mapping[tuple[int, int], int]
    """(pool, month) -> committed instances active."""
    base_demand_hours: Mapping[tuple[int, int], Decimal]
    within_limits: bool
    limit_breaches: tuple[str, ...]

    @property
    def total_billed_usd(self) -> Decimal:
        return sum(self.billed_usd, Decimal(0))

    @property
    def total_commitment_usd(self) -> Decimal:
        return self.total_billed_usd + self.billed_beyond_usd


def _cents(amount: Decimal) -> Decimal:
    return amount.quantize(CENT, rounding=ROUND_HALF_EVEN)


def _spread(amount_per_month: Decimal, months: range, horizon: int,
            ) -> tuple[tuple[Decimal, ...], Decimal]:
    """(per month inside the horizon, beyond it) of ``amount_per_month`` over ``months``."""
    inside = [Decimal(0)] * horizon
    beyond = Decimal(0)
    for m in months:
        if m < horizon:
            inside[m] += amount_per_month
        else:
            beyond += amount_per_month
    return tuple(inside), beyond


def _commitment_charge(problem: Problem, offer_index: int, start: int, count: int) -> Charge:
    offer = problem.offers[offer_index]
    length = TERM_MONTHS[offer.term]
    monthly = _cents(count * offer.rate_usd_per_instance_hour * HOURS_PER_MONTH)
    held = range(start, start + length)
    effective, effective_beyond = _spread(monthly, held, problem.months)
    if offer.upfront:
        billed = [Decimal(0)] * problem.months
        billed[start] = monthly * length
        billed_t, billed_beyond = tuple(billed), Decimal(0)
    else:
        billed_t, billed_beyond = effective, effective_beyond
    return Charge(kind="commitment", offer=offer_index, start_month=start, count=count,
                  hours=count * HOURS_PER_MONTH * length, billed_usd=billed_t,
                  effective_usd=effective, billed_beyond_usd=billed_beyond,
                  effective_beyond_usd=effective_beyond)


def _flat_charge(problem: Problem, kind: str, offer_index: int, start: int, count: int,
                 hours_by_month: Mapping[int, Decimal], job: int | None = None,
                 fleet: int | None = None) -> Charge:
    rate = problem.offers[offer_index].rate_usd_per_instance_hour
    cash = [Decimal(0)] * problem.months
    for m, hours in hours_by_month.items():
        cash[m] += _cents(hours * rate)
    t = tuple(cash)
    return Charge(kind=kind, offer=offer_index, start_month=start, count=count,
                  hours=sum(hours_by_month.values(), Decimal(0)), billed_usd=t,
                  effective_usd=t, billed_beyond_usd=Decimal(0),
                  effective_beyond_usd=Decimal(0), job=job, fleet=fleet)


def on_demand_offers(problem: Problem) -> dict[int, int]:
    """pool -> its on-demand offer (the cheapest, then the lowest index)."""
    found: dict[int, int] = {}
    for i, offer in enumerate(problem.offers):
        if offer.term != "on_demand":
            continue
        j = found.get(offer.pool)
        if j is None or (offer.rate_usd_per_instance_hour
                         < problem.offers[j].rate_usd_per_instance_hour):
            found[offer.pool] = i
    return found


def committed_offers(problem: Problem) -> list[int]:
    return [i for i, o in enumerate(problem.offers) if o.term in COMMITTED_TERMS
            and (problem.only_terms is None or o.term in problem.only_terms)]


def price_decisions(problem: Problem, decisions: Decisions) -> Priced:
    """Every charge of ``decisions`` in ``Decimal``, rounded half-even to the cent per charge
    and month: commitments as bought, spot as the placed jobs and fleets bill it, and the
    on-demand instance-hours that fill each pool's base demand above its committed hours."""
    months = problem.months
    charges: list[Charge] = []
    committed: dict[tuple[int, int], int] = {}
    for (o, start), count in sorted(decisions.commitments.items()):
        if count <= 0:
            continue
        charges.append(_commitment_charge(problem, o, start, count))
        pool = problem.offers[o].pool
        for m in range(start, min(months, start + TERM_MONTHS[problem.offers[o].term])):
            committed[(pool, m)] = committed.get((pool, m), 0) + count
    demand: dict[tuple[int, int], Decimal] = {}
    spot_gpus: dict[tuple[int, int], float] = {}
    for j, (i, start) in sorted(decisions.placements.items()):
        option = problem.jobs[j].options[i]
        hours = {start + k: option.instances * option.hours_in(k)
                 for k in range(option.months())}
        if option.spot:
            assert option.spot_offer is not None  # noqa: S101 - spot options carry one
            charges.append(_flat_charge(problem, "spot_job", option.spot_offer, start,
                                        option.instances, hours, job=j))
            gpus = option.instances * problem.pools[option.pool].gpus_per_instance
            for m in hours:
                spot_gpus[(option.pool, m)] = spot_gpus.get((option.pool, m), 0.0) + gpus
        else:
            for m, h in hours.items():
                demand[(option.pool, m)] = demand.get((option.pool, m), Decimal(0)) + h
    for (f, i, m), count in sorted(decisions.fleet_instances.items()):
        if count <= 0:
            continue
        held = problem.fleets[f].options[i]
        hours_m = count * HOURS_PER_MONTH
        if held.spot:
            assert held.spot_offer is not None  # noqa: S101 - spot options carry one
            charges.append(_flat_charge(problem, "spot_fleet", held.spot_offer, m, count,
                                        {m: hours_m}, fleet=f))
            gpus = count * problem.pools[held.pool].gpus_per_instance
            spot_gpus[(held.pool, m)] = spot_gpus.get((held.pool, m), 0.0) + gpus
        else:
            demand[(held.pool, m)] = demand.get((held.pool, m), Decimal(0)) + hours_m
    od = on_demand_offers(problem)
    on_demand: dict[tuple[int, int], Decimal] = {}
    breaches: list[str] = []
    for (pool, m), wanted in sorted(demand.items()):
        need = wanted - committed.get((pool, m), 0) * HOURS_PER_MONTH
        if need <= 0:
            continue
        on_demand[(pool, m)] = need
        if pool not in od:
            breaches.append(f"{problem.pools[pool].pool_id} month {m}: {need} instance-hours "
                            "beyond its commitments and no on-demand offer")
    by_pool: dict[int, dict[int, Decimal]] = {}
    for (pool, m), need in on_demand.items():
        by_pool.setdefault(pool, {})[m] = need
    for pool, hours_by_month in sorted(by_pool.items()):
        if pool in od:
            charges.append(_flat_charge(problem, "on_demand", od[pool],
                                        min(hours_by_month), 0, hours_by_month))
    breaches.extend(_limit_breaches(problem, committed, on_demand, spot_gpus, decisions))
    billed = tuple(sum((c.billed_usd[m] for c in charges), Decimal(0)) for m in range(months))
    effective = tuple(sum((c.effective_usd[m] for c in charges), Decimal(0))
                      for m in range(months))
    billed_beyond = sum((c.billed_beyond_usd for c in charges), Decimal(0))
    effective_beyond = sum((c.effective_beyond_usd for c in charges), Decimal(0))
    objective = (sum(effective, Decimal(0)) if problem.accounting is Accounting.AMORTISED
                 else sum(billed, Decimal(0)) + billed_beyond)
    return Priced(charges=tuple(charges), billed_usd=billed, effective_usd=effective,
                  billed_beyond_usd=billed_beyond, effective_beyond_usd=effective_beyond,
                  objective_usd=objective, on_demand_hours=on_demand,
                  committed_instances=committed, base_demand_hours=demand,
                  within_limits=not breaches, limit_breaches=tuple(breaches))


def budget_spent(problem: Problem, priced: Priced) -> list[tuple[BudgetPeriod, Decimal]]:
    """What each budget period spends of ``priced``: billed cash in its months (under
    amortised accounting the effective cost), plus what is committed beyond the horizon for
    the whole-horizon period under commitment accounting."""
    if problem.budget is None:
        return []
    series = (priced.effective_usd if problem.accounting is Accounting.AMORTISED
              else priced.billed_usd)
    out = []
    for period in problem.budget.periods:
        spent = sum((series[m] for m in period.months), Decimal(0))
        if period.includes_beyond:
            spent += priced.billed_beyond_usd
        out.append((period, spent))
    return out


def budget_breaches(problem: Problem, priced: Priced) -> list[str]:
    """The labels of the budget periods ``priced`` spends more than the budget in."""
    if problem.budget is None:
        return []
    amount = problem.budget.amount_usd
    return [p.label for p, spent in budget_spent(problem, priced) if spent > amount]


@dataclass(frozen=True, slots=True, kw_only=True)
class SlowEnd:
    """A plan's decisions raised to serve each fleet's replicas at its serving band's slow
    end (issue 40, ``slow_end_decisions``), without solving again."""

    decisions: Decisions
    """The plan's decisions with the extra fleet instances added."""
    extra: Mapping[tuple[int, int, int], int]
    """(fleet, option, month) -> instances added for the slow end."""
    unserved: tuple[tuple[int, int], ...]
    """(fleet, month) whose slow-end replicas no option of the fleet can all add on this plan
    (no on-demand or spot offer, no idle committed hours, or the capacity limits reached)."""


def slow_end_decisions(problem: Problem, decisions: Decisions, priced: Priced,
                       slow_replicas: Sequence[Sequence[int]]) -> SlowEnd:
    """``decisions`` with each fleet's instances in month ``m`` raised until
    ``sum_i rho_fi n_fim >= slow_replicas[f][m]`` (docs/portfolio.md, "The band's slow end").
    The commitments and placements stay as solved. The missing replicas go, fleet by fleet
    and month by month, greedily on the fleet's option where a replica costs the least
    given what is bought so far, within the policy's capacity limits (on-demand per pool,
    spot per zone; the rest on the next option): on a base option the pool's committed
    hours the plan leaves idle first (free), the rest on demand at the pool's on-demand
    rate; on a spot option the spot rate (ties: the lower option index). ``price_decisions``
    of the result is what the plan costs if the band's slow end is what happens: an upper
    bound on the cheapest plan for the slow-end demand (that plan may also buy more
    commitments), and at most the extra replicas all on demand."""
    od = on_demand_offers(problem)
    hours_h = HOURS_PER_MONTH
    lim = problem.limits
    demand = dict(priced.base_demand_hours)
    committed = priced.committed_instances
    instances = dict(decisions.fleet_instances)
    spot_gpus: dict[tuple[int, int], float] = {}
    for j, (i, start) in decisions.placements.items():
        placed = problem.jobs[j].options[i]
        if placed.spot:
            gpus = placed.instances * problem.pools[placed.pool].gpus_per_instance
            for m in range(start, start + placed.months()):
                spot_gpus[(placed.pool, m)] = spot_gpus.get((placed.pool, m), 0.0) + gpus
    for (f, i, m), count in decisions.fleet_instances.items():
        held = problem.fleets[f].options[i]
        if held.spot and count > 0:
            gpus = count * problem.pools[held.pool].gpus_per_instance
            spot_gpus[(held.pool, m)] = spot_gpus.get((held.pool, m), 0.0) + gpus
    extra: dict[tuple[int, int, int], int] = {}
    unserved: list[tuple[int, int]] = []

    def offer(option: FleetOption, m: int, deficit: float,
              ) -> tuple[Decimal, int] | None:
        """(cost per replica, instances) of the most of ``deficit`` the option can add in
        month ``m`` within the limits; None when it can add none."""
        rho = option.replicas_per_instance
        if rho <= 0:
            return None
        count = max(1, int(np.ceil(deficit / rho - 1e-9)))
        while count * rho < deficit - 1e-9:
            count += 1
        gpi = problem.pools[option.pool].gpus_per_instance
        if option.spot:
            assert option.spot_offer is not None  # noqa: S101 - spot options carry one
            if lim.max_spot_gpus_per_zone is not None:
                room = lim.max_spot_gpus_per_zone - spot_gpus.get((option.pool, m), 0.0)
                count = min(count, int(np.floor(room / gpi + 1e-9)))
            if count <= 0:
                return None
            cost = (count * hours_h
                    * problem.offers[option.spot_offer].rate_usd_per_instance_hour)
            return cost / Decimal(repr(min(deficit, count * rho))), count
        used = demand.get((option.pool, m), Decimal(0))
        held_h = committed.get((option.pool, m), 0) * hours_h
        idle = max(Decimal(0), held_h - used)
        if option.pool not in od:
            count = min(count, int(idle / hours_h))
        elif lim.max_on_demand_gpus_per_region is not None:
            on_demand = max(Decimal(0), used - held_h)
            room_h = (Decimal(lim.max_on_demand_gpus_per_region) / Decimal(repr(gpi))
                      * hours_h - on_demand + idle)
            count = min(count, int(room_h / hours_h))
        if count <= 0:
            return None
        paid = max(Decimal(0), count * hours_h - idle)
        cost = (paid * problem.offers[od[option.pool]].rate_usd_per_instance_hour
                if paid > 0 else Decimal(0))
        return cost / Decimal(repr(min(deficit, count * rho))), count

    for f, fleet in enumerate(problem.fleets):
        for m in range(problem.months):
            have = sum(fleet.options[i].replicas_per_instance * n
                       for (ff, i, mm), n in instances.items() if ff == f and mm == m)
            deficit = slow_replicas[f][m] - have
            while deficit > 1e-9:
                best: tuple[Decimal, int, int] | None = None
                for i, option in enumerate(fleet.options):
                    found = offer(option, m, deficit)
                    if found is not None and (best is None or found[0] < best[0]):
                        best = (found[0], i, found[1])
                if best is None:
                    unserved.append((f, m))
                    break
                _, i, count = best
                option = fleet.options[i]
                key = (f, i, m)
                instances[key] = instances.get(key, 0) + count
                extra[key] = extra.get(key, 0) + count
                deficit -= count * option.replicas_per_instance
                gpus = count * problem.pools[option.pool].gpus_per_instance
                if option.spot:
                    spot_gpus[(option.pool, m)] = spot_gpus.get((option.pool, m), 0.0) + gpus
                else:
                    demand[(option.pool, m)] = (demand.get((option.pool, m), Decimal(0))
                                                + count * hours_h)
    raised = Decisions(commitments=decisions.commitments, placements=decisions.placements,
                       fleet_instances=instances)
    return SlowEnd(decisions=raised, extra=extra, unserved=tuple(unserved))


def _limit_breaches(problem: Problem, committed: Mapping[tuple[int, int], int],
                    on_demand: Mapping[tuple[int, int], Decimal],
                    spot_gpus: Mapping[tuple[int, int], float],
                    decisions: Decisions) -> list[str]:
    lim = problem.limits
    out: list[str] = []
    for (pool, m), count in committed.items():
        gpus = count * problem.pools[pool].gpus_per_instance
        if lim.max_reserved_gpus_per_region is not None and gpus > lim.max_reserved_gpus_per_region:
            out.append(f"{problem.pools[pool].pool_id} month {m}: {gpus:g} committed GPUs > "
                       f"max_reserved_gpus_per_region {lim.max_reserved_gpus_per_region}")
    for (pool, m), hours in on_demand.items():
        cap = lim.max_on_demand_gpus_per_region
        if cap is not None:
            gpus = float(hours / HOURS_PER_MONTH) * problem.pools[pool].gpus_per_instance
            if gpus > cap + 1e-9:
                out.append(f"{problem.pools[pool].pool_id} month {m}: {gpus:g} on-demand GPUs "
                           f"> max_on_demand_gpus_per_region {cap}")
    for (o, _start), count in decisions.commitments.items():
        cap_cb = lim.max_capacity_block_instances
        if problem.offers[o].term == "capacity_block" and cap_cb is not None and count > cap_cb:
            out.append(f"{problem.offers[o].offer_id}: {count} capacity-block instances > "
                       f"max_capacity_block_instances {cap_cb}")
    for (pool, m), gpus in spot_gpus.items():
        cap_spot = lim.max_spot_gpus_per_zone
        if cap_spot is not None and gpus > cap_spot:
            out.append(f"{problem.pools[pool].pool_id} month {m}: {gpus:g} spot GPUs > "
                       f"{cap_spot} (forbid_unverified_spot_capacity)")
    return out


# --- the programme --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Column:
    kind: str
    """``y`` (commitment), ``x`` (job placement), ``n`` (fleet instances), ``z`` (on-demand)."""
    key: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Formulation:
    """``min c·v`` subject to ``row_lower <= A v <= row_upper``, ``lower <= v <= upper`` and
    ``v[i]`` integral where ``integrality[i]`` is 1 (``scipy.optimize.milp``'s form)."""

    columns: tuple[Column, ...]
    c: NDArray[np.float64]
    rows: NDArray[np.int64]
    cols: NDArray[np.int64]
    vals: NDArray[np.float64]
    num_rows: int
    row_lower: NDArray[np.float64]
    row_upper: NDArray[np.float64]
    lower: NDArray[np.float64]
    upper: NDArray[np.float64]
    integrality: NDArray[np.int64]
    optional_weight_usd: float
    """The largest reward of an optional job run (``optional_weight``)."""
    options_dropped: int = 0
    """Candidate options left out by ``restrict`` (``Problem.options_dropped``)."""
    row_names: tuple[str, ...]

    @property
    def num_columns(self) -> int:
        return len(self.columns)


class _Builder:
    def __init__(self) -> None:
        self.columns: list[Column] = []
        self.c: list[float] = []
        self.lower: list[float] = []
        self.upper: list[float] = []
        self.integral: list[int] = []
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.row_lower: list[float] = []
        self.row_upper: list[float] = []
        self.row_names: list[str] = []

    def column(self, kind: str, key: tuple[int, ...], cost: float, lower: float, upper: float,
               integral: bool) -> int:
        self.columns.append(Column(kind=kind, key=key))
        self.c.append(cost)
        self.lower.append(lower)
        self.upper.append(upper)
        self.integral.append(1 if integral else 0)
        return len(self.columns) - 1

    def row(self, name: str, terms: Sequence[tuple[int, float]], lower: float,
            upper: float) -> None:
        index = len(self.row_lower)
        for col, val in terms:
            if val != 0:
                self.rows.append(index)
                self.cols.append(col)
                self.vals.append(val)
        self.row_lower.append(lower)
        self.row_upper.append(upper)
        self.row_names.append(name)


def _rate(problem: Problem, offer: int) -> float:
    return float(problem.offers[offer].rate_usd_per_instance_hour)


def job_starts(problem: Problem, job: Job, option: JobOption) -> range:
    """Start months at which the option ends by the job's deadline inside the horizon."""
    last = min(job.deadline_month, problem.months - 1) - option.months() + 1
    return range(max(0, job.earliest_month), last + 1)


def optional_weight(problem: Problem, job: Job) -> float:
    """The objective's reward for running optional ``job``: 1 + twice its dearest option's
    cost at the dearest rate of the option's pool, more than running it can add to any plan
    (it can always run on its own capacity at that rate), so the programme runs every
    optional job it can within the budget and limits and then minimises cost. Where the
    budget cannot hold them all, it keeps the most optional work, weighted by cost."""
    worst = 0.0
    for option in job.options:
        rate = max((float(o.rate_usd_per_instance_hour) for o in problem.offers
                    if o.pool == option.pool), default=0.0)
        worst = max(worst, rate * option.instances * float(option.billed_hours))
    return 1.0 + 2.0 * worst


@dataclass(frozen=True, slots=True, kw_only=True)
class Kept:
    jobs: tuple[tuple[tuple[int, tuple[int, ...]], ...], ...]
    """Per job, (option index, start months) the programme keeps."""
    fleets: tuple[tuple[int, ...], ...]
    """Per fleet, the option indices kept."""


def reduced_options(problem: Problem) -> Kept:
    """The placements the programme needs, with the ones that cannot be in any optimum left
    out (exact reductions, each under the condition it names):

    - a spot option of more GPUs than the zone's spot limit never fits: dropped;
    - a *flexible* base option, on a pool with no committed offer whose on-demand limit no
      plan can reach (every job's and fleet's largest need on it together fit), costs its
      instance-hours at the on-demand rate whatever the month and whatever else runs: with
      no budget finer than the horizon, one start (the earliest) stands for all, and only
      the job's cheapest flexible option is kept (the others cost more, and touch nothing
      else); the same for a fleet's flexible options, by cost per replica;
    - spot options without a spot limit and a budget finer than the horizon: the cheapest
      one, at its earliest start."""
    coarse = problem.budget is None or all(
        set(p.months) == set(range(problem.months)) for p in problem.budget.periods)
    committed = {problem.offers[o].pool for o in committed_offers(problem)}
    od = on_demand_offers(problem)
    lim = problem.limits
    need: dict[int, float] = {}
    for job in problem.jobs:
        per_pool: dict[int, int] = {}
        for option in job.options:
            if not option.spot:
                per_pool[option.pool] = max(per_pool.get(option.pool, 0), option.instances)
        for pool, n in per_pool.items():
            need[pool] = need.get(pool, 0.0) + n
    for fleet in problem.fleets:
        peak = max(fleet.replicas_per_month, default=0)
        for held in fleet.options:
            if not held.spot and held.replicas_per_instance > 0:
                need[held.pool] = need.get(held.pool, 0.0) + float(
                    np.ceil(peak / held.replicas_per_instance))

    def flexible(pool: int) -> bool:
        if pool in committed or pool not in od:
            return False
        cap = lim.max_on_demand_gpus_per_region
        return cap is None or need.get(pool, 0.0) * problem.pools[pool].gpus_per_instance <= cap

    jobs: list[tuple[tuple[int, tuple[int, ...]], ...]] = []
    for job in problem.jobs:
        kept: list[tuple[int, tuple[int, ...]]] = []
        best_flex: tuple[float, int, tuple[int, ...]] | None = None
        best_spot: tuple[float, int, tuple[int, ...]] | None = None
        for i, option in enumerate(job.options):
            starts = tuple(job_starts(problem, job, option))
            if not starts:
                continue
            gpus = option.instances * problem.pools[option.pool].gpus_per_instance
            if option.spot:
                if lim.max_spot_gpus_per_zone is not None and gpus > lim.max_spot_gpus_per_zone:
                    continue
                if coarse and lim.max_spot_gpus_per_zone is None:
                    assert option.spot_offer is not None  # noqa: S101 - spot options carry one
                    cost = _rate(problem, option.spot_offer) * option.instances * float(
                        option.billed_hours)
                    if best_spot is None or cost < best_spot[0]:
                        best_spot = (cost, i, starts[:1])
                    continue
            elif coarse and flexible(option.pool):
                cost = _rate(problem, od[option.pool]) * option.instances * float(
                    option.billed_hours)
                if best_flex is None or cost < best_flex[0]:
                    best_flex = (cost, i, starts[:1])
                continue
            kept.append((i, starts))
        for best in (best_flex, best_spot):
            if best is not None:
                kept.append((best[1], best[2]))
        jobs.append(tuple(sorted(kept)))
    fleets: list[tuple[int, ...]] = []
    for fleet in problem.fleets:
        keep: list[int] = []
        flex: tuple[float, int] | None = None
        for i, held in enumerate(fleet.options):
            if not held.spot and coarse and flexible(held.pool) and held.replicas_per_instance:
                per = _rate(problem, od[held.pool]) / held.replicas_per_instance
                if flex is None or per < flex[0]:
                    flex = (per, i)
                continue
            keep.append(i)
        if flex is not None:
            keep.append(flex[1])
        fleets.append(tuple(sorted(keep)))
    return Kept(jobs=tuple(jobs), fleets=tuple(fleets))


def restrict(problem: Problem, pools_per_job: int) -> Problem:
    """``problem`` with each job's and fleet's candidate options cut to its
    ``pools_per_job`` cheapest per mode (base, spot), ranked by the lowest cost any term of
    the pool could give it (spot options beyond the zone's spot limit, which never fit, are
    not ranked). A restriction, not an exact reduction: a plan's ``optimal`` is then proven
    over the kept candidates, and its baselines are drawn from them too
    (``options_dropped`` counts the rest)."""
    cheapest: dict[int, float] = {}
    for o in problem.offers:
        if o.term != "spot":
            rate = float(o.rate_usd_per_instance_hour)
            cheapest[o.pool] = min(cheapest.get(o.pool, rate), rate)
    cap = problem.limits.max_spot_gpus_per_zone
    dropped = 0

    def top(costs: list[tuple[float, int]]) -> list[int]:
        nonlocal dropped
        order = sorted(costs)
        dropped += max(0, len(order) - pools_per_job)
        return [i for _, i in order[:pools_per_job]]

    jobs = []
    for job in problem.jobs:
        base = [(cheapest.get(o.pool, np.inf) * o.instances * float(o.billed_hours), i)
                for i, o in enumerate(job.options) if not o.spot]
        spot = [(_rate(problem, o.spot_offer) * o.instances * float(o.billed_hours), i)
                for i, o in enumerate(job.options) if o.spot and o.spot_offer is not None
                and (cap is None
                     or o.instances * problem.pools[o.pool].gpus_per_instance <= cap)]
        dropped += sum(1 for o in job.options if o.spot) - len(spot)
        keep = sorted(top(base) + top(spot))
        jobs.append(replace(job, options=tuple(job.options[i] for i in keep)))
    fleets = []
    for fleet in problem.fleets:
        base = [(cheapest.get(h.pool, np.inf) / h.replicas_per_instance, i)
                for i, h in enumerate(fleet.options)
                if not h.spot and h.replicas_per_instance > 0]
        spot = [(_rate(problem, h.spot_offer) / h.replicas_per_instance, i)
                for i, h in enumerate(fleet.options)
                if h.spot and h.spot_offer is not None and h.replicas_per_instance > 0]
        keep = sorted(top(base) + top(spot))
        fleets.append(replace(fleet, options=tuple(fleet.options[i] for i in keep)))
    return replace(problem, jobs=tuple(jobs), fleets=tuple(fleets),
                   options_dropped=problem.options_dropped + dropped)


_HALF_CENT = Decimal("0.005")


def _no_dearer(unit_y: Decimal, months_y: int, unit_x: Decimal, months_x: int) -> bool:
    """Whether ``count`` commitments charged ``months_y`` months at ``unit_y`` (USD per
    instance-month) never cost more than ``count`` charged ``months_x`` months at ``unit_x``,
    for every ``count >= 1``, after ``price_decisions``' rounding of each month's charge to
    the cent (``_cents(count * unit) * months``): either both factors are no larger (rounding
    is monotone), or the unrounded difference, which grows with ``count``, exceeds the
    rounding of both at ``count = 1`` (at most half a cent a month each)."""
    if months_y == 0:
        return True
    if unit_y <= unit_x and months_y <= months_x:
        return True
    low, high = unit_y * months_y, unit_x * months_x
    return low <= high and low + _HALF_CENT * (months_y + months_x) <= high


@dataclass(frozen=True, slots=True, kw_only=True)
class _Candidate:
    offer: int
    start: int
    pool: int
    block: bool
    first: int
    end: int
    """Months ``first`` to ``end - 1`` of the horizon are covered."""
    unit_usd: Decimal
    """USD per instance-month (the rate times 730 h)."""
    objective_months: int
    """Months of ``unit_usd`` the objective counts (the term, or the months inside)."""
    period_months: tuple[int, ...]
    """Months of ``unit_usd`` each budget period counts (an up-front fee: the whole term in
    its first month)."""


def commitment_candidates(problem: Problem, used: frozenset[int] | set[int],
                          ) -> tuple[list[tuple[int, int]], frozenset[int]]:
    """The commitment columns (offer, start month) the programme keeps, and the pools whose
    reserved limit is one row (the last month's) instead of one a month. Exact (each cannot
    remove an optimum, docs/portfolio.md "Size, reductions and limits"):

    - a pool no kept base placement uses gets no commitment (it only adds cost);
    - *nested coverage*: when every reserved or committed-use offer of a pool lasts at least
      the horizon (``TERM_MONTHS >= months``), every such commitment, whatever its start,
      holds through the last month, so the commitments active in any month are among those
      active in the last: that month's reserved-limit row implies every other month's;
    - *dominance*: commitment X is left out when a kept commitment Y on the same pool and of
      the same kind (reserved or committed-use; or capacity block, only when blocks have no
      per-purchase limit) covers every month X covers (the same months where the pool's
      reserved limit is one row a month), and costs no more, in the objective and in every
      budget period, for every count after the cent rounding (``_no_dearer``). Moving X's
      count to Y keeps every row (coverage gains, the limit rows and bounds are the same,
      each budget period spends no more) and costs no more. Identical offers (the same
      rate, term and payment) are the equal case: one of them stands for all."""
    months = problem.months
    amortised = problem.accounting is Accounting.AMORTISED
    lim = problem.limits
    offers = [o for o in committed_offers(problem) if problem.offers[o].pool in used]
    nested: set[int] = set()
    for pool in {problem.offers[o].pool for o in offers}:
        lengths = [TERM_MONTHS[problem.offers[o].term] for o in offers
                   if problem.offers[o].pool == pool
                   and problem.offers[o].term != "capacity_block"]
        if lengths and min(lengths) >= months:
            nested.add(pool)
    periods = () if problem.budget is None else problem.budget.periods
    candidates: list[_Candidate] = []
    for o in offers:
        offer = problem.offers[o]
        length = TERM_MONTHS[offer.term]
        for start in range(months):
            end = min(months, start + length)
            inside = end - start
            per_period = []
            for period in periods:
                if offer.upfront and not amortised:
                    count = length if start in period.months else 0
                else:
                    count = sum(1 for m in period.months if start <= m < end)
                    if period.includes_beyond and not amortised:
                        count += length - inside
                per_period.append(count)
            candidates.append(_Candidate(
                offer=o, start=start, pool=offer.pool, block=offer.term == "capacity_block",
                first=start, end=end,
                unit_usd=offer.rate_usd_per_instance_hour * HOURS_PER_MONTH,
                objective_months=inside if amortised else length,
                period_months=tuple(per_period)))

    def dominates(y: _Candidate, x: _Candidate) -> bool:
        if y.pool != x.pool or y.block != x.block:
            return False
        if y.block and lim.max_capacity_block_instances is not None:
            return False
        equal_cover = (not y.block and lim.max_reserved_gpus_per_region is not None
                       and y.pool not in nested)
        if equal_cover and (y.first, y.end) != (x.first, x.end):
            return False
        if not (y.first <= x.first and x.end <= y.end):
            return False
        if not _no_dearer(y.unit_usd, y.objective_months, x.unit_usd, x.objective_months):
            return False
        return all(_no_dearer(y.unit_usd, a, x.unit_usd, b)
                   for a, b in zip(y.period_months, x.period_months, strict=True))

    # A dominator never sorts after what it dominates unless the two tie (same cost and
    # start), so checking each candidate against the kept ones before it suffices.
    order = sorted(candidates, key=lambda c: (c.pool, c.unit_usd * c.objective_months,
                                              c.start, c.offer))
    kept: list[_Candidate] = []
    by_pool: dict[int, list[_Candidate]] = {}
    for cand in order:
        if any(dominates(y, cand) for y in by_pool.get(cand.pool, [])):
            continue
        kept.append(cand)
        by_pool.setdefault(cand.pool, []).append(cand)
    out = sorted((c.offer, c.start) for c in kept)
    return out, frozenset(nested)


def fleet_instances_bound(replicas: int, per_instance: float) -> float:
    """The most instances of one option a fleet needs in a month: enough for all
    ``replicas`` on that option alone (more only add cost and demand; exact)."""
    if per_instance <= 0:
        return 0.0
    most = float(np.ceil(replicas / per_instance))
    while most * per_instance < replicas:
        most += 1.0
    return most


def formulate(problem: Problem, *, tighten: bool = True) -> Formulation:
    """The programme of docs/portfolio.md, built column by column and row by row.

    ``tighten`` (default) applies the exact reductions and the valid inequalities of
    docs/portfolio.md "Tightening" (commitment dominance, one reserved-limit row for nested
    terms, bounds from the demand, the fleets' rounded demand rows, the reserved-use rows);
    ``False`` builds the plain programme, which has the same optimum (the tests compare
    them)."""
    b = _Builder()
    months = problem.months
    hpm = HOURS_PER_MONTH_FLOAT
    amortised = problem.accounting is Accounting.AMORTISED
    lim = problem.limits
    # cost of each column per month, for the budget rows: column -> {month: usd}, beyond
    cash: dict[int, dict[int, float]] = {}
    beyond: dict[int, float] = {}
    # coverage terms per (pool, month): demand (+) and supply (-)
    cover: dict[tuple[int, int], list[tuple[int, float]]] = {}
    reserved_active: dict[tuple[int, int], list[tuple[int, float]]] = {}
    spot_use: dict[tuple[int, int], list[tuple[int, float]]] = {}

    kept = reduced_options(problem)
    # A commitment on a pool no kept base placement can use only adds cost: left out.
    used = {problem.jobs[j].options[i].pool for j, options in enumerate(kept.jobs)
            for i, _ in options if not problem.jobs[j].options[i].spot}
    used |= {problem.fleets[f].options[i].pool for f, options in enumerate(kept.fleets)
             for i in options if not problem.fleets[f].options[i].spot}
    if tighten:
        columns, nested = commitment_candidates(problem, used)
    else:
        columns = [(o, start) for o in committed_offers(problem)
                   if problem.offers[o].pool in used for start in range(months)]
        nested = frozenset()
    for o, start in columns:
        offer = problem.offers[o]
        length = TERM_MONTHS[offer.term]
        monthly = _rate(problem, o) * hpm
        gpi = problem.pools[offer.pool].gpus_per_instance
        upper = np.inf
        if offer.term == "capacity_block" and lim.max_capacity_block_instances is not None:
            upper = float(lim.max_capacity_block_instances)
        if offer.term != "capacity_block" and lim.max_reserved_gpus_per_region is not None:
            upper = float(int(lim.max_reserved_gpus_per_region // gpi))
        inside = min(months, start + length) - start
        cost = monthly * (inside if amortised else length)
        col = b.column("y", (o, start), cost, 0.0, upper, True)
        per: dict[int, float] = {}
        if offer.upfront and not amortised:
            per[start] = monthly * length
        else:
            for m in range(start, start + inside):
                per[m] = monthly
            if not amortised:
                beyond[col] = monthly * (length - inside)
        cash[col] = per
        for m in range(start, start + inside):
            cover.setdefault((offer.pool, m), []).append((col, -hpm))
            if offer.term != "capacity_block" and (offer.pool not in nested
                                                   or m == months - 1):
                reserved_active.setdefault((offer.pool, m), []).append((col, 1.0))

    weights = [optional_weight(problem, job) for job in problem.jobs]

    for j, job in enumerate(problem.jobs):
        choice: list[tuple[int, float]] = []
        for i, starts in kept.jobs[j]:
            option = job.options[i]
            spot_rate = _rate(problem, option.spot_offer) if option.spot_offer is not None else 0.0
            gpus = option.instances * problem.pools[option.pool].gpus_per_instance
            for start in starts:
                hours = {start + k: option.instances * float(option.hours_in(k))
                         for k in range(option.months())}
                cost = spot_rate * sum(hours.values()) if option.spot else 0.0
                if not job.must_run:
                    cost -= weights[j]
                col = b.column("x", (j, i, start), cost, 0.0, 1.0, True)
                choice.append((col, 1.0))
                if option.spot:
                    cash[col] = {m: spot_rate * h for m, h in hours.items()}
                    for m in hours:
                        spot_use.setdefault((option.pool, m), []).append((col, gpus))
                else:
                    for m, h in hours.items():
                        cover.setdefault((option.pool, m), []).append((col, h))
        if not choice and job.must_run:
            raise InvalidSpecError(f"job {job.job_id} fits no offer within its window",
                                   field="jobs")
        b.row(f"job {job.job_id}", choice, 1.0 if job.must_run else 0.0, 1.0)

    for f, fleet in enumerate(problem.fleets):
        for m in range(months):
            need = fleet.replicas_per_month[m]
            supply: list[tuple[int, float]] = []
            if need <= 0 and tighten:
                continue  # instances in a month that needs none only add cost
            for i in kept.fleets[f]:
                held = fleet.options[i]
                gpi = problem.pools[held.pool].gpus_per_instance
                most = (fleet_instances_bound(need, held.replicas_per_instance) if tighten
                        else np.inf)
                if held.spot:
                    assert held.spot_offer is not None  # noqa: S101 - spot options carry one
                    cost = _rate(problem, held.spot_offer) * hpm
                    col = b.column("n", (f, i, m), cost, 0.0, most, True)
                    cash[col] = {m: cost}
                    spot_use.setdefault((held.pool, m), []).append((col, gpi))
                else:
                    col = b.column("n", (f, i, m), 0.0, 0.0, most, True)
                    cover.setdefault((held.pool, m), []).append((col, hpm))
                supply.append((col, held.replicas_per_instance))
            if need <= 0:
                continue
            b.row(f"fleet {fleet.fleet_id} month {m}", supply, float(need), np.inf)
            if not tighten:
                continue
            # The demand row divided by the most replicas any instance holds, rounded up
            # (a Chvatal-Gomory cut: Chvatal 1973, "Edmonds polytopes and a hierarchy of
            # combinatorial problems", Discrete Math. 4, 305-337; the instances are
            # integers): valid for every plan.
            densest = max((ro for _, ro in supply), default=0.0)
            if densest > 0:
                b.row(f"fleet {fleet.fleet_id} month {m} instances",
                      [(col, 1.0) for col, _ in supply],
                      float(np.ceil(need / densest - 1e-9)), np.inf)

    # The most base instance-hours each (pool, month) can demand: each job's largest
    # placement there (it runs once) and each fleet instance column at its bound.
    owner = {col: b.columns[col].key[0] for col in range(len(b.columns))
             if b.columns[col].kind == "x"}
    most_demand: dict[tuple[int, int], float] = {}
    for key, terms in cover.items():
        largest: dict[int, float] = {}
        total = 0.0
        for col, v in terms:
            if v <= 0:
                continue
            if col in owner:
                largest[owner[col]] = max(largest.get(owner[col], 0.0), v)
            else:
                total += v * b.upper[col]
        most_demand[key] = total + sum(largest.values())
    # A commitment holding more instances than every month it covers can demand only adds
    # cost (it alone covers each of them): bounded by the most of those months.
    for col, column in enumerate(b.columns):
        if column.kind != "y" or not tighten:
            continue
        offer = problem.offers[column.key[0]]
        start = column.key[1]
        holds = range(start, min(months, start + TERM_MONTHS[offer.term]))
        peak = max((most_demand.get((offer.pool, m), 0.0) for m in holds), default=0.0)
        b.upper[col] = min(b.upper[col], float(np.ceil(peak / hpm - 1e-9)))
    # Each pool's commitment columns: their sum ``R`` is at least the instances committed in
    # any month (the sum itself when every commitment holds the whole horizon).
    pool_y: dict[int, list[int]] = {}
    for col, column in enumerate(b.columns):
        if column.kind == "y" and tighten:
            pool_y.setdefault(problem.offers[column.key[0]].pool, []).append(col)
    on_demand_cols: dict[int, list[int]] = {}
    od = on_demand_offers(problem)
    for (pool, m), terms in sorted(cover.items()):
        if not any(v > 0 for _, v in terms):
            continue
        gpi = problem.pools[pool].gpus_per_instance
        if pool in od:
            # On-demand hours beyond the most the month can demand only add cost.
            upper = most_demand[(pool, m)] if tighten else np.inf
            if lim.max_on_demand_gpus_per_region is not None:
                upper = min(upper, float(int(lim.max_on_demand_gpus_per_region // gpi)) * hpm)
            cost = _rate(problem, od[pool])
            col = b.column("z", (pool, m), cost, 0.0, upper, False)
            cash[col] = {m: cost}
            terms = [*terms, (col, -1.0)]
            on_demand_cols.setdefault(pool, []).append(col)
        b.row(f"cover {problem.pools[pool].pool_id} month {m}", terms, -np.inf, 0.0)
    # Reserved use (docs/portfolio.md "Tightening", 5): a job that runs d months on a pool
    # gets at most R committed instances in each of them, so at least its hours beyond
    # 730 d R, ``e``, are on demand; the pool's on-demand hours over the horizon are at least
    # the sum of its jobs' ``e``. Valid for every plan, and it keeps the relaxation from
    # spreading a large job over its window to fill a fraction of a reservation evenly.
    for pool, commitments in sorted(pool_y.items()):
        job_hours: dict[int, dict[int, float]] = {}
        longest: dict[int, int] = {}
        for m in range(months):
            for col, v in cover.get((pool, m), []):
                column = b.columns[col]
                if v > 0 and column.kind == "x":
                    j, i, _ = column.key
                    per = job_hours.setdefault(j, {})
                    per[col] = per.get(col, 0.0) + v
                    longest[j] = max(longest.get(j, 0), problem.jobs[j].options[i].months())
        excess_terms: list[tuple[int, float]] = []
        for j, placed in sorted(job_hours.items()):
            excess = b.column("e", (j, pool), 0.0, 0.0, max(placed.values()), False)
            b.row(f"reserved use {problem.jobs[j].job_id} {problem.pools[pool].pool_id}",
                  [*sorted(placed.items()), *((col, -hpm * longest[j]) for col in commitments),
                   (excess, -1.0)], -np.inf, 0.0)
            excess_terms.append((excess, 1.0))
        if excess_terms:
            b.row(f"reserved use {problem.pools[pool].pool_id}",
                  [*excess_terms, *((col, -1.0) for col in on_demand_cols.get(pool, []))],
                  -np.inf, 0.0)
    if lim.max_reserved_gpus_per_region is not None:
        for (pool, m), terms in sorted(reserved_active.items()):
            cap = float(int(lim.max_reserved_gpus_per_region
                            // problem.pools[pool].gpus_per_instance))
            b.row(f"reserved cap {problem.pools[pool].pool_id} month {m}", terms, -np.inf, cap)
    if lim.max_spot_gpus_per_zone is not None:
        for (pool, m), terms in sorted(spot_use.items()):
            b.row(f"spot cap {problem.pools[pool].pool_id} month {m}", terms, -np.inf,
                  float(lim.max_spot_gpus_per_zone))

    if problem.budget is not None:
        amount = float(problem.budget.amount_usd)
        for period in problem.budget.periods:
            within = set(period.months)
            terms_b: list[tuple[int, float]] = []
            for col, per in cash.items():
                spent = sum(v for m, v in per.items() if m in within)
                if period.includes_beyond:
                    spent += beyond.get(col, 0.0)
                if spent:
                    terms_b.append((col, spent))
            b.row(f"budget {period.label}", terms_b, -np.inf, amount)

    return Formulation(
        columns=tuple(b.columns), c=np.array(b.c, dtype=np.float64),
        rows=np.array(b.rows, dtype=np.int64), cols=np.array(b.cols, dtype=np.int64),
        vals=np.array(b.vals, dtype=np.float64), num_rows=len(b.row_lower),
        row_lower=np.array(b.row_lower, dtype=np.float64),
        row_upper=np.array(b.row_upper, dtype=np.float64),
        lower=np.array(b.lower, dtype=np.float64), upper=np.array(b.upper, dtype=np.float64),
        integrality=np.array(b.integral, dtype=np.int64),
        optional_weight_usd=max(weights, default=0.0),
        options_dropped=problem.options_dropped,
        row_names=tuple(b.row_names))


def decode(problem: Problem, formulation: Formulation, values: Sequence[float]) -> Decisions:
    """The integers of a solution vector (rounded: HiGHS's integral values are within its
    integrality tolerance of an integer)."""
    commitments: dict[tuple[int, int], int] = {}
    placements: dict[int, tuple[int, int]] = {}
    fleet: dict[tuple[int, int, int], int] = {}
    for column, value in zip(formulation.columns, values, strict=True):
        count = round(float(value))
        if count <= 0:
            continue
        if column.kind == "y":
            commitments[(column.key[0], column.key[1])] = count
        elif column.kind == "x":
            placements[column.key[0]] = (column.key[1], column.key[2])
        elif column.kind == "n":
            fleet[(column.key[0], column.key[1], column.key[2])] = count
    return Decisions(commitments=commitments, placements=placements, fleet_instances=fleet)


def encode(formulation: Formulation, decisions: Decisions) -> NDArray[np.float64]:
    """A decision's integer columns as a vector (on-demand columns left 0): a warm start, and
    the check that a baseline is a point of the programme."""
    out = np.zeros(formulation.num_columns)
    for k, column in enumerate(formulation.columns):
        if column.kind == "y":
            out[k] = decisions.commitments.get((column.key[0], column.key[1]), 0)
        elif column.kind == "x":
            out[k] = 1.0 if decisions.placements.get(column.key[0]) == column.key[1:] else 0.0
        elif column.kind == "n":
            f, i, m = column.key
            out[k] = decisions.fleet_instances.get((f, i, m), 0)
    return out
