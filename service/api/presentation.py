"""Figures for people: the units and words the ``cq`` tables and the ``/ui`` pages share, so
a terminal and a browser show the same numbers the same way. Pure functions of API answers."""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation
from typing import Any

GIB_BYTES = 1024**3
DAY_S = 86_400.0

TIME_PARTS: tuple[tuple[str, str], ...] = (
    ("compute", "compute"), ("tp_comm", "tensor-parallel comm"),
    ("cp_comm", "context-parallel comm"), ("ep_comm", "expert-parallel comm"),
    ("pp_comm", "pipeline comm"), ("pp_bubble", "pipeline bubble"),
    ("dp_comm_exposed", "data-parallel comm (exposed)"), ("optimizer", "optimizer step"),
)
"""The step-time breakdown of an estimate, in the order of the chart and the table."""

MEMORY_PARTS: tuple[tuple[str, str], ...] = (
    ("weights", "weights"), ("gradients", "gradients"), ("optimizer", "optimizer states"),
    ("activations", "activations"), ("other", "other (buffers, fragmentation)"),
)


def gib(value_bytes: float) -> str:
    return f"{value_bytes / GIB_BYTES:,.1f} GiB"


def duration(value_s: float | None) -> str:
    """Seconds as the largest sensible unit: 93.2 days, 5.1 h, 12.0 min, 850 ms."""
    if value_s is None or not math.isfinite(value_s):
        return "—"
    if value_s >= 2 * DAY_S:
        return f"{value_s / DAY_S:,.1f} days"
    if value_s >= 7_200:
        return f"{value_s / 3_600:,.1f} h"
    if value_s >= 120:
        return f"{value_s / 60:,.1f} min"
    if value_s >= 1:
        return f"{value_s:,.2f} s"
    return f"{value_s * 1_000:,.1f} ms"


def number(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


def si(value: float, unit: str = "") -> str:
    """3.15e23 FLOPs -> '315.0 Z'; for large counts."""
    for factor, prefix in ((1e24, "Y"), (1e21, "Z"), (1e18, "E"), (1e15, "P"), (1e12, "T"),
                           (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:,.1f} {prefix}{unit}"
    return f"{value:,.1f} {unit}".rstrip()


def percent(fraction: float) -> str:
    return f"{fraction * 100:.1f}%"


def money(amount: str | None, currency: str = "USD") -> str:
    """A decimal string as money, never through float."""
    if amount is None:
        return "—"
    try:
        value = Decimal(amount)
    except InvalidOperation:
        return amount
    return f"{value:,.2f} {currency}"


def layout(parallelism: dict[str, Any], *, short: bool = False) -> str:
    """tp4 pp4 dp2 cp2 · mb1 · ZeRO-1 · recompute none (short: tp4 pp4 dp2 cp2 mb1 Z1)."""
    dims = " ".join(f"{d}{parallelism[d]}" for d in ("tp", "pp", "dp", "cp", "ep", "vp")
                    if parallelism.get(d, 1) != 1 or d in ("tp", "pp", "dp"))
    if short:
        recompute = parallelism.get("recompute", "none")
        return (f"{dims} mb{parallelism.get('micro_batch', 1)} "
                f"Z{parallelism.get('zero_stage', 0)}"
                + ("" if recompute == "none" else f" rc:{recompute}"))
    return (f"{dims} · mb{parallelism.get('micro_batch', 1)} · "
            f"ZeRO-{parallelism.get('zero_stage', 0)} · recompute "
            f"{parallelism.get('recompute', 'none')}")


def estimate_figures(estimate: dict[str, Any]) -> list[tuple[str, str]]:
    """The key figures of an estimate (or of a plan, which has the same blocks)."""
    time, memory, energy = estimate["time"], estimate["memory"], estimate["energy"]
    rows = []
    if "resolved" in estimate:
        r = estimate["resolved"]
        rows += [("model", r["model"]),
                 ("cluster", f"{r['num_gpus']:,} × {r['accelerator']}"),
                 ("layout", layout(r["parallelism"]))]
    rows += [
        ("training time", duration(time["train_s"])),
        ("GPU-hours", number(time["gpu_hours"])),
        ("step time", duration(time["step_s"])),
        ("throughput", f"{number(time['tokens_per_s'])} tokens/s "
                       f"({number(time['tokens_per_s_per_gpu'])} per GPU)"),
        ("MFU / HFU", f"{percent(time['mfu_fraction'])} / {percent(time['hfu_fraction'])}"),
        ("memory per GPU", f"{gib(memory['peak_bytes_per_gpu'])} of "
                           f"{gib(memory['capacity_bytes_per_gpu'])}"),
        ("fits", "yes" if memory["fits"] else "NO: over the GPU's memory"),
        ("energy", f"{number(energy['kwh'] / 1_000, 1)} MWh"),
        ("CO2e", f"{number(energy['co2e_kg'] / 1_000, 1)} t"),
    ]
    return rows


def step_parts(estimate: dict[str, Any]) -> list[tuple[str, float]]:
    """Non-zero parts of the step time, seconds."""
    breakdown = estimate["time"]["breakdown_s"]
    return [(label, breakdown[key]) for key, label in TIME_PARTS if breakdown.get(key, 0) > 0]


def memory_parts(estimate: dict[str, Any]) -> list[tuple[str, float]]:
    breakdown = estimate["memory"]["breakdown_bytes"]
    return [(label, breakdown[key]) for key, label in MEMORY_PARTS if breakdown.get(key, 0) > 0]


def line_where(line: dict[str, Any]) -> str:
    parts = [line["provider"], line.get("region") or "", line.get("instance_type") or ""]
    return " · ".join(p for p in parts if p)
