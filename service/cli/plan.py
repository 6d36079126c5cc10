"""``cq optimise``: the best parallelism plans for a training run
(``POST /v1/parallelism-plans``)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.text import Text

from service.api import presentation as fmt
from service.cli import tables as tb
from service.cli.client import DEFAULT_API_URL, connect
from service.cli.common import (
    Accelerator,
    ApiKey,
    ApiUrl,
    AsJson,
    Batch,
    GpuRange,
    Gpus,
    Local,
    Model,
    RequestFile,
    SeqLen,
    Tokens,
    _defaults,
    _emit,
    _gpu_range,
    _load,
    _put,
    _put_model_and_training,
    _table,
    handled,
    out,
    working,
)


def render_plans(answer: dict[str, Any]) -> None:
    plans = answer["plans"]
    search = answer["search"]
    accelerators = {p["accelerator"] for p in plans}
    batches = {p["global_batch_seqs"] for p in plans}
    costed = any(p.get("cost_usd") for p in plans)
    rows = fmt.fold_plans(plans)
    alike = sum(more for _, more in rows)
    title = (f"Best plans ({answer['objective']}): "
             f"{tb.shown_of(len(plans), search['feasible'], 'feasible plans')}"
             + (f", {alike} alike folded" if alike else "")
             + (f"; on {next(iter(accelerators))}" if len(accelerators) == 1 else ""))
    columns: list[tb.Col | str] = [
        tb.num("#"), *(["accelerator"] if len(accelerators) > 1 else []), tb.num("GPUs"),
        tb.Col("layout", max_width=24), *([tb.num("batch")] if len(batches) > 1 else []),
        tb.num("time"), tb.num("GPU-hours"), tb.num("MFU"), tb.num("mem/GPU"),
        *([tb.num("cost USD")] if costed else [])]
    table = _table(title, columns)
    for plan, more in rows:
        figures = fmt.plan_figures(plan)
        table.add_row(str(plan["rank"]),
                      *([plan["accelerator"]] if len(accelerators) > 1 else []),
                      f"{plan['num_gpus']:,}",
                      fmt.layout(plan["parallelism"], short=True)
                      + (f" (+{more} alike)" if more else ""),
                      *([str(plan["global_batch_seqs"])] if len(batches) > 1 else []),
                      *figures[3:7],
                      *([tb.amount(plan["cost_usd"], "USD", "USD") if plan["cost_usd"]
                         else "—"] if costed else []))
    out.print(table)
    out.print(Text.assemble(
        f"{search['candidates_evaluated']:,} layouts evaluated in "
        f"{fmt.duration(search['elapsed_s'])}; {search['feasible']:,} feasible; "
        f"Pareto front: {len(answer['pareto'])} plans",
        *([("; truncated at the deadline", "yellow")] if search["truncated"] else [])))


def register(app: typer.Typer) -> None:
    @app.command()
    @handled
    def optimise(
        model: Model = None, accelerator: Accelerator = None, gpus: Gpus = None,
        gpus_range: GpuRange = None, tokens: Tokens = None, seq_len: SeqLen = None,
        global_batch: Batch = None,
        objective: Annotated[str | None, typer.Option(
            help="time, gpu_hours, cost, energy, carbon or pareto.")] = None,
        top_k: Annotated[int | None, typer.Option(help="Plans to return.")] = None,
        price: Annotated[str | None, typer.Option(
            help="USD per GPU-hour, to rank by cost.")] = None,
        request: RequestFile = None, api: ApiUrl = DEFAULT_API_URL, api_key: ApiKey = None,
        local: Local = False, as_json: AsJson = False,
    ) -> None:
        """Search TP/PP/DP/CP/EP, micro-batch, ZeRO and recomputation for the best plans."""
        body = _load(request)
        _put_model_and_training(body, model, tokens, seq_len, global_batch)
        _put(body, "objective", objective)
        _put(body, "top_k", top_k)
        _put(body, "constraints.price_per_gpu_hour_usd", price)
        if gpus_range or gpus or accelerator:
            cluster: dict[str, Any] = dict(body.get("cluster") or {})
            _put(cluster, "accelerator", accelerator)
            if gpus_range:
                cluster.pop("num_gpus", None)
                cluster["num_gpus_range"] = _gpu_range(gpus_range)
            elif gpus:
                cluster.pop("num_gpus_range", None)
                cluster["num_gpus"] = gpus
            body.pop("clusters", None)
            body["cluster"] = cluster
        _defaults(body)
        with connect(api, api_key, local) as client, working("searching layouts"):
            answer = client.call("POST", "/v1/parallelism-plans", json=body).json()
        _emit(answer, as_json, render_plans)
