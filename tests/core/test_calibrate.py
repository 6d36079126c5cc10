"""The fit's shortcut (``benchmarks/calibrate.py``): a knob declares which published rows it
can move (``Knob.touches``), and a fit re-estimates only those when it tries a value. A
declaration that left out a row the knob does move would silently change the fit; this
checks every declaration against the model itself."""

from __future__ import annotations

from benchmarks.accuracy import evaluate, resolve_auto, usable_inputs
from benchmarks.calibrate import MEMORY_KNOBS, TIME_KNOBS, time_loss
from service.core.calibration import DEFAULT_CALIBRATION


def test_a_knob_moves_no_row_outside_what_it_declares() -> None:
    rows = resolve_auto(usable_inputs(), DEFAULT_CALIBRATION)
    before = {row.id: evaluate(row).predicted for row in rows}
    declared = [knob for knob in TIME_KNOBS if knob.touches is not None]
    assert len(declared) >= 20
    for knob in declared:
        value = knob.get(DEFAULT_CALIBRATION)
        moved = knob.set(DEFAULT_CALIBRATION, min(knob.high, max(knob.low, value * 1.25))
                         if value > 0 else 0.05)
        inside = 0
        for row in rows:
            after = evaluate(row, moved).predicted
            if knob.touches(row):
                inside += after != before[row.id]
            else:
                assert after == before[row.id], (knob.name, row.id)
        # the declaration is not vacuous: the knob does move some of its rows
        assert inside > 0, knob.name


def test_global_knobs_declare_nothing() -> None:
    """Knobs read by every step (the overheads, the attention and collective constants) and
    the memory knobs are re-estimated on every row."""
    assert all(knob.touches is None for knob in MEMORY_KNOBS)
    assert {k.name for k in TIME_KNOBS if k.touches is None} >= {
        "step_overhead_s", "attention_efficiency_fraction", "tp_comm_exposed_fraction",
        "scaleout_efficiency_fraction", "dp_comm_min_exposed_fraction"}
    assert time_loss(usable_inputs()[:5], DEFAULT_CALIBRATION) > 0
