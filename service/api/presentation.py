"""Figures for people: the units and words the ``cq`` tables and the ``/ui`` pages share, so
a terminal and a browser show the same numbers the same way. Pure functions of API answers."""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Context, Decimal, InvalidOperation
from typing import Any, TypeVar

from service.catalog.currencies import minor_units

T = TypeVar("T")
GIB_BYTES = 1024**3
DAY_S = 86_400.0
MONTH_S = 365.25 * 86_400 / 12
"""One month, seconds: a twelfth of a Julian year of 365.25 days (2,629,800 s), so that 12
months are the 31,557,600 s the API's examples use for a year. Calendar months vary (28 to
31 days); a quote for "12 months" must not depend on the day it is made."""

TIME_PARTS: tuple[tuple[str, str], ...] = (
    ("compute", "compute"), ("tp_comm", "tensor-parallel comm"),
    ("cp_comm", "context-parallel comm"), ("ep_comm", "expert-parallel comm"),
    ("pp_comm", "pipeline comm"), ("pp_bubble", "pipeline bubble"),
    ("dp_comm_exposed", "data-parallel comm (exposed)"), ("optimizer", "optimizer step"),
    ("host_offload", "host offload (exposed)"), ("fsdp_copy", "FSDP2 parameter/gradient copies"),
    ("step_overhead", "fixed per-step overhead"),
)
"""The step-time breakdown of an estimate, in the order of the chart and the table."""

MEMORY_PARTS: tuple[tuple[str, str], ...] = (
    ("weights", "weights"), ("gradients", "gradients"), ("optimizer", "optimizer states"),
    ("activations", "activations"), ("other", "other (buffers, fragmentation, allocator headroom)"),
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


MAX_SHOWN_DIGITS = 40
"""Amounts of more than 40 integer digits are shown in scientific notation (an answer's
amounts are decimal strings; none of its own is this large, but a figure for people must
never fail to render)."""


def money(amount: str | None, currency: str = "USD") -> str:
    """A decimal string as money in its currency's ISO 4217 minor units (JPY 0 decimals, KWD
    3, most 2), rounded half-even for display, never through float."""
    if amount is None:
        return "—"
    try:
        value = Decimal(amount)
    except InvalidOperation:
        return amount
    if not value.is_finite():
        return amount
    places = minor_units(currency)
    if value.adjusted() > MAX_SHOWN_DIGITS:
        return f"{value:.3E} {currency}"
    # Enough precision for every digit shown: quantize fails past the context's 28 digits.
    shown = value.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_EVEN,
                           context=Context(prec=MAX_SHOWN_DIGITS + places + 2))
    return f"{shown:,.{places}f} {currency}"


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


TERM_LABELS: dict[str, str] = {
    "on_demand": "on-demand", "spot": "spot",
    "reserved_1y": "1-year reservation", "reserved_3y": "3-year reservation",
    "capacity_block": "capacity block", "onprem": "on-premises (bought)",
}
"""Purchase terms (service/core/quote.py ``Term``) in words; the portal shows the id in a
tooltip."""

FLAG_LABELS: dict[str, str] = {
    "indicative_price": "indicative price (published list or estimate, not a quote)",
    "derived_price": "derived price (computed, not published)",
    "price_outlier": "price outlier against similar offers",
    "spot_above_on_demand": "spot price above on-demand",
    "spot_not_discounted": "spot price not discounted",
    "reserved_above_on_demand": "reserved or committed price above on-demand",
    "missing_on_demand": "no on-demand price to check against",
    "gpu_memory_mismatch": "GPU memory differs from the datasheet",
    "assumed_interruption_rate": "spot interruption rate assumed",
    "spot_capacity_unverified": "spot capacity not verified",
    "on_demand_below_committed": "on-demand price below a commitment's (likely too low)",
    "unvalidated_estimate": "serving estimate outside what the model is validated for",
}
"""Line flags (service/core/quote.py, service/catalog/quality.py) in words."""


def term_label(term: str) -> str:
    return TERM_LABELS.get(term, term.replace("_", " "))


def flag_label(code: str) -> str:
    return FLAG_LABELS.get(code, code.replace("_", " "))


def money_band(band: dict[str, str] | None, currency: str = "USD") -> str:
    """p10–p90 of an amount, with its median: '557,732.61–677,551.32 USD (p50 609,144.40)'."""
    if not band:
        return "—"
    low, mid, high = (money(band[p], currency).removesuffix(f" {currency}")
                      for p in ("p10", "p50", "p90"))
    return f"{low}–{high} {currency} (p50 {mid})"


def duration_band(band: dict[str, float] | None) -> str:
    if not band:
        return "—"
    return (f"{duration(band['p10'])} – {duration(band['p90'])} "
            f"(p50 {duration(band['p50'])})")


def probability(fraction: float) -> str:
    """A probability as a percentage that does not round a small chance to 0.0%."""
    if 0 < fraction < 0.001:
        return f"{fraction * 100:.2g}%"
    if 0.999 < fraction < 1:
        return "over 99.9%"
    return percent(fraction)


def architecture_text(arch: dict[str, Any], *, short: bool = False) -> str:
    """A generated size's architecture in one line (``cq budget-plan`` and the portal):
    '61 layers × hidden 8,192, 64 heads (8 KV), FFN 22,016, vocabulary 128,256, swiglu';
    ``short``: '61 × 8,192, 64/8 heads, FFN 22,016' (a table cell)."""
    if short:
        return (f"{arch['num_layers']:,} × {arch['hidden_size']:,}, "
                f"{arch['num_heads']:,}/{arch['num_kv_heads']:,} heads, FFN "
                f"{arch['ffn_hidden_size']:,}")
    return (f"{arch['num_layers']:,} layers × hidden {arch['hidden_size']:,}, "
            f"{arch['num_heads']:,} heads ({arch['num_kv_heads']:,} KV), FFN "
            f"{arch['ffn_hidden_size']:,}, vocabulary {arch['vocab_size']:,}, {arch['mlp']}")


def models_by_size(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """The sizes a 'largest_model' answer tried, smallest first (a bisection tries them out
    of order)."""
    return sorted(answer.get("models_tried") or [], key=lambda m: m["params"])


def stopped_size(answer: dict[str, Any]) -> dict[str, Any] | None:
    """The smallest size tried above the largest model that has no line: the one the binding
    constraint stopped (the smallest tried when none has a line)."""
    largest = answer.get("largest_model")
    floor = largest["params"] if largest else -1
    above = [m for m in models_by_size(answer) if m["params"] > floor and m.get("bound")]
    return above[0] if above else None


RULE_LABELS: dict[str, str] = {
    "within_budget": "within the budget",
    "commitment_over_budget": "commitment over the budget",
    "job_cost_over_budget": "job cost over the budget",
    "amortised_accounting": "judged by the amortised job cost",
    "deadline_met": "meets the deadline",
    "deadline_missed": "misses the deadline",
    "estimate_uncertain": "over at the slow end of the 80% band",
    "commitment_over_policy_limit": "commitment over the policy's limit",
    "job_cost_over_policy_limit": "job cost over the policy's limit",
    "term_not_allowed": "term not allowed by the policy",
    "provider_not_allowed": "provider not allowed by the policy",
    "region_not_allowed": "region not allowed by the policy",
    "indicative_price": "indicative price, not a seller's firm figure",
    "derived_price": "derived price, not published",
    "quarantined_price": "price quarantined by a data-quality check",
    "stale_price": "price older than the policy allows",
    "undated_price": "price without a date",
    "price_date_unknown_observed": "undated price, read recently",
    "observed_price_stale": "undated price, read too long ago",
    "fx_rate_stale": "exchange rate stale",
    "fx_rate_too_old": "exchange rate too old",
    "duration_over_limit": "longer than the policy allows",
    "success_probability_below_minimum": "too unlikely to meet the deadline",
    "no_offer_fits_plan": "no offer can host the plan",
    "spot_capacity_unverified": "spot capacity not verified",
    "capacity_limit_exceeded": "more GPUs than a region's quota",
    "capacity_block_size_exceeded": "more instances than capacity blocks allow",
    "assumed_interruption_rate": "spot interruption rate assumed",
    "estimate_unvalidated": "serving estimate not validated for this case",
    "infeasible": "the plan cannot run on this offer",
    "no_feasible_offer": "no offer can run this workload",
}
"""Every rule code (``service/core/policy.RULE_CODES``) in a few words, for a line's reasons
in the portal; the code itself is shown beside it."""

REASON_OUTCOMES = ("fail", "warn")
"""The rule outcomes that are a line's reasons, in the order shown: failures first."""


def rule_label(code: str) -> str:
    return RULE_LABELS.get(code, code.replace("_", " "))


def line_reasons(line: dict[str, Any]) -> list[dict[str, Any]]:
    """A quote line's reasons: the rules that failed, then those that warned (a line's
    ``rules`` hold only these), recognised by their ``outcome`` and ``code``, never by the
    words of their messages."""
    rules = line.get("rules") or []
    return [rule for outcome in REASON_OUTCOMES for rule in rules
            if rule.get("outcome") == outcome]


def group_alike(items: Sequence[T], key: Callable[[T], Hashable]) -> list[tuple[T, int]]:
    """Each first item of a run of items with the same key, and how many more it stands for
    (in first-seen order: a ranked list stays ranked)."""
    groups: dict[Hashable, list[Any]] = {}
    for item in items:
        groups.setdefault(key(item), [item, 0])[1] += 1
    return [(first, count - 1) for first, count in groups.values()]


def plan_figures(plan: dict[str, Any]) -> tuple[Any, ...]:
    """What a plans table shows of a plan besides its layout: plans equal in these are
    permutations with identical figures, and share a row (``cq optimise`` and the portal's
    Optimise table)."""
    return (plan["accelerator"], plan["num_gpus"], plan["global_batch_seqs"],
            duration(plan["time"]["train_s"]), number(plan["time"]["gpu_hours"]),
            percent(plan["time"]["mfu_fraction"]),
            gib(plan["memory"]["peak_bytes_per_gpu"]), plan.get("cost_usd"))


def fold_plans(plans: Sequence[dict[str, Any]]) -> list[tuple[dict[str, Any], int]]:
    """Ranked plans with identical figures (``plan_figures``) folded into their best-ranked
    one: each row's plan and how many alike it stands for."""
    return group_alike(plans, plan_figures)


@dataclass(frozen=True, slots=True)
class EstimateBand:
    """An estimate's 80% band (``time.tokens_per_s_low``/``_high``) and the step and training
    times at its ends: time scales with tokens/s ÷ the band's end, as ``cq estimate`` shows
    it (``service/cli/estimate.band_figures``). ``*_low`` is the fast end of each time."""

    tokens_per_s_low: float
    tokens_per_s_high: float
    step_s_low: float
    step_s_high: float
    train_s_low: float
    train_s_high: float


def estimate_band(estimate: dict[str, Any]) -> EstimateBand | None:
    """The band of an estimate (or of a plan), or None when its ends are not positive finite
    numbers (nothing to scale by)."""
    time = estimate["time"]
    tps, low, high = time["tokens_per_s"], time.get("tokens_per_s_low"), time.get(
        "tokens_per_s_high")
    if not all(isinstance(v, int | float) and math.isfinite(v) and v > 0
               for v in (tps, low, high)):
        return None
    return EstimateBand(tokens_per_s_low=low, tokens_per_s_high=high,
                        step_s_low=time["step_s"] * tps / high,
                        step_s_high=time["step_s"] * tps / low,
                        train_s_low=time["train_s"] * tps / high,
                        train_s_high=time["train_s"] * tps / low)
