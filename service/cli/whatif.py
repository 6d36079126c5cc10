"""``cq what-if``: variations of one training estimate side by side (``POST /v1/what-ifs``).

The base is an estimate body (``--request FILE`` and/or ``cq estimate``'s workload flags); each
``--set`` is one variation, ``PATH=VALUE`` pairs joined by ``;`` (``--set
'cluster.num_gpus=2048;parallelism.dp=64'``), a VALUE read as JSON where it is JSON and as a
string otherwise (``--set parallelism.recompute=full``); ``--variations FILE`` adds a JSON list
of variations (``{"name": ..., "set": {...}}`` or a bare ``{path: value}`` mapping). The table
lists the variations in the order given, with the ranking by the change in training time under
it.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any

import typer

from service.api import presentation as fmt
from service.cli import tables as tb
from service.cli.client import DEFAULT_API_URL, connect
from service.cli.common import (
    Accelerator,
    ApiKey,
    ApiUrl,
    AsJson,
    Batch,
    Format,
    Gpus,
    Local,
    Model,
    RequestFile,
    SeqLen,
    Tokens,
    _defaults,
    _emit,
    _load,
    _output,
    _price,
    _put,
    _put_model_and_training,
    _table,
    handled,
    labelled,
    out,
)
from service.cli.report import OutputFormat

SetOption = Annotated[list[str] | None, typer.Option(
    "--set", help="One variation: PATH=VALUE pairs joined by ';', e.g. "
                  "'cluster.num_gpus=2048;parallelism.dp=64'. Repeat for more.")]
VariationsFile = Annotated[Path | None, typer.Option(
    "--variations", exists=True, dir_okay=False, readable=True,
    help="A JSON list of variations: {\"name\": ..., \"set\": {path: value}} or {path: value}.")]


def _value(text: str) -> Any:
    """A --set value: JSON where it parses (2048, 1.25e10, true, null, "x"), else the text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_set(text: str) -> dict[str, Any]:
    """'a.b=1;c=x' -> {"a.b": 1, "c": "x"}."""
    changes: dict[str, Any] = {}
    for pair in (p.strip() for p in text.split(";")):
        path, equals, value = pair.partition("=")
        if not pair or not equals or not path.strip():
            raise typer.BadParameter(f"{pair!r}: use PATH=VALUE, e.g. cluster.num_gpus=2048",
                                     param_hint="--set")
        changes[path.strip()] = _value(value.strip())
    return changes


def _variations_file(path: Path) -> list[dict[str, Any]]:
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise typer.BadParameter(f"{path}: not a JSON file ({exc})",
                                 param_hint="--variations") from None
    if not isinstance(loaded, list) or not all(isinstance(v, dict) for v in loaded):
        raise typer.BadParameter(f"{path}: must hold a JSON list of objects",
                                 param_hint="--variations")
    return [v if "set" in v else {"set": v} for v in loaded]


def _signed_percent(fraction: float | None) -> str:
    return "—" if fraction is None else f"{fraction * 100:+.1f}%"


def _signed_money(amount: str | None) -> str:
    if amount is None:
        return "—"
    text = fmt.money(amount, "USD").removesuffix(" USD")
    return text if Decimal(amount) < 0 else "+" + text


def render_what_if(answer: dict[str, Any]) -> None:
    base = answer["base"]
    priced = base["cost_usd"] is not None
    rows = [("training time", fmt.duration(base["train_s"])),
            ("throughput", f"{fmt.number(base['tokens_per_s'])} tokens/s"),
            ("step time", fmt.duration(base["step_s"])),
            ("GPU-hours", fmt.number(base["gpu_hours"])),
            ("MFU", fmt.percent(base["mfu_fraction"])),
            ("communication", f"{fmt.percent(base['comm_fraction'])} of the step"),
            ("fits", "yes" if base["fits"] else "NO: over the GPU's memory")]
    if priced:
        rows.insert(4, ("cost", f"{fmt.money(base['cost_usd'])} at "
                                f"{fmt.money(answer['price_per_gpu_hour_usd'])} per GPU-hour"))
    figures = _table("Base", [tb.Col("figure", max_width=20), tb.num("value")])
    for name, value in rows:
        figures.add_row(name, value)
    out.print(figures)
    columns: list[tb.Col | str] = [
        tb.num("#"), tb.Col("variation", max_width=32), tb.num("Δ tok/s"), tb.num("time"),
        tb.num("Δ time"), tb.num("comm"), tb.num("Δ cost\nUSD" if priced else "fits")]
    table = _table("Variations", columns)
    errors: list[tuple[int, str]] = []
    for row in answer["variations"]:
        figures_of, change = row["summary"], row["delta"]
        if figures_of is None or change is None:
            detail = row["error"]["detail"] if row.get("error") else "no answer"
            errors.append((row["index"], detail))
            table.add_row(str(row["index"]), row["name"], "—", "error", "—", "—", "—")
            continue
        last = (_signed_money(change["cost_usd"]) if priced
                else "yes" if figures_of["fits"] else "NO")
        table.add_row(str(row["index"]), row["name"],
                      _signed_percent(change["tokens_per_s_fraction"]),
                      fmt.duration(figures_of["train_s"]),
                      _signed_percent(change["train_s_fraction"]),
                      fmt.percent(figures_of["comm_fraction"]), last)
    out.print(table)
    for index, detail in errors:
        out.print(labelled(f"variation {index}:", "yellow", detail))
    if answer["ranking"]:
        out.print("By |Δ time|: " + ", ".join(
            f"{r['index']} ({fmt.duration(abs(r['train_s_delta']))} "
            f"{'longer' if r['train_s_delta'] > 0 else 'shorter'})"
            for r in answer["ranking"]))


def register(app: typer.Typer) -> None:
    @app.command("what-if")
    @handled
    def what_if(
        sets: SetOption = None, variations: VariationsFile = None,
        model: Model = None, accelerator: Accelerator = None, gpus: Gpus = None,
        tokens: Tokens = None, seq_len: SeqLen = None, global_batch: Batch = None,
        tp: Annotated[int | None, typer.Option(help="Tensor-parallel size.")] = None,
        pp: Annotated[int | None, typer.Option(help="Pipeline stages.")] = None,
        dp: Annotated[int | None, typer.Option(help="Data-parallel size.")] = None,
        cp: Annotated[int | None, typer.Option(help="Context-parallel size.")] = None,
        price: Annotated[str | None, typer.Option(
            help="USD per GPU-hour: each answer's cost and its change.")] = None,
        request: RequestFile = None, api: ApiUrl = DEFAULT_API_URL, api_key: ApiKey = None,
        local: Local = False, as_json: AsJson = False, output_format: Format = None,
    ) -> None:
        """Variations of one training estimate (--set, --variations) beside it: the change
        in tokens/s, time, communication share and cost, ranked by the change in time."""
        output = _output(output_format, as_json, (OutputFormat.table, OutputFormat.json))
        base = _load(request)
        _put_model_and_training(base, model, tokens, seq_len, global_batch)
        for path, value in (("cluster.accelerator", accelerator), ("cluster.num_gpus", gpus),
                            ("parallelism.tp", tp), ("parallelism.pp", pp),
                            ("parallelism.dp", dp), ("parallelism.cp", cp)):
            _put(base, path, value)
        _defaults(base)
        listed: list[dict[str, Any]] = [{"set": parse_set(text)} for text in sets or []]
        if variations is not None:
            listed += _variations_file(variations)
        if not listed:
            raise typer.BadParameter("give at least one --set or --variations FILE",
                                     param_hint="--set")
        body: dict[str, Any] = {"base": base, "variations": listed}
        if price is not None:
            body["price_per_gpu_hour_usd"] = _price(price)
        with connect(api, api_key, local) as client:
            answer = client.call("POST", "/v1/what-ifs", json=body).json()
        _emit(answer, output is OutputFormat.json, render_what_if)
