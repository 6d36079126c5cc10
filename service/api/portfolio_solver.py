"""The portfolio programme solved: ``core.portfolio.formulate``'s arrays handed to HiGHS
through ``scipy.optimize.milp`` (branch and cut; Huangfu and Hall 2018, "Parallelizing the
dual revised simplex method", Math. Prog. Comp. 10, the HiGHS LP engine), the answer decoded
and priced again in ``Decimal``, and the baselines (all on-demand, the cheapest single
committed term, spot where the policy allows) priced by the same ``price_decisions``.

Outside the core because scipy is no dependency of the core (decision in
docs/portfolio.md). Deterministic: HiGHS runs single-threaded with a fixed seed on the same
arrays, so the same problem gives the same plan. A node limit per HiGHS solve is the work
budget (counted, so a plan it stops is the same on every machine); a wall-clock limit over
the whole chain is only a guard: a solve it stops is marked ``time_limit`` and never stored
(docs/portfolio.md, "Work and time budgets").
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

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
    options_dropped: int = 0
    source: str = "highs"
    """Where the plan came from: HiGHS's incumbent, or ``baseline:<name>`` when a baseline
    that is a point of the programme beat the incumbent of a solve stopped by a limit."""


DEFAULT_NODE_LIMIT = 200
"""The work budget of one HiGHS solve, in branch-and-bound nodes (HiGHS ``mip_max_nodes``),
when the request names none. Nodes are counted, not timed: single-threaded HiGHS on the same
arrays and options explores the same nodes in the same order on every machine, so a plan
stopped by this limit is the same plan everywhere and verifies (docs/portfolio.md, "Work and
time budgets")."""


class _Clock:
    """The wall-clock guard shared by one solve and its sub-solves: each HiGHS call gets what
    is left of it, and ``stopped`` records whether it stopped any of them (then the plan
    depends on the machine's speed and is never stored)."""

    def __init__(self, time_limit_s: float) -> None:
        self.until = time.perf_counter() + time_limit_s
        self.stopped = False

    def left_s(self) -> float:
        return self.until - time.perf_counter()


def _is_clock(result: Any) -> bool:
    return "time limit" in str(getattr(result, "message", "")).lower()


def solve(problem: pf.Problem, *, time_limit_s: float = 10.0,
          node_limit: int | None = DEFAULT_NODE_LIMIT,
          mip_rel_gap: float = DEFAULT_MIP_REL_GAP, polish: bool = True,
          clock: _Clock | None = None) -> Solution:
    """The programme solved within ``node_limit`` nodes per HiGHS call (the work budget,
    deterministic) and ``time_limit_s`` of wall clock for the whole (the guard). Stopped by
    the nodes: status ``node_limit``, the best plan found (the same on every machine).
    Stopped by the clock: status ``time_limit`` (machine-dependent; the API never stores it).
    """
    started = time.perf_counter()
    clock = clock or _Clock(time_limit_s)
    form = pf.formulate(problem)
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
    common_size = {"num_columns": n, "num_rows": form.num_rows,
                   "num_integer": int(np.sum(form.integrality)),
                   "options_dropped": form.options_dropped}
    if clock.left_s() <= 0:
        clock.stopped = True
        return Solution(status="time_limit", decisions=None, priced=None, optimal=False,
                        objective_usd=None, dual_bound_usd=None, gap_usd=None,
                        gap_fraction=None, nodes=0, solve_s=time.perf_counter() - started,
                        message="no time left", **common_size)  # type: ignore[arg-type]
    options: dict[str, object] = {"time_limit": max(0.01, clock.left_s()), "presolve": True,
                                  "mip_rel_gap": float(mip_rel_gap), "disp": False,
                                  "threads": 1, "random_seed": 0}
    if node_limit is not None:
        options["node_limit"] = int(node_limit)
    result = _milp(form, constraints, options)
    if _is_clock(result):
        clock.stopped = True
    x = getattr(result, "x", None)
    dual = getattr(result, "mip_dual_bound", None)
    nodes = getattr(result, "mip_node_count", None)
    common = {"solve_s": time.perf_counter() - started, "nodes": nodes,
              "message": str(result.message), **common_size}
    dual_f = None if dual is None or not np.isfinite(dual) else float(dual)
    if result.status != 0 and result.status != 2:
        # Stopped by a limit: a baseline that is a point of the programme and beats HiGHS's
        # incumbent (or stands in for none) is the best plan found (what a warm start
        # would give); the dual bound still bounds it.
        if dual_f is None:
            dual_f = _relaxation_bound(form, constraints, clock)
        found = None if x is None else pf.decode(problem, form, x)
        better = _best_point(problem, found)
        if polish:
            tries = [(_split(problem, node_limit, mip_rel_gap, clock), "split")]
            if better is not None:
                tries.append((_polish(problem, better[0], node_limit, mip_rel_gap, clock),
                              better[1] + "+polish"))
            for polished, name in tries:
                if polished is None:
                    continue
                priced_p = pf.price_decisions(problem, polished)
                if not _is_point(problem, polished, priced_p):
                    continue
                weighted = _weighted(problem, polished, priced_p)
                old = (None if better is None else
                       _weighted(problem, better[0], pf.price_decisions(problem, better[0])))
                if old is None or weighted < old - OPTIMAL_WITHIN_USD:
                    better = (polished, name)
        status = "time_limit" if clock.stopped else "node_limit"
        common["solve_s"] = time.perf_counter() - started
        if better is not None:
            decisions, source = better
            priced = pf.price_decisions(problem, decisions)
            weighted = _weighted(problem, decisions, priced)
            gap = None if dual_f is None else max(0.0, weighted - dual_f)
            cost = float(priced.objective_usd)
            return Solution(status=status, decisions=decisions, priced=priced,
                            optimal=gap is not None and gap <= OPTIMAL_WITHIN_USD,
                            objective_usd=cost,
                            dual_bound_usd=None if gap is None else cost - gap,
                            gap_usd=gap, gap_fraction=None if gap is None else gap / max(
                                cost, 1e-9), source=source, **common)  # type: ignore[arg-type]
        return Solution(status="time_limit" if clock.stopped else "no_solution",
                        decisions=None, priced=None, optimal=False, objective_usd=None,
                        dual_bound_usd=None, gap_usd=None, gap_fraction=None,
                        **common)  # type: ignore[arg-type]
    if x is None:
        status = "infeasible" if result.status == 2 else "no_solution"
        return Solution(status=status, decisions=None, priced=None, optimal=False,
                        objective_usd=None, dual_bound_usd=None, gap_usd=None,
                        gap_fraction=None, **common)  # type: ignore[arg-type]
    decisions = pf.decode(problem, form, x)
    priced = pf.price_decisions(problem, decisions)
    fun = float(result.fun)
    gap = None if dual_f is None else max(0.0, fun - dual_f)
    cost = float(priced.objective_usd)
    optimal = gap is not None and gap <= OPTIMAL_WITHIN_USD
    return Solution(status="optimal" if optimal else "gap_tolerance", decisions=decisions,
                    priced=priced, optimal=optimal, objective_usd=cost,
                    dual_bound_usd=None if gap is None else cost - gap,
                    gap_usd=gap, gap_fraction=None if gap is None else gap / max(cost, 1e-9),
                    **common)  # type: ignore[arg-type]


def _milp(form: pf.Formulation, constraints: list[LinearConstraint],
          options: dict[str, object], integrality: Any = None) -> Any:
    """HiGHS on ``form`` (``integrality``: the formulation's, unless given)."""
    with warnings.catch_warnings():
        # scipy passes the options it does not name (threads, random_seed) to HiGHS verbatim
        # and says so with a RuntimeWarning.
        warnings.filterwarnings("ignore", "Unrecognized options", RuntimeWarning)
        return milp(form.c, constraints=constraints,
                    integrality=form.integrality if integrality is None else integrality,
                    bounds=Bounds(form.lower, form.upper), options=options)


def _relaxation_bound(form: pf.Formulation, constraints: list[LinearConstraint],
                      clock: _Clock) -> float | None:
    """The LP relaxation's optimum: a dual bound when HiGHS stopped before it had one (a
    node limit of 0). Deterministic, like every HiGHS call here."""
    if clock.left_s() <= 0:
        clock.stopped = True
        return None
    result = _milp(form, constraints, {"time_limit": max(0.01, clock.left_s()),
                                       "presolve": True, "disp": False, "threads": 1,
                                       "random_seed": 0},
                   integrality=np.zeros_like(form.integrality))
    if _is_clock(result):
        clock.stopped = True
    if result.status != 0 or result.fun is None:
        return None
    return float(result.fun)


def _split(problem: pf.Problem, node_limit: int | None, mip_rel_gap: float, clock: _Clock,
           ) -> pf.Decisions | None:
    """A plan in two smaller programmes (each fast where the whole is not: the spot limits'
    knapsacks and the commitments' coverage together make the relaxation weak): first
    without commitments, which places the jobs on spot within the spot limits; then with
    those spot placements fixed and every other job off spot, with the commitments. Each
    gets ``node_limit`` nodes."""
    first = solve(replace(problem, only_terms=frozenset()), node_limit=node_limit,
                  mip_rel_gap=mip_rel_gap, polish=False, clock=clock)
    if first.decisions is None:
        return None
    jobs = []
    index: dict[int, list[int]] = {}
    for j, job in enumerate(problem.jobs):
        placed = first.decisions.placements.get(j)
        if placed is not None and job.options[placed[0]].spot:
            option = job.options[placed[0]]
            index[j] = [placed[0]]
            jobs.append(replace(job, options=(option,), earliest_month=placed[1],
                                deadline_month=placed[1] + option.months() - 1,
                                must_run=True))
            continue
        keep = [i for i, o in enumerate(job.options) if not o.spot]
        index[j] = keep
        jobs.append(replace(job, options=tuple(job.options[i] for i in keep)))
    second = solve(replace(problem, jobs=tuple(jobs)), node_limit=node_limit,
                   mip_rel_gap=mip_rel_gap, polish=False, clock=clock)
    if second.decisions is None:
        return None
    return pf.Decisions(
        commitments=second.decisions.commitments,
        placements={j: (index[j][i], start)
                    for j, (i, start) in second.decisions.placements.items()},
        fleet_instances=second.decisions.fleet_instances)


def _polish(problem: pf.Problem, decisions: pf.Decisions, node_limit: int | None,
            mip_rel_gap: float, clock: _Clock) -> pf.Decisions | None:
    """``decisions``' job placements fixed, everything else solved again within
    ``node_limit`` nodes (None when the smaller programme finds nothing)."""
    jobs = []
    index: dict[int, int] = {}
    for j, job in enumerate(problem.jobs):
        placed = decisions.placements.get(j)
        if placed is None:
            jobs.append(replace(job, options=(), must_run=False))
            continue
        option = job.options[placed[0]]
        index[j] = placed[0]
        jobs.append(replace(job, options=(option,), earliest_month=placed[1],
                            deadline_month=placed[1] + option.months() - 1, must_run=True))
    fixed = replace(problem, jobs=tuple(jobs))
    got = solve(fixed, node_limit=node_limit, mip_rel_gap=mip_rel_gap, polish=False,
                clock=clock)
    if got.decisions is None:
        return None
    return pf.Decisions(
        commitments=got.decisions.commitments,
        placements={j: (index[j], start) for j, (_, start) in got.decisions.placements.items()},
        fleet_instances=got.decisions.fleet_instances)


def _weighted(problem: pf.Problem, decisions: pf.Decisions, priced: pf.Priced) -> float:
    """The programme's objective of ``decisions``: the cost less each optional job's reward."""
    reward = sum(pf.optional_weight(problem, problem.jobs[j]) for j in decisions.placements
                 if not problem.jobs[j].must_run)
    return float(priced.objective_usd) - reward


def _is_point(problem: pf.Problem, decisions: pf.Decisions, priced: pf.Priced) -> bool:
    """Whether ``decisions`` satisfy the programme: every must-run job placed, every limit
    and every budget period held (in Decimal)."""
    if any(job.must_run and j not in decisions.placements
           for j, job in enumerate(problem.jobs)):
        return False
    return priced.within_limits and not pf.budget_breaches(problem, priced)


def _best_point(problem: pf.Problem, found: pf.Decisions | None,
                ) -> tuple[pf.Decisions, str] | None:
    """The better of HiGHS's incumbent and the baselines that are points of the programme,
    by the programme's own objective (None when neither is one)."""
    best: tuple[float, pf.Decisions, str] | None = None
    if found is not None:
        priced = pf.price_decisions(problem, found)
        best = (_weighted(problem, found, priced), found, "highs")
    runs = [set(range(len(problem.jobs)))]
    if found is not None:
        runs.append(set(found.placements))
    for run in runs:
        for name, decided in _baseline_decisions(problem, run):
            priced = pf.price_decisions(problem, decided)
            if not _is_point(problem, decided, priced):
                continue
            weighted = _weighted(problem, decided, priced)
            if best is None or weighted < best[0] - OPTIMAL_WITHIN_USD:
                best = (weighted, decided, f"baseline:{name}")
    return None if best is None else (best[1], best[2])


def _baseline_decisions(problem: pf.Problem, run: set[int],
                        ) -> list[tuple[str, pf.Decisions]]:
    out: list[tuple[str, pf.Decisions]] = []
    for name, decided in (("all_on_demand", on_demand_baseline(problem, run)),
                          ("spot_where_allowed", spot_baseline(problem, run))):
        if decided is not None:
            out.append((name, decided))
    for term in sorted({problem.offers[i].term for i in pf.committed_offers(problem)}):
        decided = term_baseline(problem, term, run)
        if decided is not None:
            out.append((f"cheapest_single_term:{term}", decided))
    return out


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


def _placed_at(problem: pf.Problem, rates: dict[int, Decimal],
               run: set[int]) -> pf.Decisions | None:
    """Every job in ``run`` and every fleet on its cheapest pool of ``rates``, jobs at their
    earliest start, no commitments; None when one has no such pool."""
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


def on_demand_baseline(problem: pf.Problem, run: set[int]) -> pf.Decisions | None:
    """Every job in ``run`` and every fleet on its cheapest on-demand pool, jobs at their
    earliest start; no commitments."""
    od = pf.on_demand_offers(problem)
    rates = {pool: problem.offers[o].rate_usd_per_instance_hour for pool, o in od.items()}
    return _placed_at(problem, rates, run)


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
    partial = _placed_at(problem, rates, run)
    if partial is None:
        return None
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
    """Every job on its cheapest spot option where it has one and the zone's spot capacity
    limit (``Limits.max_spot_gpus_per_zone``) still holds, else on-demand; every fleet on its
    cheapest spot option where its instances fit the limit in every month, else on-demand.
    Jobs are taken in order (a greedy fill of the limit, not an optimisation)."""
    base = on_demand_baseline(problem, run)
    if base is None:
        return None
    cap = problem.limits.max_spot_gpus_per_zone
    used: dict[tuple[int, int], float] = {}

    def fits(pool: int, gpus_by_month: dict[int, float]) -> bool:
        return cap is None or all(used.get((pool, m), 0.0) + g <= cap
                                  for m, g in gpus_by_month.items())

    def take(pool: int, gpus_by_month: dict[int, float]) -> None:
        for m, g in gpus_by_month.items():
            used[(pool, m)] = used.get((pool, m), 0.0) + g

    placements = dict(base.placements)
    any_spot = False
    for j in sorted(run):
        job = problem.jobs[j]
        ranked: list[tuple[Decimal, int, int]] = []
        for i, option in enumerate(job.options):
            if not option.spot or option.spot_offer is None:
                continue
            starts = pf.job_starts(problem, job, option)
            if not starts:
                continue
            rate = problem.offers[option.spot_offer].rate_usd_per_instance_hour
            ranked.append((rate * option.instances * option.billed_hours, i, starts[0]))
        for _cost, i, start in sorted(ranked):
            option = job.options[i]
            gpus = option.instances * problem.pools[option.pool].gpus_per_instance
            wanted = {start + k: gpus for k in range(option.months())}
            if fits(option.pool, wanted):
                take(option.pool, wanted)
                placements[j] = (i, start)
                any_spot = True
                break
    fleets = dict(base.fleet_instances)
    for f, fleet in enumerate(problem.fleets):
        choices: list[tuple[Decimal, int]] = []
        for i, held in enumerate(fleet.options):
            if held.spot and held.spot_offer is not None:
                rate = problem.offers[held.spot_offer].rate_usd_per_instance_hour
                choices.append((rate / Decimal(repr(held.replicas_per_instance)), i))
        for _per, i in sorted(choices):
            held = fleet.options[i]
            counts = {m: _instances(r, held.replicas_per_instance)
                      for m, r in enumerate(fleet.replicas_per_month) if r > 0}
            gpi = problem.pools[held.pool].gpus_per_instance
            wanted = {m: n * gpi for m, n in counts.items()}
            if fits(held.pool, wanted):
                take(held.pool, wanted)
                any_spot = True
                fleets = {k: v for k, v in fleets.items() if k[0] != f}
                fleets.update({(f, i, m): n for m, n in counts.items()})
                break
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
