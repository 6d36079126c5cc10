"""Plans nobody would run (issue 18): a run past the wall-clock limit, or dearer than 10x the
cheapest alternative of the same answer, is warned about with a stable prefix."""

from __future__ import annotations

from decimal import Decimal

from service.core.plausibility import (
    COSTLY_PREFIX,
    DEFAULT_MAX_REASONABLE_TRAIN_S,
    LONG_RUN_PREFIX,
    costly_warnings,
    long_run_warning,
)
from service.core.units import SECONDS_PER_DAY


class TestLongRunWarning:
    def test_a_run_over_the_limit_is_warned_in_days_and_years(self) -> None:
        warning = long_run_warning(2_447 * SECONDS_PER_DAY, DEFAULT_MAX_REASONABLE_TRAIN_S)
        assert warning == (f"{LONG_RUN_PREFIX}: training takes 2,447 days (6.7 years), more "
                           "than the 365-day limit for a plan anyone would run")

    def test_a_run_at_the_limit_or_without_one_is_not(self) -> None:
        assert long_run_warning(365 * SECONDS_PER_DAY, DEFAULT_MAX_REASONABLE_TRAIN_S) is None
        assert long_run_warning(10_000 * SECONDS_PER_DAY, None) is None

    def test_the_limit_is_the_callers(self) -> None:
        assert long_run_warning(40 * SECONDS_PER_DAY, 30 * SECONDS_PER_DAY) is not None


class TestCostlyWarnings:
    def test_only_alternatives_over_ten_times_the_cheapest_are_warned(self) -> None:
        warnings = costly_warnings([Decimal("100"), Decimal("1000"), Decimal("1000.01"), None],
                                   "USD")
        assert warnings[:2] == [None, None]
        assert warnings[2] is not None
        assert warnings[2].startswith(f"{COSTLY_PREFIX}: 10.0× the cheapest alternative")
        assert "(100 USD)" in warnings[2]
        assert warnings[3] is None

    def test_float_costs_and_answers_without_a_positive_cost(self) -> None:
        assert costly_warnings([1.0, 25.0], "GPU-hours")[1] is not None
        assert costly_warnings([None, None], "USD") == [None, None]
        assert costly_warnings([], "USD") == []
