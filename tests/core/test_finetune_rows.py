"""Published fine-tuning measurements (issue 43): benchmarks/data/finetune-runs.csv.

Each row is one published LoRA, QLoRA or full fine-tuning run with its peak memory and/or
throughput; these checks keep the file loadable and honest about what it states.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from benchmarks.accuracy import seed_accelerators
from benchmarks.finetune_validation import HELD_ACCELERATORS

CSV_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "finetune-runs.csv"

METHODS = {"full_finetune", "lora", "qlora"}
PRECISIONS = {"bf16", "fp16", "fp8", "nf4", "int8"}
TARGETS = {"q", "k", "v", "o", "gate", "up", "down"}
RECOMPUTE = {"none", "selective", "full"}
SCOPES = {"per_gpu", "total"}
POSITIVE_NUMBERS = (
    "params_b", "layers", "hidden", "ffn", "heads", "kv_heads", "vocab", "lora_rank",
    "lora_alpha", "num_gpus", "tp", "pp", "seq_len", "micro_batch", "grad_accum", "global_batch",
    "measured_peak_memory_gib", "measured_tokens_per_s", "measured_step_time_s",
)
INTEGERS = (
    "layers", "hidden", "ffn", "heads", "kv_heads", "vocab", "lora_rank", "num_gpus", "tp", "pp",
    "seq_len", "micro_batch", "grad_accum", "global_batch",
)


def _rows() -> list[dict[str, str]]:
    with CSV_PATH.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


ROWS = _rows()


def test_header_names_the_documented_columns() -> None:
    with CSV_PATH.open(newline="", encoding="utf-8") as handle:
        header = next(csv.reader(handle))
    for column in ("id", "source", "url_or_repo_path", "model", "method", "base_precision",
                   "accelerator", "measured_peak_memory_gib", "measured_tokens_per_s",
                   "tokens_per_s_scope", "measured_step_time_s", "notes"):
        assert column in header
    assert len(header) == len(set(header))


def test_ids_are_unique() -> None:
    ids = [row["id"] for row in ROWS]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("row", ROWS, ids=[row["id"] for row in ROWS])
def test_row_is_sourced_and_well_formed(row: dict[str, str]) -> None:
    assert row["source"].strip()
    assert row["url_or_repo_path"].strip()
    assert row["model"].strip()
    assert len(row["notes"]) > 40, "notes must quote the published row"
    assert row["method"] in METHODS
    assert row["base_precision"] in PRECISIONS or row["base_precision"] == ""
    if row["method"] == "qlora":
        assert row["base_precision"] == "nf4"
    if row["method"] == "full_finetune":
        assert row["base_precision"] != "nf4"
        assert row["lora_rank"] == ""
    if row["target_modules"]:
        assert set(row["target_modules"].split(";")) <= TARGETS
    assert row["recompute"] in RECOMPUTE or row["recompute"] == ""
    assert row["packing"] in {"true", "false", ""}
    # The catalogue's GPUs, or one the benchmark holds with its datasheet (the A10G).
    assert row["accelerator"] == "" or row["accelerator"] in {
        **seed_accelerators(), **HELD_ACCELERATORS}
    for column in POSITIVE_NUMBERS:
        if row[column]:
            assert float(row[column]) > 0, column
    for column in INTEGERS:
        if row[column]:
            assert int(row[column]) == float(row[column]), column
    if all(row[c] for c in ("num_gpus", "micro_batch", "grad_accum", "global_batch")):
        model_parallel = int(row["tp"] or 1) * int(row["pp"] or 1)
        assert int(row["num_gpus"]) % model_parallel == 0
        data_parallel = int(row["num_gpus"]) // model_parallel
        assert int(row["micro_batch"]) * int(row["grad_accum"]) * data_parallel == int(
            row["global_batch"]
        )
    measured = [row[c] for c in ("measured_peak_memory_gib", "measured_tokens_per_s",
                                 "measured_step_time_s")]
    assert any(measured), "a row must carry at least one measurement"
    assert (row["tokens_per_s_scope"] in SCOPES) == bool(row["measured_tokens_per_s"])


def test_rows_come_from_at_least_three_documents() -> None:
    assert len({row["source"] for row in ROWS}) >= 3
    assert len({row["url_or_repo_path"].split("@")[0] for row in ROWS}) >= 3


def test_issue_43_targets_have_enough_rows() -> None:
    """LoRA/QLoRA peaks: >= 10 rows from >= 3 documents; throughput: >= 20 rows from >= 3."""
    adapter_peaks = [r for r in ROWS if r["method"] in {"lora", "qlora"}
                     and r["measured_peak_memory_gib"]]
    assert len(adapter_peaks) >= 10
    assert len({r["source"] for r in adapter_peaks}) >= 3
    throughput = [r for r in ROWS if r["measured_tokens_per_s"]]
    assert len(throughput) >= 20
    assert len({r["source"] for r in throughput}) >= 3
