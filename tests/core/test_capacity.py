"""Capacity limits per term (service/core/capacity.py, the policy's capacity rules) and the
spare instances of an SLO-bound serving fleet on spot (issue 39)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.core import capacity
from service.core.policy import DEFAULT_POLICY, Outcome, Policy
from service.core.quote import Term
from tests.core.test_quote import NO_FAILURES, codes, job, offer, only_line, priced


def poisson_tail(mean: float, k: int) -> float:
    """P(N > k) for N ~ Poisson(mean), each term from its logarithm (lgamma), not from the
    core's recurrence."""
    return 1.0 - sum(math.exp(-mean + i * math.log(mean) - math.lgamma(i + 1))
                     for i in range(k + 1))


class TestSpareInstances:
    @given(instances=st.integers(1, 400), rate_per_hour=st.floats(1e-6, 0.5),
           restart_s=st.floats(1.0, 3600.0))
    def test_the_fewest_spares_that_keep_the_fleet_short_at_most_rarely(
        self, instances: int, rate_per_hour: float, restart_s: float,
    ) -> None:
        rate_s = rate_per_hour / 3600
        if rate_s * restart_s >= 1:
            return
        k = capacity.spare_instances(instances, rate_s, restart_s)
        mean = instances * rate_s * restart_s
        assert k >= capacity.MIN_SPARE_INSTANCES
        if k < instances:
            assert poisson_tail(mean, k) <= capacity.SPARE_SHORTFALL_PROBABILITY + 1e-12
        if k > capacity.MIN_SPARE_INSTANCES:
            # One fewer would leave the fleet short more often than the target.
            assert poisson_tail(mean, k - 1) > capacity.SPARE_SHORTFALL_PROBABILITY - 1e-12

    def test_more_evictions_need_more_spares(self) -> None:
        few = capacity.spare_instances(100, 0.001 / 3600, 600.0)
        many = capacity.spare_instances(100, 0.5 / 3600, 600.0)
        assert few == capacity.MIN_SPARE_INSTANCES
        assert many > few


def rule_of(policy: Policy, num_gpus: int, **changes: object) -> dict[str, Outcome]:
    return codes(only_line(priced(offer(**changes), job(num_gpus=num_gpus), NO_FAILURES, policy)))


class TestRegionLimits:
    def test_on_demand_at_the_limit_passes_and_one_instance_more_fails(self) -> None:
        limit = DEFAULT_POLICY.max_on_demand_gpus_per_region
        assert limit == 2048
        assert "capacity_limit_exceeded" not in rule_of(DEFAULT_POLICY, limit)
        assert rule_of(DEFAULT_POLICY, limit + 8)["capacity_limit_exceeded"] is Outcome.FAIL

    @pytest.mark.parametrize("term", [Term.RESERVED_1Y, Term.RESERVED_3Y])
    def test_reserved_terms_read_their_own_limit(self, term: Term) -> None:
        tight = Policy(max_reserved_gpus_per_region=64, max_on_demand_gpus_per_region=None)
        assert rule_of(tight, 72, term=term)["capacity_limit_exceeded"] is Outcome.FAIL
        assert "capacity_limit_exceeded" not in rule_of(tight, 72, term=Term.ON_DEMAND)

    def test_null_switches_a_limit_off_and_warn_only_softens_it(self) -> None:
        off = Policy(max_on_demand_gpus_per_region=None)
        assert "capacity_limit_exceeded" not in rule_of(off, 12_288)
        soft = Policy(warn_only=frozenset({"max_gpus_per_region_by_term"}))
        assert rule_of(soft, 12_288)["capacity_limit_exceeded"] is Outcome.WARN

    def test_spot_is_judged_per_zone_not_by_the_region_limit(self) -> None:
        found = rule_of(DEFAULT_POLICY, 12_288, term=Term.SPOT,
                        interruption_rate_per_hour=0.001, interruption_rate_source="test")
        assert "capacity_limit_exceeded" not in found
        assert found["spot_capacity_unverified"] is Outcome.FAIL

    def test_the_reason_names_the_figure_the_limit_its_field_and_the_source(self) -> None:
        line = only_line(priced(offer(provider="gcp", instance_type="a3-highgpu-8g"),
                                job(num_gpus=4096), NO_FAILURES, DEFAULT_POLICY))
        (rule,) = [r for r in line.rules if r.code == "capacity_limit_exceeded"]
        assert rule.rule == "max_gpus_per_region_by_term"
        assert "4,096 GPUs (512 instances)" in rule.message
        assert "allows 2,048 (max_on_demand_gpus_per_region" in rule.message
        assert "NVIDIA_H100_GPUS" in rule.message  # where GCP publishes its quotas
        assert rule.fix is not None
        assert rule.fix in rule.message


class TestCapacityBlocks:
    def test_a_block_holds_64_instances(self) -> None:
        block = {"term": Term.CAPACITY_BLOCK}
        assert "capacity_block_size_exceeded" not in rule_of(DEFAULT_POLICY, 512, **block)
        found = rule_of(DEFAULT_POLICY, 520, **block)
        assert found["capacity_block_size_exceeded"] is Outcome.FAIL
        assert "capacity_limit_exceeded" not in found
        wider = Policy(max_capacity_block_instances=256)
        assert "capacity_block_size_exceeded" not in rule_of(wider, 2048, **block)
