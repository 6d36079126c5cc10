"""Fit the free constants of the model to the published runs (docs/model.md section 5).

Objective: mean absolute log error of tokens/s per GPU over the usable rows, plus a penalty on
rows off by more than 30%, plus a weak prior (0.02 x squared log distance) towards the
physically motivated starting values in ``service/core/calibration.py``. Memory constants are
fitted to the rows that publish peak memory. The search is a deterministic multiplicative
coordinate descent with shrinking steps: no randomness, so a re-run gives the same numbers.

Usage: ``python -m benchmarks.calibrate``; paste the printed values into calibration.py.
``python -m benchmarks.calibrate --holdout`` refits without each source in turn and reports
the error on the left-out source (an out-of-sample figure).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass

from benchmarks.accuracy import RowInputs, evaluate, percentile, summarise, usable_inputs
from service.core.calibration import DEFAULT_CALIBRATION, Calibration, GemmEfficiency
from service.core.specs import Precision
from service.core.units import bytes_to_gib


@dataclass(frozen=True, slots=True)
class Knob:
    name: str
    get: Callable[[Calibration], float]
    set: Callable[[Calibration, float], Calibration]
    low: float
    high: float


def _field_knob(name: str, low: float, high: float) -> Knob:
    return Knob(
        name,
        lambda c: float(getattr(c, name)),
        lambda c, v: dataclasses.replace(c, **{name: v}),
        low,
        high,
    )


def _gemm_knob(accelerators: tuple[str, ...], precisions: tuple[Precision, ...], low: float,
               high: float) -> Knob:
    """One efficiency shared by accelerators built on the same silicon."""

    def get(c: Calibration) -> float:
        return c.gemm_efficiency[accelerators[0]].by_precision[precisions[0]]

    def set_(c: Calibration, v: float) -> Calibration:
        table = dict(c.gemm_efficiency)
        for accelerator in accelerators:
            by_precision = dict(table[accelerator].by_precision)
            for precision in precisions:
                by_precision[precision] = v
            table[accelerator] = GemmEfficiency(by_precision=by_precision)
        return dataclasses.replace(c, gemm_efficiency=table)

    return Knob(f"gemm[{'/'.join(accelerators)}][{'/'.join(precisions)}]", get, set_, low, high)


HALF = (Precision.BF16, Precision.FP16)
TIME_KNOBS = (
    _gemm_knob(("a100-sxm4-80gb", "a100-sxm4-40gb"), HALF, 0.4, 0.95),
    _gemm_knob(("h100-sxm5-80gb",), HALF, 0.4, 0.95),
    _gemm_knob(("h100-sxm5-80gb",), (Precision.FP8,), 0.25, 0.95),
    _gemm_knob(("h100-96gb-500w",), HALF, 0.3, 0.95),
    _gemm_knob(("h100-96gb-500w",), (Precision.FP8,), 0.2, 0.95),
    _field_knob("gemm_shape_ridge_multiple", 0.05, 5.0),
    _field_knob("attention_efficiency_fraction", 0.2, 1.0),
    _field_knob("elementwise_passes", 0.2, 8.0),
    _field_knob("moe_expert_efficiency_fraction", 0.1, 1.0),
    _field_knob("scaleup_efficiency_fraction", 0.3, 0.95),
    _field_knob("scaleout_efficiency_fraction", 0.3, 0.95),
    _field_knob("tp_comm_exposed_fraction", 0.02, 1.0),
    _field_knob("ep_comm_exposed_fraction", 0.02, 1.0),
    _field_knob("dp_comm_min_exposed_fraction", 0.0, 0.5),
)
MEMORY_KNOBS = (
    # CUDA context (~0.5 GiB), NCCL buffers and cuBLAS/cuDNN workspaces: a few GiB at most.
    _field_knob("memory_overhead_bytes", 0.5 * 2**30, 4 * 2**30),
    _field_knob("memory_fragmentation_fraction", 0.0, 0.5),
    _field_knob("selective_activation_fraction", 0.3, 1.0),
)
PRIOR_WEIGHT = 0.02
OUTLIER_LIMIT = math.log(1.3)


def time_loss(rows: list[RowInputs], cal: Calibration) -> float:
    logs = []
    for row in rows:
        predicted = evaluate(row, cal).estimate.throughput.tokens_per_s_per_gpu
        logs.append(abs(math.log(predicted / row.measured_tokens_per_s_per_gpu)))
    outliers = sum(max(0.0, x - OUTLIER_LIMIT) ** 2 for x in logs)
    return sum(logs) / len(logs) + 2.0 * outliers


def memory_loss(rows: list[RowInputs], cal: Calibration) -> float:
    logs = []
    for row in rows:
        if row.measured_memory_gib:
            predicted = bytes_to_gib(evaluate(row, cal).estimate.memory.peak_bytes)
            logs.append(abs(math.log(predicted / row.measured_memory_gib)))
    return sum(logs) / len(logs)


def _prior(cal: Calibration, start: Calibration, knobs: tuple[Knob, ...]) -> float:
    total = 0.0
    for knob in knobs:
        a, b = knob.get(cal), knob.get(start)
        if a > 0 and b > 0:
            total += math.log(a / b) ** 2
    return PRIOR_WEIGHT * total


def fit(rows: list[RowInputs], cal: Calibration, knobs: tuple[Knob, ...],
        loss: Callable[[list[RowInputs], Calibration], float]) -> Calibration:
    start = cal

    def objective(c: Calibration) -> float:
        return loss(rows, c) + _prior(c, start, knobs)

    best = objective(cal)
    for step in (0.3, 0.15, 0.07, 0.03, 0.01):
        improved = True
        while improved:
            improved = False
            for knob in knobs:
                for direction in (1 + step, 1 / (1 + step)):
                    value = knob.get(cal)
                    candidate_value = min(knob.high, max(knob.low, value * direction
                                                         if value > 0 else step))
                    if candidate_value == value:
                        continue
                    candidate = knob.set(cal, candidate_value)
                    score = objective(candidate)
                    if score < best - 1e-9:
                        best, cal, improved = score, candidate, True
    return cal


def source_of(row: RowInputs) -> str:
    """Rows from one publication share an id prefix (sc21-, dgxc-, tt-h100-, ...)."""
    parts = row.id.split("-")
    return "-".join(parts[:2]) if parts[0] == "tt" else parts[0]


def leave_one_source_out(rows: list[RowInputs]) -> list[tuple[str, float]]:
    """Refit without each source in turn and predict that source's rows: out-of-sample error."""
    errors: list[tuple[str, float]] = []
    for source in sorted({source_of(r) for r in rows}):
        train = [r for r in rows if source_of(r) != source]
        cal = fit(train, DEFAULT_CALIBRATION, TIME_KNOBS, time_loss)
        for row in rows:
            if source_of(row) == source:
                errors.append((row.id, evaluate(row, cal).error_fraction))
    return errors


def leave_one_stack_out(rows: list[RowInputs]) -> list[tuple[str, float]]:
    """Refit without each training framework's rows and predict them (fit rows only)."""
    errors: list[tuple[str, float]] = []
    for stack in sorted({r.training.framework for r in rows}):
        train = [r for r in rows if r.training.framework != stack]
        cal = fit(train, DEFAULT_CALIBRATION, TIME_KNOBS, time_loss)
        errors += [(r.id, evaluate(r, cal).error_fraction) for r in rows
                   if r.training.framework == stack]
    return errors


def main() -> int:
    if "--holdout" in sys.argv:
        held = leave_one_source_out([r for r in usable_inputs() if r.role == "fit"])
        for row_id, error in held:
            print(f"{row_id:40s} {error:+.1%}")
        values = [abs(e) for _, e in held]
        print(f"leave-one-source-out: median {statistics.median(values):.1%}, "
              f"p90 {percentile(values, 0.9):.1%}, max {max(values):.1%} over {len(values)} rows")
        return 0
    rows = [r for r in usable_inputs() if r.role == "fit"]  # validation rows stay unseen
    cal = DEFAULT_CALIBRATION
    for _ in range(2):
        cal = fit(rows, cal, TIME_KNOBS, time_loss)
        cal = fit(rows, cal, MEMORY_KNOBS, memory_loss)
    for knob in TIME_KNOBS + MEMORY_KNOBS:
        print(f"{knob.name:45s} {knob.get(cal):.4g}")
    results = [evaluate(row, cal) for row in rows]
    errors = sorted(r.error_fraction for r in results)
    print(f"residual_low_fraction  {percentile(errors, 0.1):+.4f}  (10th percentile)")
    print(f"residual_high_fraction {percentile(errors, 0.9):+.4f}  (90th percentile)")
    summary = summarise(results)
    print(f"median {summary.median_abs_error:.1%}  p90 {summary.p90_abs_error:.1%}  "
          f"max {summary.max_abs_error:.1%}  memory median {summary.memory_median_abs_error}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
