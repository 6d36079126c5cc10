"""Groups that differ only in the accelerator share their layouts and memory figures inside one
``search_part`` call (issue 38, ``search._family``), and the API keeps them in one share.

Sharing is exact only while a layout's peak memory does not depend on the accelerator: these
tests fail if a formula starts reading it."""

from __future__ import annotations

import dataclasses
from decimal import Decimal

import numpy as np

from service.api.plan_search import shares
from service.core.search import (
    Objective,
    SearchRequest,
    _grid,
    _inner,
    _skeletons,
    evaluate_bulk,
    group_count,
    group_families,
    merge_parts,
    search,
    search_part,
    search_size,
)
from service.core.specs import ClusterSpec, EnergySpec, TrainingSpec
from tests.factories import accelerator, model

ACCELERATORS = ("h100-sxm5-80gb", "a100-sxm4-40gb", "mi300x-192gb", "b200-sxm-180gb")


def frozen() -> float:
    return 0.0


def _sweep(**changes: object) -> SearchRequest:
    clusters = tuple(ClusterSpec(accelerator=accelerator(acc), num_gpus=n, gpus_per_node=8)
                     for acc in ACCELERATORS for n in (128, 192))
    request = SearchRequest(
        model=model("llama3.1-70b"), clusters=clusters,
        training=TrainingSpec(seq_len=4096, global_batch_seqs=384, tokens=1e12),
        global_batches=(384, 768), objective=Objective.PARETO,
        price_per_gpu_hour_usd={"h100-sxm5-80gb": Decimal("2.50"),
                                "a100-sxm4-40gb": Decimal("1.10"),
                                "mi300x-192gb": Decimal("2.90"),
                                "b200-sxm-180gb": Decimal("4.80")})
    return dataclasses.replace(request, **changes)  # type: ignore[arg-type]


def _answer(request: SearchRequest, parts: list[list[int]]) -> tuple[object, ...]:
    result = merge_parts(request, [search_part(request, frozen, p) for p in parts], 0.0)
    return (result.plans, result.pareto, dataclasses.replace(result.stats, elapsed_s=0.0),
            result.cost_basis)


def test_peak_memory_does_not_depend_on_the_accelerator() -> None:
    m = model("llama3.1-70b")
    training = TrainingSpec(seq_len=4096, global_batch_seqs=384, tokens=1e12)
    peaks = []
    for acc in ACCELERATORS:
        cluster = ClusterSpec(accelerator=accelerator(acc), num_gpus=192, gpus_per_node=8)
        space = _sweep().space
        zeros, codes = _inner(space, training.framework)
        grid = _grid(list(_skeletons(m, cluster, 384, training.seq_len, space, {})), zeros,
                     codes, 384)
        peaks.append(np.broadcast_to(evaluate_bulk(
            m, cluster, training, grid.columns, energy=EnergySpec(),
            calibration=_sweep().calibration).peak_bytes, grid.shape))
    assert all(np.array_equal(peaks[0], other) for other in peaks[1:])
    assert np.unique(peaks[0]).size > 100  # the layouts differ, the accelerators do not


def test_shared_families_answer_as_one_group_at_a_time() -> None:
    request = _sweep(top_k=9, max_train_s=40 * 86_400.0)
    alone = [[g] for g in range(group_count(request))]  # no group shares anything
    together = [list(range(group_count(request)))]
    assert _answer(request, together) == _answer(request, alone)
    result = search(request, frozen)
    assert result.stats.pruned_by_rule["deadline"] > 0
    assert {p.cluster.accelerator.id for p in result.pareto} >= {"b200-sxm-180gb"}


def test_a_family_with_nothing_feasible_keeps_its_closest_misses() -> None:
    request = _sweep(max_train_s=1.0, objective=Objective.TIME)
    alone = [[g] for g in range(group_count(request))]
    parts = [search_part(request, frozen, p) for p in alone]
    shared = search_part(request, frozen)
    assert sorted(c.key for p in parts for c in p.closest) == sorted(
        c.key for c in shared.closest)
    assert shared.feasible == 0
    assert len(shared.closest) == 3 * group_count(request)


def test_group_families_name_the_gpu_count_node_and_batch() -> None:
    request = _sweep()
    families = group_families(request)
    assert len(families) == group_count(request) == 16
    assert len(set(families)) == 4  # two GPU counts x two batches, four accelerators each
    assert families[0] == (128, 8, 384)
    assert families[1] == (128, 8, 768)


def test_shares_keep_a_family_together_and_balance_the_candidates() -> None:
    request = _sweep()
    sizes, families = search_size(request), group_families(request)
    cut = shares(sizes, 2, families)
    assert sorted(g for share in cut for g in share) == list(range(16))
    for share in cut:
        others = [g for other in cut if other is not share for g in other]
        assert not {families[g] for g in share} & {families[g] for g in others}
    loads = [sum(sizes[g] for g in share) for share in cut]
    assert max(loads) < 1.5 * min(loads)


def test_a_family_larger_than_a_fair_share_is_cut() -> None:
    # One family holds everything: it is cut into consecutive bundles, one per share.
    assert shares([4, 4, 4, 4], 2, ["a"] * 4) == [[0, 1], [2, 3]]
    assert shares([9, 1, 1, 1], 2, ["a", "b", "b", "b"]) == [[0], [1, 2, 3]]
    assert shares([5, 0, 3, 3], 2) == [[0], [2, 3]]  # no families: each group alone
