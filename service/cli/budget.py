"""``cq budget-plan``: the soonest plans within a budget and the cheapest before a deadline,
or the largest model they can train (``POST /v1/budget-plans``)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.table import Table

from service.api import presentation as fmt
from service.cli import report
from service.cli import tables as tb
from service.cli.client import DEFAULT_API_URL, connect
from service.cli.common import (
    Accelerator,
    Accounting,
    ApiKey,
    ApiUrl,
    AsJson,
    Batch,
    GpuRange,
    Gpus,
    Local,
    Model,
    PolicyOption,
    RequestFile,
    SeqLen,
    Tokens,
    Utilisation,
    _defaults,
    _emit,
    _gpu_range,
    _load,
    _put,
    _put_accounting,
    _put_budget_and_deadline,
    _put_model_and_training,
    _table,
    handled,
    out,
    working,
)
from service.cli.quote import _line_amounts, _line_label, infeasible_notes

PLAN_ROWS = 10
"""Rows of each budget-plan table (the title says how many lines there are)."""
NOTE_CELL_WIDTH = 28
"""A model's note longer than this ("nothing fits the budget: the cheapest line ... has a
commitment total of 2,067,918.00 USD ...") is printed under the "Models tried" table as
prose, which wraps at spaces, instead of in a narrow column where an amount would be cut
(issue 41); on a roomy console (piped, 200 wide) it stays in its row, for grep."""


class PlanObjective(StrEnum):
    soonest = "soonest"
    largest_model = "largest_model"


def _plan_table(title: str, lines: list[dict[str, Any]]) -> Table:
    """A budget plan's lines: the commitment (cash signed for) first, then the job's own cost,
    then how long and where."""
    amortised = any(line.get("accounting") == "amortised" for line in lines)
    currency = tb.common_currency(lines)
    columns: list[tb.Col | str] = [
        tb.num("#"), tb.num(tb.money_header("commitment", currency)),
        tb.num(tb.money_header("job cost", currency)),
        *([tb.num(tb.money_header("judged", currency))] if amortised else []),
        tb.Col("days p50 (p10–p90)", max_width=11, secondary=True, short="days"),
        tb.Col("line", max_width=14),
        tb.Col("policy", max_width=6), tb.Col("flags", max_width=6)]
    table = _table(title, columns)
    letters = tb.FlagLetters()
    for rank, line in enumerate(lines, 1):
        judged = ([tb.amount(line.get("total"), line["currency"], currency)]
                  if amortised else [])
        table.add_row(str(rank), *_line_amounts(line, currency), *judged, report.days(line),
                      _line_label(line), line.get("policy_outcome") or "—",
                      letters.cell(line.get("flags") or []))
    table.caption = "\n".join(x for x in (letters.legend(), infeasible_notes(lines)) if x) or None
    table.caption_justify = "left"
    return table


def render_budget_plan(answer: dict[str, Any]) -> None:
    budget = answer.get("budget") or {}
    deadline = answer.get("deadline_s")
    policy = answer.get("policy") or {}
    out.print(f"budget {fmt.money(budget.get('amount'), budget.get('currency', 'USD'))} "
              f"({answer.get('accounting', 'commitment')} accounting); deadline "
              f"{fmt.duration(deadline) if deadline else 'none'}; policy "
              f"{policy.get('name') or 'default'}@"
              f"{'built-in' if policy.get('revision') is None else policy['revision']}; "
              f"catalogue {answer.get('catalog_version')}", highlight=False)
    if answer.get("objective") == "largest_model":
        _render_largest(answer)
    explanation = answer.get("explanation") or ""
    for title, key, empty in (
            ("Soonest within the budget", "soonest_within_budget", "no line is within the "
                                                                    "budget"),
            ("Cheapest before the deadline" if deadline else "Cheapest (no deadline given)",
             "cheapest_before_deadline", "no line meets the deadline")):
        lines = answer.get(key) or []
        if lines:
            shown = tb.shown_of(min(len(lines), PLAN_ROWS), len(lines), "lines")
            out.print(_plan_table(f"{title}: {shown}", lines[:PLAN_ROWS]))
        else:
            out.print(f"{title}: {empty}", highlight=False)
    if explanation:
        out.print(f"why: {explanation}", highlight=False)


def bound_text(answer: dict[str, Any]) -> str | None:
    """'budget (next size tried: llama3-style-h8192-l63, 45.7 G parameters, has no line)', or
    None when the answer names no binding constraint."""
    bound = answer.get("binding_constraint")
    if not isinstance(bound, str) or not bound:
        return None
    stopped = fmt.stopped_size(answer)
    if stopped is None:
        return bound
    return (f"{bound} (next size tried: {stopped['preset']}, {fmt.si(stopped['params'])} "
            "parameters, has no line)")


def _render_largest(answer: dict[str, Any]) -> None:
    largest = answer.get("largest_model")
    if largest:
        line = largest["line"]
        out.print(f"largest model: {largest['preset']}, {fmt.si(largest['params'])} "
                  f"parameters on {fmt.si(largest['tokens'])} tokens "
                  f"({largest['tokens'] / largest['params']:,.1f} per parameter)",
                  highlight=False)
        if largest.get("architecture"):
            out.print(f"architecture: {fmt.architecture_text(largest['architecture'])}",
                      highlight=False)
        share = largest.get("share_of_budget")
        out.print(f"its best line: commitment {report.commitment(line)}, job cost "
                  f"{report.job_cost(line)}, {report.days(line)} days, "
                  f"{fmt.line_where(line)}, {line['term']}, {line['num_gpus']:,} GPUs"
                  + (f"; {fmt.percent(share)} of the budget" if share is not None else ""),
                  highlight=False)
    else:
        out.print("largest model: none: no candidate has a line within the budget and "
                  "deadline that the policy passes (the lists are the smallest candidate's)",
                  highlight=False)
    bound = bound_text(answer)
    if bound:
        out.print(f"bound by: {bound}", highlight=False)
    if largest and largest.get("shape_rule"):
        out.print(f"shape rule: {largest['shape_rule']}", highlight=False)
    if largest and largest.get("tokens_rule"):
        out.print(f"tokens rule: {largest['tokens_rule']}", highlight=False)
    models = sorted(answer.get("models_tried") or [], key=lambda m: m["params"])
    generated = any(m.get("architecture") for m in models)
    tried = _table("Models tried, smallest first", [
        tb.Col("model", max_width=24, min_width=23), tb.num("params"), tb.num("tokens"),
        *([tb.Col("layers × hidden, heads, FFN", max_width=16)] if generated else []),
        tb.num("lines\nwithin"), tb.Col("bound", max_width=8),
        tb.Col("note", max_width=14, secondary=True)], boxed=True)
    notes: list[str] = []
    for model in models:
        arch = model.get("architecture")
        shape = [fmt.architecture_text(arch, short=True) if arch else "preset"] if generated else []
        note = model["note"]
        if len(note) > NOTE_CELL_WIDTH and out.width < tb.ROOMY_WIDTH:  # under the table
            notes.append(f"({len(notes) + 1}) {model['preset']}: {note}")
            note = f"under the table ({len(notes)})"
        tried.add_row(model["preset"], fmt.si(model["params"]), fmt.si(model["tokens"]),
                      *shape, f"{model['lines_within']:,}", model.get("bound") or "—", note)
    tried.caption = "\n".join(notes) or None
    tried.caption_justify = "left"
    out.print(tried)


def register(app: typer.Typer) -> None:
    @app.command("budget-plan")
    @handled
    def budget_plan(
        model: Model = None, accelerator: Accelerator = None, gpus_range: GpuRange = None,
        gpus: Gpus = None, tokens: Tokens = None, seq_len: SeqLen = None,
        global_batch: Batch = None,
        budget: Annotated[str | None, typer.Option(help="Budget amount.")] = None,
        currency: Annotated[str, typer.Option(help="Budget currency.")] = "USD",
        deadline_days: Annotated[float | None, typer.Option(help="Wall-clock limit.")]
        = None,
        provider: Annotated[list[str] | None, typer.Option(
            help="Only this provider; repeat for several ('onprem' included).")] = None,
        term: Annotated[list[str] | None, typer.Option(
            help="on_demand, spot, reserved_1y, reserved_3y, capacity_block, onprem.")]
        = None,
        objective: Annotated[PlanObjective | None, typer.Option(
            help="soonest (default: the lines for --model) or largest_model (the largest "
                 "compute-optimal candidate with a line within the budget and deadline).")]
        = None,
        candidate_model: Annotated[list[str] | None, typer.Option(
            help="largest_model: a candidate preset; repeat for several (default: the "
                 "dense Llama presets).")] = None,
        tokens_per_param: Annotated[float | None, typer.Option(
            help="largest_model: training tokens per parameter (default 20, Chinchilla).")]
        = None,
        accounting: Accounting = None, utilisation: Utilisation = None,
        policy: PolicyOption = None,
        request: RequestFile = None, api: ApiUrl = DEFAULT_API_URL, api_key: ApiKey = None,
        local: Local = False, as_json: AsJson = False,
    ) -> None:
        """The soonest plans within a budget and the cheapest before a deadline; or, with
        --objective largest_model, the largest compute-optimal model they can train."""
        body = _load(request)
        _put_model_and_training(body, model, tokens, seq_len, global_batch)
        _put(body, "objective", objective.value if objective else None)
        _put(body, "candidate_models", candidate_model)
        _put(body, "tokens_per_param", tokens_per_param)
        if body.get("objective") == "largest_model":
            # Replaced by tokens_per_param × each candidate's parameters; the schema wants one.
            body.setdefault("training", {}).setdefault("tokens", 1.0)
        _put(body, "providers", provider)
        _put(body, "terms", term)
        if accelerator:
            cluster: dict[str, Any] = {"accelerator": accelerator}
            if gpus_range:
                cluster["num_gpus_range"] = _gpu_range(gpus_range)
            else:
                cluster["num_gpus"] = gpus
            body["clusters"] = [cluster]
        _put_budget_and_deadline(body, budget, currency, deadline_days)
        _put_accounting(body, accounting, utilisation, policy)
        _defaults(body)
        with connect(api, api_key, local) as client, working("sweeping plans and offers"):
            answer = client.call("POST", "/v1/budget-plans", json=body).json()
        _emit(answer, as_json, render_budget_plan)
