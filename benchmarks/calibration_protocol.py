"""The calibration protocol of issue 37: does a user's own handful of runs fix the estimate?

For every source family of ``benchmarks/data/published-runs.csv`` with at least
``MIN_FAMILY_ROWS`` usable rows: draw ``CALIBRATION_RUNS`` of its rows (a fixed seed, repeated
``REPEATS`` times), calibrate on them as ``POST /v1/calibrations`` does
(``service.core.user_calibration.fit``), and predict the family's other rows with the
calibrated model (``apply`` then ``estimate``). It prints, before (no calibration) and
after, the median |predicted / measured - 1| of tokens/s per GPU over every prediction and
the share inside the 80% band, per family and overall.

The base model was fitted on these very rows, so predicting them in sample would flatter
both figures. The headline is leave one family out: each row's prediction is its in-sample
one scaled to the stored leave-one-source-out prediction (``benchmarks/data/holdout.csv``,
``make holdout``), i.e. every part of the step is scaled by the same ratio. That is an
approximation of refitting the project's constants without the family (which changes the
parts unequally); it keeps the family's out-of-sample offset, which is what a user's runs
have to correct. The in-sample figures are printed too.

Usage: ``python -m benchmarks.calibration_protocol`` (about a minute).
"""

from __future__ import annotations

import math
import random
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass

from benchmarks.accuracy import RowResult, evaluate, family_of, usable_inputs
from benchmarks.calibrate import read_holdout
from service.core.calibration import DEFAULT_CALIBRATION, Band
from service.core.errors import CoreError
from service.core.estimate import estimate
from service.core.user_calibration import (
    MeasuredRun,
    OutlierRunsError,
    StepParts,
    apply,
    fit,
    step_parts,
)

MIN_FAMILY_ROWS = 8
CALIBRATION_RUNS = 5
REPEATS = 5
SEED = 37


@dataclass(frozen=True, slots=True)
class Row:
    result: RowResult
    regime: str
    parts: StepParts
    scale: float
    """The base step's leave-one-family-out over in-sample ratio (1 in sample)."""
    measured_step_s: float
    band: Band


@dataclass(frozen=True, slots=True)
class Outcome:
    family: str
    errors_before: list[float]
    errors_after: list[float]
    covered_before: list[bool]
    covered_after: list[bool]
    refused: int
    """Draws whose runs the fit refused as outliers (the whole draw is then skipped)."""


def _rows(out_of_family: bool) -> dict[str, list[Row]]:
    held = read_holdout() if out_of_family else {}
    families: dict[str, list[Row]] = defaultdict(list)
    for inputs in usable_inputs():
        result = evaluate(inputs)
        step = result.estimate.throughput.step
        scale = 1.0
        if out_of_family:
            if inputs.id not in held:
                continue
            loso_tokens = inputs.measured_tokens_per_s_per_gpu * (1.0 + held[inputs.id])
            scale = result.predicted / loso_tokens
        # measured step = predicted step x predicted tokens/s / measured tokens/s.
        measured = float(step.step_s) * result.predicted / inputs.measured_tokens_per_s_per_gpu
        regime = DEFAULT_CALIBRATION.regime_of(
            framework=inputs.training.framework, moe=inputs.model.is_moe,
            accelerator_id=inputs.cluster.accelerator.id)
        parts = step_parts(step, inputs.cluster.num_gpus, DEFAULT_CALIBRATION)
        scaled = StepParts(compute_s=parts.compute_s * scale,
                           communication_s=parts.communication_s * scale,
                           fixed_s=parts.fixed_s * scale, overhead_s=parts.overhead_s * scale,
                           straggler_multiplier=parts.straggler_multiplier)
        families[family_of(inputs)].append(Row(
            result=result, regime=regime, parts=scaled, scale=scale, measured_step_s=measured,
            band=DEFAULT_CALIBRATION.band_for(framework=inputs.training.framework,
                                              moe=inputs.model.is_moe,
                                              accelerator_id=inputs.cluster.accelerator.id)))
    return {f: rows for f, rows in families.items() if len(rows) >= MIN_FAMILY_ROWS}


def _error_and_cover(predicted_step_s: float, measured_step_s: float,
                     band: Band) -> tuple[float, bool]:
    """|tokens/s error| and whether the measured tokens/s is in the band around it."""
    error = measured_step_s / predicted_step_s - 1.0  # predicted / measured tokens/s - 1
    return abs(error), band.low_fraction <= error <= band.high_fraction


def family_outcome(family: str, rows: list[Row]) -> Outcome:
    """``REPEATS`` draws of ``CALIBRATION_RUNS`` rows from the family's, each predicting the
    rest before and after calibrating on the draw."""
    rng = random.Random(f"{SEED}:{family}")
    outcome = Outcome(family, [], [], [], [], 0)
    for _ in range(REPEATS):
        chosen = set(rng.sample(range(len(rows)), CALIBRATION_RUNS))
        runs = [MeasuredRun(parts=rows[i].parts, measured_step_s=rows[i].measured_step_s,
                            regime=rows[i].regime) for i in sorted(chosen)]
        try:
            user = fit(runs)
        except OutlierRunsError:
            outcome = Outcome(family, outcome.errors_before, outcome.errors_after,
                              outcome.covered_before, outcome.covered_after,
                              outcome.refused + 1)
            continue
        calibration = apply(DEFAULT_CALIBRATION, dict(zip(
            (f.name for f in user.factors), user.values, strict=True)), user.bands)
        for i, row in enumerate(rows):
            if i in chosen:
                continue
            before = float(row.result.estimate.throughput.step.step_s) * row.scale
            error, covered = _error_and_cover(before, row.measured_step_s, row.band)
            outcome.errors_before.append(error)
            outcome.covered_before.append(covered)
            inputs = row.result.inputs
            try:
                after_estimate = estimate(inputs.model, inputs.cluster, row.result.plan,
                                          inputs.training, calibration=calibration)
            except CoreError:
                continue
            after = float(after_estimate.throughput.step.step_s) * row.scale
            band = calibration.band_for(framework=inputs.training.framework,
                                        moe=inputs.model.is_moe,
                                        accelerator_id=inputs.cluster.accelerator.id)
            error, covered = _error_and_cover(after, row.measured_step_s, band)
            outcome.errors_after.append(error)
            outcome.covered_after.append(covered)
    return outcome


def _line(label: str, before: list[float], after: list[float], covered_before: list[bool],
          covered_after: list[bool], refused: int) -> str:
    def med(values: list[float]) -> str:
        return f"{statistics.median(values):6.1%}" if values else "     -"

    def share(values: list[bool]) -> str:
        return f"{sum(values) / len(values):6.1%}" if values else "     -"

    return (f"{label[:34]:34} {len(after):5}  {med(before)} {med(after)}   "
            f"{share(covered_before)} {share(covered_after)}  {refused}")


def run(out_of_family: bool = True) -> list[Outcome]:
    return [family_outcome(f, rows) for f, rows in sorted(_rows(out_of_family).items())]


def report(outcomes: list[Outcome], label: str) -> dict[str, float]:
    print(f"\n{label}: families with >= {MIN_FAMILY_ROWS} rows, {CALIBRATION_RUNS} runs "
          f"calibrate, {REPEATS} draws (seed {SEED})")
    print(f"{'family':34} {'preds':>5}  {'median error':>13}   {'band coverage':>13}  "
          "refused")
    print(f"{'':34} {'':5}  {'before':>6} {'after':>6}   {'before':>6} {'after':>6}")
    every: tuple[list[float], list[float], list[bool], list[bool]] = ([], [], [], [])
    refused = 0
    for o in outcomes:
        print(_line(o.family, o.errors_before, o.errors_after, o.covered_before,
                    o.covered_after, o.refused))
        for store, values in zip(every, (o.errors_before, o.errors_after, o.covered_before,
                                         o.covered_after), strict=True):
            store.extend(values)  # type: ignore[arg-type]
        refused += o.refused
    print(_line("all", *every, refused))
    before, after, cb, ca = every
    return {"median_before": statistics.median(before), "median_after": statistics.median(after),
            "coverage_before": sum(cb) / len(cb), "coverage_after": sum(ca) / len(ca),
            "family_median_after_max": max(
                (statistics.median(o.errors_after) for o in outcomes if o.errors_after),
                default=math.nan)}


def main() -> int:
    headline = report(run(out_of_family=True), "leave one family out (headline)")
    report(run(out_of_family=False), "in sample")
    met = headline["median_after"] <= 0.06 and headline["coverage_after"] >= 0.8
    print(f"\ntarget (issue 37): median <= 6% and coverage >= 80% after: "
          f"{'met' if met else 'NOT met'} (median {headline['median_after']:.1%}, coverage "
          f"{headline['coverage_after']:.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
