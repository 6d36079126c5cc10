"""Money: hand-computed lines and properties of the pricing core."""

from __future__ import annotations

import math
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.core import pricing


class TestGoodput:
    def test_young_daly_by_hand(self) -> None:
        # 1,024 GPUs at 2.2e-5 failures per GPU-hour: 0.022528 per hour = 6.2578e-6 per s.
        rate = 1024 * 2.2e-5 / 3600
        result = pricing.goodput(rate, checkpoint_s=100.0, restart_s=600.0)
        interval = math.sqrt(2 * 100.0 / rate)  # 5,653 s
        assert result.interval_s == pytest.approx(interval)
        assert result.interval_s == pytest.approx(5653.3, abs=0.1)
        expected = 100.0 / interval + rate * (interval / 2 + 600.0)
        assert result.lost_fraction == pytest.approx(expected)
        # 100/5653.3 = 0.017689; 6.2578e-6 x (2826.7 + 600) = 0.021443
        assert result.lost_fraction == pytest.approx(0.039132, abs=1e-6)

    def test_no_interruptions_lose_nothing(self) -> None:
        assert pricing.goodput(0.0, 100.0, 600.0).lost_fraction == 0.0

    def test_interrupted_faster_than_a_restart_cannot_progress(self) -> None:
        result = pricing.goodput(1 / 500, checkpoint_s=10.0, restart_s=600.0)
        assert not result.feasible
        assert "Λ·R = 1.20" in (result.reason or "")

    @pytest.mark.parametrize("checkpoint_s", [1e300 * 1e10, 1e308])
    def test_a_checkpoint_that_never_finishes_is_infeasible_not_nan(
        self, checkpoint_s: float,
    ) -> None:
        # Issue 14: a near-zero checkpoint bandwidth gave nan and a 500.
        result = pricing.goodput(1e-4, checkpoint_s=checkpoint_s, restart_s=600.0)
        assert not result.feasible
        assert "checkpoint" in (result.reason or "")


class TestCloudLine:
    def test_on_demand_by_hand(self) -> None:
        # 256 GPUs on 8-GPU instances for 100 h with 4% lost, at 55.04 per instance-hour:
        # 32 x 104 h x 55.04 = 183,173.12
        line = pricing.cloud_line(num_gpus=256, gpus_per_instance=8.0, wall_s=360_000.0,
                                  lost_fraction=0.04, price_per_instance_hour=Decimal("55.04"))
        assert (line.instances, line.rounded_up) == (32, False)
        assert line.billed_hours == Decimal("104.0000")
        assert line.total == Decimal("183173.12")
        assert line.gpu_hours == Decimal("26624.0")

    def test_gpu_count_rounds_up_to_whole_instances(self) -> None:
        line = pricing.cloud_line(num_gpus=12, gpus_per_instance=8.0, wall_s=3600.0,
                                  lost_fraction=0.0, price_per_instance_hour=Decimal("10"))
        assert (line.instances, line.rounded_up, line.total) == (2, True, Decimal("20.00"))

    def test_spot_with_preemption_by_hand(self) -> None:
        # 16 instances, 0.01 interruptions per instance-hour: Λ = 0.16/h; C = 300 s, R = 600 s.
        rate = 16 * 0.01 / 3600
        loss = pricing.goodput(rate, 300.0, 600.0)
        tau = math.sqrt(2 * 300 / rate)  # 3,674 s
        assert loss.lost_fraction == pytest.approx(300 / tau + rate * (tau / 2 + 600))
        line = pricing.cloud_line(num_gpus=128, gpus_per_instance=8.0, wall_s=36_000.0,
                                  lost_fraction=loss.lost_fraction,
                                  price_per_instance_hour=Decimal("20.00"))
        hours = Decimal(repr(36_000.0)) / 3600 * (1 + Decimal(repr(loss.lost_fraction)))
        assert line.total == (16 * hours * Decimal("20.00")).quantize(Decimal("0.01"))
        # lost = 300/3674.2 + 4.444e-5 x (1837.1 + 600) = 0.08165 + 0.10832 = 0.18997;
        # 16 x 10 h x 1.18997 x 20.00 = 3,807.89
        assert line.total == Decimal("3807.89")

    def test_rounding_is_half_even_to_the_cent(self) -> None:
        assert pricing.cents(Decimal("0.125")) == Decimal("0.12")
        assert pricing.cents(Decimal("0.135")) == Decimal("0.14")


class TestReservation:
    def test_dedicated_and_amortised_by_hand(self) -> None:
        # 4 instances for 1,000 h at 10.00/h on a 1-year term, 80% utilisation assumed:
        # dedicated = 4 x 8,760 x 10 = 350,400; amortised = 4 x 1,000 x 10 / 0.8 = 50,000.
        result = pricing.reservation(instances=4, billed_hours=Decimal(1000), years=1,
                                     effective_rate=Decimal("10.00"),
                                     on_demand_rate=Decimal("20.00"),
                                     utilisation_fraction=Decimal("0.8"))
        assert result.dedicated_total == Decimal("350400.00")
        assert result.amortised_total == Decimal("50000.00")
        assert result.terms_bought == 1
        assert result.break_even_utilisation_fraction == Decimal("0.5000")

    def test_a_job_longer_than_the_term_buys_two_terms(self) -> None:
        result = pricing.reservation(instances=1, billed_hours=Decimal(9000), years=1,
                                     effective_rate=Decimal("1"), on_demand_rate=None,
                                     utilisation_fraction=Decimal(1))
        assert result.terms_bought == 2
        assert result.dedicated_total == Decimal("17520.00")
        assert result.break_even_utilisation_fraction is None


class TestOnPrem:
    def test_tco_per_gpu_hour_by_hand(self) -> None:
        # 30,000 per GPU + 35% = 40,500 capex; / (4 x 8,760 h) = 1.155822/h;
        # operations 10%/year: 4,050 / 8,760 = 0.462329/h; energy 1.2 kW x 1.3 x 0.10 = 0.156/h.
        rate = pricing.onprem_rate(pricing.OnPremInputs(purchase_price_per_gpu=Decimal(30_000)),
                                   power_w_per_gpu=1200.0)
        assert rate.capex_per_gpu_hour.quantize(Decimal("0.000001")) == Decimal("1.155822")
        assert rate.operations_per_gpu_hour.quantize(Decimal("0.000001")) == Decimal("0.462329")
        assert rate.energy_per_gpu_hour == Decimal("0.156")
        assert rate.per_gpu_hour.quantize(Decimal("0.000001")) == Decimal("1.774151")


prices = st.decimals(min_value=Decimal("0.01"), max_value=Decimal("500"), places=2)
seconds = st.floats(min_value=60.0, max_value=1e8, allow_nan=False, allow_infinity=False)


@given(price=prices, wall=seconds, factor=st.integers(min_value=2, max_value=50))
def test_cost_is_linear_in_hours(price: Decimal, wall: float, factor: int) -> None:
    one = pricing.cloud_line(num_gpus=64, gpus_per_instance=8.0, wall_s=wall,
                             lost_fraction=0.0, price_per_instance_hour=price)
    many = pricing.cloud_line(num_gpus=64, gpus_per_instance=8.0, wall_s=wall * factor,
                              lost_fraction=0.0, price_per_instance_hour=price)
    # Hours are a 28-digit Decimal, so the product is taken in that order (instances x
    # hours x price): dividing after multiplying can land an exact half cent on the other side.
    hours = pricing.exact(wall * factor) / pricing.SECONDS_PER_HOUR_DECIMAL
    assert many.total == pricing.cents(8 * hours * price)
    assert abs(many.total - one.total * factor) <= Decimal("0.01") * factor


@given(low=prices, high=prices, wall=seconds)
def test_cost_is_monotone_in_price(low: Decimal, high: Decimal, wall: float) -> None:
    low, high = min(low, high), max(low, high)
    a = pricing.cloud_line(num_gpus=8, gpus_per_instance=8.0, wall_s=wall, lost_fraction=0.01,
                           price_per_instance_hour=low)
    b = pricing.cloud_line(num_gpus=8, gpus_per_instance=8.0, wall_s=wall, lost_fraction=0.01,
                           price_per_instance_hour=high)
    assert a.total <= b.total


@given(price=prices, wall=seconds)
def test_spot_with_zero_interruptions_is_price_times_hours(price: Decimal, wall: float) -> None:
    loss = pricing.goodput(0.0, checkpoint_s=500.0, restart_s=600.0)
    line = pricing.cloud_line(num_gpus=16, gpus_per_instance=8.0, wall_s=wall,
                              lost_fraction=loss.lost_fraction, price_per_instance_hour=price)
    exact_total = 2 * price * pricing.exact(wall) / 3600
    # Hours are a 28-digit Decimal (60 s = 0.016666...67 h), so an exact half cent can round
    # either way: the property is "price x hours, to the cent", not one rounding of it.
    assert abs(line.total - exact_total) <= Decimal("0.005") + Decimal("1e-20")
