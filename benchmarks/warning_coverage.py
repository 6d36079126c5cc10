"""How often answers carry ``outside_validated_range``, and how many out-of-band rows carry
no coded warning (issue 37: "0 rows outside the band without a coded warning, and at most
half of all rows carry outside_validated_range").

Over the usable rows of ``benchmarks/data/published-runs.csv``, each row is estimated as
``benchmarks.accuracy`` does (as a new user would send it) and judged by the envelope derived
*without its own source family*, as its held-out residual (``benchmarks/data/holdout.csv``)
was predicted by a fit without it: a row judged by an envelope that contains itself would
always be inside. A row is out of band when its held-out residual lies outside its regime's
band (``Calibration.bands``); it is "warned" when its estimate carries a
``defaulted_input`` naming an input the row's source leaves open (``auto`` fields, unknown
recompute or offload, no framework), an ``outside_validated_range`` or an
``uncalibrated_accelerator``.

Over typical requests (every preset with a published training layout of 8 to 1,024 GPUs on
the H100, A100 and B200, megatron, 4k and 8k tokens), the share carrying
``outside_validated_range`` against the shipped envelope.

Usage: ``python -m benchmarks.warning_coverage`` (a few seconds; ``make accuracy`` runs it).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from benchmarks.accuracy import RowInputs, evaluate, family_of, seed_accelerators, usable_inputs
from benchmarks.calibrate import read_holdout
from benchmarks.envelope import derive
from service.core.calibration import DEFAULT_CALIBRATION
from service.core.envelope import outside_details
from service.core.errors import CoreError
from service.core.estimate import estimate
from service.core.plausibility import (
    DEFAULTED_INPUT,
    OUTSIDE_VALIDATED_RANGE,
    UNCALIBRATED_ACCELERATOR,
    WarningDetail,
)
from service.core.presets import PRESETS
from service.core.specs import (
    ClusterSpec,
    Framework,
    ParallelismPlan,
    RecomputeMode,
    TrainingSpec,
)
from service.core.timing import EAGER_ELEMENTWISE_STACKS

NAMING = (DEFAULTED_INPUT, OUTSIDE_VALIDATED_RANGE, UNCALIBRATED_ACCELERATOR)
"""The codes that name an input that was defaulted or a regime out of range."""


@dataclass(frozen=True, slots=True)
class RowVerdict:
    row: RowInputs
    residual: float
    in_band: bool
    details: tuple[WarningDetail, ...]

    @property
    def outside(self) -> bool:
        return any(d.code == OUTSIDE_VALIDATED_RANGE for d in self.details)

    @property
    def warned(self) -> bool:
        return any(d.code in NAMING for d in self.details)


def row_defaults(row: RowInputs) -> list[WarningDetail]:
    """``defaulted_input`` for what the row's source leaves open, as the API names it."""
    out = [WarningDetail(DEFAULTED_INPUT, f"parallelism.{name}", "open in the source")
           for name in sorted(row.auto)]
    if not row.recompute_known:
        out.append(WarningDetail(DEFAULTED_INPUT, "parallelism.recompute", "open"))
    if not row.offload_known:
        out.append(WarningDetail(DEFAULTED_INPUT, "parallelism.offload", "open"))
    if row.training.framework == Framework.UNKNOWN:
        out.append(WarningDetail(DEFAULTED_INPUT, "training.framework", "open"))
    if row.training.torch_compile is None and row.training.framework in (
            EAGER_ELEMENTWISE_STACKS):
        out.append(WarningDetail(DEFAULTED_INPUT, "training.torch_compile", "open"))
    return out


def verdicts() -> list[RowVerdict]:
    rows = usable_inputs()
    held = read_holdout()
    without = {family: derive(r for r in rows if family_of(r) != family)
               for family in {family_of(r) for r in rows}}
    out = []
    for row in rows:
        result = evaluate(row).estimate
        kept = [d for d in result.warning_details if d.code != OUTSIDE_VALIDATED_RANGE]
        acc = row.cluster.accelerator
        outside = outside_details(
            framework=row.training.framework, accelerator_id=acc.id,
            calibrated=DEFAULT_CALIBRATION.is_calibrated_for(acc.id),
            num_gpus=row.cluster.num_gpus, hidden_size=row.model.hidden_size,
            seq_len=row.training.seq_len, moe=row.model.is_moe,
            regions=without[family_of(row)])
        band = DEFAULT_CALIBRATION.band_for(framework=row.training.framework,
                                            moe=row.model.is_moe, accelerator_id=acc.id)
        residual = held[row.id]
        out.append(RowVerdict(row, residual, band.low_fraction <= residual <= band.high_fraction,
                              (*kept, *outside, *row_defaults(row))))
    return out


TYPICAL_ACCELERATORS = ("h100-sxm5-80gb", "a100-sxm4-80gb", "b200-sxm-180gb")
TYPICAL_GPUS = (8, 64, 256, 1024)
TYPICAL_SEQ = (4096, 8192)


def typical_outside_share() -> tuple[int, int]:
    """(answers with outside_validated_range, answers) over presets x accelerators x GPU counts
    x sequence lengths, each on a plain Megatron layout (TP 8 within the node, PP to fit the
    model's size, the rest data parallel)."""
    accelerators = seed_accelerators()
    flagged = total = 0
    for preset in PRESETS.values():
        model = preset.model
        for acc_id in TYPICAL_ACCELERATORS:
            for gpus in TYPICAL_GPUS:
                for seq in TYPICAL_SEQ:
                    tp = 8 if model.num_heads % 8 == 0 and model.num_kv_heads % 8 in (0, 8) else 1
                    pp = 1 if preset.published_params < 3e10 else 4 if (
                        preset.published_params < 2e11) else 8
                    if gpus % (tp * pp) or model.num_layers < pp:
                        continue
                    dp = gpus // (tp * pp)
                    plan = ParallelismPlan(tp=tp, pp=pp, dp=dp,
                                           ep=min(dp, model.num_experts) if model.is_moe
                                           and model.num_experts % min(
                                               dp, model.num_experts) == 0 else 1,
                                           recompute=RecomputeMode.SELECTIVE)
                    training = TrainingSpec(seq_len=seq, global_batch_seqs=dp * 8,
                                            tokens=1e11, framework=Framework.MEGATRON)
                    cluster = ClusterSpec(accelerator=accelerators[acc_id], num_gpus=gpus,
                                          gpus_per_node=min(8, gpus))
                    try:
                        result = estimate(model, cluster, plan, training)
                    except CoreError:
                        continue
                    total += 1
                    flagged += any(d.code == OUTSIDE_VALIDATED_RANGE
                                   for d in result.warning_details)
    return flagged, total


def main() -> int:
    found = verdicts()
    n = len(found)
    outside = [v for v in found if v.outside]
    out_of_band = [v for v in found if not v.in_band]
    silent = [v for v in out_of_band if not v.warned]
    silent_before = [v for v in out_of_band
                     if not any(d.code == UNCALIBRATED_ACCELERATOR for d in v.details)]
    print(f"rows carrying outside_validated_range (envelope without their own family): "
          f"{len(outside)} of {n} ({len(outside) / n:.0%})")
    by_field: dict[str, int] = {}
    for v in outside:
        for d in v.details:
            if d.code == OUTSIDE_VALIDATED_RANGE and d.field:
                by_field[d.field] = by_field.get(d.field, 0) + 1
    print("  by dimension: " + ", ".join(f"{k} {c}" for k, c in sorted(by_field.items())))
    print(f"rows outside their band (held-out residual): {len(out_of_band)} of {n}")
    print(f"  of which with no coded warning naming a defaulted input or a range: "
          f"{len(silent)} (before issue 37's codes, with only the uncalibrated-accelerator "
          f"sentence: {len(silent_before)}); with no coded warning at all: "
          f"{sum(1 for v in out_of_band if not v.details)}")
    for v in silent:
        print(f"    {v.row.id:44s} {v.residual:+7.1%}  {v.row.training.framework.value}")
    inside = [v for v in found if not v.outside]
    for label, group in (("inside the envelope", inside), ("outside it", outside)):
        if group:
            hits = sum(v.in_band for v in group)
            print(f"band coverage {label}: {hits} of {len(group)} ({hits / len(group):.0%})")
    flagged, total = typical_outside_share()
    print(f"typical requests (presets x H100/A100/B200 x 8-1,024 GPUs x 4k/8k, megatron) "
          f"carrying outside_validated_range: {flagged} of {total} "
          f"({flagged / max(total, 1):.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
