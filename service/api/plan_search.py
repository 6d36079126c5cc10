"""The plan search of ``POST /v1/parallelism-plans`` across the search workers (issue 38).

The work is counted in candidates, never in seconds, so the same request gets the same answer
however busy the machine is:

1. one worker counts the candidates of every (cluster, batch) group (``search_size``): a
   request over the cap is refused (422 naming the field and the limit) before any is
   evaluated;
2. the groups are spread across the workers in shares of about equal candidates
   (``shares``), each evaluated by ``search_part``; the groups of one family (the same GPU
   count, node size and batch on different accelerators, ``search.group_families``) stay
   in one share where the balance allows, since one call evaluates their layouts' memory
   once for all of them;
3. one worker merges the parts (``merge_parts``), which ranks them exactly as one search
   over every group would (``tests/core/test_search_parts.py``).

A request of one group skips the counting and the merge: one worker runs ``search``.

The deadline (``CQ_SEARCH_DEADLINE_S``) is only a safety net: past it the request is refused
with 503 and ``Retry-After`` (``SearchTimeoutError`` from a worker, ``TimeoutError`` from the
wait, ``SearchQueueTimeoutError`` when no worker was free), never answered from part of the
space.

``search_until`` and ``part_until`` first set a worker's C allocator to keep freed memory for
the next numpy temporaries (``allocator.keep_freed_memory``: page faults were half of a
single-chunk search's CPU).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Hashable, Sequence

from service.api.allocator import keep_freed_memory
from service.api.workers import run_cpu_bound, run_each_cpu_bound
from service.core.search import (
    SearchPart,
    SearchRequest,
    SearchResult,
    SearchTimeoutError,
    group_count,
    group_families,
    merge_parts,
    search,
    search_part,
    search_size,
)

SHARES_PER_WORKER = 2
"""Shares a sweep is cut into per worker: more than one, so a worker that finishes early (a
share's candidates are counted, not its seconds) takes another instead of waiting; few, since
each share is one round trip with the request pickled."""


def _left(ends_at: float, deadline_s: float) -> float:
    left = ends_at - time.monotonic()
    if left <= 0:
        raise SearchTimeoutError(deadline_s)
    return left


def search_until(request: SearchRequest, ends_at: float) -> SearchResult:
    """``search`` in a worker, with what is left of the deadline at ``ends_at`` (a
    ``time.monotonic()`` instant: the time spent waiting for the worker is not given again)."""
    keep_freed_memory()
    left = _left(ends_at, request.deadline_s)
    return search(dataclasses.replace(request, deadline_s=left), time.monotonic)


def part_until(request: SearchRequest, groups: Sequence[int], ends_at: float) -> SearchPart:
    """``search_part`` of ``groups`` in a worker, within what is left of the deadline."""
    keep_freed_memory()
    left = _left(ends_at, request.deadline_s)
    return search_part(dataclasses.replace(request, deadline_s=left), time.monotonic, groups)


def shares(sizes: Sequence[int], count: int,
           families: Sequence[Hashable] | None = None) -> list[list[int]]:
    """The groups with candidates, cut into at most ``count`` shares of about equal
    candidates. The groups of one family (``families[g]``, default: each group its own) form
    one bundle, or, when the family holds more than a share's fair part of the candidates,
    as many bundles of consecutive groups as that takes. The largest bundle goes first into
    the share with the fewest candidates so far (ties: the first share), each share's groups
    in ascending order. Deterministic, and the answer does not depend on it
    (``merge_parts`` ranks any split alike)."""
    loads = [0] * max(1, count)
    members: dict[Hashable, list[int]] = {}
    for group, size in enumerate(sizes):
        if size:
            members.setdefault(group if families is None else families[group], []).append(group)
    fair = sum(sizes) / len(loads)
    bundles: list[list[int]] = []
    for groups in members.values():
        parts = min(len(groups), max(1, math.ceil(sum(sizes[g] for g in groups) / fair)))
        bundles.extend(groups[i * len(groups) // parts:(i + 1) * len(groups) // parts]
                       for i in range(parts))
    cut: list[list[int]] = [[] for _ in loads]
    for bundle in sorted(bundles, key=lambda b: (-sum(sizes[g] for g in b), b[0])):
        lightest = loads.index(min(loads))
        cut[lightest].extend(bundle)
        loads[lightest] += sum(sizes[g] for g in bundle)
    return [sorted(share) for share in cut if share]


def plan_search(request: SearchRequest, *, workers: int, ends_at: float,
                stop: Callable[[], bool] | None = None) -> SearchResult:
    """The answer of ``search(request)``, its groups spread across ``workers`` processes (in
    this thread when ``workers`` is 0), all of it by ``ends_at``."""
    def within() -> float:
        return ends_at - time.monotonic()

    if group_count(request) <= 1 or workers <= 0:
        return run_cpu_bound(workers, search_until, request, ends_at, timeout_s=within(),
                             start_by=ends_at, stop=stop)
    started = time.monotonic()
    sizes = run_cpu_bound(workers, search_size, request, timeout_s=within(), start_by=ends_at,
                          stop=stop)
    cut = shares(sizes, workers * SHARES_PER_WORKER, group_families(request))
    parts = run_each_cpu_bound(workers, part_until, [(request, share, ends_at) for share in cut],
                               start_by=ends_at, ends_at=ends_at, stop=stop)
    elapsed_s = time.monotonic() - started
    return run_cpu_bound(workers, merge_parts, request, parts, elapsed_s, timeout_s=within(),
                         start_by=ends_at, stop=stop)
