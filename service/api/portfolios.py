"""A portfolio request resolved the way a quote resolves its workload, solved, and written
(issue 44; docs/portfolio.md). Each job's workload is sized and priced on every matching
offer by the quote's own ``size_workload`` and ``price``; each line gives the job's instances
and billed hours on that offer's pool. Nothing here stores anything."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlalchemy.orm import Session

from service.api.deps import AcceleratorCache
from service.api.portfolio_solver import Solution, baselines, solve
from service.api.quoting import OfferCache, price, serving_jobs, size_workload
from service.api.schemas.portfolios import PortfolioRequest, month_index, month_label
from service.api.schemas.quotes import QuoteRequest, ServingWorkload
from service.api.work import SearchDeadlineError, WorkBudget
from service.core import portfolio as pf
from service.core.errors import InvalidSpecError
from service.core.plausibility import WarningDetail, outside_validated
from service.core.policy import (
    SPOT_CAPACITY_UNVERIFIED_GPUS,
    Outcome,
    Policy,
    RuleResult,
    unvalidated_estimate_rule,
)
from service.core.quote import QuoteLine, Term, job_flags

PORTFOLIO_DECIDES = frozenset({
    "budget", "deadline", "max_commitment", "max_job_cost", "max_gpus_per_region_by_term",
    "max_capacity_block_instances", "forbid_unverified_spot_capacity", "max_duration_s",
    "forbid_unvalidated_estimates"})
"""Rules a quote line fails that the portfolio decides itself (its budget per period, the
job's window, capacity per term and region over the whole plan, and an unvalidated serving
estimate, judged once per fleet or job in the verdict: ``unvalidated_reasons``): such a
line stays a candidate. A line any other rule fails (an indicative or stale price, a term,
provider or region the policy does not allow) is no candidate."""


class _Pools:
    def __init__(self) -> None:
        self.pools: list[pf.Pool] = []
        self.index: dict[tuple[str, str, str | None, str], int] = {}
        self.offers: list[pf.PoolOffer] = []
        self.offer_index: dict[str, int] = {}

    def pool(self, line: QuoteLine) -> int:
        key = (line.provider, line.region or "", line.zone, line.instance_type or "")
        found = self.index.get(key)
        if found is None:
            found = len(self.pools)
            self.index[key] = found
            zone = f"/{line.zone}" if line.zone else ""
            self.pools.append(pf.Pool(
                pool_id=f"{line.provider}/{line.region}{zone}/{line.instance_type}",
                provider=line.provider, region=line.region or "", zone=line.zone,
                instance_type=line.instance_type or "", accelerator=line.accelerator,
                gpus_per_instance=line.gpus_per_instance))
        return found

    def offer(self, line: QuoteLine, pool: int) -> int:
        assert line.offer_id is not None  # noqa: S101 - candidates are priced offers
        assert line.unit_price is not None  # noqa: S101
        found = self.offer_index.get(line.offer_id)
        if found is None:
            found = len(self.offers)
            self.offer_index[line.offer_id] = found
            self.offers.append(pf.PoolOffer(
                offer_id=line.offer_id, pool=pool, term=line.term.value,
                rate_usd_per_instance_hour=line.unit_price,
                upfront=(line.payment_option or "") == "all_upfront"))
        return found


def _candidates(lines: Sequence[QuoteLine], terms: set[str]) -> list[QuoteLine]:
    out = []
    for line in lines:
        if (line.amounts is None or line.offer_id is None or line.term is Term.ONPREM
                or line.term.value not in terms):
            continue
        if any(r.outcome is Outcome.FAIL and r.rule not in PORTFOLIO_DECIDES
               for r in line.rules):
            continue
        out.append(line)
    return out


def _quote_request(body: PortfolioRequest, workload: Any) -> QuoteRequest:
    terms = list(body.terms)
    return QuoteRequest.model_validate({
        "workload": workload, "terms": terms, "providers": body.providers,
        "regions": body.regions, "catalog_version": body.catalog_version})


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetSlowEnd:
    """A fleet's serving estimates at the band's slow end (issue 40), month by month: the
    same estimate that sizes ``pf.Fleet.replicas_per_month`` (``serving.SlowEnd``)."""

    replicas: tuple[int, ...]
    """Replicas the month's load needs at the band's slow end (the quote line's
    ``replicas_at_band_slow_end``); the expected replicas where the estimate has no slow
    end; 0 in a month without load."""
    factor: float | None
    """``band_slow_end_factor``: the largest of the months' (one regime's band: the same in
    every month); None when no month has a slow end."""
    warning_details: tuple[WarningDetail, ...]
    """The estimates' coded warnings, the peak month's first, then each other month's whose
    (code, field) is new."""

    @property
    def unvalidated(self) -> bool:
        return outside_validated(self.warning_details)


@dataclass(frozen=True, slots=True, kw_only=True)
class Resolved:
    problem: pf.Problem
    labels: tuple[str, ...]
    num_lines: int
    slow_ends: tuple[FleetSlowEnd, ...] = ()
    """Per fleet, in ``problem.fleets`` order."""
    unvalidated: tuple[tuple[str, int, RuleResult], ...] = ()
    """("fleet" or "job", its index, rule ``forbid_unvalidated_estimates``'s outcome) for
    each fleet, and each job of a serving workload, whose estimate carries
    ``outside_validated_range`` (``policy.unvalidated_estimate_rule``, as a quote line)."""


def resolve(body: PortfolioRequest, session: Session, cache: AcceleratorCache,
            version_id: str, policy: Policy, now: dt.datetime, budget: WorkBudget,
            offer_cache: OfferCache | None = None) -> Resolved:
    """The request as a ``core.portfolio.Problem``: every job and fleet sized and priced
    within the request's one work budget (``budget.check`` before each: past its deadline,
    503 ``search-deadline`` with nothing stored)."""
    start = month_index(body.horizon.start)
    months = body.horizon.months
    labels = tuple(month_label(start + m) for m in range(months))
    terms: set[str] = set(body.terms)
    pools = _Pools()
    jobs: list[pf.Job] = []
    unvalidated: list[tuple[str, int, RuleResult]] = []
    seen = 0
    for index, job_in in enumerate(body.jobs):
        budget.check(f"jobs.{index}")
        request = _quote_request(body, job_in.workload.model_dump(mode="json",
                                                                  exclude_none=True))
        try:
            sized = size_workload(request, cache, budget)
        except InvalidSpecError as exc:
            raise InvalidSpecError(str(exc), field=f"jobs.{index}.{exc.field}"
                                   if exc.field else f"jobs.{index}") from None
        if any(job_flags(s) for s, _ in sized):
            unvalidated.append(("job", index, unvalidated_estimate_rule(
                policy, f"job {job_in.id}")))
        computed = price(session, request, sized, version_id, policy, now, gated=True,
                         offer_cache=offer_cache)
        lines = _candidates(computed.result.lines, terms)
        seen += len(lines)
        options: list[pf.JobOption] = []
        for line in lines:
            assert line.amounts is not None  # noqa: S101 - candidates are feasible
            pool = pools.pool(line)
            offer = pools.offer(line, pool)
            if line.term is Term.SPOT:
                options.append(pf.JobOption(pool=pool, spot=True,
                                            instances=line.amounts.instances,
                                            billed_hours=line.amounts.billed_hours,
                                            spot_offer=offer))
        base: dict[int, QuoteLine] = {}
        for line in lines:
            if line.term is not Term.SPOT:
                base.setdefault(pools.pool(line), line)
        for pool, line in base.items():
            assert line.amounts is not None  # noqa: S101
            options.append(pf.JobOption(pool=pool, spot=False, instances=line.amounts.instances,
                                        billed_hours=line.amounts.billed_hours))
        job = pf.Job(job_id=job_in.id, earliest_month=month_index(job_in.earliest_start) - start,
                     deadline_month=month_index(job_in.deadline) - start,
                     must_run=job_in.must_run, options=tuple(options))
        if not any(pf.job_starts(pf.Problem(months=months, pools=(), offers=(), jobs=()), job,
                                 o) for o in options):
            raise InvalidSpecError(
                f"job {job_in.id} fits no offer within its window {job_in.earliest_start} to "
                f"{job_in.deadline} ({len(lines)} candidate offers)", field=f"jobs.{index}")
        jobs.append(job)
    fleets = []
    slow_ends = []
    for index in range(len(body.fleets)):
        budget.check(f"fleets.{index}")
        fleet, slow_end = _fleet(body, index, session, cache, version_id, policy, now, pools,
                                 terms, offer_cache)
        fleets.append(fleet)
        slow_ends.append(slow_end)
        if slow_end.unvalidated:
            unvalidated.append(("fleet", index, unvalidated_estimate_rule(
                policy, f"fleet {fleet.fleet_id}")))
    if len(pools.offers) > body.max_offers:
        raise InvalidSpecError(
            f"{len(pools.offers)} candidate offers, more than max_offers {body.max_offers}: "
            "narrow providers, regions or terms", field="max_offers")
    problem = pf.Problem(
        months=months, pools=tuple(pools.pools), offers=tuple(pools.offers), jobs=tuple(jobs),
        fleets=tuple(fleets), limits=pf.Limits(
            max_on_demand_gpus_per_region=policy.max_on_demand_gpus_per_region,
            max_reserved_gpus_per_region=policy.max_reserved_gpus_per_region,
            max_capacity_block_instances=policy.max_capacity_block_instances,
            max_spot_gpus_per_zone=(SPOT_CAPACITY_UNVERIFIED_GPUS
                                    if policy.forbid_unverified_spot_capacity else None)),
        budget=_budget(body, labels), accounting=pf.Accounting(body.accounting))
    if body.pools_per_job is not None:
        problem = pf.restrict(problem, body.pools_per_job)
    return Resolved(problem=problem, labels=labels, num_lines=seen,
                    slow_ends=tuple(slow_ends), unvalidated=tuple(unvalidated))


def _fleet(body: PortfolioRequest, index: int, session: Session, cache: AcceleratorCache,
           version_id: str, policy: Policy, now: dt.datetime, pools: _Pools,
           terms: set[str], offer_cache: OfferCache | None) -> tuple[pf.Fleet, FleetSlowEnd]:
    """A fleet: its deployment sized at the peak month by the quote's serving sizing, then
    its replicas each month from the serving estimate at that month's requests per second,
    and from the same estimate the replicas at its band's slow end (issue 40)."""
    fleet_in = body.fleets[index]
    raw = fleet_in.workload.serving.model_dump(mode="json", exclude_none=True)
    peak = max(fleet_in.monthly_requests_per_s)
    by_rate: dict[float, int] = {}
    slow_by_rate: dict[float, int] = {}
    factors: list[float] = []
    details_by_rate: dict[float, tuple[WarningDetail, ...]] = {}
    replicas: list[int] = []
    slow_replicas: list[int] = []
    gpus_per_replica = 1
    request = None
    for rate in fleet_in.monthly_requests_per_s:
        if rate <= 0:
            replicas.append(0)
            slow_replicas.append(0)
            continue
        if rate not in by_rate:
            spec = _with_rate(raw, rate)
            workload = ServingWorkload.model_validate(spec)
            energy = QuoteRequest.model_validate({"workload": {"serving": spec}}).energy
            try:
                sized = serving_jobs(workload, cache, energy.to_core())
            except InvalidSpecError as exc:
                raise InvalidSpecError(str(exc), field=f"fleets.{index}.workload") from None
            serving = sized[0][0].serving or {}
            by_rate[rate] = int(str(serving.get("replicas", 1)))
            slow = serving.get("replicas_at_band_slow_end")
            slow_by_rate[rate] = max(by_rate[rate],
                                     by_rate[rate] if slow is None else int(str(slow)))
            factor = serving.get("band_slow_end_factor")
            if factor is not None:
                factors.append(float(str(factor)))
            details_by_rate[rate] = sized[0][0].warning_details
            gpus_per_replica = int(str(serving.get("gpus_per_replica", 1)))
            if rate == peak:
                request = _quote_request(body, {"serving": spec})
        replicas.append(by_rate[rate])
        slow_replicas.append(slow_by_rate[rate])
    assert request is not None  # noqa: S101 - the peak month is positive
    details: list[WarningDetail] = []
    said: set[tuple[str, str | None]] = set()
    for rate in (peak, *details_by_rate):
        for detail in details_by_rate[rate]:
            if (detail.code, detail.field) not in said:
                said.add((detail.code, detail.field))
                details.append(detail)
    slow_end = FleetSlowEnd(replicas=tuple(slow_replicas),
                            factor=max(factors) if factors else None,
                            warning_details=tuple(details))
    sized = size_workload(request, cache, WorkBudget(1))
    computed = price(session, request, sized, version_id, policy, now, gated=True,
                     offer_cache=offer_cache)
    options: list[pf.FleetOption] = []
    for line in _candidates(computed.result.lines, terms):
        assert line.amounts is not None  # noqa: S101
        pool = pools.pool(line)
        offer = pools.offer(line, pool)
        gpi = line.gpus_per_instance
        per = (gpi // gpus_per_replica if gpi >= gpus_per_replica
               else 1 / -(-gpus_per_replica // gpi))
        if line.term is Term.SPOT:
            options.append(pf.FleetOption(
                pool=pool, spot=True, spot_offer=offer,
                replicas_per_instance=per / (1 + line.amounts.goodput_loss_fraction)))
        elif not any(o.pool == pool and not o.spot for o in options):
            options.append(pf.FleetOption(pool=pool, spot=False, replicas_per_instance=per))
    if not options:
        raise InvalidSpecError(f"fleet {fleet_in.id} fits no offer", field=f"fleets.{index}")
    return pf.Fleet(fleet_id=fleet_in.id, replicas_per_month=tuple(replicas),
                    options=tuple(options)), slow_end


def _with_rate(raw: dict[str, Any], rate: float) -> dict[str, Any]:
    out = dict(raw)
    key = "estimate" if "estimate" in out else "plan"
    given = dict(out[key])
    traffic = dict(given["traffic"])
    traffic["requests_per_s"] = rate
    traffic.pop("concurrency", None)
    given["traffic"] = traffic
    out[key] = given
    return out


def _budget(body: PortfolioRequest, labels: tuple[str, ...]) -> pf.Budget | None:
    if body.budget is None:
        return None
    if body.budget.currency != "USD":
        raise InvalidSpecError("a portfolio budget is in USD, the pricing currency",
                               field="budget.currency")
    per = body.budget.per
    groups: dict[str, list[int]] = {}
    for m, label in enumerate(labels):
        year, month = label.split("-")
        key = {"month": label, "quarter": f"{year}-Q{(int(month) - 1) // 3 + 1}",
               "year": year, "horizon": "horizon"}[per]
        groups.setdefault(key, []).append(m)
    beyond = body.accounting == "commitment"
    return pf.Budget(amount_usd=Decimal(body.budget.amount), periods=tuple(
        pf.BudgetPeriod(label=k, months=tuple(v), includes_beyond=beyond and k == "horizon")
        for k, v in groups.items()))


def _usd(amount: Decimal) -> str:
    return f"{amount.quantize(pf.CENT)}"


def solve_request(body: PortfolioRequest, resolved: Resolved,
                  seconds_left: float | None = None) -> tuple[Solution, Solution]:
    """(the plan, the plan without the budget): the second names the periods a budget that
    no plan meets is exceeded in. Each HiGHS solve gets the request's ``node_limit`` nodes
    (the work budget); the clock guard is the request's ``time_limit_s`` or what is left of
    the request's deadline (``CQ_SEARCH_DEADLINE_S``), whichever is less. A solve the clock
    stopped is 503 whatever ``on_limit`` says: how far it got depends on the machine, and a
    stored plan must verify. One the node limit stopped is 503 under ``on_limit: refuse``
    and the best plan found, with its gap, under ``on_limit: best``."""
    problem = resolved.problem
    limit_s = body.time_limit_s if seconds_left is None else max(
        0.05, min(body.time_limit_s, seconds_left))
    if seconds_left is not None and seconds_left <= 0:
        raise SearchDeadlineError(body.time_limit_s, (
            "the portfolio's jobs and fleets took the request's whole deadline "
            "(CQ_SEARCH_DEADLINE_S) before the solve; nothing was stored"))
    solution = solve(problem, time_limit_s=limit_s, node_limit=body.node_limit)
    free = solution
    if problem.budget is not None and solution.decisions is None:
        free = solve(pf.Problem(**{name: getattr(problem, name)
                                   for name in problem.__dataclass_fields__ if name != "budget"}),
                     time_limit_s=limit_s, node_limit=body.node_limit)
    for got in (solution, free):
        if got.status == "time_limit":
            raise SearchDeadlineError(limit_s, (
                f"the portfolio's programme ({got.num_columns} columns, {got.num_rows} rows) "
                f"was stopped by the clock ({limit_s:g} s: time_limit_s or the request's "
                "deadline) before its work budget (node_limit "
                f"{body.node_limit}) was spent; a plan cut by the clock depends on the "
                "machine's speed and would not verify, so nothing was stored: raise "
                "time_limit_s, lower node_limit, or narrow the offers"))
        if got.status in ("node_limit", "no_solution") and (
                body.on_limit == "refuse" or got.decisions is None):
            raise SearchDeadlineError(limit_s, (
                f"the portfolio's programme ({got.num_columns} columns, {got.num_rows} rows) "
                f"was not solved within node_limit {body.node_limit} (status {got.status}, "
                f"gap {got.gap_fraction}); nothing was stored: raise node_limit, narrow the "
                "offers, or set on_limit 'best'"))
    return solution, free


def plan_body(body: PortfolioRequest, resolved: Resolved, solution: Solution,
              free: Solution) -> dict[str, Any]:
    """The plan's JSON (no id, owner or timestamps)."""
    problem = resolved.problem
    labels = resolved.labels
    chosen = solution if solution.decisions is not None else free
    reasons: list[dict[str, Any]] = []
    if chosen.decisions is None or chosen.priced is None:
        return {"solver": _solver(solution), "purchases": [], "jobs": [], "fleets": [],
                "months": [], "utilisation": [], "totals": {}, "baselines": [],
                "budget": None, "verdict": "reject", "reasons": [{
                    "code": "no_feasible_portfolio", "period": None,
                    "message": "no plan runs every must-run job within the policy's capacity "
                               "limits"}]}
    decisions, priced = chosen.decisions, chosen.priced
    purchases = []
    for (o, s), count in sorted(decisions.commitments.items()):
        offer = problem.offers[o]
        pool = problem.pools[offer.pool]
        length = pf.TERM_MONTHS[offer.term]
        purchases.append({
            "term": offer.term, "provider": pool.provider, "instance_type": pool.instance_type,
            "region": pool.region, "offer_id": offer.offer_id, "count": count,
            "start": labels[s], "end": month_label(month_index(labels[s]) + length - 1),
            "payment": "all_upfront" if offer.upfront else "monthly",
            "commitment_usd": _usd(count * offer.rate_usd_per_instance_hour
                                   * pf.HOURS_PER_MONTH * length)})
    jobs = []
    for j, job in enumerate(problem.jobs):
        placed = decisions.placements.get(j)
        if placed is None:
            jobs.append({"id": job.job_id, "run": False, "code": (
                "optional_job_dropped_budget" if problem.budget is not None
                else "optional_job_dropped_capacity"),
                "reason": "optional: left out so the must-run jobs fit the budget and limits"})
            continue
        option = job.options[placed[0]]
        pool = problem.pools[option.pool]
        jobs.append({"id": job.job_id, "run": True, "pool": pool.pool_id,
                     "mode": "spot" if option.spot else "committed_or_on_demand",
                     "instances": option.instances, "billed_hours": str(option.billed_hours),
                     "start": labels[placed[1]],
                     "end": labels[placed[1] + option.months() - 1]})
    slow = _slow_end(resolved, decisions, priced)
    fleets = []
    for f, fleet in enumerate(problem.fleets):
        out: dict[str, Any] = {
            "id": fleet.fleet_id, "replicas": list(fleet.replicas_per_month),
            "months": _fleet_months(problem, f, decisions.fleet_instances)}
        if slow is not None:
            facts = resolved.slow_ends[f]
            out.update({
                "replicas_at_band_slow_end": list(facts.replicas),
                "band_slow_end_factor": facts.factor,
                "extra_instances_at_band_slow_end": _fleet_months(problem, f, slow[0].extra),
                "warning_details": [{"code": d.code, "field": d.field, "message": d.message}
                                    for d in facts.warning_details]})
        fleets.append(out)
    months = []
    for m in range(problem.months):
        committed = sum(n * problem.pools[p].gpus_per_instance
                        for (p, mm), n in priced.committed_instances.items() if mm == m)
        demand = sum(float(h / pf.HOURS_PER_MONTH) * problem.pools[p].gpus_per_instance
                     for (p, mm), h in priced.base_demand_hours.items() if mm == m)
        months.append({"month": labels[m], "billed_cost_usd": _usd(priced.billed_usd[m]),
                       "effective_cost_usd": _usd(priced.effective_usd[m]),
                       "committed_gpus": committed, "base_demand_gpus": round(demand, 3)})
        if slow is not None:
            months[-1].update({
                "billed_cost_at_band_slow_end_usd": _usd(slow[1].billed_usd[m]),
                "effective_cost_at_band_slow_end_usd": _usd(slow[1].effective_usd[m])})
    utilisation = []
    for (p, m), n in sorted(priced.committed_instances.items()):
        used = min(priced.base_demand_hours.get((p, m), Decimal(0)), n * pf.HOURS_PER_MONTH)
        utilisation.append({"pool": problem.pools[p].pool_id, "month": labels[m],
                            "committed_instances": n,
                            "utilisation_fraction": float(used / (n * pf.HOURS_PER_MONTH))})
    run = set(decisions.placements)
    spot_allowed = "spot" in body.terms
    base = [{"name": b.name, "total_usd": _usd(b.priced.objective_usd),
             "within_limits": b.priced.within_limits}
            for b in baselines(problem, run, spot_allowed=spot_allowed)]
    verdict = "approve"
    periods = []
    if problem.budget is not None:
        amount = problem.budget.amount_usd
        per = body.budget.per if body.budget else "horizon"
        at_slow = (None if slow is None
                   else [spent for _, spent in pf.budget_spent(problem, slow[1])])
        for index, (period, spent) in enumerate(pf.budget_spent(problem, priced)):
            ok = spent <= amount
            periods.append({"period": period.label, "spent_usd": _usd(spent),
                            "budget_usd": _usd(amount), "within": ok})
            if at_slow is not None:
                high = at_slow[index]
                periods[-1].update({"spent_at_band_slow_end_usd": _usd(high),
                                    "within_at_band_slow_end": high <= amount})
                if ok and high > amount:
                    reasons.append({
                        "code": "estimate_uncertain", "period": period.label,
                        "rule": "budget", "outcome": "warn",
                        "message": f"{period.label}: {_usd(spent)} USD is within the budget "
                                   f"of {_usd(amount)} USD per {per}, but at the slow end "
                                   "of the fleets' serving bands (replicas_at_band_slow_end, "
                                   "the extra replicas on the plan's idle commitments, then "
                                   f"on demand or spot) it is {_usd(high)} USD"})
            if not ok:
                verdict = "reject"
                reasons.append({"code": "budget_exceeded", "period": period.label,
                                "message": f"{period.label}: {_usd(spent)} USD against a "
                                           f"budget of {_usd(amount)} USD per {per}"})
    if not priced.within_limits:
        verdict = "reject"
        reasons.extend({"code": "capacity_limit_exceeded", "period": None, "message": m}
                       for m in priced.limit_breaches)
    if slow is not None:
        reasons.extend(_slow_end_limits(problem, labels, slow[0], slow[1], priced))
    for kind, index, rule in resolved.unvalidated:
        if kind == "job" and index not in decisions.placements:
            continue  # an optional job left out: no verdict rests on it
        name = (problem.fleets[index].fleet_id if kind == "fleet"
                else problem.jobs[index].job_id)
        if rule.outcome is Outcome.FAIL:
            verdict = "reject"
        reasons.append({"code": rule.code, "period": None, "rule": rule.rule,
                        "outcome": rule.outcome.value, kind: name, "message": rule.message})
    totals = {"objective_usd": _usd(priced.objective_usd),
              "billed_in_horizon_usd": _usd(priced.total_billed_usd),
              "billed_beyond_horizon_usd": _usd(priced.billed_beyond_usd),
              "effective_in_horizon_usd": _usd(sum(priced.effective_usd, Decimal(0))),
              "effective_beyond_horizon_usd": _usd(priced.effective_beyond_usd),
              "committed_total_usd": _usd(priced.total_commitment_usd),
              "currency": "USD"}
    if slow is not None:
        totals = {**totals, "objective_at_band_slow_end_usd": _usd(slow[1].objective_usd)}
    return {
        "solver": _solver(chosen), "purchases": purchases, "jobs": jobs, "fleets": fleets,
        "months": months, "utilisation": utilisation,
        "totals": totals,
        "baselines": base,
        "budget": None if body.budget is None else {**body.budget.model_dump(mode="json"),
                                                    "periods": periods},
        "verdict": verdict, "reasons": reasons,
    }


def _fleet_months(problem: pf.Problem, f: int,
                  instances: Mapping[tuple[int, int, int], int]) -> list[list[dict[str, Any]]]:
    """Fleet ``f``'s instances per month, per pool and mode."""
    fleet = problem.fleets[f]
    return [[{"pool": problem.pools[fleet.options[i].pool].pool_id,
              "mode": "spot" if fleet.options[i].spot else "committed_or_on_demand",
              "instances": n}
             for (ff, i, mm), n in sorted(instances.items()) if ff == f and mm == m]
            for m in range(problem.months)]


def _slow_end(resolved: Resolved, decisions: pf.Decisions, priced: pf.Priced,
              ) -> tuple[pf.SlowEnd, pf.Priced] | None:
    """The plan as solved, its fleets raised to their replicas at the band's slow end and
    priced again (``pf.slow_end_decisions``; no second solve). None without fleets."""
    problem = resolved.problem
    if not problem.fleets:
        return None
    raised = pf.slow_end_decisions(problem, decisions, priced,
                                   [s.replicas for s in resolved.slow_ends])
    return raised, pf.price_decisions(problem, raised.decisions)


def _slow_end_limits(problem: pf.Problem, labels: tuple[str, ...], raised: pf.SlowEnd,
                     at_slow: pf.Priced, priced: pf.Priced) -> list[dict[str, Any]]:
    """``estimate_uncertain`` (a warning) where the band's slow end cannot be bought on the
    plan: a month whose slow-end replicas no option of the fleet can buy, or a capacity limit
    only the slow end's extra instances break."""
    out: list[dict[str, Any]] = [{
            "code": "estimate_uncertain", "period": labels[m], "rule": "budget",
            "outcome": "warn", "fleet": problem.fleets[f].fleet_id,
            "message": f"{labels[m]}: fleet {problem.fleets[f].fleet_id} needs "
                       "replicas_at_band_slow_end that no pool of the plan can add (no "
                       "on-demand or spot offer, no idle commitment): its slow-end cost is "
                       "not counted"} for f, m in raised.unserved]
    known = set(priced.limit_breaches)
    out.extend({"code": "estimate_uncertain", "period": None,
                "rule": None, "outcome": "warn",
                "message": f"at the slow end of the fleets' serving bands: {breach}"}
               for breach in at_slow.limit_breaches if breach not in known)
    return out


def _solver(solution: Solution) -> dict[str, Any]:
    return {"engine": "HiGHS (scipy.optimize.milp)", "status": solution.status,
            "optimal": solution.optimal,
            "gap_usd": None if solution.gap_usd is None else round(solution.gap_usd, 6),
            "gap_fraction": (None if solution.gap_fraction is None
                             else round(solution.gap_fraction, 9)),
            "nodes": solution.nodes, "columns": solution.num_columns,
            "rows": solution.num_rows, "integer_columns": solution.num_integer,
            "options_dropped": solution.options_dropped, "source": solution.source}
