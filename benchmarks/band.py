"""The estimate's 80% band, from out-of-sample residuals.

For every usable row of ``benchmarks/data/published-runs.csv`` the residual is
(predicted / measured - 1) of tokens/s per GPU, predicted by a refit without the row's source
family (``make holdout``: ``benchmarks.calibrate.leave_one_source_out``, stored in
``benchmarks/data/holdout.csv``).

Each row belongs to one regime (``Calibration.regime_of``: an uncalibrated accelerator, an MoE
model, else its training framework). A regime's band is the split-conformal pair of order
statistics of its residuals: the floor((n+1) t_low)-th and ceil((n+1)(1 - t_high))-th
(Angelopoulos and Bates 2021, section 1), each tail one of ``TAILS`` (10% down to 0), the pair
giving the narrowest band that covers 80% of the regime out of sample. Regimes with fewer
than ``MIN_ROWS`` rows use ``unknown``, which pools every row.

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
"""Tail mass tried on each side, narrowest first. Each side is chosen separately: a regime
takes the pair of tails whose band is narrowest among those that cover at least
TARGET_COVERAGE of its rows out of sample (runs from different families are not
exchangeable, so the nominal 10% tails under-cover; cross-conformal, Vovk 2015). Until
2026-11-27 both sides widened together, so a regime whose held-out misses all lay below its
band also widened above it, by a whole order statistic (FSDP: +27% to +109%)."""
Tail = float | tuple[float, float]
"""A regime's tails: (low side, high side), or one value for both (``WIDEN`` included)."""


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


def conformal(values: list[float], tail: Tail = 0.1) -> tuple[float, float]:
    """The split-conformal order statistics with tail masses (t_low, t_high) (one value: the
    same on each side): the floor((n+1) t_low)-th and ceil((n+1)(1 - t_high))-th, clamped
    to the sample's ends."""
    low_tail, high_tail = tail if isinstance(tail, tuple) else (tail, tail)
    ordered = sorted(values)
    n = len(ordered)
    low = max(1, math.floor((n + 1) * low_tail))
    high = min(n, math.ceil((n + 1) * (1 - high_tail)))
    return ordered[low - 1], ordered[high - 1]


WIDEN = -1.0
"""A tail value meaning: no tail of the regime's own rows covers the target, so its band is
the union of its own widest band and the pooled one."""


def bands(sample: list[Residual],
          tails: dict[str, Tail] | None = None) -> dict[str, tuple[float, float, int]]:
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
        low, high = conformal(values, 0.0 if tail == WIDEN else tail)
        if tail == WIDEN:
            low, high = min(low, pooled_low), max(high, pooled_high)
        out[regime] = (low, high, len(values))
    return out


def band_of(table: dict[str, tuple[float, float, int]], regime: str) -> tuple[float, float]:
    low, high, _ = table.get(regime, table["unknown"])
    return low, high


def coverage(sample: list[Residual],
             tails: dict[str, Tail] | None = None) -> tuple[dict[str, float], float]:
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


def unknown_coverage(sample: list[Residual], tail: Tail) -> float:
    """Coverage of the pooled band alone (a caller who gives no framework)."""
    hits = []
    for family in {r.family for r in sample}:
        low, high = conformal([r.fraction for r in sample if r.family != family], tail)
        hits += [low <= r.fraction <= high for r in sample if r.family == family]
    return sum(hits) / len(hits)


def choose_tails(sample: list[Residual]) -> dict[str, Tail]:
    """Tails per regime: for each regime, the pair of tails (``TAILS`` on each side) giving
    the narrowest band that still covers TARGET_COVERAGE of its rows out of sample (ties:
    the pair with the most tail mass); a regime no pair serves takes ``WIDEN``, the union
    with the pooled band. The pooled (``unknown``) band must cover the target for its own
    rows and for every row when used alone, since a caller who names no framework gets it;
    its pairs are tried narrowest first, and the first with which every regime reaches the
    target is kept (a widened regime's band includes the pooled one)."""
    pairs = [(low, high) for low in TAILS for high in TAILS]
    regimes = sorted(set(bands(sample)) - {"unknown"})

    def narrowest(tails: dict[str, Tail], regime: str, pair: tuple[float, float]) -> float:
        low, high = band_of(bands(sample, {**tails, regime: pair}), regime)
        return high - low

    def covers(tails: dict[str, Tail], regime: str) -> bool:
        by_regime, _ = coverage(sample, tails)
        return by_regime.get(regime, 1.0) >= TARGET_COVERAGE

    fallback: dict[str, Tail] | None = None
    for pooled in sorted(pairs, key=lambda pair: (narrowest({}, "unknown", pair),
                                                  -(pair[0] + pair[1]))):
        tails: dict[str, Tail] = {"unknown": pooled}
        if not (covers(tails, "unknown")
                and unknown_coverage(sample, pooled) >= TARGET_COVERAGE):
            continue
        for regime in regimes:
            ordered = sorted(pairs, key=lambda pair, r=regime, t=tails: (
                narrowest(t, r, pair), -(pair[0] + pair[1])))
            tails[regime] = next((pair for pair in ordered
                                  if covers({**tails, regime: pair}, regime)), WIDEN)
        if all(covers(tails, regime) for regime in regimes):
            return tails
        fallback = fallback or tails
    return fallback or {}


def _family_logs(sample: list[Residual]) -> list[list[float]]:
    """Each family's held-out residuals as log(predicted / measured), in sample order."""
    logs: dict[str, list[float]] = defaultdict(list)
    for r in sample:
        logs[r.family].append(math.log1p(r.fraction))
    return list(logs.values())


def family_scaled(sample: list[Residual]) -> list[float]:
    """Each held-out residual scaled by the median residual (in log space) of the *other* rows
    of its family (families of one row are left out). Out of sample twice over: the refit never
    saw the family, and the scale never sees the row. What a caller gets who has measured
    several runs of the same stack on the same cluster and scales the estimate by how far off
    it was on them: the part of the held-out error that is a level per family (its cluster,
    software build and tuning, none of them inputs) goes, the shape of the step stays."""
    return [math.expm1(value - statistics.median(values[:i] + values[i + 1:]))
            for values in _family_logs(sample) if len(values) > 1
            for i, value in enumerate(values)]


def anchored(sample: list[Residual]) -> list[float]:
    """Each row predicted from another row of its family as an anchor: the held-out prediction
    times the anchor's measured / held-out predicted throughput, for every ordered pair of
    distinct rows of a family (families of one row have no anchor). Out of sample: the refit
    never saw the family, and the anchor is never the row it predicts. What a caller gets who
    has measured one run of the same stack on the same cluster and scales the estimate by it."""
    return [math.expm1(row - anchor)
            for values in _family_logs(sample)
            for i, row in enumerate(values)
            for j, anchor in enumerate(values) if i != j]


def print_families(sample: list[Residual], in_sample: dict[str, float]) -> None:
    """Per source family, the signed median error in sample and held out (refit without the
    family), worst held-out first. Where the two are close, the fit does not absorb the
    family's level even when it sees the family: the error is the family's own (its cluster,
    build, tuning), which no shared constant removes."""
    by_family: dict[str, list[Residual]] = defaultdict(list)
    for r in sample:
        by_family[r.family].append(r)
    print("family                                     rows  in sample  held out  held-out |e|")
    for family, rows in sorted(by_family.items(), key=lambda kv: -statistics.median(
            abs(r.fraction) for r in kv[1])):
        print(f"{family[:42]:42s} {len(rows):4d}  "
              f"{statistics.median(in_sample[r.row.id] for r in rows):+8.1%}  "
              f"{statistics.median(r.fraction for r in rows):+8.1%}  "
              f"{statistics.median(abs(r.fraction) for r in rows):11.1%}")


def report(label: str, errors: list[float], unit: str = "rows") -> None:
    absolute = [abs(e) for e in errors]
    print(f"{label:62s} {len(errors):4d} {unit:5s} median {statistics.median(absolute):6.1%}  "
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
    print("tails (low, high): " + ", ".join(
        f"{k} {v if isinstance(v, tuple) else 'widened'}" for k, v in sorted(tails.items())))
    print()
    print("tokens/s per GPU, |predicted / measured - 1|:")
    everything = usable_inputs()
    in_sample = {r.id: evaluate(r).error_fraction for r in everything}
    report("in sample (shipped calibration)", list(in_sample.values()))
    report("leave-one-source-out (refit without the row's family)",
           [r.fraction for r in sample])
    report("  of which the original 51 rows", [r.fraction for r in sample if r.row.role == "fit"])
    report("  of which the rows added on 2026-11-23",
           [r.fraction for r in sample if r.row.role == "validation"])
    report("  scaled by the family's other runs (their median residual)", family_scaled(sample))
    report("  scaled by one other run of the family (every pair)", anchored(sample), "pairs")
    if "--stack" in sys.argv:  # several minutes
        report("leave-one-stack-out (refit without the framework)",
               [e for _, e in leave_one_stack_out(everything)])
    for framework in sorted({r.row.training.framework.value for r in sample}):
        report(f"  framework {framework}",
               [r.fraction for r in sample if r.row.training.framework.value == framework])
    print()
    print_families(sample, in_sample)
    print()
    print("    bands={")
    for regime, (low, high, n) in sorted(table.items()):
        cov = by_regime.get(regime, overall)
        print(f'        "{regime}": Band(regime="{regime}", low_fraction={low:.4f}, '
              f"high_fraction={high:.4f}, rows={n}, coverage_fraction={cov:.3f}),")
    print("    },")
    print()
    # Issue 37: the share of rows outside the envelope and the out-of-band rows no coded
    # warning names (benchmarks/warning_coverage.py, under a second).
    from benchmarks.warning_coverage import main as warning_coverage
    return warning_coverage()


if __name__ == "__main__":
    sys.exit(main())
