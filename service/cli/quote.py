"""``cq quote`` (``POST /v1/quotes``) and ``cq quotes get|verify|requote|diff`` (stored
quotes): a quote's table, Markdown (service/cli/report.py) and the CI gate (``--fail-on``)."""

from __future__ import annotations

import functools
import json
import sys
import uuid
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from service.api import presentation as fmt
from service.cli import report
from service.cli import tables as tb
from service.cli.client import DEFAULT_API_URL, Api, connect
from service.cli.common import (
    Accelerator,
    Accounting,
    ApiKey,
    ApiUrl,
    AsJson,
    Batch,
    FailOnOption,
    Format,
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
    _load,
    _output,
    _paged,
    _put,
    _put_accounting,
    _put_budget_and_deadline,
    _put_model_and_training,
    _table,
    err,
    handled,
    labelled,
    out,
    working,
)
from service.cli.report import FailOn, OutputFormat


def _post_quote(body: dict[str, Any], idempotency_key: str | None, api: str,
                api_key: str | None, local: bool, output: OutputFormat,
                fail_on: FailOn | None) -> None:
    """``POST /v1/quotes`` (a new random Idempotency-Key unless one is given), then print the
    quote and apply the CI gate (``cq quote`` and ``cq serve-quote``)."""
    key = idempotency_key or uuid.uuid4().hex
    with connect(api, api_key, local) as client, working("pricing"):
        answer = client.call("POST", "/v1/quotes", json=body,
                             headers={"Idempotency-Key": key}).json()
    _emit_quote(answer, output, fail_on)


def _emit_quote(answer: dict[str, Any], output: OutputFormat, fail_on: FailOn | None) -> None:
    """Prints a quote, then applies the CI gate: exit 3 (reject) or 4 (warn) with --fail-on."""
    if output is OutputFormat.json:
        sys.stdout.write(json.dumps(answer, indent=2) + "\n")
    elif output is OutputFormat.markdown:
        sys.stdout.write(report.quote_markdown(answer))
    else:
        render_quote(answer)
    _gate(answer, fail_on)


def _gate(answer: dict[str, Any], fail_on: FailOn | None) -> None:
    if fail_on is None:
        return
    if answer.get("verdict") is None:
        err.print(labelled(
            "note:", "yellow", f"--fail-on {fail_on.value}: quote {answer.get('id')} has "
            "no verdict (no budget, deadline or policy to judge by), so the gate passes"),
            highlight=False)
        return
    code = report.gate_code(answer, fail_on)
    if code:
        _, word = report.headline(answer)
        err.print(f"--fail-on {fail_on.value}: quote {answer['id']} is {word} (policy "
                  f"{report.policy_label(answer)}); exit {code}", highlight=False)
        raise typer.Exit(code=code)


def _lines_table(title: str, lines: list[dict[str, Any]],
                 recommended: dict[str, Any] | None = None) -> Table:
    """Commitment (cash signed for) first, then the job's own cost; under amortised
    accounting also the amount judged."""
    amortised = any(line.get("accounting") == "amortised" for line in lines)
    serving = any(line.get("serving") for line in lines)
    currency = tb.common_currency(lines)
    columns: list[tb.Col | str] = [
        "line", tb.Col("days held" if serving else "days p50 (p10–p90)", max_width=11,
                       secondary=True, short="days"),
        tb.num(tb.money_header("commitment", currency)),
        tb.num(tb.money_header("job cost", currency)),
        *([tb.num(tb.money_header("judged", currency))] if amortised else []),
        tb.Col("budget, policy", max_width=8), tb.Col("flags", max_width=6)]
    table = _table(title, columns)
    letters = tb.FlagLetters()
    for line in lines:
        budget = {True: "yes", False: "no", None: "—"}[line.get("within_budget")]
        judged = ([tb.amount(line.get("total"), line["currency"], currency) if line["feasible"]
                   else "—"] if amortised else [])
        mark = "★ " if report.same_line(line, recommended) else ""
        table.add_row(f"{mark}{_line_label(line)}", report.days(line),
                      *_line_amounts(line, currency), *judged,
                      f"{budget}, {line.get('policy_outcome') or '—'}",
                      letters.cell(line.get("flags") or []))
    table.caption = "\n".join(x for x in (letters.legend(), infeasible_notes(lines)) if x) or None
    table.caption_justify = "left"
    return table


def infeasible_notes(lines: list[dict[str, Any]]) -> str:
    """Why each infeasible line is infeasible, under the table: prose that wraps at spaces, not
    an amount column's cell that a long reason would widen past the screen (issue 41)."""
    return "\n".join(f"infeasible: {_line_label(line)}: {line.get('infeasible_reason') or '—'}"
                     for line in lines if not line.get("feasible", True))


def _line_label(line: dict[str, Any]) -> str:
    """'512 × aws us-east-1 p5.48xlarge spot': the GPU count as an integer, then where, then
    the term; a serving line's fleet instead of its GPU count: '2 × 4 h100-sxm5-80gb on aws
    us-east-1 p5.48xlarge spot' (replicas × GPUs per replica)."""
    fleet = report.fleet(line)
    if fleet:
        return f"{fleet} on {report.line_where(line)}"
    return f"{line['num_gpus']:,} × {report.line_where(line)}"


def _line_amounts(line: dict[str, Any], currency: str | None) -> tuple[str, str]:
    if not line.get("feasible", True):
        return "infeasible", "—"  # the reason is under the table (infeasible_notes)
    return (tb.amount(line.get("commitment_total"), line["currency"], currency),
            tb.amount(line.get("job_cost_total"), line["currency"], currency))


def render_quote(answer: dict[str, Any]) -> None:
    recommended = answer.get("recommended")
    lines = answer.get("lines") or list(answer["cheapest_per_term"].values())
    shown = tb.shown_of(len(lines), answer["summary"]["lines"], "lines")
    out.print(_lines_table(f"Quote {answer['id']}: {shown}, the best per provider and term "
                           "(★ recommended)", lines, recommended))
    summary = answer["summary"]
    judged = "amortised totals" if answer.get("accounting") == "amortised" else "commitments"
    out.print(f"{summary['lines']} lines ({summary['feasible_lines']} feasible); {judged} from "
              f"{fmt.money(summary['min_total'], summary['currency'])} to "
              f"{fmt.money(summary['max_total'], summary['currency'])}", highlight=False)
    if recommended:
        out.print(f"recommended: {report.line_where(recommended)}, "
                  f"{report.gpus_text(recommended)}: commitment "
                  f"{report.commitment(recommended)}, job cost {report.job_cost(recommended)} "
                  f"vs {report.budget_text(answer)}", highlight=False)
        if fleet := report.fleet_details(recommended):
            out.print(f"  fleet: {fleet}", highlight=False)
        converted = recommended.get("in_budget_currency")
        conversion = answer.get("fx")
        if converted and conversion:
            out.print(f"  in {converted['currency']}: commitment "
                      f"{fmt.money(converted['commitment_total'], converted['currency'])}, "
                      f"job cost {fmt.money(converted['job_cost_total'], converted['currency'])}"
                      f" (ECB {conversion['fixing_date']}, {conversion['rate']} "
                      f"{recommended['currency']} per {converted['currency']}, rounded up)",
                      highlight=False)
    rejected = answer.get("rejected_offers") or {}
    if rejected.get("count"):
        groups = "; ".join(f"{g['provider']} {g['instance_type']} ({g['code']}) ×{g['offers']}"
                           for g in rejected.get("groups", [])[:5])
        out.print(f"{rejected['count']:,} offers rejected unpriced: {groups}", highlight=False)
    verdict = answer.get("verdict")
    _, word = report.headline(answer)
    colour = {"approve": "green", "reject": "red", "warn": "yellow"}.get(word, "default")
    out.print(Text.assemble(
        "verdict: ", (verdict or "none", f"bold {colour}"),
        f" (policy {report.policy_label(answer)}: "
        f"{(answer.get('policy_result') or {}).get('outcome', '—')})"), highlight=False)
    details = answer.get("reason_details")
    if details is None:
        details = [{"code": "", "message": m} for m in answer.get("reasons", [])]
    for reason in details:
        code = f"[{reason['code']}] " if reason.get("code") else ""
        out.print(f"  · {code}{reason['message']}", highlight=False)
    out.print(f"catalogue {answer['catalog_version']}; estimator "
              f"{answer.get('estimator_version', '?')}; stored as /v1/quotes/{answer['id']}"
              + (f"; requote of {answer['requote_of']}" if answer.get("requote_of") else ""),
              highlight=False)


def render_verify(answer: dict[str, Any], quote_id: str) -> None:
    estimator = answer["estimator_version"]
    stored = answer["stored_estimator_version"]
    versions = (f"catalogue {answer['catalog_version']}; estimator {estimator}"
                + ("" if estimator == stored else f" (the quote was made with {stored})"))
    if answer["matches"]:
        out.print(Text.assemble((f"quote {quote_id} verifies", "bold green"),
                                f": recomputed to the cent; {versions}"), highlight=False)
        return
    table = _table(f"Quote {quote_id} does not verify",
                   [tb.Col("path", max_width=24), tb.Col("stored", max_width=24),
                    tb.Col("recomputed", max_width=24)])
    for d in answer["differences"]:
        table.add_row(d["path"], json.dumps(d["stored"]), json.dumps(d["recomputed"]))
    out.print(table)
    out.print(versions, highlight=False)


def render_diff(diff: dict[str, Any], show_unchanged: bool = False) -> None:
    figures = _table(f"Quote {diff['a']} → {diff['b']}",
                     [tb.Col("", max_width=22), tb.Col("A", max_width=22),
                      tb.Col("B", max_width=22), tb.Col("", max_width=14)])
    for f in diff["fields"]:
        figures.add_row(f["field"], str(f["a"]), str(f["b"]), "changed" if f["changed"] else "")
    rec = diff["recommended"]
    currency = (rec["b"] or rec["a"] or {}).get("currency", "USD")
    figures.add_row("recommended", report.line_where(rec["a"]) if rec["a"] else "—",
                    report.line_where(rec["b"]) if rec["b"] else "—", "")
    for label, field, delta in (("recommended commitment", "commitment_total",
                                 "commitment_change"),
                                ("recommended job cost", "job_cost_total", "job_cost_change")):
        before, after = report.amount_pair(rec, field)
        figures.add_row(label, before, after, report.signed_money(rec[delta], currency))
    out.print(figures)
    rows = [r for r in diff["lines"] if show_unchanged or r["status"] != "unchanged"]
    counts = diff["counts"]
    summary = (f"lines: {counts['changed']} changed, {counts['added']} added, "
               f"{counts['removed']} removed, {counts['unchanged']} unchanged")
    if rows:
        # Five columns fit 80: the line, what changed, B's commitment and both changes (A's
        # amounts are B's minus the change; --json and --markdown have every figure).
        shared = tb.common_currency([{"currency": report.currency_of(r)} for r in rows])
        table = _table(tb.shown_of(len(rows), len(diff["lines"]),
                                   "lines (cheapest per provider, instance, region and term)"),
                       [tb.Col("line", max_width=24), tb.Col("change", max_width=9),
                        tb.num(tb.money_header("commitment B", shared)),
                        tb.num(tb.money_header("Δ commitment", shared)),
                        tb.num(tb.money_header("Δ job cost", shared))])
        def bare(text: str) -> str:
            return text.removesuffix(f" {shared}") if shared is not None else text

        for r in rows:
            cur = report.currency_of(r)
            _, cb = report.amount_pair(r, "commitment_total")
            where = " ".join(x for x in (r["provider"], r["region"], r["instance_type"],
                                         r["term"]) if x)
            share = report.relative(r["a"] and r["a"]["commitment_total"],
                                    r["commitment_change"]).strip(" ()")
            table.add_row(where, r["status"] + (f"\n{share}" if share else ""), bare(cb),
                          bare(report.signed_money(r["commitment_change"], cur)),
                          bare(report.signed_money(r["job_cost_change"], cur)))
        out.print(table)
    out.print(summary + ("" if show_unchanged else " (--all shows unchanged lines)"),
              highlight=False)


QuoteId = Annotated[str, typer.Argument(help="A stored quote's id (q_...).")]
LINES_PAGE_SIZE = 200


def _all_lines(client: Api, quote_id: str) -> list[dict[str, Any]]:
    """Every line of a stored quote, through GET /v1/quotes/{id}/lines page by page."""
    return _paged(client, f"/v1/quotes/{quote_id}/lines", {"page_size": LINES_PAGE_SIZE})


def register(app: typer.Typer) -> None:
    @app.command()
    @handled
    def quote(
        model: Model = None, accelerator: Accelerator = None, gpus: Gpus = None,
        tokens: Tokens = None, seq_len: SeqLen = None, global_batch: Batch = None,
        gpu_hours: Annotated[float | None, typer.Option(
            help="Price plain GPU-hours instead of a model (with --accelerator, --gpus).")]
        = None,
        provider: Annotated[list[str] | None, typer.Option(
            help="Only this provider; repeat for several ('onprem' included).")] = None,
        term: Annotated[list[str] | None, typer.Option(
            help="on_demand, spot, reserved_1y, reserved_3y, capacity_block, onprem.")]
        = None,
        budget: Annotated[str | None, typer.Option(help="Budget amount, e.g. 2500000.")]
        = None,
        currency: Annotated[str, typer.Option(help="Budget currency.")] = "USD",
        deadline_days: Annotated[float | None, typer.Option(help="Wall-clock limit.")]
        = None,
        idempotency_key: Annotated[str | None, typer.Option(
            help="Retry-safe key; default a new random one.")] = None,
        accounting: Accounting = None, utilisation: Utilisation = None,
        policy: PolicyOption = None, fail_on: FailOnOption = None,
        request: RequestFile = None, api: ApiUrl = DEFAULT_API_URL, api_key: ApiKey = None,
        local: Local = False, as_json: AsJson = False, output_format: Format = None,
    ) -> None:
        """Price a workload against every matching offer, check the budget, store the quote.

        Exit 0, or 1 for a problem, 2 when unreachable, 3 reject and 4 warn (--fail-on)."""
        output = _output(output_format, as_json)
        body = _load(request)
        if gpu_hours is not None:
            body["workload"] = {"gpu_hours": {"accelerator": accelerator, "gpu_hours": gpu_hours,
                                              "num_gpus": gpus}}
        elif model or accelerator or gpus or tokens or "workload" not in body:
            workload = body.setdefault("workload", {}).setdefault("optimise", {})
            _put_model_and_training(workload, model, tokens, seq_len, global_batch)
            if accelerator or gpus:
                workload["clusters"] = [{"accelerator": accelerator, "num_gpus": gpus}]
            _defaults(workload)
        _put(body, "providers", provider)
        _put(body, "terms", term)
        _put_budget_and_deadline(body, budget, currency, deadline_days)
        _put_accounting(body, accounting, utilisation, policy)
        _post_quote(body, idempotency_key, api, api_key, local, output, fail_on)


def register_quotes(app: typer.Typer) -> None:
    quotes_app = typer.Typer(help="Stored quotes: get, verify, requote, diff.",
                             no_args_is_help=True, rich_markup_mode=None)
    app.add_typer(quotes_app, name="quotes")

    @quotes_app.command("get")
    @handled
    def get(
        quote_id: QuoteId, fail_on: FailOnOption = None,
        api: ApiUrl = DEFAULT_API_URL, api_key: ApiKey = None, local: Local = False,
        as_json: AsJson = False, output_format: Format = None,
    ) -> None:
        """A stored quote, as stored (json), as a table or as Markdown; --fail-on gates it."""
        output = _output(output_format, as_json)
        with connect(api, api_key, local) as client:
            answer = client.call("GET", f"/v1/quotes/{quote_id}").json()
        _emit_quote(answer, output, fail_on)

    @quotes_app.command("verify")
    @handled
    def verify(
        quote_id: QuoteId, api: ApiUrl = DEFAULT_API_URL, api_key: ApiKey = None,
        local: Local = False, as_json: AsJson = False, output_format: Format = None,
    ) -> None:
        """Recompute a stored quote (same catalogue and policy); exit 5 if anything differs."""
        output = _output(output_format, as_json, (OutputFormat.json, OutputFormat.table))
        with connect(api, api_key, local) as client, working("recomputing"):
            answer = client.call("POST", f"/v1/quotes/{quote_id}/verify").json()
        _emit(answer, output is OutputFormat.json,
              functools.partial(render_verify, quote_id=quote_id))
        if not answer["matches"]:
            raise typer.Exit(code=report.EXIT_MISMATCH)

    @quotes_app.command("requote")
    @handled
    def requote(
        quote_id: QuoteId,
        idempotency_key: Annotated[str | None, typer.Option(
            help="Retry-safe key; default a new random one.")] = None,
        fail_on: FailOnOption = None,
        api: ApiUrl = DEFAULT_API_URL, api_key: ApiKey = None, local: Local = False,
        as_json: AsJson = False, output_format: Format = None,
    ) -> None:
        """Price a stored quote's request again on today's catalogue, as a new linked quote."""
        output = _output(output_format, as_json)
        key = idempotency_key or uuid.uuid4().hex
        with connect(api, api_key, local) as client, working("pricing"):
            answer = client.call("POST", f"/v1/quotes/{quote_id}/requote",
                                 headers={"Idempotency-Key": key}).json()
        _emit_quote(answer, output, fail_on)

    @quotes_app.command("diff")
    @handled
    def diff(
        first: Annotated[str, typer.Argument(help="The older quote's id.")],
        second: Annotated[str, typer.Argument(help="The newer quote's id.")],
        show_all: Annotated[bool, typer.Option("--all", help="Show unchanged lines too.")]
        = False,
        api: ApiUrl = DEFAULT_API_URL, api_key: ApiKey = None, local: Local = False,
        as_json: AsJson = False, output_format: Format = None,
    ) -> None:
        """What changed between two quotes: versions, policy, verdict and every line."""
        output = _output(output_format, as_json)
        with connect(api, api_key, local) as client:
            a = client.call("GET", f"/v1/quotes/{first}").json()
            b = client.call("GET", f"/v1/quotes/{second}").json()
            changes = report.diff_quotes(a, b, _all_lines(client, first),
                                         _all_lines(client, second))
        if output is OutputFormat.json:
            sys.stdout.write(json.dumps(changes, indent=2) + "\n")
        elif output is OutputFormat.markdown:
            sys.stdout.write(report.diff_markdown(changes, show_unchanged=show_all))
        else:
            render_diff(changes, show_all)
