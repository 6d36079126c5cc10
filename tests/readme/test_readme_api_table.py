"""The README's "API at a glance" table names every operation of the API document: an
operation added without a row (the four portfolio operations and ``get_metrics`` were missing
until 2026-12-04) fails here, and so does a row for an operation the document no longer has."""

from __future__ import annotations

import json
import re

from tests.live_server import REPO_ROOT

ROW = re.compile(r"^\| `(?:GET|POST|PUT|DELETE|PATCH) [^|]*\| (`[a-z_]+`(?:, `[a-z_]+`)*) \|",
                 re.M)


def _table() -> str:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index("## API at a glance")
    return readme[start:readme.index("\n## ", start + 1)]


def _documented() -> set[str]:
    document = json.loads((REPO_ROOT / "openapi" / "openapi.json").read_text(encoding="utf-8"))
    return {operation["operationId"] for item in document["paths"].values()
            for operation in item.values()
            if isinstance(operation, dict) and "operationId" in operation}


def test_every_operation_has_a_row_and_every_row_an_operation() -> None:
    listed = {name.strip("` ") for cell in ROW.findall(_table()) for name in cell.split(",")}
    documented = _documented()
    assert len(documented) > 40
    assert sorted(documented - listed) == []
    assert sorted(listed - documented) == []


def test_the_accuracy_section_states_the_shipped_band_coverage() -> None:
    """The README's per-stack band coverage is the shipped calibration's (it had drifted: 82%
    for Megatron and 81% for MaxText after both bands moved), and its overall figure is the
    derivation's on the stored out-of-sample residuals."""
    from benchmarks.accuracy import usable_inputs
    from benchmarks.band import choose_tails, coverage, residuals
    from service.core.calibration import DEFAULT_CALIBRATION

    readme = " ".join((REPO_ROOT / "README.md").read_text(encoding="utf-8").split())
    bands = DEFAULT_CALIBRATION.bands
    names = {"megatron": "Megatron", "fsdp": "FSDP", "torchtitan": "torchtitan", "moe": "MoE",
             "maxtext": "MaxText"}
    stated = ", ".join(f"{label} {bands[key].coverage_fraction:.0%}"
                       for key, label in names.items())
    assert f"({stated};" in readme
    sample = residuals(usable_inputs())
    _, overall = coverage(sample, choose_tails(sample))
    assert f"the bands hold the truth on {overall:.1%} of the {len(sample)} runs" in readme
