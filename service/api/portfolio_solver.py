"""The portfolio programme solved: ``core.portfolio.formulate``'s arrays handed to HiGHS
through ``scipy.optimize.milp`` (branch and cut; Huangfu and Hall 2018, "Parallelizing the
dual revised simplex method", Math. Prog. Comp. 10, the HiGHS LP engine), the answer decoded
and priced again in ``Decimal``, and the baselines (all on-demand, the cheapest single
committed term, spot where the policy allows) priced by the same ``price_decisions``.

Outside the core because scipy is no dependency of the core (decision in
docs/portfolio.md). Deterministic: HiGHS runs single-threaded on the same arrays, so the
same problem gives the same plan; a node limit is the work budget, a time limit the time
budget (a plan stopped by the time limit is reported with its gap and ``optimal: false``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from decimal import Decimal

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp  # type: ignore[import-untyped]
from scipy.sparse import coo_matrix  # type: ignore[import-untyped]

from service.core import portfolio as pf

OPTIMAL_WITHIN_USD = 0.01
"""``optimal: true`` only when HiGHS reports the programme solved and its dual bound is within
a cent of the plan's objective: no plan a cent cheaper exists."""
DEFAULT_MIP_REL_GAP = 1e-9
"""HiGHS stops when (primal - dual) / |primal| is below this; 1e-9 of a 10-million-dollar plan
is a cent."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Solution:
    status: str
    """``optimal``, ``time_limit`` (stopped with a plan), ``node_limit`` (ditto),
    ``infeasible``, ``no_solution`` (stopped before any plan)."""
    decisions: pf.Decisions | None
    priced: pf.Priced | None
    optimal: bool
    objective_usd: float | None
    dual_bound_usd: float | None
    gap_usd: float | None
    gap_fraction: float | None
    nodes: int | None
    solve_s: float
    """Wall-clock of the solve (reported, never compared in tests)."""
    num_columns: int
    num_rows: int
    num_integer: int
    message: str


def solve(problem: pf.Problem, *, time_limit_s: float = 10.0, node_limit: int | None = None,
          mip_rel_gap: float = DEFAULT_MIP_REL_GAP) -> Solution:
    form = pf.formulate(problem)
    started = time.perf_counter()
    n = form.num_columns
    if n == 0:
        decisions = pf.Decisions(commitments={}, placements={}, fleet_instances={})
        priced = pf.price_decisions(problem, decisions)
        return Solution(status="optimal", decisions=decisions, priced=priced, optimal=True,
                        objective_usd=0.0, dual_bound_usd=0.0, gap_usd=0.0, gap_fraction=0.0,
                        nodes=0, solve_s=0.0, num_columns=0, num_rows=0, num_integer=0,
                        message="nothing to buy")
    constraints = []
    if form.num_rows:
        a = coo_matrix((form.vals, (form.rows, form.cols)), shape=(form.num_rows, n)).tocsr()
        constraints.append(LinearConstraint(a, form.row_lower, form.row_upper))
    options: dict[str, object] = {"time_limit": float(time_limit_s), "presolve": True,
                                  "mip_rel_gap": float(mip_rel_gap), "disp": False}
    if node_limit is not None:
        options["node_limit"] = int(node_limit)
    result = milp(form.c, constraints=constraints, integrality=form.integrality,
                  bounds=Bounds(form.lower, form.upper), options=options)
    elapsed = time.perf_counter() - started
    x = getattr(result, "x", None)
    dual = getattr(result, "mip_dual_bound", None)
    nodes = getattr(result, "mip_node_count", None)
    common = {"solve_s": elapsed, "num_columns": n, "num_rows": form.num_rows,
              "num_integer": int(np.sum(form.integrality)), "nodes": nodes,
              "message": str(result.message)}
    if x is None:
        status = "infeasible" if result.status == 2 else "no_solution"
        return Solution(status=status, decisions=None, priced=None, optimal=False,
                        objective_usd=None, dual_bound_usd=None, gap_usd=None,
                        gap_fraction=None, **common)  # type: ignore[arg-type]
    decisions = pf.decode(problem, form, x)
    priced = pf.price_decisions(problem, decisions)
    fun = float(result.fun)
    gap = None if dual is None or not np.isfinite(dual) else max(0.0, fun - float(dual))
    cost = float(priced.objective_usd)
    optimal = result.status == 0 and gap is not None and gap <= OPTIMAL_WITHIN_USD
    if result.status == 0:
        status = "optimal" if optimal else "gap_tolerance"
    else:
        status = "node_limit" if "node" in str(result.message).lower() else "time_limit"
    return Solution(status=status, decisions=decisions, priced=priced, optimal=optimal,
                    objective_usd=cost, dual_bound_usd=None if gap is None else cost - gap,
                    gap_usd=gap, gap_fraction=None if gap is None else gap / max(cost, 1e-9),
                    **common)  # type: ignore[arg-type]


# --- baselines -----------------------------------------------------------------------------


def _cheapest_base(problem: pf.Problem, j: int, rates: dict[int, Decimal],
                   ) -> tuple[int, int] | None:
    """(option, start) of job ``j``'s cheapest base option on a pool with a rate in
    ``rates`` (pool -> USD per instance-hour), started at its earliest."""
    job = problem.jobs[j]
    best: tuple[Decimal, int, int] | None = None
    for i, option in enumerate(job.options):
        if option.spot or option.pool not in rates:
            continue
        starts = pf.job_starts(problem, job, option)
        if not starts:
            continue
        cost = rates[option.pool] * option.instances * option.billed_hours
        if best is None or cost < best[0]:
            best = (cost, i, starts[0])
    return None if best is None else (best[1], best[2])


def _fleet_base(problem: pf.Problem, f: int, rates: dict[int, Decimal],
                ) -> dict[tuple[int, int, int], int] | None:
    fleet = problem.fleets[f]
    best: tuple[Decimal, int] | None = None
    for i, option in enumerate(fleet.options):
        if option.spot or option.pool not in rates:
            continue
        per = rates[option.pool] / Decimal(repr(option.replicas_per_instance))
        if best is None or per < best[0]:
            best = (per, i)
    if best is None:
        return None
    i = best[1]
    per_instance = fleet.options[i].replicas_per_instance
    return {(f, i, m): _instances(r, per_instance)
            for m, r in enumerate(fleet.replicas_per_month) if r > 0}


def _instances(replicas: int, per_instance: float) -> int:
    count = int(np.ceil(replicas / per_instance - 1e-9))
    return max(count, 0)


def on_demand_baseline(problem: pf.Problem, run: set[int]) -> pf.Decisions | None:
    """Every job in ``run`` and every fleet on its cheapest on-demand pool, jobs at their
    earliest start; no commitments."""
    od = pf.on_demand_offers(problem)
    rates = {pool: problem.offers[o].rate_usd_per_instance_hour for pool, o in od.items()}
    placements: dict[int, tuple[int, int]] = {}
    for j in sorted(run):
        choice = _cheapest_base(problem, j, rates)
        if choice is None:
            return None
        placements[j] = choice
    fleets: dict[tuple[int, int, int], int] = {}
    for f in range(len(problem.fleets)):
        got = _fleet_base(problem, f, rates)
        if got is None:
            return None
        fleets.update(got)
    return pf.Decisions(commitments={}, placements=placements, fleet_instances=fleets)


def term_baseline(problem: pf.Problem, term: str, run: set[int]) -> pf.Decisions | None:
    """Every job and fleet on its cheapest pool with an offer of the committed ``term``, at
    the earliest start, with as many ``term`` commitments as each month's peak needs (bought
    when the need rises; what a single-term purchase covering the demand costs)."""
    offers: dict[int, int] = {}
    for i, o in enumerate(problem.offers):
        if o.term == term and (o.pool not in offers or o.rate_usd_per_instance_hour
                               < problem.offers[offers[o.pool]].rate_usd_per_instance_hour):
            offers[o.pool] = i
    if not offers:
        return None
    rates = {pool: problem.offers[o].rate_usd_per_instance_hour for pool, o in offers.items()}
    placements: dict[int, tuple[int, int]] = {}
    for j in sorted(run):
        choice = _cheapest_base(problem, j, rates)
        if choice is None:
            return None
        placements[j] = choice
    fleets: dict[tuple[int, int, int], int] = {}
    for f in range(len(problem.fleets)):
        got = _fleet_base(problem, f, rates)
        if got is None:
            return None
        fleets.update(got)
    partial = pf.Decisions(commitments={}, placements=placements, fleet_instances=fleets)
    demand = pf.price_decisions(problem, partial).base_demand_hours
    length = pf.TERM_MONTHS[term]
    commitments: dict[tuple[int, int], int] = {}
    for pool, offer in sorted(offers.items()):
        active = [0] * problem.months
        for m in range(problem.months):
            hours = demand.get((pool, m), Decimal(0))
            need = int((hours / pf.HOURS_PER_MONTH).to_integral_value(
                rounding="ROUND_CEILING"))
            if need > active[m]:
                buy = need - active[m]
                commitments[(offer, m)] = buy
                for k in range(m, min(problem.months, m + length)):
                    active[k] += buy
    return replace(partial, commitments=commitments)


def spot_baseline(problem: pf.Problem, run: set[int]) -> pf.Decisions | None:
    """Every job on its cheapest spot option where it has one, else on-demand; every fleet on
    its cheapest spot option, else on-demand."""
    base = on_demand_baseline(problem, run)
    if base is None:
        return None
    placements = dict(base.placements)
    any_spot = False
    for j in sorted(run):
        job = problem.jobs[j]
        best: tuple[Decimal, int, int] | None = None
        for i, option in enumerate(job.options):
            if not option.spot or option.spot_offer is None:
                continue
            starts = pf.job_starts(problem, job, option)
            if not starts:
                continue
            rate = problem.offers[option.spot_offer].rate_usd_per_instance_hour
            cost = rate * option.instances * option.billed_hours
            if best is None or cost < best[0]:
                best = (cost, i, starts[0])
        if best is not None:
            placements[j] = (best[1], best[2])
            any_spot = True
    fleets = dict(base.fleet_instances)
    for f, fleet in enumerate(problem.fleets):
        choice: tuple[Decimal, int] | None = None
        for i, held in enumerate(fleet.options):
            if held.spot and held.spot_offer is not None:
                rate = problem.offers[held.spot_offer].rate_usd_per_instance_hour
                per = rate / Decimal(repr(held.replicas_per_instance))
                if choice is None or per < choice[0]:
                    choice = (per, i)
        if choice is not None:
            any_spot = True
            fleets = {k: v for k, v in fleets.items() if k[0] != f}
            per_instance = fleet.options[choice[1]].replicas_per_instance
            fleets.update({(f, choice[1], m): _instances(r, per_instance)
                           for m, r in enumerate(fleet.replicas_per_month) if r > 0})
    if not any_spot:
        return None
    return pf.Decisions(commitments={}, placements=placements, fleet_instances=fleets)


@dataclass(frozen=True, slots=True, kw_only=True)
class Baseline:
    name: str
    priced: pf.Priced


def baselines(problem: pf.Problem, run: set[int], *, spot_allowed: bool) -> list[Baseline]:
    """The baselines a plan is compared with, each priced by ``price_decisions``."""
    out: list[Baseline] = []
    found = on_demand_baseline(problem, run)
    if found is not None:
        out.append(Baseline(name="all_on_demand", priced=pf.price_decisions(problem, found)))
    terms = sorted({problem.offers[i].term for i in pf.committed_offers(problem)})
    best: Baseline | None = None
    for term in terms:
        decided = term_baseline(problem, term, run)
        if decided is None:
            continue
        priced = pf.price_decisions(problem, decided)
        if best is None or priced.objective_usd < best.priced.objective_usd:
            best = Baseline(name=f"cheapest_single_term:{term}", priced=priced)
    if best is not None:
        out.append(best)
    if spot_allowed:
        decided = spot_baseline(problem, run)
        if decided is not None:
            out.append(Baseline(name="spot_where_allowed",
                                priced=pf.price_decisions(problem, decided)))
    return out
