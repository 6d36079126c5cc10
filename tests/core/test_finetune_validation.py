"""benchmarks/finetune_validation.py maps every published fine-tuning row (issue 43) to the
estimate or skips it with a coded reason; structural facts of the mapping, not accuracy."""

from __future__ import annotations

import math

import pytest

from benchmarks import finetune_validation as fv

Evaluated = tuple[list[fv.Result], dict[str, str]]


@pytest.fixture(scope="module")
def evaluated() -> Evaluated:
    return fv.run()


def test_every_row_is_evaluated_or_skipped_with_a_known_reason(evaluated: Evaluated) -> None:
    results, skipped = evaluated
    ids = [row["id"] for row in fv.load_rows()]
    assert len(ids) == 76
    assert sorted([r.id for r in results] + list(skipped)) == sorted(ids)
    assert set(skipped.values()) <= set(fv.SKIP_REASONS)
    assert "invalid_layout" not in skipped.values()
    assert len(results) >= 30


def test_predicted_figures_are_finite_and_positive(evaluated: Evaluated) -> None:
    results, _ = evaluated
    for r in results:
        for value in (r.predicted_peak_gib, r.predicted_tokens_per_s_per_gpu,
                      r.predicted_step_s):
            assert math.isfinite(value), r.id
            assert value > 0, r.id


def test_every_measured_figure_of_an_evaluated_row_is_compared(evaluated: Evaluated) -> None:
    results, _ = evaluated
    rows = {row["id"]: row for row in fv.load_rows()}
    for r in results:
        row = rows[r.id]
        assert (r.peak_error is None) == (not row["measured_peak_memory_gib"].strip()), r.id
        assert (r.throughput_error is None) == (not row["measured_tokens_per_s"].strip()), r.id
        assert (r.step_error is None) == (not row["measured_step_time_s"].strip()), r.id
    # PEFT MetaMathQA reports max reserved memory; the others allocated or active.
    assert {r.memory_kind for r in results if "MetaMathQA" in r.document} == {"reserved"}
    assert {r.memory_kind for r in results if r.id.startswith("litgpt")} == {"allocated"}


def _same_setup(a: fv.Result, b: fv.Result) -> bool:
    return (a.document, a.model, a.gpus) == (b.document, b.model, b.gpus)


def test_qlora_predicts_less_memory_than_full_and_lora_alike(evaluated: Evaluated) -> None:
    results, _ = evaluated
    pairs = 0
    for q in (r for r in results if r.method == "qlora"):
        for other in results:
            if other.method in ("full_finetune", "lora") and _same_setup(q, other):
                assert q.predicted_peak_gib < other.predicted_peak_gib, (q.id, other.id)
                pairs += other.method == "full_finetune"
    assert pairs >= 1


def test_skip_reasons_are_the_expected_ones(evaluated: Evaluated) -> None:
    _, skipped = evaluated
    assert skipped["tt_readme_l31_8b_lora_4090"] == "accelerator_not_in_catalogue"
    assert skipped["tt_flags_l32_3b_full_adamw8bit"] == "optimizer_not_modelled"
    assert skipped["nemo2407_llama2_7b_lora_8gpu"] == "lora_config_not_stated"


def test_report_states_the_targets_and_that_nothing_is_fitted(evaluated: Evaluated) -> None:
    text = fv.report(*evaluated)
    assert "out of sample" in text
    assert "## Issue 43's targets" in text
    assert "cannot be per GPU" in text
