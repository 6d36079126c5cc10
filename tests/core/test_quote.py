"""The quote vertical in the core: commitments, accounting, node fit, every policy rule, the
recommendation and the verdict, worked by hand."""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from typing import Any

import pytest

from service.core import pricing
from service.core import quote as q
from service.core.policy import DEFAULT_POLICY, Accounting, Outcome, Policy
from service.core.quote import (
    Fabric,
    JobTiming,
    Options,
    PriceOffer,
    SizedJob,
    Term,
    Verdict,
)

TODAY = 739_000  # a day ordinal; prices below are dated relative to it
HGX = Fabric(gpus_per_instance=8, nvlink_domain=8, inter_node_gbps=3200.0)
DAY_S = 86_400.0


def offer(**changes: object) -> PriceOffer:
    base = PriceOffer(
        offer_id="off_1", provider="aws", region="us-east-1", zone=None,
        instance_type="p5.48xlarge", accelerator="h100", term=Term.ON_DEMAND,
        payment_option=None, currency="USD", price_per_instance_hour=Decimal("80.00"),
        fabric=HGX, fabric_source="AWS P5 page", interruption_rate_per_hour=None,
        interruption_rate_source=None, interruption_rate_assumed=False,
        region_carbon_g_per_kwh=None, as_of="2026-11-01", as_of_day=TODAY - 10,
        indicative=False, derived=False, quality_flags=())
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def job(num_gpus: int = 64, wall_s: float = 10 * DAY_S, fast: int = 8,
        band: tuple[float, float] | None = None) -> SizedJob:
    low, high = band or (wall_s, wall_s)
    return SizedJob(accelerator="h100", num_gpus=num_gpus,
                    timing=JobTiming(wall_s=wall_s, wall_s_p10=low, wall_s_p90=high,
                                     basis="test"),
                    checkpoint_bytes=0.0, power_w_per_gpu=1000.0, fast_domain=fast)


NO_FAILURES = Options(failure_rate_per_gpu_hour=0.0)


def priced(o: PriceOffer, j: SizedJob | None = None, options: Options = NO_FAILURES,
           policy: Policy = DEFAULT_POLICY) -> q.QuoteResult:
    return q.price_all(jobs=[j or job()], offers=[o], timings={}, onprem={}, options=options,
                       policy=policy, today=TODAY, version_id="cv_000001", gated=True)


def only_line(result: q.QuoteResult) -> q.QuoteLine:
    assert len(result.lines) == 1
    return result.lines[0]


def codes(line: q.QuoteLine) -> dict[str, Outcome]:
    return {r.code: r.outcome for r in line.rules}


class TestCommitment:
    def test_on_demand_commits_the_jobs_own_cost(self) -> None:
        line = only_line(priced(offer()))
        a = line.amounts
        assert a is not None
        # 8 instances x 240 h x 80.00
        assert a.job_cost_total == a.commitment_total == a.total == Decimal("153600.00")
        assert a.term_s == pytest.approx(10 * DAY_S)

    def test_a_reservation_commits_every_hour_of_its_term(self) -> None:
        line = only_line(priced(offer(term=Term.RESERVED_3Y, payment_option="no_upfront",
                                      price_per_instance_hour=Decimal("40.00"))))
        a = line.amounts
        assert a is not None
        assert a.job_cost_total == Decimal("76800.00")             # 8 x 240 h x 40
        assert a.commitment_total == Decimal(8 * 3 * 8760 * 40)    # 8,409,600.00
        assert a.total == a.commitment_total                       # commitment accounting
        assert a.term_s == 3 * 8760 * 3600
        assert a.terms_bought == 1

    def test_amortised_accounting_divides_the_jobs_share_by_the_stated_utilisation(
        self,
    ) -> None:
        options = dataclasses.replace(NO_FAILURES, accounting=Accounting.AMORTISED,
                                      utilisation_fraction=Decimal("0.5"))
        line = only_line(priced(offer(term=Term.RESERVED_1Y, payment_option="no_upfront",
                                      price_per_instance_hour=Decimal("40.00")),
                                options=options))
        a = line.amounts
        assert a is not None
        assert a.total == Decimal("153600.00")                     # 76,800 / 0.5
        assert a.commitment_total == Decimal(8 * 8760 * 40)
        assert codes(line)["amortised_accounting"] is Outcome.WARN

    @pytest.mark.parametrize(("hours", "days", "blocks"), [
        (Decimal(1), 1, 1), (Decimal(14 * 24), 14, 1), (Decimal(14 * 24 + 1), 21, 1),
        (Decimal(182 * 24), 182, 1), (Decimal(200 * 24), 210, 2),  # 2 x 100 -> 2 x 15 weeks
    ])
    def test_capacity_blocks_are_bought_in_days_then_weeks(self, hours: Decimal, days: int,
                                                         blocks: int) -> None:
        assert q.capacity_block_days(hours) == (days, blocks)

    def test_a_capacity_block_commits_the_whole_block(self) -> None:
        line = only_line(priced(offer(term=Term.CAPACITY_BLOCK, payment_option="all_upfront"),
                                job(wall_s=15 * DAY_S)))
        a = line.amounts
        assert a is not None
        assert a.commitment_total == Decimal(8 * 21 * 24 * 80)     # 15 days -> 3 weeks
        assert a.job_cost_total == Decimal(8 * 15 * 24 * 80)

    def test_the_band_carries_into_money_and_the_deadline_probability(self) -> None:
        options = dataclasses.replace(NO_FAILURES, deadline_s=10 * DAY_S)
        line = only_line(priced(offer(), job(band=(8 * DAY_S, 12 * DAY_S)), options))
        a = line.amounts
        assert a is not None
        assert a.job_cost_band.p10 == Decimal("122880.00")
        assert a.job_cost_band.p90 == Decimal("184320.00")
        assert a.deadline_probability == pytest.approx(0.5)        # the median is the deadline
        assert codes(line)["estimate_uncertain"] is Outcome.WARN


class TestNodeFit:
    @pytest.mark.parametrize(("fabric", "gpus", "code"), [
        (Fabric(gpus_per_instance=0.25, nvlink_domain=1, inter_node_gbps=10.0), 8,
         "fractional_gpu_instance"),
        (Fabric(gpus_per_instance=8, nvlink_domain=None, inter_node_gbps=3200.0), 64,
         "nvlink_domain_unknown"),
        (Fabric(gpus_per_instance=1, nvlink_domain=1, inter_node_gbps=100.0), 64,
         "nvlink_domain_too_small"),
        (Fabric(gpus_per_instance=8, nvlink_domain=8, inter_node_gbps=None), 64,
         "interconnect_unknown"),
    ])
    def test_offers_that_cannot_host_the_plan_are_rejected_unpriced(
        self, fabric: Fabric, gpus: int, code: str,
    ) -> None:
        result = priced(offer(fabric=fabric), job(num_gpus=gpus))
        assert result.lines == ()
        assert [r.code for r in result.rejected] == [code]
        assert result.verdict is Verdict.REJECT
        assert result.reasons[0].code == "no_offer_fits_plan"

    def test_one_instance_needs_no_inter_node_network(self) -> None:
        fabric = Fabric(gpus_per_instance=8, nvlink_domain=8, inter_node_gbps=None)
        assert q.node_fit(job(num_gpus=8), fabric) is None

    def test_without_require_node_fit_a_misfit_is_priced_with_a_warning(self) -> None:
        policy = Policy(require_node_fit=False)
        fabric = Fabric(gpus_per_instance=1, nvlink_domain=1, inter_node_gbps=100.0)
        line = only_line(priced(offer(fabric=fabric), job(), policy=policy))
        assert codes(line)["no_offer_fits_plan"] is Outcome.WARN


class TestRules:
    def judged(self, policy: Policy, options: Options = NO_FAILURES,
               **changes: Any) -> dict[str, Outcome]:
        return codes(only_line(priced(offer(**changes), options=options, policy=policy)))

    def test_budget_fails_on_the_commitment_and_passes_at_equality(self) -> None:
        at = dataclasses.replace(NO_FAILURES, budget=Decimal("153600.00"))
        under = dataclasses.replace(NO_FAILURES, budget=Decimal("153599.99"))
        assert self.judged(DEFAULT_POLICY, at)["within_budget"] is Outcome.PASS
        assert self.judged(DEFAULT_POLICY, under)["commitment_over_budget"] is Outcome.FAIL

    def test_deadline(self) -> None:
        late = dataclasses.replace(NO_FAILURES, deadline_s=9 * DAY_S)
        assert self.judged(DEFAULT_POLICY, late)["deadline_missed"] is Outcome.FAIL

    @pytest.mark.parametrize(("policy", "code"), [
        (Policy(max_commitment=Decimal("100000")), "commitment_over_policy_limit"),
        (Policy(max_job_cost=Decimal("100000")), "job_cost_over_policy_limit"),
        (Policy(allowed_terms=frozenset({"spot"})), "term_not_allowed"),
        (Policy(allowed_providers=frozenset({"gcp"})), "provider_not_allowed"),
        (Policy(allowed_regions=frozenset({"eu-west-1"})), "region_not_allowed"),
        (Policy(max_duration_s=5 * DAY_S), "duration_over_limit"),
        (Policy(max_price_age_s=5 * DAY_S), "stale_price"),
        (Policy(currency="EUR", max_commitment=Decimal("1e9")), "commitment_over_policy_limit"),
    ])
    def test_each_limit_fails_and_warn_only_downgrades_it(self, policy: Policy,
                                                          code: str) -> None:
        assert self.judged(policy)[code] is Outcome.FAIL
        rule = next(r.rule for r in only_line(priced(offer(), policy=policy)).rules
                    if r.code == code)
        soft = dataclasses.replace(policy, warn_only=frozenset({rule}))
        assert self.judged(soft)[code] is Outcome.WARN

    def test_success_probability(self) -> None:
        options = dataclasses.replace(NO_FAILURES, deadline_s=10 * DAY_S)
        policy = Policy(min_success_probability=0.8)
        line = only_line(priced(offer(), job(band=(8 * DAY_S, 12 * DAY_S)), options, policy))
        assert codes(line)["success_probability_below_minimum"] is Outcome.FAIL

    @pytest.mark.parametrize(("changes", "code", "lenient"), [
        ({"indicative": True}, "indicative_price", Policy(forbid_indicative=False)),
        ({"derived": True}, "derived_price", Policy(forbid_indicative=False)),
        ({"quality_flags": ("price_outlier",)}, "quarantined_price",
         Policy(forbid_quarantined=False)),
        # A committed price dearer than on-demand (catalog.quality, issue 39) is quarantined.
        ({"quality_flags": ("reserved_above_on_demand",)}, "quarantined_price",
         Policy(forbid_quarantined=False)),
    ])
    def test_price_quality_fails_by_default_and_warns_when_the_policy_allows_it(
        self, changes: dict[str, Any], code: str, lenient: Policy,
    ) -> None:
        assert self.judged(DEFAULT_POLICY, **changes)[code] is Outcome.FAIL
        assert self.judged(lenient, **changes)[code] is Outcome.WARN

    def test_a_stale_price_under_the_default_policy(self) -> None:
        old = self.judged(DEFAULT_POLICY, as_of_day=TODAY - 181)
        assert old["stale_price"] is Outcome.FAIL
        assert "stale_price" not in self.judged(DEFAULT_POLICY, as_of_day=TODAY - 180)

    def test_spot_capacity_and_assumed_rates(self) -> None:
        spot = {"term": Term.SPOT, "zone": "use1-az1", "interruption_rate_per_hour": 1e-4,
                "interruption_rate_source": "assumed", "interruption_rate_assumed": True}
        small = codes(only_line(priced(offer(**spot), job(num_gpus=64))))
        assert "spot_capacity_unverified" not in small           # 64 GPUs: at the threshold
        assert small["assumed_interruption_rate"] is Outcome.WARN
        big = codes(only_line(priced(offer(**spot), job(num_gpus=72))))
        assert big["spot_capacity_unverified"] is Outcome.FAIL
        strict = Policy(forbid_assumed_interruption_rates=True,
                        forbid_unverified_spot_capacity=False)
        judged = codes(only_line(priced(offer(**spot), job(num_gpus=72), policy=strict)))
        assert judged["assumed_interruption_rate"] is Outcome.FAIL
        assert judged["spot_capacity_unverified"] is Outcome.WARN


class TestVerdict:
    def test_the_recommendation_prefers_a_passing_line_to_a_cheaper_failing_one(
        self,
    ) -> None:
        cheap = offer(offer_id="off_cheap", price_per_instance_hour=Decimal("10.00"),
                      indicative=True)
        firm = offer(offer_id="off_firm", instance_type="p5e.48xlarge")
        result = q.price_all(jobs=[job()], offers=[cheap, firm], timings={}, onprem={},
                             options=NO_FAILURES, policy=DEFAULT_POLICY, today=TODAY,
                             version_id="cv_000001", gated=True)
        assert result.cheapest is not None
        assert result.cheapest.offer_id == "off_cheap"
        assert result.recommended is not None
        assert result.recommended.offer_id == "off_firm"
        assert result.verdict is Verdict.APPROVE

    def test_a_warning_still_approves_a_failure_rejects(self) -> None:
        lenient = priced(offer(indicative=True), policy=Policy(forbid_indicative=False))
        assert (lenient.verdict, lenient.policy_outcome) == (Verdict.APPROVE, Outcome.WARN)
        strict = priced(offer(indicative=True))
        assert (strict.verdict, strict.policy_outcome) == (Verdict.REJECT, Outcome.FAIL)

    def test_the_fabric_timing_is_used_per_offer(self) -> None:
        slow = Fabric(gpus_per_instance=8, nvlink_domain=8, inter_node_gbps=400.0)
        j = job()
        timings = {(0, slow): JobTiming(wall_s=20 * DAY_S, wall_s_p10=20 * DAY_S,
                                        wall_s_p90=20 * DAY_S, basis="slow fabric")}
        result = q.price_all(
            jobs=[j], offers=[offer(), offer(offer_id="off_2", fabric=slow)], timings=timings,
            onprem={}, options=NO_FAILURES, policy=DEFAULT_POLICY, today=TODAY,
            version_id="cv_000001", gated=False)
        seconds = {x.offer_id: x.amounts.wall_clock_s for x in result.lines if x.amounts}
        assert seconds == {"off_1": pytest.approx(10 * DAY_S), "off_2": pytest.approx(20 * DAY_S)}
        assert result.verdict is None  # ungated: no budget, deadline or named policy


def test_owned_gpus_that_fail_faster_than_a_restart_are_an_infeasible_line_not_a_500() -> None:
    """Issue 14: an on-prem line with Λ·R ≥ 1 reached exact(inf) and answered 500."""
    from service.core import pricing

    inputs = q.OnPremInputs(purchase_price_per_gpu=Decimal("30000"), basis="request",
                            tco=pricing.OnPremInputs(purchase_price_per_gpu=Decimal("30000")))
    options = Options(failure_rate_per_gpu_hour=1.0, restart_s=600.0)
    line = q.onprem_line(job(num_gpus=64), inputs, options, "cv_000001")
    assert not line.feasible
    assert "cannot make progress" in (line.infeasible_reason or "")


class TestEqualAmounts:
    """Equal inputs that print differently give their own text, whatever was priced before."""

    @staticmethod
    def fresh(o: PriceOffer, options: Options = NO_FAILURES) -> q.QuoteLine:
        return only_line(priced(o, options=options))

    @pytest.mark.parametrize(("first", "second"), [
        (Decimal("2.5"), Decimal("2.50")), (Decimal("2.50"), Decimal("2.5")),
        (Decimal("40"), Decimal("40.000000")),
    ])
    def test_equal_rates_keep_their_own_representation(self, first: Decimal,
                                                        second: Decimal) -> None:
        def reserved(rate: Decimal) -> PriceOffer:
            return offer(term=Term.RESERVED_1Y, payment_option="no_upfront",
                         price_per_instance_hour=rate, on_demand_rate=rate * 2)

        expected = self.fresh(reserved(second))
        only_line(priced(reserved(first)))      # an equal value priced before
        again = only_line(priced(reserved(second)))
        assert again.amounts == expected.amounts
        assert again.amounts is not None
        assert expected.amounts is not None
        assert again.amounts.reserved is not None
        assert expected.amounts.reserved is not None
        assert (str(again.amounts.reserved.break_even_utilisation_fraction)
                == str(expected.amounts.reserved.break_even_utilisation_fraction))

    def test_a_negative_zero_carbon_intensity_prints_as_zero_either_way(self) -> None:
        zero = dataclasses.replace(NO_FAILURES, grid_gco2e_per_kwh=0.0)
        negative_zero = dataclasses.replace(NO_FAILURES, grid_gco2e_per_kwh=-0.0)
        first = self.fresh(offer(), negative_zero)
        second = only_line(priced(offer(), options=zero))
        assert first.amounts is not None
        assert second.amounts is not None
        assert str(first.amounts.co2e_kg) == str(second.amounts.co2e_kg) == "0.000"


class TestBreakEven:
    """Buy versus rent (issue 17): months of use after which owning is cheaper than the
    cheapest feasible on-demand line of the same job."""

    @staticmethod
    def owned_line(cloud_price: str, options: Options = NO_FAILURES) -> q.QuoteLine:
        inputs = q.OnPremInputs(
            purchase_price_per_gpu=Decimal("20000"), basis="request",
            tco=pricing.OnPremInputs(purchase_price_per_gpu=Decimal("20000"),
                                     overhead_fraction=Decimal("0.10")))
        result = q.price_all(
            jobs=[job(num_gpus=64)],
            offers=[offer(price_per_instance_hour=Decimal(cloud_price)),
                    offer(offer_id="off_2", price_per_instance_hour=Decimal("999.00"))],
            timings={}, onprem={"h100": inputs}, options=options, policy=DEFAULT_POLICY,
            today=TODAY, version_id="cv_000001", gated=False)
        owned = [x for x in result.lines if x.term is Term.ONPREM]
        assert len(owned) == 1
        return owned[0]

    def test_the_months_follow_capex_over_the_monthly_saving(self) -> None:
        line = self.owned_line("80.00")  # 10.00 per GPU-hour on 8-GPU instances
        facts = line.onprem
        assert facts is not None
        assert facts["capex_total"] == "1408000.00"  # 64 x 20,000 x 1.10
        running = (Decimal(str(facts["energy_per_gpu_hour"]))
                   + Decimal(str(facts["operations_per_gpu_hour"])))
        months = Decimal("1408000.00") / (64 * (Decimal("10") - running) * 730)
        assert facts["break_even_months"] == str(months.quantize(Decimal("0.1")))
        assert facts["break_even_offer_id"] == "off_1"  # the cheaper of the two lines
        assert facts["break_even_price_per_gpu_hour"] == "10.000000"

    def test_half_the_utilisation_takes_twice_as_long(self) -> None:
        full = self.owned_line("80.00")
        half = self.owned_line("80.00", dataclasses.replace(
            NO_FAILURES, accounting=Accounting.AMORTISED, utilisation_fraction=Decimal("0.5")))
        assert full.onprem is not None
        assert half.onprem is not None
        assert half.onprem["break_even_utilisation_fraction"] == "0.5"
        months_full = Decimal(str(full.onprem["break_even_months"]))
        months_half = Decimal(str(half.onprem["break_even_months"]))
        assert months_full > 1
        assert abs(months_half - 2 * months_full) <= Decimal("0.15")  # both rounded to 0.1

    def test_renting_below_the_running_cost_never_breaks_even(self) -> None:
        line = self.owned_line("0.08")  # 0.01 per GPU-hour: less than power alone
        assert line.onprem is not None
        assert line.onprem["break_even_months"] is None
        assert "never breaks even" in str(line.onprem["break_even_basis"])


def test_rank_by_co2e_recommends_the_cleaner_grid_and_keeps_the_cheapest() -> None:
    dirty = offer(offer_id="off_dirty", region="dirty-1", region_carbon_g_per_kwh=800.0)
    clean = offer(offer_id="off_clean", region="clean-1", region_carbon_g_per_kwh=50.0,
                  price_per_instance_hour=Decimal("90.00"))
    results = {
        rank: q.price_all(jobs=[job()], offers=[dirty, clean], timings={}, onprem={},
                          options=dataclasses.replace(NO_FAILURES, rank_by=rank),
                          policy=DEFAULT_POLICY, today=TODAY, version_id="cv_000001",
                          gated=True)
        for rank in q.RankBy}
    by_total, by_carbon = results[q.RankBy.TOTAL], results[q.RankBy.CO2E]
    assert by_total.recommended is not None
    assert by_carbon.recommended is not None
    assert by_total.recommended.offer_id == "off_dirty"   # cheaper
    assert by_carbon.recommended.offer_id == "off_clean"  # 16x less CO2e
    assert [x.offer_id for x in by_carbon.lines] == ["off_clean", "off_dirty"]
    assert by_carbon.cheapest is not None
    assert by_carbon.cheapest.offer_id == "off_dirty"


class TestRepeatedOfferFacts:
    """The goodput, basis and flags of an offer are the same from quote to quote."""

    def test_a_kept_line_equals_a_fresh_one(self) -> None:
        spot = offer(term=Term.SPOT, interruption_rate_per_hour=0.002,
                     interruption_rate_source="test", interruption_rate_assumed=True)
        options = Options()
        cold = only_line(priced(spot, options=options))
        warm = only_line(priced(spot, options=options))
        assert warm == cold
        assert (warm.goodput_basis, warm.flags) == (cold.goodput_basis, cold.flags)

    def test_a_negative_zero_failure_rate_keeps_its_own_basis(self) -> None:
        # -0.0 == 0.0, but the basis prints the rate: "-0" is not "0".
        plus = dataclasses.replace(Options(), failure_rate_per_gpu_hour=0.0)
        minus = dataclasses.replace(Options(), failure_rate_per_gpu_hour=-0.0)
        assert only_line(priced(offer(), options=plus)).goodput_basis == (
            "hardware failures 0 per GPU-hour")
        assert only_line(priced(offer(), options=minus)).goodput_basis == (
            "hardware failures -0 per GPU-hour")


def test_a_kept_rejection_equals_a_fresh_one() -> None:
    small = offer(fabric=Fabric(gpus_per_instance=8, nvlink_domain=4, inter_node_gbps=3200.0))
    cold = priced(small)
    warm = priced(small)
    assert cold.rejected == warm.rejected
    assert [r.code for r in warm.rejected] == ["nvlink_domain_too_small"]


class TestLineConstruction:
    """Lines are made by their constructor (issue 38: no ``object.__new__``): ``price_all``
    judges a line from its fields (``_Facts``) and makes it once; that line must be the line
    ``cloud_line`` then ``judge`` (a ``dataclasses.replace`` copy) make."""

    def test_a_priced_line_has_every_field_and_equals_one_built_by_init(self) -> None:
        line = only_line(priced(offer()))
        names = {f.name for f in dataclasses.fields(q.QuoteLine)}
        assert {n: getattr(line, n) for n in names} == {
            f.name: getattr(line, f.name) for f in dataclasses.fields(line)}
        assert q.QuoteLine(**{n: getattr(line, n) for n in names}) == line

    @pytest.mark.parametrize("change", [
        {}, {"term": Term.SPOT, "interruption_rate_per_hour": 0.01,
             "interruption_rate_source": "test", "interruption_rate_assumed": True},
        {"as_of": None, "as_of_day": None}, {"quality_flags": ("price_outlier",)},
        {"fabric": Fabric(gpus_per_instance=8, nvlink_domain=4, inter_node_gbps=3200.0)}])
    def test_the_line_made_once_equals_the_judged_copy_of_an_unjudged_line(
        self, change: dict[str, object],
    ) -> None:
        o = offer(**change)
        j = job(num_gpus=2048)
        policy = dataclasses.replace(DEFAULT_POLICY, require_node_fit=False,
                                     max_on_demand_gpus_per_region=1024)
        options = dataclasses.replace(NO_FAILURES, budget=Decimal(1_000_000),
                                      deadline_s=5 * DAY_S)
        made = priced(o, j, options=options, policy=policy)
        bare = q.cloud_line(j, j.timing, o, options, "cv_000001")
        assert bare.rules == ()
        misfit = q.node_fit(j, o.fabric)
        judged = q.judge([bare], [], policy, options, TODAY, gated=True,
                         misfits={0: misfit[1]} if misfit else None)
        assert made.lines == judged.lines
        assert made.lines[0].rules
        assert (made.verdict, made.reasons) == (judged.verdict, judged.reasons)
        assert bare.rules == (), "judge leaves the lines it is given as they are"

    def test_a_line_is_frozen(self) -> None:
        line = only_line(priced(offer()))
        with pytest.raises(dataclasses.FrozenInstanceError):
            line.provider = "gcp"  # type: ignore[misc]
        assert not hasattr(line, "__dict__")
