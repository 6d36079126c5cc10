"""Validation of specs and layouts: every rule names its field."""

from __future__ import annotations

import math

import pytest

from service.core.errors import InvalidSpecError
from service.core.estimate import estimate
from service.core.specs import EnergySpec, ModelSpec, TrainingSpec, validate_plan
from tests.factories import cluster, model, plan, training


class TestValidatePlan:
    def test_gpu_product_must_equal_cluster(self) -> None:
        with pytest.raises(InvalidSpecError, match=r"must equal cluster.num_gpus \(128\)") as e:
            validate_plan(model(), cluster(128), plan(), training())
        assert e.value.field == "parallelism"

    def test_a_gpu_count_off_the_layout_names_the_nearest_counts(self) -> None:
        """Issue 18: the rule in the user's words, with the two counts that would work."""
        with pytest.raises(InvalidSpecError) as e:
            validate_plan(model(), cluster(100), plan(tp=4, pp=3, dp=8, cp=1, vp=1),
                          training())
        assert str(e.value).startswith(
            "GPU count (100) must be a multiple of TP×PP×CP = 4×3×1 = 12: try 96 or 108")
        with pytest.raises(InvalidSpecError, match=r"= 32: try 32$"):
            validate_plan(model(), cluster(8), plan(tp=4, pp=4, dp=1, cp=2), training())

    def test_heads_must_divide_by_tp(self) -> None:
        m = model("llama3.1-8b")
        with pytest.raises(InvalidSpecError, match=r"divisible by parallelism\.tp") as e:
            validate_plan(m, cluster(24), plan(tp=3, pp=1, dp=8, cp=1, vp=1), training())
        assert e.value.field == "parallelism.tp"

    def test_global_batch_must_divide_by_dp_times_micro_batch(self) -> None:
        with pytest.raises(InvalidSpecError, match="global_batch_seqs") as e:
            validate_plan(model(), cluster(), plan(micro_batch=3), training())
        assert e.value.field == "training.global_batch_seqs"

    def test_expert_parallel_needs_a_moe_model(self) -> None:
        with pytest.raises(InvalidSpecError, match="dense model"):
            validate_plan(model(), cluster(), plan(ep=2), training())

    def test_uneven_layers_are_allowed_with_a_warning(self) -> None:
        layout = validate_plan(model("llama3.1-405b"), cluster(512),
                               plan(tp=8, pp=8, dp=8, cp=1, vp=1), training(global_batch_seqs=256))
        assert layout.layers_per_stage == 16
        assert any("do not divide evenly" in w for w in layout.warnings)

    def test_micro_batches_follow_from_batch_and_dp(self) -> None:
        layout = validate_plan(model(), cluster(), plan(), training())
        assert layout.num_micro_batches == 128 // 2


class TestSpecs:
    @pytest.mark.parametrize("tokens", [math.nan, math.inf, -1.0, 0.0, 1e19])
    def test_training_tokens_must_be_finite_positive_and_bounded(self, tokens: float) -> None:
        with pytest.raises(InvalidSpecError) as e:
            TrainingSpec(seq_len=1024, global_batch_seqs=8, tokens=tokens)
        assert e.value.field == "training.tokens"

    def test_heads_must_divide_by_kv_heads(self) -> None:
        with pytest.raises(InvalidSpecError, match="num_kv_heads"):
            ModelSpec(num_layers=2, hidden_size=64, num_heads=8, num_kv_heads=3,
                      ffn_hidden_size=256, vocab_size=100)

    def test_pue_below_one_is_rejected(self) -> None:
        with pytest.raises(InvalidSpecError, match=r"energy.pue"):
            EnergySpec(pue=0.9)

    def test_precision_missing_on_accelerator_names_the_field(self) -> None:
        with pytest.raises(InvalidSpecError, match="no bf16") as e:
            estimate(model("llama2-7b"), cluster(8, "v100-sxm2-32gb"),
                     plan(tp=1, pp=1, dp=8, cp=1, vp=1), training(seq_len=2048))
        assert e.value.field == "training.precision"
