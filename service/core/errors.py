"""The core's exceptions.

    CoreError (ValueError)
    ├── InvalidSpecError       an input breaks a rule (names the field and the limit)
    ├── InfeasiblePlanError    a plan is valid but cannot run (carries structured reasons)
    └── NoFeasiblePlanError    a search found nothing that runs (carries the closest tries)
        └── NoLayoutError      no layout multiplies to the GPU count asked (none evaluated)

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
                 candidates_total: int = 0) -> None:
        super().__init__(message)
        self.closest: list[dict[str, Any]] = list(closest or [])
        self.candidates_total = candidates_total
        """The candidates the search held (callers charge them to a shared work budget)."""


class NoLayoutError(NoFeasiblePlanError):
    """No (tp, pp, cp, dp) layout allowed by the model and the constraints multiplies to the
    GPU count asked, so the search evaluated nothing (issue 38: it used to say that nothing
    fits in memory). ``cluster_index`` is the first of the request's clusters; its
    ``num_gpus`` is named in the message. A subclass of ``NoFeasiblePlanError`` so that
    callers that skip a cluster on which nothing runs (quote sizing, budget plans) skip this one
    too; the API answers it as a 422 invalid-spec naming the GPU count, with the nearest
    counts that have a layout (``search.no_layout_problem``)."""

    def __init__(self, message: str, *, cluster_index: int, num_gpus: int,
                 counts_asked: int = 1, field: str | None = None,
                 nearest: tuple[int | None, int | None] | None = None) -> None:
        super().__init__(message)
        self.cluster_index = cluster_index
        self.num_gpus = num_gpus
        self.counts_asked = counts_asked
        """How many (cluster, GPU count) pairs the request held; none has a layout."""
        self.field = field
        """The request field that gave the GPU count (set by the API, which knows it)."""
        self.nearest = nearest
        """The nearest counts below and above that have a layout, once looked up."""
