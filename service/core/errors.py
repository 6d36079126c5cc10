"""The core's exceptions.

    CoreError (ValueError)
    ├── InvalidSpecError       an input breaks a rule (names the field and the limit)
    ├── InfeasiblePlanError    a plan is valid but cannot run (carries structured reasons)
    └── NoFeasiblePlanError    a search found nothing that runs (carries the closest tries)

The API maps each class to one problem type; the message is the per-occurrence detail.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _rebuild(cls: type[CoreError], args: tuple[Any, ...], state: dict[str, Any]) -> CoreError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


class CoreError(ValueError):
    """Root of every error the core raises on purpose. Pickles with its attributes (the plan
    search runs in worker processes and its errors travel back)."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.args, self.__dict__))


class InvalidSpecError(CoreError):
    """An input violates a rule. ``field`` names the offending input (dotted path)."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class InfeasiblePlanError(CoreError):
    """A well-formed plan that cannot run, for example because it does not fit in memory."""

    def __init__(self, message: str, *, reasons: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.reasons: dict[str, Any] = dict(reasons or {})


class NoFeasiblePlanError(CoreError):
    """No candidate plan satisfies the constraints. ``closest`` lists the nearest misses."""

    def __init__(self, message: str, *, closest: list[dict[str, Any]] | None = None,
                 candidates_total: int = 0, truncated: bool = False) -> None:
        super().__init__(message)
        self.closest: list[dict[str, Any]] = list(closest or [])
        self.candidates_total = candidates_total
        """The candidates the search held (callers charge them to a shared work budget)."""
        self.truncated = truncated
        """The search stopped at its deadline: part of the space was never evaluated."""
