"""The serving validation (issue 19): its rows have sources, the leave-one-source-out figure
never fits on the source it predicts, and the shipped engine table is the in-sample fit."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from benchmarks import serving_validation as v
from benchmarks.accuracy import seed_accelerators
from service.core import serving as s
from service.core.specs import AcceleratorSpec

ACC = seed_accelerators()
ROWS = v.load()
USABLE = [r for r in ROWS if v.skip_reason(r, ACC) is None]


def test_every_row_names_its_source_and_where_to_find_it() -> None:
    assert len(ROWS) >= 53
    for row in ROWS:
        assert row["source"].strip(), row["id"]
        assert row["url_or_repo_path"].strip(), row["id"]
        assert row["notes"].strip(), row["id"]  # the quoted table row


def test_an_mlperf_round_is_one_document_whoever_submitted() -> None:
    giga = {"source": "MLPerf Inference v5.0 (GigaComputing submission)"}
    nvidia = {"source": "MLPerf Inference v5.0 (NVIDIA submission)"}
    assert v.document(giga) == v.document(nvidia) == "MLPerf Inference v5.0"
    blog = {"source": "vLLM blog: The State of FP8 (2026-04-22), Table 5"}
    assert v.document(blog) == "vLLM blog: The State of FP8 (2026-04-22)"


def test_leave_one_source_out_never_trains_on_the_held_out_source() -> None:
    seen: list[set[str]] = []

    def spy(train: Sequence[dict[str, str]],
            accelerators: Mapping[str, AcceleratorSpec]) -> dict[s.Engine, s.EngineEfficiency]:
        seen.append({v.document(r) for r in train})
        return dict(s.ENGINE_PRIORS)

    results = v.leave_one_source_out(USABLE, ACC, fitter=spy)
    documents = {v.document(r) for r in USABLE}
    assert len(documents) >= 2
    assert len(seen) == len(documents)  # one fold per document
    for held_out in documents:
        folds = [docs for docs in seen if held_out not in docs]
        assert len(folds) == 1  # exactly the fold that holds it out
        assert folds[0] == documents - {held_out}
    assert sorted(r.row_id for r in results) == sorted(r["id"] for r in USABLE)


def test_a_fold_without_an_engine_s_rows_keeps_that_engine_s_prior() -> None:
    nim_only = [r for r in USABLE if r["engine"] not in v.ENGINES]
    assert nim_only
    table = v.fit(nim_only, ACC)
    for engine in v.NAMED:
        assert table[engine] == s.ENGINE_PRIORS[engine]


def test_unknown_is_the_least_efficient_of_the_named_engines() -> None:
    table = s.ENGINE_EFFICIENCY
    unknown = table[s.Engine.UNKNOWN]
    for engine in v.NAMED:
        assert unknown.hbm_fraction <= table[engine].hbm_fraction
        assert unknown.compute_fraction <= table[engine].compute_fraction
        assert unknown.step_overhead_s >= table[engine].step_overhead_s
        assert unknown.gpu_memory_fraction <= table[engine].gpu_memory_fraction


def test_the_shipped_engine_table_is_the_in_sample_fit() -> None:
    fitted = v.fit(USABLE, ACC)
    for engine in s.Engine:
        got, want = s.ENGINE_EFFICIENCY[engine], fitted[engine]
        assert (got.hbm_fraction, got.compute_fraction, got.step_overhead_s,
                got.gpu_memory_fraction) == (want.hbm_fraction, want.compute_fraction,
                                             want.step_overhead_s, want.gpu_memory_fraction)
    for row_id in ("vllmblog_fp8kv_llama8b_bf16kv_c8", "vllmblog_fp8kv_llama8b_fp8kv_c8"):
        assert row_id in s.ENGINE_EFFICIENCY[s.Engine.VLLM].basis


def test_evaluating_a_table_leaves_the_model_s_table_unchanged() -> None:
    before = dict(s.ENGINE_EFFICIENCY)
    v.predict(USABLE, dict(s.ENGINE_PRIORS), ACC)
    assert before == s.ENGINE_EFFICIENCY
