"""``cq calibrate create|get|list``: calibrate the estimate on your own measured runs
(``POST /v1/calibrations``, issue 37; docs/calibrations.md).

``cq calibrate create runs.csv`` (or ``runs.json``). The CSV has one row per measured run: the
layout and ``step_time_s``. Columns (names as below; empty cells take the API's defaults):

- required: ``accelerator``, ``gpus``, ``seq_len``, ``global_batch``, ``step_time_s``, and
  either ``model`` (a preset of ``cq models``) or the architecture ``num_layers``,
  ``hidden_size``, ``num_heads``, ``num_kv_heads``, ``ffn_hidden_size`` (and ``vocab_size``);
- layout: ``tp``, ``pp``, ``dp``, ``cp``, ``ep``, ``vp``, ``micro_batch``, ``zero_stage``,
  ``recompute`` (none, selective, full), ``sequence_parallel`` (true/false), ``gpus_per_node``;
- stack: ``framework`` (megatron, torchtitan, fsdp, deepspeed, maxtext, unknown),
  ``framework_version``, ``precision`` (bf16, fp16, fp8), ``torch_compile`` (true/false);
- ``tokens`` (default 1e9: a run's length does not change its step).

The JSON file is either the request body (``{"name": ..., "runs": [...]}``) or its list of
runs. ``--megatron-log FILE --layout ROW.json`` instead reads the ``elapsed time per iteration
(ms)`` lines of a Megatron-LM training log and takes their median after the first
``--warmup`` iterations as the step time of the one layout given (an estimate body): the log
itself does not state every layout field, so the layout must come from you.
"""

from __future__ import annotations

import csv
import json
import re
import statistics
import uuid
from pathlib import Path
from typing import Annotated, Any

import typer

from service.cli.client import DEFAULT_API_URL, CliError, connect
from service.cli.common import (
    ApiKey,
    ApiUrl,
    AsJson,
    Local,
    _emit,
    handled,
    working,
)

INT_FIELDS = {"tp": "parallelism", "pp": "parallelism", "dp": "parallelism",
              "cp": "parallelism", "ep": "parallelism", "vp": "parallelism",
              "micro_batch": "parallelism", "zero_stage": "parallelism"}
ARCHITECTURE = ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "ffn_hidden_size",
                "vocab_size")
REQUIRED = ("accelerator", "gpus", "seq_len", "global_batch", "step_time_s")
KNOWN = {*REQUIRED, *INT_FIELDS, *ARCHITECTURE, "model", "recompute", "sequence_parallel",
         "gpus_per_node", "framework", "framework_version", "precision", "torch_compile",
         "tokens"}
MEGATRON_ITERATION = re.compile(r"elapsed time per iteration \(ms\):\s*([0-9.]+)")
"""Megatron-LM's training log line (megatron/training/training.py, training_log)."""


def _int(row: dict[str, str], name: str, line: int) -> int:
    try:
        return int(row[name])
    except ValueError:
        raise CliError(f"line {line}: {name} must be a whole number, not {row[name]!r}") from None


def _float(row: dict[str, str], name: str, line: int) -> float:
    try:
        return float(row[name])
    except ValueError:
        raise CliError(f"line {line}: {name} must be a number, not {row[name]!r}") from None


def _bool(row: dict[str, str], name: str, line: int) -> bool:
    value = row[name].strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise CliError(f"line {line}: {name} must be true or false, not {row[name]!r}")


def run_of_row(row: dict[str, str], line: int) -> dict[str, Any]:
    """One CSV row as a calibration run (``{"estimate": ..., "measured": ...}``)."""
    row = {k.strip(): (v or "").strip() for k, v in row.items() if k}
    unknown = sorted(set(row) - KNOWN)
    if unknown:
        raise CliError(f"line {line}: unknown column(s) {', '.join(unknown)}; the columns are "
                       f"{', '.join(sorted(KNOWN))}")
    missing = [name for name in REQUIRED if not row.get(name)]
    if missing:
        raise CliError(f"line {line}: {', '.join(missing)} must be given")
    given = {k: v for k, v in row.items() if v}
    if "model" in given:
        model: dict[str, Any] = {"preset": given["model"]}
    else:
        absent = [n for n in ARCHITECTURE[:5] if n not in given]
        if absent:
            raise CliError(f"line {line}: give model (a preset) or the architecture "
                           f"({', '.join(absent)} missing)")
        model = {n: _int(given, n, line) for n in ARCHITECTURE if n in given}
    cluster: dict[str, Any] = {"accelerator": given["accelerator"],
                               "num_gpus": _int(given, "gpus", line)}
    if "gpus_per_node" in given:
        cluster["gpus_per_node"] = _int(given, "gpus_per_node", line)
    parallelism: dict[str, Any] = {n: _int(given, n, line) for n in INT_FIELDS if n in given}
    for name in ("recompute",):
        if name in given:
            parallelism[name] = given[name]
    if "sequence_parallel" in given:
        parallelism["sequence_parallel"] = _bool(given, "sequence_parallel", line)
    training: dict[str, Any] = {
        "seq_len": _int(given, "seq_len", line),
        "global_batch_seqs": _int(given, "global_batch", line),
        "tokens": _float(given, "tokens", line) if "tokens" in given else 1e9}
    for name in ("framework", "framework_version", "precision"):
        if name in given:
            training[name] = given[name]
    if "torch_compile" in given:
        training["torch_compile"] = _bool(given, "torch_compile", line)
    return {"estimate": {"model": model, "cluster": cluster, "parallelism": parallelism,
                         "training": training},
            "measured": {"step_time_s": _float(given, "step_time_s", line)}}


def runs_of_csv(text: str) -> list[dict[str, Any]]:
    reader = csv.DictReader(text.splitlines())
    runs = [run_of_row(row, index + 2) for index, row in enumerate(reader)]
    if not runs:
        raise CliError("the CSV has no runs (a header line, then one row per run)")
    return runs


def body_of_file(path: Path, name: str | None) -> dict[str, Any]:
    """The request body from a .csv or .json file; ``name`` overrides or supplies its name."""
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".csv":
        body: dict[str, Any] = {"runs": runs_of_csv(text)}
    else:
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CliError(f"{path} is not JSON: {exc}") from None
        body = {"runs": parsed} if isinstance(parsed, list) else dict(parsed)
    body["name"] = name or body.get("name") or path.stem
    return body


def megatron_step_s(log_text: str, warmup: int) -> float:
    """The median of a Megatron-LM log's per-iteration times after ``warmup`` of them."""
    times = [float(m) / 1000.0 for m in MEGATRON_ITERATION.findall(log_text)]
    if len(times) <= warmup:
        raise CliError(f"the log has {len(times)} 'elapsed time per iteration (ms)' line(s); "
                       f"at least {warmup + 1} are needed after --warmup {warmup}")
    return statistics.median(times[warmup:])


def register(app: typer.Typer) -> None:
    calibrate_app = typer.Typer(help="Calibrate the estimate on your own measured runs.",
                                no_args_is_help=True, rich_markup_mode=None)
    app.add_typer(calibrate_app, name="calibrate")

    @calibrate_app.command("create")
    @handled
    def create(
        runs_file: Annotated[Path | None, typer.Argument(
            exists=True, dir_okay=False, readable=True,
            help="runs.csv (one row per run: the layout and step_time_s) or runs.json.")] = None,
        name: Annotated[str | None, typer.Option(help="The calibration's name (default: the "
                                                      "file's).")] = None,
        megatron_log: Annotated[Path | None, typer.Option(
            exists=True, dir_okay=False, readable=True,
            help="A Megatron-LM training log: its iteration times give one run's step.")]
        = None,
        layout: Annotated[Path | None, typer.Option(
            exists=True, dir_okay=False, readable=True,
            help="With --megatron-log: the run's layout as an estimate body (JSON).")] = None,
        warmup: Annotated[int, typer.Option(min=0, help="Log iterations to skip.")] = 10,
        idempotency_key: Annotated[str | None, typer.Option(
            help="Retry-safe key; default a new random one.")] = None,
        api: ApiUrl = DEFAULT_API_URL, api_key: ApiKey = None, local: Local = False,
        as_json: AsJson = False,
    ) -> None:
        """Fit your compute, communication and overhead factors on measured runs and store
        them; pass the id as calibration_id to estimates, plans and quotes."""
        if megatron_log is not None:
            if layout is None or runs_file is not None:
                raise typer.BadParameter("--megatron-log needs --layout and no runs file",
                                         param_hint="--layout")
            step = megatron_step_s(megatron_log.read_text(encoding="utf-8"), warmup)
            body: dict[str, Any] = {
                "name": name or megatron_log.stem,
                "runs": [{"estimate": json.loads(layout.read_text(encoding="utf-8")),
                          "measured": {"step_time_s": step}}]}
        elif runs_file is not None:
            body = body_of_file(runs_file, name)
        else:
            raise typer.BadParameter("give a runs file (.csv or .json) or --megatron-log",
                                     param_hint="RUNS_FILE")
        key = idempotency_key or uuid.uuid4().hex
        with connect(api, api_key, local) as client, working("calibrating"):
            answer = client.call("POST", "/v1/calibrations", json=body,
                                 headers={"Idempotency-Key": key}).json()
        _emit(answer, as_json, render)

    @calibrate_app.command("get")
    @handled
    def get(
        calibration_id: Annotated[str, typer.Argument(help="cal_ and 32 hex digits.")],
        api: ApiUrl = DEFAULT_API_URL, api_key: ApiKey = None, local: Local = False,
        as_json: AsJson = False,
    ) -> None:
        """A stored calibration, as first answered."""
        with connect(api, api_key, local) as client:
            answer = client.call("GET", f"/v1/calibrations/{calibration_id}").json()
        _emit(answer, as_json, render)


def render(answer: dict[str, Any]) -> None:
    loo = answer["leave_one_out"]
    print(f"{answer['id']}  '{answer['name']}' revision {answer['revision']}  "
          f"{answer['runs_used']} run(s)")
    for factor in answer["factors"]:
        low, high = factor["interval_80"]
        flag = "" if factor["informed"] else "  (not informed by these runs)"
        print(f"  {factor['name']:<14} x{factor['value']:.3f}  80% {low:.3f}-{high:.3f}  "
              f"share {factor['mean_share_fraction']:.0%}{flag}")
    print(f"  leave-one-out step error: median {loo['median_fraction']:.1%}, p90 "
          f"{loo['p90_fraction']:.1%}, max {loo['max_fraction']:.1%}; band covers "
          f"{loo['band_coverage_fraction']:.0%}")
    for band in answer["bands"]:
        print(f"  band ({band['regime']}): {band['low_fraction']:+.1%} to "
              f"{band['high_fraction']:+.1%}")
    print(f"  use it: \"calibration_id\": \"{answer['id']}\"")
