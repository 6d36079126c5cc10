"""The calibration's envelope: the region of inputs its published runs cover (issue 37).

Reads the usable rows of ``benchmarks/data/published-runs.csv`` (the rows the calibration is
fitted on) and derives, per training stack, the source families, row counts (and how many rows
this project measured itself), the GPU-count, hidden-size and sequence-length ranges, the
accelerators and whether MoE models are among them; the ``unknown`` stack is the pool of every
row. ``python -m benchmarks.envelope`` prints the ``REGIONS`` literal of
``service/core/envelope.py``; ``tests/core/test_envelope.py`` checks the two agree.

``--measure`` reports the share of answers carrying ``outside_validated_range`` over the rows
themselves, each judged by the envelope derived without its own source family (as its held-out
residual was predicted without it), and how many rows fall outside their band with no coded
warning (``outside_band_report``).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from collections.abc import Iterable

from benchmarks.accuracy import RowInputs, family_of, usable_inputs
from service.core.envelope import LOCAL_SOURCE, Region
from service.core.specs import Framework


def derive(rows: Iterable[RowInputs]) -> dict[str, Region]:
    """One region per stack that has rows, and ``unknown`` pooling every row."""
    rows = list(rows)
    groups: dict[str, list[RowInputs]] = defaultdict(list)
    for row in rows:
        groups[row.training.framework.value].append(row)
    out = {stack: _region(stack, members) for stack, members in groups.items()
           if stack != Framework.UNKNOWN.value}
    out[Framework.UNKNOWN.value] = _region(Framework.UNKNOWN.value, rows)
    return dict(sorted(out.items()))


def _region(stack: str, rows: list[RowInputs]) -> Region:
    gpus = [r.cluster.num_gpus for r in rows]
    hidden = [r.model.hidden_size for r in rows]
    seq = [r.training.seq_len for r in rows]
    return Region(
        framework=stack, rows=len(rows),
        local_rows=sum(1 for r in rows if r.source.startswith(LOCAL_SOURCE)),
        families=tuple(sorted({family_of(r) for r in rows})),
        num_gpus=(min(gpus), max(gpus)), hidden_size=(min(hidden), max(hidden)),
        seq_len=(min(seq), max(seq)),
        accelerators=tuple(sorted({r.cluster.accelerator.id for r in rows})),
        moe=any(r.model.is_moe for r in rows))


def literal(regions: dict[str, Region]) -> str:
    lines = ["REGIONS: dict[str, Region] = {"]
    for stack, g in regions.items():
        lines.append(f'    "{stack}": Region(')
        lines.append(f'        framework="{g.framework}", rows={g.rows}, '
                     f"local_rows={g.local_rows},")
        lines.append("        families=(")
        lines.extend(f"            {json.dumps(family)}," for family in g.families)
        lines.append("        ),")
        lines.append(f"        num_gpus={g.num_gpus!r}, hidden_size={g.hidden_size!r}, "
                     f"seq_len={g.seq_len!r},")
        lines.append("        accelerators=(")
        lines.extend(f"            {json.dumps(acc)}," for acc in g.accelerators)
        lines.append("        ),")
        lines.append(f"        moe={g.moe!r}),")
    lines.append("}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--measure" in argv:
        from benchmarks.warning_coverage import main as measure
        return measure()
    print(literal(derive(usable_inputs())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
