"""The network terms against published measurements (issue 42, "Validation"), and
docs/model.md's fabric tables against the code.

Every predicted figure is computed by the core on the row's setup
(``benchmarks.network_validation``); the measured figure, its source and the tolerance are
the CSV's (``benchmarks/data/network-measurements.csv``). A row expected ``within`` fails
the test when the model moves out of its tolerance; a ``known_gap`` row fails when the model
comes within it, so the gap docs/model.md states ("Fabric validation") cannot go stale
silently either way.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks import network_validation as nv
from service.core.fabric import PROTOCOL_DEFAULTS, powersgd_fraction

DOC = Path(__file__).resolve().parents[2] / "docs" / "model.md"
ROWS = nv.load_rows()


def test_every_row_names_its_document_and_figure() -> None:
    assert len(ROWS) >= 12
    kinds = {row["kind"] for row in ROWS}
    assert {"allreduce_busbw", "allreduce_time", "loss_goodput", "mfu",
            "powersgd_numbers"} <= kinds
    for row in ROWS:
        assert row["document"]
        assert row["url"].startswith("https://")
        assert row["table_or_figure"]
        assert float(row["measured"]) > 0
        assert row["expect"] in ("within", "known_gap")
        assert 0 < float(row["tolerance_fraction"]) < 1


@pytest.mark.parametrize("row", ROWS, ids=[row["id"] for row in ROWS])
def test_each_measurement_stays_where_the_document_says(row: dict[str, str]) -> None:
    (checked,) = nv.check([row])
    if row["expect"] == "within":
        assert abs(checked.error) <= checked.tolerance, (
            f"{row['id']}: predicted {checked.predicted:.4g} against {checked.measured:.4g} "
            f"{row['measured_unit']} ({checked.error:+.1%}, tolerance {checked.tolerance:.0%})")
    else:
        assert abs(checked.error) > checked.tolerance, (
            f"{row['id']}: the known gap closed ({checked.error:+.1%}); update docs/model.md "
            "'Fabric validation' and the row")


def test_the_documented_errors_are_the_computed_ones() -> None:
    """docs/model.md's validation table gives each row's error as the benchmark computes it."""
    text = DOC.read_text()
    for checked in nv.check():
        match = re.search(rf"^\| `{re.escape(checked.row['id'])}` \|.*$", text, re.MULTILINE)
        assert match, f"{checked.row['id']} is not in docs/model.md"
        assert f"{checked.error:+.1%}".replace("-", "−") in match.group(0), match.group(0)


def test_infiniband_bus_bandwidth_comes_from_the_nic_rate() -> None:
    """The bandwidth end is the node's NICs at the fitted efficiency: halving the NIC rate
    halves the predicted busbw of a large all-reduce (so the rows test the term, not a
    constant)."""
    row = next(r for r in ROWS if r["id"] == "ib-hdr-dgx-a100")
    halved = {**row, "nic_gbps_per_gpu": str(float(row["nic_gbps_per_gpu"]) / 2)}
    assert nv.bus_bandwidth_gb_per_s(halved) == pytest.approx(
        nv.bus_bandwidth_gb_per_s(row) / 2, rel=2e-3)


@pytest.mark.parametrize("machine_gpus", [8, 4])
def test_powersgd_fraction_on_dalle_s_shapes_is_its_formula(machine_gpus: int) -> None:
    """On DALL-E's own per-GPU shard shapes (Ramesh et al. 2021, appendix E.1, Table 2: q, k,
    v and the post-attention matrix d x d/m each, the MLP's d x 4d/m and 4d/m x d, each
    GPU at rank r/m), the core's ``powersgd_fraction`` is the paper's r(m + 2)/(2dm), 5r/(8d)
    at m = 8: the ``powersgd_numbers`` rows' gap comes from ``matrix_shapes`` (K and V taken
    as one matrix), not from the counting."""
    d, total_rank, m = 3968, 896, machine_gpus
    shapes = ((d, d / m, 4.0), (d, 4 * d / m, 1.0), (4 * d / m, d, 1.0))
    assert powersgd_fraction(shapes, total_rank // m) == pytest.approx(
        total_rank * (m + 2) / (2 * d * m), rel=1e-12)


def test_the_powersgd_rows_follow_the_rank() -> None:
    """The prediction is the term, not a constant: halving DALL-E's rank halves the numbers
    sent (r(n + m) is linear in r while it is below nm)."""
    row = next(r for r in ROWS if r["id"] == "dalle-12b-r896")
    _, rank = nv.POWERSGD_SETUPS[row["id"]]
    assert nv.powersgd_numbers(row, rank // 2) == pytest.approx(
        nv.powersgd_numbers(row) / 2, rel=1e-12)


def test_the_claim_table_in_the_document_is_the_code_s() -> None:
    """The '0.1% loss costs up to 50%' check in docs/model.md is the code's (``--claim-table``)."""
    assert nv.claim_table() in DOC.read_text()


def test_the_protocol_table_in_the_document_is_the_code_s() -> None:
    """docs/model.md's protocol table is ``fabric.PROTOCOL_DEFAULTS`` as
    ``benchmarks.network_validation.fabric_table`` prints it; a changed constant fails here
    until the document is regenerated (``python -m benchmarks.network_validation
    --fabric-table``)."""
    table = nv.fabric_table()
    assert table in DOC.read_text()
    for protocol, facts in PROTOCOL_DEFAULTS.items():
        assert f"| `{protocol.value}` | {facts.latency_s * 1e6:g} µs | " in table


def test_the_what_if_table_in_the_document_is_the_code_s() -> None:
    """docs/model.md's 70B table is what the code computes now (``--what-if-table``)."""
    assert nv.what_if_table() in DOC.read_text()
