"""``cq portfolio create plan.yaml`` (``POST /v1/portfolios``): a commitment portfolio from a
YAML or JSON plan file, as a table, JSON or a Markdown decision memo, with the CI gate
(``--fail-on reject``: exit 3 when the plan's verdict is reject)."""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path
from typing import Annotated, Any

import typer

from service.cli.client import DEFAULT_API_URL, connect
from service.cli.common import (
    ApiKey,
    ApiUrl,
    AsJson,
    FailOnOption,
    Format,
    Local,
    _output,
    _table,
    err,
    handled,
    out,
    working,
)
from service.cli.report import EXIT_REJECT, FailOn, OutputFormat

PlanFile = Annotated[Path, typer.Argument(
    exists=True, dir_okay=False, readable=True,
    help="The portfolio request (POST /v1/portfolios body) as YAML or JSON.")]


def load_plan(path: Path) -> dict[str, Any]:
    """The plan file's body: JSON when it parses as JSON, else YAML (safe_load)."""
    import yaml  # only here: cq's other commands do not pay for it

    text = path.read_text()
    try:
        body = json.loads(text)
    except ValueError:
        try:
            body = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise typer.BadParameter(f"{path}: neither JSON nor YAML ({exc})",
                                     param_hint="PLAN") from None
    if not isinstance(body, dict):
        raise typer.BadParameter(f"{path}: the plan must be a mapping", param_hint="PLAN")
    return body


def memo(plan: dict[str, Any]) -> str:
    """The plan as a Markdown decision memo: verdict, totals against the baselines, what to
    buy, where each job runs, cash per month, and the solver's proof."""
    solver = plan.get("solver", {})
    totals = plan.get("totals", {})
    icon = "✅" if plan.get("verdict") == "approve" else "❌"
    lines = [f"## {icon} Portfolio {plan.get('name')}: {plan.get('verdict')}", ""]
    for reason in plan.get("reasons", []):
        lines.append(f"- **{reason.get('code')}** ({reason.get('period') or 'plan'}): "
                     f"{reason.get('message')}")
    gap = solver.get("gap_fraction")
    proof = ("proven optimal" if solver.get("optimal") else
             f"not proven optimal (gap {gap:.1%})" if isinstance(gap, float) else
             "not proven optimal")
    lines += ["", f"Total **{totals.get('objective_usd')} USD** ({plan.get('accounting')} "
              f"accounting), {proof}; solver {solver.get('engine')}, status "
              f"{solver.get('status')}, {solver.get('columns')} columns. Catalogue "
              f"{plan.get('catalog_version')}, estimator {plan.get('estimator_version')}, "
              f"policy {plan.get('policy', {}).get('name')}.", "",
              "| against | total (USD) |", "|---|---:|",
              f"| this plan | {totals.get('objective_usd')} |"]
    lines += [f"| {b['name']} | {b['total_usd']} |" for b in plan.get("baselines", [])]
    lines += ["", f"Billed in the horizon {totals.get('billed_in_horizon_usd')} USD, "
              f"committed beyond it {totals.get('billed_beyond_horizon_usd')} USD.", ""]
    if totals.get("objective_at_band_slow_end_usd") is not None:
        lines[-1:] = [f"At the slow end of the fleets' serving bands (their "
                      "replicas_at_band_slow_end, on this plan's commitments, then on "
                      f"demand or spot) {totals['objective_at_band_slow_end_usd']} USD.", ""]
    purchases = plan.get("purchases", [])
    lines += ["### Buy", ""]
    if purchases:
        lines += ["| term | provider | instance | region | count | from | to | USD |",
                  "|---|---|---|---|---:|---|---|---:|"]
        lines += [f"| {p['term']} | {p['provider']} | {p['instance_type']} | {p['region']} | "
                  f"{p['count']} | {p['start']} | {p['end']} | {p['commitment_usd']} |"
                  for p in purchases]
    else:
        lines.append("No commitments: on-demand and spot cost less.")
    lines += ["", "### Jobs", "", "| job | runs | on | from | to |", "|---|---|---|---|---|"]
    lines += [f"| {j['id']} | {'yes' if j['run'] else 'no: ' + j.get('code', '')} | "
              f"{j.get('pool', '')} ({j.get('mode', '')}) | {j.get('start', '')} | "
              f"{j.get('end', '')} |" for j in plan.get("jobs", [])]
    lines += ["", "### Cash per month", "", "| month | billed (USD) | effective (USD) |",
              "|---|---:|---:|"]
    lines += [f"| {m['month']} | {m['billed_cost_usd']} | {m['effective_cost_usd']} |"
              for m in plan.get("months", [])]
    return "\n".join(lines) + "\n"


def render(plan: dict[str, Any]) -> None:
    totals = plan.get("totals", {})
    solver = plan.get("solver", {})
    out.print(f"portfolio {plan.get('id')}: {plan.get('verdict')}, total "
              f"{totals.get('objective_usd')} USD, solver {solver.get('status')} (optimal "
              f"{solver.get('optimal')}, gap {solver.get('gap_fraction')})")
    table = _table("against the baselines", ["plan", "total (USD)"])
    table.add_row("this plan", str(totals.get("objective_usd")))
    for b in plan.get("baselines", []):
        table.add_row(b["name"], b["total_usd"])
    out.print(table)
    buy = _table("commitments", ["term", "provider", "instance", "region", "count", "from",
                                 "to"])
    for p in plan.get("purchases", []):
        buy.add_row(p["term"], p["provider"], p["instance_type"], p["region"],
                    str(p["count"]), p["start"], p["end"])
    out.print(buy)


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Commitment portfolios: plan a horizon of jobs and fleets.",
                        no_args_is_help=True, rich_markup_mode=None)
    app.add_typer(group, name="portfolio")

    @group.command("create")
    @handled
    def create(
        plan: PlanFile, fail_on: FailOnOption = None, api: ApiUrl = DEFAULT_API_URL,
        api_key: ApiKey = None, local: Local = False, as_json: AsJson = False,
        output_format: Format = None,
        idempotency_key: Annotated[str | None, typer.Option(
            "--idempotency-key", help="Default: a new random key.")] = None,
    ) -> None:
        """Solve and store a portfolio (POST /v1/portfolios); --format markdown writes a
        decision memo; --fail-on reject exits 3 when the verdict is reject."""
        output = _output(output_format, as_json)
        body = load_plan(plan)
        with connect(api, api_key, local) as client, working("solving"):
            answer = client.call("POST", "/v1/portfolios", json=body, headers={
                "Idempotency-Key": idempotency_key or uuid.uuid4().hex}).json()
        if output is OutputFormat.json:
            sys.stdout.write(json.dumps(answer, indent=2) + "\n")
        elif output is OutputFormat.markdown:
            sys.stdout.write(memo(answer))
        else:
            render(answer)
        if fail_on is not None and answer.get("verdict") == "reject":
            err.print(f"--fail-on {fail_on.value}: portfolio {answer.get('id')} is rejected; "
                      f"exit {EXIT_REJECT}", highlight=False)
            raise typer.Exit(code=EXIT_REJECT)


__all__ = ["FailOn", "load_plan", "memo", "register"]
