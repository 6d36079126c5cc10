"""Loops whose trip count a request sets (issue 36's audit): each is bounded by a schema
limit or a cap, and a refused request does no more work than the limit allows."""

from __future__ import annotations

import tracemalloc

import pytest
from pydantic import ValidationError

from service.api.schemas.plans import MAX_BATCH_OPTIONS, PlanTrainingIn


def test_a_batch_range_over_the_cap_is_refused_without_making_it() -> None:
    """global_batch_range of a million batches was made (40 MB on the event loop, where the
    body is validated) only to be refused for holding more than 64; it is counted now."""
    body = {"seq_len": 4096, "tokens": 1e9,
            "global_batch_range": {"start": 1, "stop": 1_000_000, "step": 1}}
    tracemalloc.start()
    try:
        with pytest.raises(ValidationError, match=f"at most {MAX_BATCH_OPTIONS} values"):
            PlanTrainingIn.model_validate(body)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2_000_000, f"{peak:,} bytes to refuse one batch range"


def test_a_batch_range_within_the_cap_still_lists_its_batches() -> None:
    training = PlanTrainingIn.model_validate(
        {"seq_len": 4096, "tokens": 1e9,
         "global_batch_range": {"start": 64, "stop": 512, "step": 64}})
    assert training.batches() == [64, 128, 192, 256, 320, 384, 448, 512]
    assert training.global_batch_range is not None
    assert training.global_batch_range.size() == 8
