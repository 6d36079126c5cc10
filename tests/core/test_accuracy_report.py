"""What ``make accuracy`` prints (issue 37, "Report"): the <= 8-GPU rows of
small-scale-runs.csv evaluated like the published rows, and the calibration protocol."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks import accuracy
from benchmarks.accuracy import (
    evaluate,
    in_band,
    row_inputs,
    seed_accelerators,
    small_scale_inputs,
)

ROOT = Path(__file__).resolve().parents[2]


def test_the_small_scale_rows_are_mapped_like_the_published_rows() -> None:
    rows = small_scale_inputs()
    assert len(rows) == 40  # small-scale-runs.md: 40 rows, every one on one 8-GPU node
    assert all(r.cluster.num_gpus <= 8 for r in rows)
    raw = accuracy.load_rows(accuracy.SMALL_SCALE)
    accelerators = seed_accelerators()
    assert rows[0] == row_inputs(raw[0], accelerators)  # the same mapping, not a copy
    assert not {r.id for r in rows} & {r.id for r in accuracy.usable_inputs()}


def test_in_band_is_the_answers_own_band() -> None:
    result = evaluate(small_scale_inputs()[0])
    t = result.estimate.throughput
    measured = result.inputs.measured_tokens_per_s_per_gpu * result.inputs.cluster.num_gpus
    assert in_band(result) == (t.tokens_per_s_low <= measured <= t.tokens_per_s_high)


def test_the_small_scale_section_prints_error_and_coverage(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert accuracy.main(["--small-scale"]) == 0
    out = capsys.readouterr().out
    assert out.count(" in band") + out.count("OUT of band") == 40
    summary = re.search(r"rows: 40 .*median (\S+)%, p90 (\S+)%, max (\S+)%; inside the "
                        r"answer's 80% band: (\d+) of 40", out)
    assert summary is not None, out[-400:]
    assert int(summary.group(4)) == out.count(" in band")


def test_make_accuracy_runs_the_calibration_protocol_and_the_warning_counts() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    target = makefile.split("\naccuracy: venv\n")[1].split("\n\n")[0]
    assert "-m benchmarks.accuracy" in target
    assert "-m benchmarks.band --stack" in target
    assert "-m benchmarks.calibration_protocol" in target
    band = (ROOT / "benchmarks" / "band.py").read_text(encoding="utf-8")
    assert "from benchmarks.warning_coverage import main" in band  # band prints the counts
