"""What ``cq`` says about quotes, as pure functions of API answers: the CI gate's exit code,
the Markdown a reviewer reads on a pull request, and the difference between two quotes.

Amounts stay decimal strings (``Decimal`` for arithmetic, never float). Wherever a total is
shown, the commitment (cash signed for) comes first and the job's own cost after.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from enum import StrEnum
from typing import Any

from service.api import presentation as fmt

EXIT_OK = 0
EXIT_PROBLEM = 1
EXIT_UNREACHABLE = 2
EXIT_REJECT = 3
EXIT_WARN = 4
EXIT_MISMATCH = 5

MARKDOWN_LINES = 3
MARKDOWN_DIFF_LINES = 20
REASON_CHARS = 240


class OutputFormat(StrEnum):
    json = "json"
    table = "table"
    markdown = "markdown"


class FailOn(StrEnum):
    reject = "reject"
    warn = "warn"


# --- the gate -------------------------------------------------------------------------------


def gate_code(answer: dict[str, Any], fail_on: FailOn | None) -> int:
    """0, or 3 when the verdict is reject (``--fail-on reject`` or ``warn``), or 4 when the
    policy only warned (``--fail-on warn``). A quote without a verdict (no budget, deadline or
    policy) was not judged, so it never fails the gate."""
    if fail_on is None or answer.get("verdict") is None:
        return EXIT_OK
    if answer["verdict"] == "reject":
        return EXIT_REJECT
    outcome = (answer.get("policy_result") or {}).get("outcome")
    if fail_on is FailOn.warn and outcome in ("warn", "fail"):
        return EXIT_WARN
    return EXIT_OK


def headline(answer: dict[str, Any]) -> tuple[str, str]:
    """(emoji, word) for the verdict: approve, reject, warn (approved with warnings) or no
    verdict."""
    verdict = answer.get("verdict")
    outcome = (answer.get("policy_result") or {}).get("outcome")
    if verdict == "reject":
        return "❌", "reject"
    if verdict == "approve":
        return ("⚠️", "warn") if outcome in ("warn", "fail") else ("✅", "approve")
    return "➖", "no verdict"


def policy_label(answer: dict[str, Any]) -> str:
    """name@revision, or name@built-in for the built-in default."""
    policy = answer.get("policy_result") or {}
    name = policy.get("name") or "default"
    revision = policy.get("revision")
    return f"{name}@{'built-in' if revision is None else revision}"


# --- amounts --------------------------------------------------------------------------------


def decimal(amount: str | None) -> Decimal | None:
    if amount is None:
        return None
    try:
        return Decimal(amount)
    except InvalidOperation:
        return None


def change(before: str | None, after: str | None) -> str | None:
    """after - before as a decimal string with two places, or None if either is missing."""
    a, b = decimal(before), decimal(after)
    if a is None or b is None:
        return None
    return f"{b - a:.2f}"


def signed_money(amount: str | None, currency: str) -> str:
    value = decimal(amount)
    if value is None:
        return "—"
    if value == 0:
        return f"0.00 {currency}"
    sign = "+" if value > 0 else "−"
    return f"{sign}{abs(value):,.2f} {currency}"


def relative(before: str | None, delta: str | None) -> str:
    a, d = decimal(before), decimal(delta)
    if a is None or d is None or a == 0:
        return ""
    return f" ({d / a * 100:+.1f}%)"


def days(line: dict[str, Any]) -> str:
    """p50 days with the p10–p90 band: 8.2 (7.9–8.6); a serving line's days held (its
    duration, 365.2: a fleet has no band)."""
    held = (line.get("serving") or {}).get("duration_s")
    if held is not None:
        return f"{held / fmt.DAY_S:,.1f}"
    band = ((line.get("uncertainty") or {}).get("wall_clock_s")) or None
    if band is None:
        wall = line.get("wall_clock_s")
        return "—" if wall is None else f"{wall / fmt.DAY_S:,.1f}"
    return (f"{band['p50'] / fmt.DAY_S:,.1f} ({band['p10'] / fmt.DAY_S:,.1f}–"
            f"{band['p90'] / fmt.DAY_S:,.1f})")


def commitment(line: dict[str, Any]) -> str:
    if not line.get("feasible", True):
        return f"infeasible: {line.get('infeasible_reason') or ''}".strip()
    return fmt.money(line.get("commitment_total"), line["currency"])


def job_cost(line: dict[str, Any]) -> str:
    if not line.get("feasible", True):
        return "—"
    return fmt.money(line.get("job_cost_total"), line["currency"])


MONTH_S = fmt.MONTH_S


def fleet(line: dict[str, Any]) -> str | None:
    """A serving line's fleet, replicas × GPUs per replica and the accelerator:
    '2 × 4 h100-sxm5-80gb'; None for a training line."""
    held = line.get("serving")
    if not held:
        return None
    return f"{held['replicas']:,} × {held['gpus_per_replica']} {held['accelerator']}"


def gpus_text(line: dict[str, Any]) -> str:
    """'512 GPUs', or a serving line's fleet with its GPUs: '2 × 4 h100-sxm5-80gb (8 GPUs)'."""
    count = f"{line['num_gpus']:,} GPU{'' if line['num_gpus'] == 1 else 's'}"
    shown = fleet(line)
    return f"{shown} ({count})" if shown else count


def fleet_details(line: dict[str, Any]) -> str | None:
    """What a serving line holds: its fleet, layout and engine, its p99 latency at the load,
    and for how long; None for a training line."""
    held = line.get("serving")
    if not held:
        return None
    return (f"{gpus_text(line)}, {serving_plan_layout(held, engine=True)}; p99 TTFT "
            f"{fmt.duration(held['ttft_p99_s'])}, p99 TPOT {fmt.duration(held['tpot_p99_s'])} "
            f"at {held['requests_per_s']:,g} requests/s; held for "
            f"{fmt.duration(held['duration_s'])}")


def same_line(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    if a is None or b is None:
        return False
    fields = ("provider", "region", "zone", "instance_type", "term", "num_gpus", "offer_id",
              "total")
    return all(a.get(f) == b.get(f) for f in fields)


def top_lines(answer: dict[str, Any], count: int = MARKDOWN_LINES) -> list[dict[str, Any]]:
    """The recommended line first, then the best per provider and term in the quote's
    ranking, ``count`` in all."""
    recommended = answer.get("recommended")
    lines = [line for line in answer.get("lines") or [] if not same_line(line, recommended)]
    return ([recommended] if recommended else []) + lines[:count - (1 if recommended else 0)]


# --- Markdown -------------------------------------------------------------------------------


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _short(text: str, limit: int = REASON_CHARS) -> str:
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


def _table(header: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---:" if i in right else "---" for i in range(len(header))) + "|"]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out


def budget_text(answer: dict[str, Any]) -> str:
    budget = answer.get("budget")
    if not budget:
        return "no budget"
    return f"budget {fmt.money(budget.get('amount'), budget.get('currency', 'USD'))}"


def quote_markdown(answer: dict[str, Any]) -> str:
    """A pull-request comment: verdict, commitment against budget, the top lines, the reasons
    with their codes, and what the quote was computed with."""
    emoji, word = headline(answer)
    md = [f"### {emoji} {word}: ComputeQuote `{answer['id']}`", ""]
    recommended = answer.get("recommended")
    if recommended:
        where = " ".join(p for p in (recommended["provider"], recommended.get("region"),
                                     recommended.get("instance_type"), recommended["term"]) if p)
        judged = ""
        if answer.get("accounting") == "amortised":
            judged = (f"; judged amortised: "
                      f"{fmt.money(recommended.get('total'), recommended['currency'])}")
        committed = fmt.money(recommended.get("commitment_total"), recommended["currency"])
        md.append(f"**Commitment {committed} vs {budget_text(answer)}** · job cost "
                  f"{job_cost(recommended)}{judged} · {where}, {gpus_text(recommended)}")
        if recommended.get("serving"):
            md[-1] += f" · held {fmt.duration(recommended['serving']['duration_s'])}"
    else:
        md.append(f"**No feasible line** · {budget_text(answer)}")
    if answer.get("deadline_s"):
        md[-1] += f" · deadline {answer['deadline_s'] / fmt.DAY_S:,.1f} days"
    md.append("")
    lines = top_lines(answer)
    if lines:
        # A serving quote's lines show their fleet and the days it is held.
        serving = any(line.get("serving") for line in lines)
        rows = [[("★ " if i == 0 and recommended else "") + line["provider"],
                 line.get("region") or "—", line.get("instance_type") or "—", line["term"],
                 fleet(line) or f"{line['num_gpus']:,}", commitment(line), job_cost(line),
                 days(line)]
                for i, line in enumerate(lines)]
        md += _table(["provider", "region", "instance", "term",
                      "fleet" if serving else "GPUs", "commitment", "job cost",
                      "days held" if serving else "days p50 (p10–p90)"], rows,
                     right={5, 6, 7} if serving else {4, 5, 6, 7})
        shown = len(answer.get("lines") or [])
        note = (f"★ recommended. Top {len(lines)} of {shown} best lines per provider and term "
                f"({answer.get('lines_total', shown):,} lines in all)")
        rejected = (answer.get("rejected_offers") or {}).get("count") or 0
        if rejected:
            note += f"; {rejected:,} offers rejected unpriced"
        md += ["", note + "."]
    reasons = answer.get("reason_details") or []
    if reasons:
        md += ["", "**Reasons**", ""]
        mark = {"fail": "❌", "warn": "⚠️", "pass": "✅"}
        md += [f"- {mark.get(r.get('outcome', ''), '•')} `{r.get('code', '')}` "
               f"({r.get('rule', '')}): {_short(str(r.get('message', '')))}" for r in reasons]
    md += ["", f"<sub>quote `{answer['id']}` · catalogue `{answer.get('catalog_version')}` · "
               f"estimator `{answer.get('estimator_version')}` · policy "
               f"`{policy_label(answer)}` · accounting {answer.get('accounting', 'commitment')}"
               + (f" · requote of `{answer['requote_of']}`" if answer.get("requote_of") else "")
               + "</sub>"]
    return "\n".join(md) + "\n"


# --- two quotes -----------------------------------------------------------------------------

LineKey = tuple[str, str, str, str]


def line_key(line: dict[str, Any]) -> LineKey:
    return (line["provider"], line.get("instance_type") or "", line.get("region") or "",
            line["term"])


def _rank(line: dict[str, Any]) -> tuple[int, Decimal]:
    total = decimal(line.get("total"))
    return (0 if line.get("feasible") and total is not None else 1,
            total if total is not None else Decimal(0))


def best_per_key(lines: list[dict[str, Any]]) -> dict[LineKey, dict[str, Any]]:
    """The cheapest (feasible first) line per (provider, instance_type, region, term)."""
    best: dict[LineKey, dict[str, Any]] = {}
    for line in lines:
        key = line_key(line)
        if key not in best or _rank(line) < _rank(best[key]):
            best[key] = line
    return best


def _amounts(line: dict[str, Any] | None) -> dict[str, Any] | None:
    if line is None:
        return None
    return {"provider": line["provider"], "region": line.get("region"),
            "instance_type": line.get("instance_type"), "term": line["term"],
            "num_gpus": line["num_gpus"], "feasible": line.get("feasible", True),
            "commitment_total": line.get("commitment_total"),
            "job_cost_total": line.get("job_cost_total"), "total": line.get("total"),
            "currency": line["currency"]}


def _changes(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, str | None]:
    same_currency = a is not None and b is not None and a["currency"] == b["currency"]
    return {name: change(a.get(field), b.get(field)) if same_currency and a and b else None
            for name, field in (("commitment_change", "commitment_total"),
                                ("job_cost_change", "job_cost_total"),
                                ("total_change", "total"))}


def diff_quotes(a: dict[str, Any], b: dict[str, Any], lines_a: list[dict[str, Any]],
                lines_b: list[dict[str, Any]]) -> dict[str, Any]:
    """What changed from quote ``a`` to quote ``b``: the versions and policy they were
    computed with, the verdict, the recommended line, and every (provider, instance_type,
    region, term) line's amounts (its cheapest line when there are several)."""

    def field(name: str, before: Any, after: Any) -> dict[str, Any]:
        return {"field": name, "a": before, "b": after, "changed": before != after}

    def budget(q: dict[str, Any]) -> str | None:
        money = q.get("budget")
        return f"{money['amount']} {money['currency']}" if money else None

    fields = [
        field("catalog_version", a.get("catalog_version"), b.get("catalog_version")),
        field("estimator_version", a.get("estimator_version"), b.get("estimator_version")),
        field("policy", policy_label(a), policy_label(b)),
        field("verdict", a.get("verdict"), b.get("verdict")),
        field("policy_outcome", (a.get("policy_result") or {}).get("outcome"),
              (b.get("policy_result") or {}).get("outcome")),
        field("accounting", a.get("accounting"), b.get("accounting")),
        field("budget", budget(a), budget(b)),
        field("lines_total", a.get("lines_total"), b.get("lines_total")),
    ]
    rec_a, rec_b = _amounts(a.get("recommended")), _amounts(b.get("recommended"))
    recommended = {"a": rec_a, "b": rec_b, **_changes(rec_a, rec_b)}
    best_a, best_b = best_per_key(lines_a), best_per_key(lines_b)
    rows: list[dict[str, Any]] = []
    for key in sorted(set(best_a) | set(best_b)):
        before, after = _amounts(best_a.get(key)), _amounts(best_b.get(key))
        changes = _changes(before, after)
        if before is None:
            status = "added"
        elif after is None:
            status = "removed"
        elif (before["feasible"], before["commitment_total"], before["job_cost_total"],
              before["total"], before["currency"]) != (
                  after["feasible"], after["commitment_total"], after["job_cost_total"],
                  after["total"], after["currency"]):
            status = "changed"
        else:
            status = "unchanged"
        provider, instance_type, region, term = key
        rows.append({"provider": provider, "instance_type": instance_type or None,
                     "region": region or None, "term": term, "status": status,
                     "a": before, "b": after, **changes})
    order = {"changed": 0, "added": 1, "removed": 2, "unchanged": 3}
    rows.sort(key=lambda r: (order[r["status"]],
                             -abs(decimal(r["total_change"]) or Decimal(0))))
    counts = {status: sum(r["status"] == status for r in rows) for status in order}
    return {"a": a["id"], "b": b["id"], "fields": fields, "recommended": recommended,
            "lines": rows, "counts": counts}


def line_where(line: dict[str, Any]) -> str:
    return " ".join(p for p in (line["provider"], line.get("region"),
                                line.get("instance_type"), line["term"]) if p)


def amount_pair(row: dict[str, Any], field: str) -> tuple[str, str]:
    def one(side: dict[str, Any] | None) -> str:
        if side is None:
            return "—"
        return (fmt.money(side.get(field), side["currency"]) if side["feasible"]
                else "infeasible")
    return one(row["a"]), one(row["b"])


def currency_of(row: dict[str, Any]) -> str:
    side = row["b"] or row["a"] or {}
    return str(side.get("currency", "USD"))


def diff_markdown(diff: dict[str, Any], *, show_unchanged: bool = False) -> str:
    md = [f"### Quote `{diff['a']}` → `{diff['b']}`", ""]
    for f in diff["fields"]:
        if f["changed"]:
            md.append(f"- **{f['field']}**: `{f['a']}` → `{f['b']}`")
    if not any(f["changed"] for f in diff["fields"]):
        md.append("- same catalogue, estimator, policy and verdict")
    rec = diff["recommended"]
    if rec["a"] or rec["b"]:
        currency = (rec["b"] or rec["a"])["currency"]
        ca, cb = amount_pair(rec, "commitment_total")
        ja, jb = amount_pair(rec, "job_cost_total")
        where_a = line_where(rec["a"]) if rec["a"] else "none"
        where_b = line_where(rec["b"]) if rec["b"] else "none"
        md.append(f"- **recommended**: {where_a} → {where_b}: commitment {ca} → {cb} "
                  f"({signed_money(rec['commitment_change'], currency)}), job cost {ja} → "
                  f"{jb} ({signed_money(rec['job_cost_change'], currency)})")
    rows = [r for r in diff["lines"] if show_unchanged or r["status"] != "unchanged"]
    counts = diff["counts"]
    md += ["", f"Lines: {counts['changed']} changed, {counts['added']} added, "
               f"{counts['removed']} removed, {counts['unchanged']} unchanged."]
    if rows:
        table = []
        for r in rows[:MARKDOWN_DIFF_LINES]:
            currency = currency_of(r)
            ca, cb = amount_pair(r, "commitment_total")
            ja, jb = amount_pair(r, "job_cost_total")
            table.append([r["provider"], r["region"] or "—", r["instance_type"] or "—",
                          r["term"], r["status"], f"{ca} → {cb}",
                          signed_money(r["commitment_change"], currency)
                          + relative(r["a"] and r["a"]["commitment_total"],
                                     r["commitment_change"]),
                          f"{ja} → {jb}", signed_money(r["job_cost_change"], currency)])
        md += ["", *_table(["provider", "region", "instance", "term", "change", "commitment",
                            "Δ commitment", "job cost", "Δ job cost"], table,
                           right={5, 6, 7, 8})]
        if len(rows) > MARKDOWN_DIFF_LINES:
            md += ["", f"… and {len(rows) - MARKDOWN_DIFF_LINES} more (--format json has "
                       "every line)."]
    return "\n".join(md) + "\n"


# --- serving (issue 19) ---------------------------------------------------------------------

KIB_BYTES = 1024


def size(value_bytes: float) -> str:
    """Bytes in the largest binary unit that keeps a figure of at least 1: 40.0 KiB, 50.0 MiB,
    16.4 GiB (from a GiB up, exactly :func:`fmt.gib`)."""
    if value_bytes >= fmt.GIB_BYTES:
        return fmt.gib(value_bytes)
    for unit, factor in (("MiB", KIB_BYTES**2), ("KiB", KIB_BYTES)):
        if value_bytes >= factor:
            return f"{value_bytes / factor:,.1f} {unit}"
    return f"{value_bytes:,.0f} B"


def per_million(amount: str | None) -> str:
    """A price per million tokens as the API gives it (4 places: at this unit a tenth of a
    cent matters), with thousands separators; — when unknown."""
    value = decimal(amount)
    return "—" if value is None else f"{value:,}"


def _length_text(length: dict[str, Any] | None) -> str:
    if not length:
        return "?"
    if length.get("mean") is not None:
        return f"mean {length['mean']:,.0f}"
    if length.get("samples"):
        return f"{len(length['samples']):,} samples"
    return f"p50 {length.get('p50') or 0:,.0f}, p99 {length.get('p99') or 0:,.0f}"


def slo_text(slo: dict[str, Any] | None) -> str:
    """'TTFT p99 2.00 s, TPOT p99 100.0 ms', or 'none'."""
    parts = [f"{metric.upper()} {q} {fmt.duration(value)}"
             for metric in ("ttft", "tpot") for q in ("p50", "p99")
             if (value := (slo or {}).get(f"{metric}_{q}_s")) is not None]
    return ", ".join(parts) or "none"


def serving_setup(request: dict[str, Any]) -> list[tuple[str, str]]:
    """What was asked, from the request body (the answer does not repeat it): the model, the
    replica, the engine and the traffic."""
    model = request.get("model") or {}
    d = request.get("deployment") or {}
    traffic = request.get("traffic") or {}
    gpus = d.get("gpus_per_replica")
    layout = f"tp{d.get('tp', 1)} pp{d.get('pp', 1)}"
    replica = (f"{gpus:,} × {d.get('accelerator', '?')} ({layout})" if gpus
               else f"{d.get('accelerator', '?')} ({layout})")
    engine = (f"{d.get('engine', 'unknown')}; {d.get('weight_precision', 'bf16')} weights, "
              f"{d.get('kv_cache_precision', 'bf16')} KV cache"
              + (f"; max batch {d['max_batch']:,}" if d.get("max_batch") else ""))
    if d.get("prefix_caching"):
        engine += f"; prefix cache hits {fmt.percent(d.get('prefix_cache_hit_fraction', 0))}"
    if d.get("speculative"):
        engine += (f"; speculative, acceptance "
                   f"{fmt.percent(d['speculative'].get('acceptance_rate', 0))}")
    mode = traffic.get("mode", "?")
    load = {"online": (f"{traffic['requests_per_s']:,g} requests/s"
                       if traffic.get("requests_per_s") is not None
                       else f"concurrency {traffic.get('concurrency', '?')}"),
            "fixed_batch": f"batch {traffic.get('batch_size', '?')}",
            "offline": "the largest batch that fits"}.get(mode, "")
    return [("model", str(model.get("preset") or model.get("name") or "custom")),
            ("replica", replica), ("engine", engine),
            ("traffic", f"{mode}, {load}; prompt {_length_text(traffic.get('prompt_tokens'))}"
                        f", output {_length_text(traffic.get('output_tokens'))} tokens"),
            ("SLO", slo_text(traffic.get("slo")))]


def serving_memory_rows(answer: dict[str, Any]) -> list[tuple[str, str]]:
    """Memory per GPU, then the largest concurrency that fits and whether the model fits."""
    m = answer["memory"]
    return [("weights", size(m["weights_bytes_per_gpu"])),
            ("KV cache per token", size(m["kv_cache_bytes_per_token"])),
            ("KV cache per sequence", size(m["kv_cache_bytes_per_sequence"])),
            ("workspace, activations", size(m["workspace_bytes_per_gpu"])),
            ("KV cache budget", size(m["kv_budget_bytes_per_gpu"])),
            ("usable (engine's share)", size(m["usable_bytes_per_gpu"])),
            ("max concurrency", f"{m['max_concurrency']:,} sequences per replica"),
            ("fits", "yes" if m["fits"] else "NO: the weights leave no room for a sequence")]


LATENCY_ROWS: tuple[tuple[str, str, str | None], ...] = (
    ("ttft_s", "TTFT", "ttft"), ("tpot_s", "TPOT", "tpot"), ("e2e_s", "end to end", None),
    ("prefill_s", "prefill (unloaded)", None))


def serving_latency_rows(answer: dict[str, Any], slo: dict[str, Any] | None,
                         ) -> list[tuple[str, str, str, str, str]]:
    """(label, p50, p99, SLO p50, SLO p99) for TTFT, TPOT, end to end and unloaded prefill."""
    latency, slo = answer["latency"], slo or {}

    def limit(metric: str | None, quantile: str) -> str:
        value = slo.get(f"{metric}_{quantile}_s") if metric else None
        return "—" if value is None else fmt.duration(value)

    return [(label, fmt.duration(latency[key]["p50"]), fmt.duration(latency[key]["p99"]),
             limit(metric, "p50"), limit(metric, "p99")) for key, label, metric in LATENCY_ROWS]


def meets_slo_text(sizing: dict[str, Any]) -> str:
    meets = {True: "yes", False: "NO", None: "no SLO given"}[sizing.get("meets_slo")]
    return meets + ("; saturated (over capacity)" if sizing.get("saturated") else "")


def serving_figures(answer: dict[str, Any]) -> list[tuple[str, str]]:
    """Throughput, the decode roofline, sizing, cost and energy of a serving estimate."""
    t, d, s = answer["throughput"], answer["decode"], answer["sizing"]
    crossover = d.get("crossover_batch")
    rows = [
        ("output tokens/s", f"{fmt.number(t['output_tokens_per_s'])} per replica "
                            f"({fmt.number(t['output_tokens_per_s_per_gpu'])} per GPU)"),
        ("input tokens/s", f"{fmt.number(t['input_tokens_per_s'])} per replica"),
        ("requests/s", f"{fmt.number(t['requests_per_s'], 2)} per replica served; capacity "
                       f"{fmt.number(t['capacity_requests_per_s'], 2)}"),
        ("decode step", f"{fmt.duration(d['step_s'])} at batch {fmt.number(d['batch'], 1)} "
                        f"(HBM {fmt.duration(d['memory_bound_s'])}, FLOPs "
                        f"{fmt.duration(d['compute_bound_s'])})"),
        ("compute-bound from", f"batch {fmt.number(crossover)}" if crossover is not None
         else "never (decode stays memory-bound)"),
        ("replicas", f"{s['replicas']:,} ({s['num_gpus']:,} "
                     f"GPU{'' if s['num_gpus'] == 1 else 's'})"),
        ("meets the SLOs", meets_slo_text(s)),
    ]
    cost = answer.get("cost")
    if cost:
        rows += [("cost", f"{fmt.money(cost['usd_per_hour'])} per hour"),
                 ("per M output tokens",
                  f"{per_million(cost['usd_per_million_output_tokens'])} USD"),
                 ("per M tokens in + out",
                  f"{per_million(cost['usd_per_million_total_tokens'])} USD")]
    else:
        rows.append(("cost", "— (give a price per GPU-hour)"))
    energy = answer["energy"]
    kwh = fmt.number(energy["kwh_per_million_output_tokens"], 2)
    co2e = fmt.number(energy["co2e_kg_per_million_output_tokens"], 2)
    rows.append(("energy per M output", f"{kwh} kWh, {co2e} kg CO2e"))
    return rows


def serving_plan_layout(deployment: dict[str, Any], *, engine: bool = False) -> str:
    """'tp4 fp8/bf16 b256': tensor (and pipeline) parallel size, weight/KV precision, the max
    batch when one was set, and with ``engine`` the engine ('tp4 fp8/bf16 vllm')."""
    d = deployment
    return " ".join(p for p in (
        f"tp{d.get('tp', 1)}", f"pp{d['pp']}" if d.get("pp", 1) != 1 else "",
        f"{d.get('weight_precision', 'bf16')}/{d.get('kv_cache_precision', 'bf16')}",
        f"b{d['max_batch']}" if d.get("max_batch") else "",
        str(d.get("engine", "")) if engine else "") if p)
