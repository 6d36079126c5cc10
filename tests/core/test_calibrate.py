"""The fit's shortcut (``benchmarks/calibrate.py``): a knob declares which published rows it
can move (``Knob.touches``), and a fit re-estimates only those when it tries a value. A
declaration that left out a row the knob does move would silently change the fit; this
checks every declaration against the model itself."""

from __future__ import annotations

import dataclasses

from benchmarks.accuracy import evaluate, resolve_auto, usable_inputs
from benchmarks.calibrate import MEMORY_KNOBS, TIME_KNOBS, fit, physical_start, time_loss
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


def test_the_shortcut_fits_what_the_whole_loss_fits() -> None:
    """A fit whose knobs declare their rows ends at the very constants of the same fit with
    every row re-estimated at every step (on a sample of rows and knobs, to stay quick)."""
    rows = usable_inputs()[::6]
    declared = [k for k in TIME_KNOBS if k.touches is not None]
    knobs = (*declared[:6], next(k for k in TIME_KNOBS if k.name == "step_overhead_s"))
    whole = tuple(dataclasses.replace(k, touches=None) for k in knobs)
    shortcut = fit(rows, physical_start(), knobs, time_loss)
    assert shortcut == fit(rows, physical_start(), whole, time_loss)
    assert shortcut != physical_start()  # the fit moved something
