"""The portfolio programme (issue 44): HiGHS's plan costs what a brute-force enumeration of
every purchase and placement finds, on small portfolios; it is never dearer than a baseline;
a budget a cent below the optimum rejects; the money adds up."""

from __future__ import annotations

import itertools
from decimal import Decimal

import numpy as np
import pytest

from service.api.portfolio_solver import baselines, solve
from service.core import portfolio as pf

H = pf.HOURS_PER_MONTH


def _problem(seed: int, *, months: int = 4, accounting: pf.Accounting = pf.Accounting.COMMITMENT,
             budget: pf.Budget | None = None, optional: bool = False,
             upfront: bool = False, capacity_block: bool = False) -> pf.Problem:
    """A random small portfolio on one pool: on-demand, one committed term, spot (3 offers);
    3 jobs of 1-2 instances. Rates are whole cents and hours whole, so no rounding enters."""
    rng = np.random.default_rng(seed)
    pools = (pf.Pool(pool_id="p0", provider="aws", region="r", zone=None, instance_type="i",
                     accelerator="h100", gpus_per_instance=8.0),)
    od = Decimal(int(rng.integers(800, 1200))) / 100
    committed = Decimal(int(rng.integers(300, 700))) / 100
    spot = Decimal(int(rng.integers(200, 600))) / 100
    offers = (
        pf.PoolOffer(offer_id="od", pool=0, term="on_demand", rate_usd_per_instance_hour=od),
        pf.PoolOffer(offer_id="c", pool=0,
                     term="capacity_block" if capacity_block else "reserved_1y",
                     rate_usd_per_instance_hour=committed, upfront=upfront),
        pf.PoolOffer(offer_id="sp", pool=0, term="spot", rate_usd_per_instance_hour=spot),
    )
    jobs = []
    for j in range(3):
        instances = int(rng.integers(1, 3))
        hours = Decimal(int(rng.integers(200, 1400)))
        spot_hours = hours * Decimal(int(rng.integers(110, 150))) / 100
        runs = -(-int(hours) // 730)
        earliest = int(rng.integers(0, months - runs + 1))
        deadline = int(rng.integers(earliest + runs - 1, months))
        options = [pf.JobOption(pool=0, spot=False, instances=instances, billed_hours=hours)]
        if j != 1:  # one job has no spot option
            options.append(pf.JobOption(pool=0, spot=True, instances=instances,
                                        billed_hours=spot_hours.to_integral_value(),
                                        spot_offer=2))
        jobs.append(pf.Job(job_id=f"j{j}", earliest_month=earliest, deadline_month=deadline,
                           must_run=not (optional and j == 2), options=tuple(options)))
    return pf.Problem(months=months, pools=pools, offers=offers, jobs=tuple(jobs),
                      accounting=accounting, budget=budget)


def _brute_force(problem: pf.Problem) -> tuple[int, Decimal]:
    """(optional jobs run, cheapest cost) over every placement of every job (each option and
    start, or not run when optional) and every commitment vector whose active count never
    exceeds the peak instances of all jobs together (more can only add cost: every rate is
    positive). Written apart from ``price_decisions``: its own arithmetic, unrounded."""
    months = problem.months
    od = problem.offers[0].rate_usd_per_instance_hour
    com = problem.offers[1]
    length = pf.TERM_MONTHS[com.term]
    spot = problem.offers[2].rate_usd_per_instance_hour
    amortised = problem.accounting is pf.Accounting.AMORTISED
    peak = sum(max(o.instances for o in j.options) for j in problem.jobs)
    choices = []
    for job in problem.jobs:
        per = [None] if not job.must_run else []
        for option in job.options:
            runs = -(-int(option.billed_hours) // 730)
            for start in range(job.earliest_month, job.deadline_month - int(runs) + 2):
                if start + runs <= months:
                    per.append((option, start))
        choices.append(per)
    best: tuple[int, Decimal] | None = None
    for counts in itertools.product(range(peak + 1), repeat=months):
        active = [0] * months
        for s, count in enumerate(counts):
            for m in range(s, min(months, s + length)):
                active[m] += count
        if max(active) > peak:
            continue
        commit = Decimal(0)
        budget_cash = [Decimal(0)] * months
        beyond = Decimal(0)
        for s, count in enumerate(counts):
            inside = min(months, s + length) - s
            commit += count * com.rate_usd_per_instance_hour * H * (inside if amortised
                                                                    else length)
            for m in range(s, s + inside):
                budget_cash[m] += count * com.rate_usd_per_instance_hour * H
            if not amortised:
                beyond += count * com.rate_usd_per_instance_hour * H * (length - inside)
        for placed in itertools.product(*choices):
            demand = [Decimal(0)] * months
            cash = list(budget_cash)
            for item in placed:
                if item is None:
                    continue
                option, start = item
                left = option.billed_hours
                m = start
                while left > 0:
                    used = min(H, left)
                    if option.spot:
                        cash[m] += spot * option.instances * used
                    else:
                        demand[m] += option.instances * used
                    left -= used
                    m += 1
            for m in range(months):
                cash[m] += od * max(Decimal(0), demand[m] - active[m] * H)
            total = sum(cash, Decimal(0)) + beyond
            if problem.budget is not None and total > problem.budget.amount_usd:
                continue
            run = sum(1 for item in placed if item is not None)
            key = (run, total)
            if best is None or (key[0], -key[1]) > (best[0], -best[1]):
                best = key
    assert best is not None
    return best


@pytest.mark.parametrize(("seed", "accounting", "optional", "upfront", "block"), [
    (1, pf.Accounting.COMMITMENT, False, False, False),
    (2, pf.Accounting.COMMITMENT, True, True, False),
    (3, pf.Accounting.AMORTISED, False, False, False),
    (4, pf.Accounting.COMMITMENT, False, False, True),
    (5, pf.Accounting.AMORTISED, True, True, True),
])
def test_plan_costs_what_brute_force_finds(seed: int, accounting: pf.Accounting,
                                           optional: bool, upfront: bool, block: bool) -> None:
    problem = _problem(seed, accounting=accounting, optional=optional, upfront=upfront,
                       capacity_block=block)
    solution = solve(problem)
    assert solution.optimal
    assert solution.priced is not None
    assert solution.decisions is not None
    run, cost = _brute_force(problem)
    assert len(solution.decisions.placements) == run
    assert solution.priced.objective_usd == cost
    # ... and no baseline is cheaper
    for baseline in baselines(problem, set(solution.decisions.placements), spot_allowed=True):
        assert solution.priced.objective_usd <= baseline.priced.objective_usd, baseline.name


def test_a_budget_a_cent_below_the_optimum_rejects_the_period() -> None:
    problem = _problem(1)
    best = solve(problem)
    assert best.priced is not None
    assert best.optimal
    horizon = pf.BudgetPeriod(label="horizon", months=tuple(range(problem.months)),
                              includes_beyond=True)
    at = pf.Problem(**{**_fields(problem), "budget": pf.Budget(
        amount_usd=best.priced.objective_usd, periods=(horizon,))})
    assert solve(at).status == "optimal"
    below = pf.Problem(**{**_fields(problem), "budget": pf.Budget(
        amount_usd=best.priced.objective_usd - Decimal("0.01"), periods=(horizon,))})
    refused = solve(below)
    assert refused.status == "infeasible"
    assert any(name == "budget horizon" for name in pf.formulate(below).row_names)


def _fields(problem: pf.Problem) -> dict[str, object]:
    return {name: getattr(problem, name) for name in problem.__dataclass_fields__}


def test_money_adds_up() -> None:
    problem = _problem(2, months=6, upfront=False)
    solution = solve(problem)
    priced = solution.priced
    assert priced is not None
    assert solution.optimal
    # monthly billed cash sums to the total (commitment accounting) to the cent
    assert sum(priced.billed_usd, Decimal(0)) + priced.billed_beyond_usd == priced.objective_usd
    per_charge = sum((sum(c.billed_usd, Decimal(0)) for c in priced.charges), Decimal(0))
    assert per_charge == sum(priced.billed_usd, Decimal(0))
    # effective (amortised) cost = billed over the horizon + what is committed beyond it
    assert (sum(priced.effective_usd, Decimal(0)) + priced.effective_beyond_usd
            == priced.total_commitment_usd)
    for charge in priced.charges:
        assert (sum(charge.billed_usd, Decimal(0)) + charge.billed_beyond_usd
                == sum(charge.effective_usd, Decimal(0)) + charge.effective_beyond_usd)


def test_upfront_fees_are_billed_in_the_month_paid() -> None:
    problem = _problem(2, upfront=True)
    priced = pf.price_decisions(problem, pf.Decisions(
        commitments={(1, 1): 2}, placements={}, fleet_instances={}))
    fee = 2 * problem.offers[1].rate_usd_per_instance_hour * H * 12
    assert priced.billed_usd[1] == fee
    assert priced.billed_usd[0] == 0
    assert priced.effective_usd[1] == fee / 12
    assert priced.effective_beyond_usd == fee * 9 / 12


def test_capacity_limits_bind() -> None:
    """A reserved limit of 8 GPUs (one 8-GPU instance) caps the commitments."""
    problem = _problem(1)
    capped = pf.Problem(**{**_fields(problem), "limits": pf.Limits(
        max_reserved_gpus_per_region=8)})
    solution = solve(capped)
    assert solution.priced is not None
    assert max(solution.priced.committed_instances.values(), default=0) <= 1
    assert solution.priced.within_limits


def test_deadline_before_earliest_start_names_the_field() -> None:
    late = pf.Job(job_id="j", earliest_month=3, deadline_month=2, must_run=True, options=())
    with pytest.raises(pf.InvalidSpecError) as raised:
        pf.Problem(months=4, pools=(), offers=(), jobs=(late,))
    assert raised.value.field == "jobs.deadline"


def test_pools_per_job_restricts_and_counts_what_it_drops() -> None:
    """Three pools; keeping one per job and mode drops the others and says how many."""
    base = _problem(3)
    pools = tuple(pf.Pool(pool_id=f"p{k}", provider="aws", region=f"r{k}", zone=None,
                          instance_type="i", accelerator="h100", gpus_per_instance=8.0)
                  for k in range(3))
    offers = tuple(pf.PoolOffer(offer_id=f"{o.offer_id}{k}", pool=k, term=o.term,
                                rate_usd_per_instance_hour=o.rate_usd_per_instance_hour
                                + Decimal(k))
                   for k in range(3) for o in base.offers)
    jobs = tuple(pf.Job(job_id=j.job_id, earliest_month=j.earliest_month,
                        deadline_month=j.deadline_month, must_run=True, options=tuple(
                            pf.JobOption(pool=k, spot=o.spot, instances=o.instances,
                                         billed_hours=o.billed_hours,
                                         spot_offer=3 * k + 2 if o.spot else None)
                            for k in range(3) for o in j.options)) for j in base.jobs)
    every = pf.Problem(months=base.months, pools=pools, offers=offers, jobs=jobs)
    one = pf.restrict(every, 1)
    assert pf.formulate(every).options_dropped == 0
    assert pf.formulate(one).options_dropped == 2 * 3 + 2 * 2  # 3 jobs' base, 2 jobs' spot
    assert all(o.pool == 0 for job in one.jobs for o in job.options)
    full, kept = solve(every), solve(one)
    assert full.priced is not None
    assert kept.priced is not None
    # pool 0 is the cheapest on every term, so keeping one pool loses nothing here
    assert kept.priced.objective_usd == full.priced.objective_usd


def _rich_problem(seed: int) -> pf.Problem:
    """A random portfolio on two pools that exercises every tightening of ``formulate``:
    pool 0 has on-demand, reserved_1y, reserved_3y, a duplicate of the 1-year offer and
    (some seeds) a capacity block, two spot zones; pool 1 on-demand and reserved_1y; jobs of
    1-3 instances with base and spot options; a serving fleet; horizons of 3-5 months (every
    term holds the whole horizon) or 13-14 (a 1-year term does not: one reserved-limit row a
    month); limits that bind; no budget, a horizon budget or a monthly one (each at 70-100 %
    of what the plain programme's unbudgeted optimum spends in its dearest period, so that it
    binds); both accountings."""
    rng = np.random.default_rng(seed)
    months = int(rng.choice([3, 4, 5, 13, 14]))
    pools = tuple(pf.Pool(pool_id=f"p{k}", provider="aws", region=f"r{k}", zone=zone,
                          instance_type="i", accelerator="h100", gpus_per_instance=8.0)
                  for k, zone in enumerate([None, None, "z1", "z2"]))

    def cents(low: int, high: int) -> Decimal:
        return Decimal(int(rng.integers(low, high))) / 100

    upfront = bool(rng.integers(0, 2))
    one_year = cents(400, 700)
    offers = [
        pf.PoolOffer(offer_id="od0", pool=0, term="on_demand",
                     rate_usd_per_instance_hour=cents(800, 1200)),
        pf.PoolOffer(offer_id="r1", pool=0, term="reserved_1y",
                     rate_usd_per_instance_hour=one_year, upfront=upfront),
        pf.PoolOffer(offer_id="r1-again", pool=0, term="reserved_1y",
                     rate_usd_per_instance_hour=one_year, upfront=upfront),
        pf.PoolOffer(offer_id="r3", pool=0, term="reserved_3y",
                     rate_usd_per_instance_hour=cents(100, 500)),
        pf.PoolOffer(offer_id="od1", pool=1, term="on_demand",
                     rate_usd_per_instance_hour=cents(800, 1200)),
        pf.PoolOffer(offer_id="r1b", pool=1, term="reserved_1y",
                     rate_usd_per_instance_hour=cents(400, 800)),
        pf.PoolOffer(offer_id="sp1", pool=2, term="spot",
                     rate_usd_per_instance_hour=cents(200, 500)),
        pf.PoolOffer(offer_id="sp2", pool=3, term="spot",
                     rate_usd_per_instance_hour=cents(200, 500)),
    ]
    if rng.integers(0, 2):
        offers.append(pf.PoolOffer(offer_id="cb", pool=0, term="capacity_block",
                                   rate_usd_per_instance_hour=cents(500, 900)))
    horizon_months = min(months, 5)
    jobs = []
    for j in range(int(rng.integers(2, 5))):
        instances = int(rng.integers(1, 4))
        hours = Decimal(int(rng.integers(200, 1400)))
        runs = -(-int(hours) // 730)
        earliest = int(rng.integers(0, horizon_months - runs + 1))
        deadline = int(rng.integers(earliest + runs - 1, months))
        options = [pf.JobOption(pool=k, spot=False, instances=instances, billed_hours=hours)
                   for k in (0, 1)]
        options += [pf.JobOption(pool=k, spot=True, instances=instances,
                                 billed_hours=hours + 30, spot_offer=4 + k) for k in (2, 3)
                    if rng.integers(0, 3)]
        jobs.append(pf.Job(job_id=f"j{j}", earliest_month=earliest, deadline_month=deadline,
                           must_run=bool(rng.integers(0, 4)), options=tuple(options)))
    fleets = (pf.Fleet(fleet_id="f", replicas_per_month=tuple(
        int(r) for r in rng.integers(0, 7, size=months)), options=(
        pf.FleetOption(pool=0, spot=False, replicas_per_instance=2.0),
        pf.FleetOption(pool=1, spot=False, replicas_per_instance=0.5),
        pf.FleetOption(pool=2, spot=True, replicas_per_instance=1.6, spot_offer=6))),)
    limits = pf.Limits(
        max_reserved_gpus_per_region=int(rng.choice([8, 16, 40])),
        max_on_demand_gpus_per_region=int(rng.choice([32, 64, 2048])),
        max_capacity_block_instances=int(rng.choice([1, 3])),
        max_spot_gpus_per_zone=int(rng.choice([8, 16, 64])))
    accounting = pf.Accounting.AMORTISED if rng.integers(0, 3) == 0 else pf.Accounting.COMMITMENT
    problem = pf.Problem(months=months, pools=pools, offers=tuple(offers), jobs=tuple(jobs),
                         fleets=fleets, limits=limits, accounting=accounting)
    kind = int(rng.integers(0, 3))
    if kind == 0:
        return problem
    periods = (tuple(pf.BudgetPeriod(label=f"month {m}", months=(m,)) for m in range(months))
               if kind == 2 else
               (pf.BudgetPeriod(label="horizon", months=tuple(range(months)),
                                includes_beyond=accounting is pf.Accounting.COMMITMENT),))
    counted = pf.Problem(**{**_fields(problem), "budget": pf.Budget(
        amount_usd=Decimal(10) ** 12, periods=periods)})
    plain = pf.formulate(counted, tighten=False)
    found = _optimum(plain)
    if found is None:
        return problem
    priced = pf.price_decisions(counted, pf.decode(counted, plain, found[1]))
    dearest = max(spent for _, spent in pf.budget_spent(counted, priced))
    amount = (dearest * Decimal(int(rng.integers(70, 101))) / 100).to_integral_value()
    return pf.Problem(**{**_fields(problem), "budget": pf.Budget(amount_usd=amount,
                                                                  periods=periods)})


def _optimum(form: pf.Formulation) -> tuple[float, np.ndarray] | None:
    """HiGHS's proven optimum of ``form`` and its solution (None when infeasible)."""
    from scipy.optimize import Bounds, LinearConstraint, milp  # type: ignore[import-untyped]
    from scipy.sparse import coo_matrix  # type: ignore[import-untyped]
    a = coo_matrix((form.vals, (form.rows, form.cols)),
                   shape=(form.num_rows, form.num_columns)).tocsr()
    result = milp(form.c, constraints=[LinearConstraint(a, form.row_lower, form.row_upper)],
                  integrality=form.integrality, bounds=Bounds(form.lower, form.upper),
                  options={"mip_rel_gap": 1e-12, "disp": False})
    if result.status == 2:
        return None
    assert result.status == 0, result.message
    return float(result.fun), result.x


@pytest.mark.parametrize("seed", range(24))
def test_the_tightened_programme_has_the_plain_programmes_optimum(seed: int) -> None:
    """Every reduction and valid inequality of ``formulate`` (docs/portfolio.md, "Tightening")
    keeps the optimum: the tightened programme and the plain one (``tighten=False``, every
    commitment at every start, one reserved-limit row a month, no bounds from the demand, no
    rounded fleet rows, no reserved-use rows) prove the same objective, or are both
    infeasible."""
    problem = _rich_problem(seed)
    tight, plain = pf.formulate(problem), pf.formulate(problem, tighten=False)
    got, want = _optimum(tight), _optimum(plain)
    if want is None:
        assert got is None
        return
    assert got is not None
    assert got[0] == pytest.approx(want[0], rel=1e-9, abs=1e-6)


def _edge_problem(case: str) -> pf.Problem:
    """Portfolios where a condition of the commitments' dominance decides the optimum (each
    reduction without its condition would lose the optimum or every plan):

    - ``monthly_budget``: a 1-year commitment from month 1 fits a monthly budget that one from
      month 0 (the same cost, more months covered) breaks: the budget's periods count;
    - ``monthly_limit``: 13 months, a reserved limit of one instance and no on-demand: a
      commitment from month 0 and one from month 12 cover the year; one from month 1 covers
      more than the one from 12 but breaks the limit in months 1-11 beside the first;
    - ``block_limit``: two capacity blocks on one pool, one instance each at most, two
      instances needed: the dearer block is not dominated."""
    pools = tuple(pf.Pool(pool_id=f"p{k}", provider="aws", region=f"r{k}", zone=None,
                          instance_type="i", accelerator="h100", gpus_per_instance=8.0)
                  for k in range(2))
    od = pf.PoolOffer(offer_id="od", pool=0, term="on_demand",
                      rate_usd_per_instance_hour=Decimal(30))
    year = pf.PoolOffer(offer_id="r1", pool=0, term="reserved_1y",
                        rate_usd_per_instance_hour=Decimal(5))
    if case == "monthly_budget":
        other = pf.PoolOffer(offer_id="od1", pool=1, term="on_demand",
                             rate_usd_per_instance_hour=Decimal(30))
        jobs = (pf.Job(job_id="a", earliest_month=0, deadline_month=0, must_run=True, options=(
                    pf.JobOption(pool=1, spot=False, instances=1, billed_hours=H),)),
                pf.Job(job_id="b", earliest_month=1, deadline_month=3, must_run=True, options=(
                    pf.JobOption(pool=0, spot=False, instances=1, billed_hours=3 * H),)))
        return pf.Problem(months=4, pools=pools, offers=(od, year, other), jobs=jobs,
                          budget=pf.Budget(amount_usd=Decimal(22_000), periods=tuple(
                              pf.BudgetPeriod(label=f"month {m}", months=(m,))
                              for m in range(4))))
    if case == "monthly_limit":
        fleet = pf.Fleet(fleet_id="f", replicas_per_month=(1,) * 13, options=(
            pf.FleetOption(pool=0, spot=False, replicas_per_instance=1.0),))
        return pf.Problem(months=13, pools=pools, offers=(od, year), jobs=(), fleets=(fleet,),
                          limits=pf.Limits(max_reserved_gpus_per_region=8,
                                           max_on_demand_gpus_per_region=0))
    blocks = tuple(pf.PoolOffer(offer_id=f"cb{k}", pool=0, term="capacity_block",
                                rate_usd_per_instance_hour=Decimal(6 + k)) for k in range(2))
    job = pf.Job(job_id="a", earliest_month=0, deadline_month=0, must_run=True, options=(
        pf.JobOption(pool=0, spot=False, instances=2, billed_hours=H),))
    return pf.Problem(months=2, pools=pools, offers=(od, *blocks), jobs=(job,),
                      limits=pf.Limits(max_capacity_block_instances=1,
                                       max_on_demand_gpus_per_region=0))


@pytest.mark.parametrize("case", ["monthly_budget", "monthly_limit", "block_limit"])
def test_the_commitments_dominance_keeps_the_optimum_at_its_conditions(case: str) -> None:
    problem = _edge_problem(case)
    got = _optimum(pf.formulate(problem))
    want = _optimum(pf.formulate(problem, tighten=False))
    assert want is not None
    assert got is not None
    assert got[0] == pytest.approx(want[0], rel=1e-9, abs=1e-6)
    solution = solve(problem)
    assert solution.optimal
    assert solution.priced is not None
    assert solution.priced.within_limits
    assert float(solution.priced.objective_usd) == pytest.approx(want[0], abs=0.01)


# --- The band's slow end (issue 40): the plan's fleets raised, priced, never re-solved -----

def _slow_problem(*, on_demand: bool = True, spot_limit: int | None = None) -> pf.Problem:
    """One pool of 8-GPU instances holding 2 replicas each, a reservation, on-demand (10 USD)
    and spot (4 USD, a replica per instance after the spares); a fleet of 2 replicas a
    month for 2 months."""
    pools = (pf.Pool(pool_id="p0", provider="aws", region="r", zone=None, instance_type="i",
                     accelerator="h100", gpus_per_instance=8.0),)
    offers = [pf.PoolOffer(offer_id="c", pool=0, term="reserved_1y",
                           rate_usd_per_instance_hour=Decimal("6.00")),
              pf.PoolOffer(offer_id="sp", pool=0, term="spot",
                           rate_usd_per_instance_hour=Decimal("4.00"))]
    if on_demand:
        offers.append(pf.PoolOffer(offer_id="od", pool=0, term="on_demand",
                                   rate_usd_per_instance_hour=Decimal("10.00")))
    fleet = pf.Fleet(fleet_id="f", replicas_per_month=(2, 2), options=(
        pf.FleetOption(pool=0, spot=False, replicas_per_instance=2.0),
        pf.FleetOption(pool=0, spot=True, replicas_per_instance=1.0, spot_offer=1)))
    return pf.Problem(months=2, pools=pools, offers=tuple(offers), jobs=(), fleets=(fleet,),
                      limits=pf.Limits(max_spot_gpus_per_zone=spot_limit))


def _decided(instances: dict[tuple[int, int, int], int], reserved: int) -> pf.Decisions:
    return pf.Decisions(commitments={(0, 0): reserved} if reserved else {}, placements={},
                        fleet_instances=instances)


def test_the_slow_end_fills_idle_commitments_first_then_the_cheapest_within_the_limits(
        ) -> None:
    problem = _slow_problem(spot_limit=16)
    # Two reserved instances, one used: the slow end's 2 more replicas fit on the idle one.
    decisions = _decided({(0, 0, 0): 1, (0, 0, 1): 1}, reserved=2)
    priced = pf.price_decisions(problem, decisions)
    raised = pf.slow_end_decisions(problem, decisions, priced, [(4, 4)])
    assert raised.extra == {(0, 0, 0): 1, (0, 0, 1): 1}
    assert raised.unserved == ()
    assert pf.price_decisions(problem, raised.decisions).billed_usd == priced.billed_usd
    # No reservation: spot (4 USD a replica) before on demand (5 USD a replica), up to the
    # zone's 16 spot GPUs (2 instances), the rest on demand.
    bare = _decided({(0, 0, 0): 1, (0, 0, 1): 1}, reserved=0)
    priced = pf.price_decisions(problem, bare)
    raised = pf.slow_end_decisions(problem, bare, priced, [(7, 2)])
    assert raised.extra == {(0, 1, 0): 2, (0, 0, 0): 2}
    again = pf.price_decisions(problem, raised.decisions)
    assert again.within_limits
    assert again.billed_usd[0] - priced.billed_usd[0] == (2 * 4 + 2 * 10) * H
    assert again.billed_usd[1] == priced.billed_usd[1]  # month 2 needs no more


def test_slow_end_replicas_no_pool_can_add_are_unserved() -> None:
    problem = _slow_problem(on_demand=False, spot_limit=0)
    decisions = _decided({(0, 0, 0): 1, (0, 0, 1): 1}, reserved=1)
    priced = pf.price_decisions(problem, decisions)
    raised = pf.slow_end_decisions(problem, decisions, priced, [(2, 3)])
    assert raised.unserved == ((0, 1),)
    assert raised.extra == {}
