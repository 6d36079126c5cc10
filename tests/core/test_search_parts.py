"""A sweep spread over several ``search_part`` calls and merged is the answer of one
``search`` (issue 38: the API spreads a sweep's groups across its search workers), and
``search_size`` counts what the search would evaluate, refusing before any work."""

from __future__ import annotations

import dataclasses
import pickle
import random
from decimal import Decimal

import pytest

from service.core.errors import NoFeasiblePlanError, NoLayoutError
from service.core.search import (
    Objective,
    SearchRequest,
    SearchResult,
    SearchTooLargeError,
    group_count,
    merge_parts,
    search,
    search_part,
    search_size,
)
from service.core.specs import ClusterSpec, TrainingSpec
from tests.factories import accelerator, model


def frozen() -> float:
    return 0.0


def _sweep(**changes: object) -> SearchRequest:
    clusters = tuple(
        ClusterSpec(accelerator=accelerator(acc), num_gpus=n, gpus_per_node=8)
        for acc in ("h100-sxm5-80gb", "a100-sxm4-80gb", "h200-sxm-141gb")
        for n in (64, 96, 128))
    request = SearchRequest(
        model=model("llama3.1-70b"), clusters=clusters,
        training=TrainingSpec(seq_len=4096, global_batch_seqs=256, tokens=1e12),
        global_batches=(256, 512),
        price_per_gpu_hour_usd={"h100-sxm5-80gb": Decimal("2.50"),
                                "a100-sxm4-80gb": Decimal("1.40"),
                                "h200-sxm-141gb": Decimal("3.20")},
        top_k=7)
    return dataclasses.replace(request, **changes)  # type: ignore[arg-type]


def _answer(result: SearchResult) -> tuple[object, ...]:
    """Everything but the elapsed time (the run's measure, not part of the answer)."""
    stats = dataclasses.replace(result.stats, elapsed_s=0.0)
    return result.plans, result.pareto, stats, result.cost_basis


def _split(request: SearchRequest, parts: int, seed: int) -> SearchResult:
    groups = list(range(group_count(request)))
    random.Random(seed).shuffle(groups)
    shares = [groups[i::parts] for i in range(parts)]
    done = [search_part(request, frozen, share) for share in shares]
    # The parts travel back from worker processes.
    done = [pickle.loads(pickle.dumps(part)) for part in reversed(done)]  # noqa: S301 - our own bytes
    return merge_parts(request, done, 0.0)


@pytest.mark.parametrize("objective", [Objective.TIME, Objective.COST, Objective.PARETO])
@pytest.mark.parametrize(("parts", "seed"), [(2, 0), (3, 1), (18, 2)])
def test_any_split_of_the_groups_gives_the_answer_of_one_search(
        objective: Objective, parts: int, seed: int) -> None:
    request = _sweep(objective=objective)
    whole = search(request, frozen)
    assert len(whole.plans) == (3 if objective is Objective.PARETO else 7)
    assert len(whole.pareto) == 3
    assert _answer(_split(request, parts, seed)) == _answer(whole)


def test_nothing_feasible_names_the_same_closest_split_or_not() -> None:
    request = _sweep(max_train_s=1.0)
    with pytest.raises(NoFeasiblePlanError) as whole:
        search(request, frozen)
    with pytest.raises(NoFeasiblePlanError) as split:
        _split(request, 4, 3)
    assert split.value.closest == whole.value.closest
    assert len(whole.value.closest) == 3
    assert split.value.candidates_total == whole.value.candidates_total


def test_a_part_without_a_layout_is_not_a_refusal_unless_no_part_has_one() -> None:
    clusters = (ClusterSpec(accelerator=accelerator("h100-sxm5-80gb"), num_gpus=97,
                            gpus_per_node=8),
                ClusterSpec(accelerator=accelerator("h100-sxm5-80gb"), num_gpus=64,
                            gpus_per_node=8))
    request = _sweep(clusters=clusters, global_batches=(256,))
    parts = [search_part(request, frozen, [0]), search_part(request, frozen, [1])]
    assert parts[0].groups_with_layout == 0
    assert parts[1].groups_with_layout == 1
    assert _answer(merge_parts(request, parts, 0.0)) == _answer(search(request, frozen))
    lone = dataclasses.replace(request, clusters=clusters[:1])
    with pytest.raises(NoLayoutError):
        search_size(lone)
    with pytest.raises(NoLayoutError):
        merge_parts(lone, [search_part(lone, frozen, [0])], 0.0)


def test_search_size_counts_what_the_search_evaluates() -> None:
    request = _sweep()
    sizes = search_size(request)
    assert len(sizes) == group_count(request) == 18
    result = search(request, frozen)
    assert sum(sizes) == result.stats.candidates_total == result.stats.candidates_evaluated
    assert all(size > 0 for size in sizes)


def test_search_size_refuses_past_the_cap_as_the_search_does() -> None:
    request = _sweep()
    cap = sum(search_size(request)) - 1
    tight = dataclasses.replace(request, max_candidates=cap)
    with pytest.raises(SearchTooLargeError) as counted:
        search_size(tight)
    with pytest.raises(SearchTooLargeError) as searched:
        search(tight, frozen)
    assert str(counted.value) == str(searched.value)
    assert f"{cap:,}" in str(counted.value)
    at_cap = dataclasses.replace(request, max_candidates=cap + 1)
    assert search(at_cap, frozen).stats.max_candidates == cap + 1
