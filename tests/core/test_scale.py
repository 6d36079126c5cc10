"""Scale (issue 42, "Scale"): the model against the largest published training runs, and a coded
warning on any plan beyond the largest published scale that predicts more MFU than was
published there."""

from __future__ import annotations

import pytest

from service.core.estimate import (
    LARGEST_PUBLISHED_GPUS,
    LARGEST_SCALE_MFU_FRACTION,
    scale_details,
)
from service.core.plausibility import OUTSIDE_VALIDATED_RANGE
from service.core.search import SearchRequest, frozen_clock, search
from service.core.specs import ClusterSpec, TrainingSpec
from tests.factories import accelerator, model

# The Llama 3 paper's Table 4 runs (8,192 and 16,384 H100) are reserved for independent
# validation (issue 15's list), so nothing here compares against them (decision 444); the
# published scale point is MegaScale's, in tests/core/test_network_validation.py.


def test_the_coded_warning_only_beyond_the_largest_published_scale() -> None:
    assert LARGEST_PUBLISHED_GPUS == 12_288
    assert pytest.approx(0.552 / 1.34, abs=5e-4) == LARGEST_SCALE_MFU_FRACTION
    assert scale_details(LARGEST_PUBLISHED_GPUS, 0.9) == ()
    assert scale_details(LARGEST_PUBLISHED_GPUS + 8, LARGEST_SCALE_MFU_FRACTION) == ()
    (detail,) = scale_details(LARGEST_PUBLISHED_GPUS + 8, LARGEST_SCALE_MFU_FRACTION + 0.001)
    assert detail.code == OUTSIDE_VALIDATED_RANGE
    assert detail.field == "cluster.num_gpus"
    assert "2402.15627" in detail.message
    assert "2407.21783" not in detail.message


def test_a_98304_gpu_plan_above_the_published_mfu_says_so() -> None:
    h100 = accelerator("h100-sxm5-80gb")
    request = SearchRequest(
        model=model("llama3.1-405b"),
        clusters=(ClusterSpec(accelerator=h100, num_gpus=98_304, gpus_per_node=8),),
        training=TrainingSpec(seq_len=8192, global_batch_seqs=16384, tokens=15.6e12),
        top_k=1)
    best = search(request, frozen_clock).plans[0].estimate
    mfu = best.throughput.mfu_fraction
    assert mfu > LARGEST_SCALE_MFU_FRACTION  # the model alone does not fall to 41.2% here
    coded = [d for d in best.warning_details
             if d.code == OUTSIDE_VALIDATED_RANGE and "Megatron-LM on" in d.message]
    assert len(coded) == 1
    assert coded[0].field == "cluster.num_gpus"
    assert f"{mfu:.1%}" in coded[0].message
