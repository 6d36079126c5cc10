"""The bounds on one request's searches: a candidate count, a wall-clock deadline, and the
client still being there (issue 14, defect 3).

A quote, its verify and a budget plan run one search per (accelerator, GPU count) pair, and
for ``largest_model`` per candidate model. ``WorkBudget`` holds them all together:

- **candidates** (``CQ_SEARCH_MAX_CANDIDATES``): counted, not timed, so it is the same on
  every machine and a quote still recomputes exactly;
- **a deadline** (``CQ_SEARCH_DEADLINE_S``, the plan search's safety net too): a partial
  search is not reproducible, so past the deadline the request is refused with 503
  ``search-deadline`` and nothing is stored. The wait for a
  free search worker counts against it: a search no worker has started by the deadline is
  dropped and the request refused with 503 ``search-queue-timeout`` and ``Retry-After``
  (issue 36: queued searches waited without a bound); a plan search that starts late gets
  only what is left of the deadline (``plan_search.search_until``);
- **the client**: once it has disconnected, no further search starts and a queued one is
  cancelled (a running one stops at the deadline).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Request

from service.core.errors import InvalidSpecError
from service.core.search import SearchTooLargeError
from service.settings import Settings

CLIENT_GONE_KEY = "cq_client_gone"
CLIENT_WATCH_KEY = "cq_client_watch"
"""Scope state: a callable that starts watching for the disconnect (on the event loop)."""
"""``scope["state"]`` key of the ``threading.Event`` the body middleware sets when the client
disconnects (service/api/limits.py)."""


class SearchDeadlineError(Exception):
    """The request's searches did not finish within the deadline (HTTP 503)."""

    def __init__(self, deadline_s: float, detail: str | None = None) -> None:
        """``detail``: what the refused request was (a plan search, a what-if sweep), in
        place of the quote's sentence."""
        super().__init__(detail or (
            f"this request's searches did not finish within {deadline_s:g} s "
            "(CQ_SEARCH_DEADLINE_S); a quote is never built from a partial search, so nothing "
            "was stored: fix some dimensions, or narrow the GPU counts, batches or candidate "
            "models"))
        self.deadline_s = deadline_s


class SearchQueueTimeoutError(Exception):
    """The request's deadline passed while its search waited for a free worker; nothing ran
    and nothing was stored (HTTP 503 with ``Retry-After``)."""

    def __init__(self, waited_s: float) -> None:
        super().__init__(
            f"every search worker was busy for the {waited_s:.1f} s this request waited, "
            "and its deadline (CQ_SEARCH_DEADLINE_S) passed before its search could start; "
            "nothing was stored: retry after Retry-After seconds")
        self.waited_s = waited_s


class ClientGoneError(Exception):
    """The client disconnected; the work it asked for was abandoned (logged as 499)."""


def never() -> bool:
    return False


class WorkBudget:
    """Candidates and time one request may spend on searches, across every (accelerator, GPU
    count) pair and every model it tries (issue 14: 13 s per pair, up to 16 × 1,024 pairs,
    unbounded in total, and searches that went on after the client had gone)."""

    def __init__(self, max_candidates: int, *, deadline_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 cancelled: Callable[[], bool] = never) -> None:
        self.limit = max_candidates
        self.remaining = max_candidates
        self.deadline_s = deadline_s
        self.clock = clock
        self.cancelled = cancelled
        self._ends_at = None if deadline_s is None else clock() + deadline_s

    def charge(self, candidates: int) -> None:
        self.remaining -= candidates

    @property
    def ends_at(self) -> float | None:
        """The deadline as a ``clock()`` instant (None: no deadline): the time a search may
        wait for a worker and the time it may run come out of it together."""
        return self._ends_at

    def seconds_left(self) -> float | None:
        """Time left before the deadline (None: no deadline)."""
        return None if self._ends_at is None else self._ends_at - self.clock()

    def check(self, field: str) -> None:
        """Before each search: refuse when the client is gone, the deadline has passed or
        the candidates are spent."""
        if self.cancelled():
            raise ClientGoneError("the client disconnected")
        left = self.seconds_left()
        if left is not None and left <= 0:
            raise self.late()
        if self.remaining <= 0:
            raise self.exhausted(field)

    def late(self) -> SearchDeadlineError:
        return SearchDeadlineError(self.deadline_s or 0.0)

    def exhausted(self, field: str) -> InvalidSpecError:
        return SearchTooLargeError(
            f"this request's searches together hold more than {self.limit:,} candidates "
            "(CQ_SEARCH_MAX_CANDIDATES): fix some dimensions, or narrow the GPU counts, "
            "batches or candidate models", field=field)


def request_budget(settings: Settings, gone: Callable[[], bool] = never) -> WorkBudget:
    """One request's budget: ``CQ_SEARCH_MAX_CANDIDATES`` candidates and
    ``CQ_SEARCH_DEADLINE_S`` seconds for all its searches, while the client is there."""
    return WorkBudget(settings.search_max_candidates, deadline_s=settings.search_deadline_s,
                      cancelled=gone)


async def client_gone(request: Request) -> Callable[[], bool]:
    """True once this request's client has disconnected (callable from any thread). Runs on
    the event loop, where it starts the body middleware's disconnect watcher."""
    state = request.scope.get("state", {})
    start = state.get(CLIENT_WATCH_KEY)
    if callable(start):
        start()
    event = state.get(CLIENT_GONE_KEY)
    if isinstance(event, threading.Event):
        return event.is_set
    return never


ClientGoneDep = Annotated[Callable[[], bool], Depends(client_gone)]
