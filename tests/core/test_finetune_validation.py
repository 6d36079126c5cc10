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
    assert len(ids) == 90
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


def _same_setup(a: fv.Result, b: fv.Result, rows: dict[str, dict[str, str]]) -> bool:
    """Same document, model, GPUs, micro-batch and sequence length. LitGPT's config hub runs
    some QLoRA configs at twice their LoRA config's micro-batch (Llama 3 8B, Llama 3.2 1B and
    3B), and there QLoRA's published peak is above LoRA's (Llama 3.2 1B: 5.53 GB against
    4.49 GB), so such pairs are not alike."""
    def batch(r: fv.Result) -> tuple[str, str]:
        return rows[r.id]["micro_batch"], rows[r.id]["seq_len"]
    return ((a.document, a.model, a.gpus, batch(a))
            == (b.document, b.model, b.gpus, batch(b)))


def test_qlora_predicts_less_memory_than_full_and_lora_alike(evaluated: Evaluated) -> None:
    results, _ = evaluated
    rows = {row["id"]: row for row in fv.load_rows()}
    pairs = 0
    for q in (r for r in results if r.method == "qlora"):
        for other in results:
            if other.method in ("full_finetune", "lora") and _same_setup(q, other, rows):
                assert q.predicted_peak_gib < other.predicted_peak_gib, (q.id, other.id)
                pairs += other.method == "full_finetune"
    assert pairs >= 1


def test_skip_reasons_are_the_expected_ones(evaluated: Evaluated) -> None:
    _, skipped = evaluated
    assert skipped["tt_readme_l31_8b_lora_4090"] == "accelerator_not_in_catalogue"
    assert "tt_flags_l32_3b_full_adamw8bit" not in skipped  # adamw_8bit is modelled now
    assert skipped["nemo2407_llama2_7b_lora_8gpu"] == "lora_config_not_stated"


def test_report_states_the_targets_and_that_nothing_is_fitted(evaluated: Evaluated) -> None:
    text = fv.report(*evaluated)
    assert "out of sample" in text
    assert "## Issue 43's targets" in text
    assert "cannot be per GPU" in text


def test_issue_43_memory_target_is_met_by_the_benchmark(evaluated: Evaluated) -> None:
    """At least 10 LoRA/QLoRA peaks within 10%, from at least 3 documents, as the benchmark
    counts them (fails if a change to the memory model or the mapping loses it)."""
    results, _ = evaluated
    within = fv.adapter_peaks_within(results)
    assert len(within) >= 10
    assert len({r.document for r in within}) >= 3
    assert all(r.method in ("lora", "qlora") for r in within)
    assert fv.peak_target_met(results)
    assert "LoRA/QLoRA peaks within 10%: " + str(len(within)) in fv.report(*evaluated)


def test_peft_reserved_peaks_keep_their_accuracy(evaluated: Evaluated) -> None:
    """The loss kernel and allocated figure leave PEFT MetaMathQA's reserved rows as they were
    (4 of 5 within 10%): the rows state no loss kernel, so the stack's own is used."""
    results, _ = evaluated
    peft = [r for r in results if "MetaMathQA" in r.document]
    assert len(peft) == 5
    assert sum(abs(r.peak_error or 1.0) <= 0.10 for r in peft) >= 4


def test_loss_kernels_and_eight_bit_adamw_follow_the_documents(evaluated: Evaluated) -> None:
    accelerators = fv.seed_accelerators()
    rows = {row["id"]: row for row in fv.load_rows()}

    def case(row_id: str) -> fv.Case:
        built = fv.row_case(rows[row_id], accelerators)
        assert isinstance(built, fv.Case), built
        return built

    assert case("tt_flags_l32_3b_full_compile").training.loss_kernel == fv.LossKernel.STANDARD
    assert case("tt_flags_l32_3b_lora").training.loss_kernel == fv.LossKernel.CHUNKED
    assert (case("tt_readme_l31_405b_qlora_8xa100").training.loss_kernel
            == fv.LossKernel.STANDARD)
    assert (case("tt_readme2024_l2_70b_lora_8xa100").training.loss_kernel
            == fv.LossKernel.STANDARD)
    assert case("peft_metamath_lora_l32_3b_rank32").training.loss_kernel is None
    assert case("tt_flags_l32_3b_full_adamw8bit").training.optimizer == fv.Optimizer.ADAMW_8BIT
    results, _ = evaluated
    by_id = {r.id: r for r in results}
    # Chunked cross-entropy lowers the flags table's peak, as the table measured it.
    assert (by_id["tt_flags_l32_3b_full_chunkedce"].predicted_peak_gib
            < by_id["tt_flags_l32_3b_full_compile"].predicted_peak_gib)
    # 8-bit AdamW lowers it further, by about 6 B per parameter (fp32 m and v -> 8-bit).
    drop = (by_id["tt_flags_l32_3b_full_actoffload"].predicted_peak_gib
            - by_id["tt_flags_l32_3b_full_adamw8bit"].predicted_peak_gib)
    assert 3.0 < drop < 8.0


def test_peft_rows_are_timed_at_the_mean_example_and_sized_at_the_truncation_length() -> None:
    """PEFT's MetaMathQA files state 4,198,051 train tokens over 20,000 samples (about 210
    each, truncated at 768): a step's throughput is estimated at batch x 210 tokens, its peak
    memory at batch x 768 (the longest batch)."""
    import dataclasses

    from benchmarks.accuracy import seed_accelerators
    from service.core.estimate import estimate

    accelerators = {**seed_accelerators(), **fv.HELD_ACCELERATORS}
    row = next(r for r in fv.load_rows() if r["id"] == "peft_metamath_lora_l32_3b_rank32")
    case = fv.row_case(row, accelerators)
    assert isinstance(case, fv.Case)
    assert case.training.seq_len == 768
    result = fv.evaluate(case)
    at_cap = estimate(case.model, case.cluster, case.plan, case.training)
    at_mean = estimate(case.model, case.cluster, case.plan,
                       dataclasses.replace(case.training, seq_len=210))
    assert result.predicted_peak_gib * fv.GIB == pytest.approx(
        float(at_cap.memory.reserved_bytes))
    assert result.predicted_tokens_per_s_per_gpu == pytest.approx(
        float(at_mean.throughput.tokens_per_s_per_gpu))
    assert (result.predicted_tokens_per_s_per_gpu
            < float(at_cap.throughput.tokens_per_s_per_gpu))
