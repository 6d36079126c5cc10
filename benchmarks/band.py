"""The estimate's 80% band, from out-of-sample residuals.

For every usable row of ``benchmarks/data/published-runs.csv`` the residual is
(predicted / measured - 1) of tokens/s per GPU, predicted by a refit without the row's source
family (``make holdout``: ``benchmarks.calibrate.leave_one_source_out``, stored in
``benchmarks/data/holdout.csv``).

Each row belongs to one regime (``Calibration.regime_of``: an uncalibrated accelerator, an MoE
model, else its training framework). A regime's band is the split-conformal pair of order
statistics of its residuals: the floor((n+1) t)-th and ceil((n+1)(1 - t))-th (Angelopoulos and
Bates 2021, section 1), with the tail t starting at 10% and widened (``TAILS``) until the
regime covers 80% out of sample. Regimes with fewer than ``MIN_ROWS`` rows use ``unknown``,
which pools every row.

Coverage is then checked out of sample: each source family's rows are judged by bands derived
without that family. Usage: ``make band`` or ``python -m benchmarks.band``; paste the printed
``bands`` into ``service/core/calibration.py``.
"""

from __future__ import annotations

import math
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass

from benchmarks.accuracy import RowInputs, evaluate, family_of, percentile, usable_inputs
from benchmarks.calibrate import leave_one_stack_out, read_holdout
from service.core.calibration import DEFAULT_CALIBRATION

MIN_ROWS = 10
TARGET_COVERAGE = 0.8
TAILS = (0.1, 0.075, 0.05, 0.025, 0.0)
"""Tail mass tried on each side, narrowest first: a regime takes the first whose band covers
at least TARGET_COVERAGE of its rows out of sample (runs from different families are not
exchangeable, so the nominal 10% tails under-cover; cross-conformal, Vovk 2015)."""


@dataclass(frozen=True, slots=True)
class Residual:
    row: RowInputs
    regime: str
    family: str
    fraction: float


def regime_of(row: RowInputs) -> str:
    return DEFAULT_CALIBRATION.regime_of(framework=row.training.framework,
                                         moe=row.model.is_moe,
                                         accelerator_id=row.cluster.accelerator.id)


def residuals(rows: list[RowInputs]) -> list[Residual]:
    """Every row's leave-one-source-out residual (``benchmarks/data/holdout.csv``)."""
    held = read_holdout()
    return [Residual(row, regime_of(row), family_of(row), held[row.id]) for row in rows]


def conformal(values: list[float], tail: float = 0.1) -> tuple[float, float]:
    """The split-conformal order statistics with ``tail`` on each side: the
    floor((n+1) tail)-th and ceil((n+1)(1 - tail))-th, clamped to the sample's ends."""
    ordered = sorted(values)
    n = len(ordered)
    low = max(1, math.floor((n + 1) * tail))
    high = min(n, math.ceil((n + 1) * (1 - tail)))
    return ordered[low - 1], ordered[high - 1]


WIDEN = -1.0
"""A tail value meaning: no tail of the regime's own rows covers the target, so its band is
the union of its own widest band and the pooled one."""


def bands(sample: list[Residual],
          tails: dict[str, float] | None = None) -> dict[str, tuple[float, float, int]]:
    tails = tails or {}
    by_regime: dict[str, list[float]] = defaultdict(list)
    for r in sample:
        by_regime[r.regime].append(r.fraction)
    pooled_low, pooled_high = conformal([r.fraction for r in sample],
                                        tails.get("unknown", 0.1))
    out = {"unknown": (pooled_low, pooled_high, len(sample))}
    for regime, values in by_regime.items():
        if regime == "unknown" or len(values) < MIN_ROWS:
            continue
        tail = tails.get(regime, 0.1)
        low, high = conformal(values, max(tail, 0.0))
        if tail == WIDEN:
            low, high = min(low, pooled_low), max(high, pooled_high)
        out[regime] = (low, high, len(values))
    return out


def band_of(table: dict[str, tuple[float, float, int]], regime: str) -> tuple[float, float]:
    low, high, _ = table.get(regime, table["unknown"])
    return low, high


def coverage(sample: list[Residual],
             tails: dict[str, float] | None = None) -> tuple[dict[str, float], float]:
    """Leave-one-family-out: each family judged by bands derived without it."""
    inside: dict[str, list[bool]] = defaultdict(list)
    for family in {r.family for r in sample}:
        table = bands([r for r in sample if r.family != family], tails)
        for r in sample:
            if r.family == family:
                low, high = band_of(table, r.regime)
                inside[r.regime].append(low <= r.fraction <= high)
    every = [x for xs in inside.values() for x in xs]
    return ({k: sum(v) / len(v) for k, v in inside.items()}, sum(every) / len(every))


def unknown_coverage(sample: list[Residual], tail: float) -> float:
    """Coverage of the pooled band alone (a caller who gives no framework)."""
    hits = []
    for family in {r.family for r in sample}:
        low, high = conformal([r.fraction for r in sample if r.family != family], tail)
        hits += [low <= r.fraction <= high for r in sample if r.family == family]
    return sum(hits) / len(hits)


def choose_tails(sample: list[Residual]) -> dict[str, float]:
    """For each regime in turn, the widest tail (narrowest band) that still covers
    TARGET_COVERAGE of its rows out of sample; ``unknown`` must also do so for every row
    when used alone, since a caller who names no framework gets it."""
    tails: dict[str, float] = {}
    regimes = [*sorted(set(bands(sample)) - {"unknown"}), "unknown"]
    for regime in regimes:
        for tail in (*TAILS, WIDEN) if regime != "unknown" else TAILS:
            tails[regime] = tail
            by_regime, _ = coverage(sample, tails)
            ok = by_regime.get(regime, 1.0) >= TARGET_COVERAGE
            if regime == "unknown":
                ok = ok and unknown_coverage(sample, tail) >= TARGET_COVERAGE
            if ok:
                break
    return tails


def report(label: str, errors: list[float]) -> None:
    absolute = [abs(e) for e in errors]
    print(f"{label:62s} {len(errors):4d} rows  median {statistics.median(absolute):6.1%}  "
          f"p90 {percentile(absolute, 0.9):6.1%}  max {max(absolute):7.1%}  "
          f"bias {statistics.mean(errors):+6.1%}")


def main() -> int:
    sample = residuals(usable_inputs())
    tails = choose_tails(sample)
    table = bands(sample, tails)
    by_regime, overall = coverage(sample, tails)
    print("regime          rows   band (pred/measured - 1)    leave-one-family-out coverage")
    for regime, (low, high, n) in sorted(table.items()):
        cov = by_regime.get(regime)
        print(f"{regime:14s} {n:5d}   {low:+7.1%} .. {high:+7.1%}        "
              f"{'' if cov is None else f'{cov:.0%}'}")
    print(f"overall leave-one-family-out coverage: {overall:.1%} over {len(sample)} rows "
          f"({len({r.family for r in sample})} families)")
    print(f"the pooled 'unknown' band alone: {unknown_coverage(sample, tails['unknown']):.1%}")
    print("tails: " + ", ".join(f"{k} {v:g}" for k, v in sorted(tails.items())))
    print()
    print("tokens/s per GPU, |predicted / measured - 1|:")
    everything = usable_inputs()
    report("in sample (shipped calibration)", [evaluate(r).error_fraction for r in everything])
    report("leave-one-source-out (refit without the row's family)",
           [r.fraction for r in sample])
    report("  of which the original 51 rows", [r.fraction for r in sample if r.row.role == "fit"])
    report("  of which the rows added on 2026-11-23",
           [r.fraction for r in sample if r.row.role == "validation"])
    if "--stack" in sys.argv:  # several minutes
        report("leave-one-stack-out (refit without the framework)",
               [e for _, e in leave_one_stack_out(everything)])
    for framework in sorted({r.row.training.framework.value for r in sample}):
        report(f"  framework {framework}",
               [r.fraction for r in sample if r.row.training.framework.value == framework])
    print()
    print("    bands={")
    for regime, (low, high, n) in sorted(table.items()):
        cov = by_regime.get(regime, overall)
        print(f'        "{regime}": Band(regime="{regime}", low_fraction={low:.4f}, '
              f"high_fraction={high:.4f}, rows={n}, coverage_fraction={cov:.3f}),")
    print("    },")
    return 0


if __name__ == "__main__":
    sys.exit(main())
