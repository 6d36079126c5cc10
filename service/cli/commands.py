"""``cq estimate|optimise|quote|budget-plan|offers|catalog|serve``: the API from a terminal.

Every command builds the same JSON body the API takes (from flags, or ``--request FILE``),
sends it (``--api URL`` or ``--local``), and prints a table, or the raw answer with ``--json``.
"""

from __future__ import annotations

import functools
import json
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from service.api import presentation as fmt
from service.cli.client import DEFAULT_API_URL, ApiProblemError, CliError, connect

ApiUrl = Annotated[str, typer.Option("--api", envvar="CQ_API_URL", show_default=True,
                                     help="The service's base URL.")]
ApiKey = Annotated[str | None, typer.Option("--api-key", envvar="CQ_API_KEY",
                                            help="API key for writes (env CQ_API_KEY).")]
Local = Annotated[bool, typer.Option("--local", help="Run in process on the local database "
                                     "(CQ_DATABASE_URL or the embedded SQLite), no server.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print the API's JSON answer.")]
RequestFile = Annotated[Path | None, typer.Option(
    "--request", exists=True, dir_okay=False, readable=True,
    help="A JSON request body; flags given as well override its fields.")]
Model = Annotated[str | None, typer.Option("--model", help="Model preset, e.g. llama3.1-70b "
                                           "(cq models lists them).")]
Accelerator = Annotated[str | None, typer.Option("--accelerator",
                                                 help="Accelerator id, e.g. h100-sxm5-80gb.")]
Gpus = Annotated[int | None, typer.Option("--gpus", help="GPUs in the job.")]
Tokens = Annotated[float | None, typer.Option("--tokens", help="Training tokens, e.g. 15e12.")]
SeqLen = Annotated[int | None, typer.Option("--seq-len", help="Sequence length (tokens).")]
Batch = Annotated[int | None, typer.Option("--global-batch",
                                           help="Global batch, in sequences.")]
GpuRange = Annotated[str | None, typer.Option(
    "--gpus-range", help="START:STOP:STEP GPU counts to sweep, e.g. 512:4096:512.")]

# Piped output is not cut to 80 columns: tables stay one row per line for grep and logs.
out = Console() if sys.stdout.isatty() else Console(width=200)
err = Console(stderr=True)


def _load(request: Path | None) -> dict[str, Any]:
    if request is None:
        return {}
    try:
        body = json.loads(request.read_text())
    except (OSError, ValueError) as exc:
        raise typer.BadParameter(f"{request}: not a JSON file ({exc})",
                                 param_hint="--request") from None
    if not isinstance(body, dict):
        raise typer.BadParameter(f"{request}: must hold a JSON object", param_hint="--request")
    return body


def _put(body: dict[str, Any], path: str, value: Any) -> None:
    """Sets body[a][b]... = value for a dotted path when value is given."""
    if value is None:
        return
    *parents, leaf = path.split(".")
    node = body
    for name in parents:
        node = node.setdefault(name, {})
    node[leaf] = value


def _put_model_and_training(body: dict[str, Any], model: str | None, tokens: float | None,
                            seq_len: int | None, global_batch: int | None) -> None:
    _put(body, "model", _model(model))
    _put(body, "training.tokens", tokens)
    _put(body, "training.seq_len", seq_len)
    _put(body, "training.global_batch_seqs", global_batch)


def _put_budget_and_deadline(body: dict[str, Any], budget: str | None, currency: str,
                             deadline_days: float | None) -> None:
    if budget is not None:
        body["budget"] = {"amount": budget, "currency": currency}
    _put(body, "deadline_s", None if deadline_days is None else deadline_days * fmt.DAY_S)


def _gpu_range(text: str) -> dict[str, int]:
    try:
        start, stop, step = (int(x) for x in text.split(":"))
    except ValueError:
        raise typer.BadParameter("use START:STOP:STEP, e.g. 512:4096:512",
                                 param_hint="--gpus-range") from None
    return {"start": start, "stop": stop, "step": step}


def _model(model: str | None) -> dict[str, Any] | None:
    return {"preset": model} if model else None


@contextmanager
def working(label: str) -> Iterator[None]:
    """A progress bar with elapsed time on a terminal; nothing when piped."""
    if not err.is_terminal:
        yield
        return
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                  TimeElapsedColumn(), console=err, transient=True) as progress:
        progress.add_task(label, total=None)
        yield


def _emit(answer: Any, as_json: bool, render: Callable[[Any], None]) -> None:
    if as_json:
        sys.stdout.write(json.dumps(answer, indent=2) + "\n")
    else:
        render(answer)


def _figures_table(title: str, rows: list[tuple[str, str]]) -> Table:
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("figure", style="bold")
    table.add_column("value")
    for name, value in rows:
        table.add_row(name, value)
    return table


def render_estimate(answer: dict[str, Any]) -> None:
    out.print(_figures_table("Estimate", fmt.estimate_figures(answer)))
    step = answer["time"]["step_s"]
    parts = Table("step time part", "time", "share", title="Step time", title_justify="left")
    for label, seconds in fmt.step_parts(answer):
        parts.add_row(label, fmt.duration(seconds), fmt.percent(seconds / step))
    out.print(parts)
    memory = Table("memory part", "per GPU", title="Memory per GPU", title_justify="left")
    for label, size in fmt.memory_parts(answer):
        memory.add_row(label, fmt.gib(size))
    memory.add_row("capacity", fmt.gib(answer["memory"]["capacity_bytes_per_gpu"]))
    out.print(memory)
    for warning in answer.get("warnings", []):
        out.print(f"[yellow]warning:[/] {warning}")


def render_plans(answer: dict[str, Any]) -> None:
    table = Table("#", "accelerator", "GPUs", "layout", "batch", "time", "GPU-hours", "MFU",
                  "memory/GPU", "cost", title=f"Best plans ({answer['objective']})",
                  title_justify="left")
    for plan in answer["plans"]:
        table.add_row(str(plan["rank"]), plan["accelerator"], f"{plan['num_gpus']:,}",
                      fmt.layout(plan["parallelism"], short=True),
                      str(plan["global_batch_seqs"]),
                      fmt.duration(plan["time"]["train_s"]),
                      fmt.number(plan["time"]["gpu_hours"]),
                      fmt.percent(plan["time"]["mfu_fraction"]),
                      fmt.gib(plan["memory"]["peak_bytes_per_gpu"]),
                      fmt.money(plan["cost_usd"]) if plan["cost_usd"] else "—")
    out.print(table)
    search = answer["search"]
    out.print(f"{search['candidates_evaluated']:,} layouts evaluated in "
              f"{fmt.duration(search['elapsed_s'])}; {search['feasible']:,} feasible; "
              f"Pareto front: {len(answer['pareto'])} plans"
              + ("; [yellow]truncated at the deadline[/]" if search["truncated"] else ""))


def _lines_table(title: str, lines: list[dict[str, Any]]) -> Table:
    table = Table("term", "where", "GPUs", "wall-clock", "total", "within budget", "flags",
                  title=title, title_justify="left")
    for line in lines:
        budget = {True: "yes", False: "no", None: "—"}[line.get("within_budget")]
        total = (fmt.money(line["total"], line["currency"]) if line["feasible"]
                 else f"infeasible: {line['infeasible_reason']}")
        table.add_row(line["term"], fmt.line_where(line), f"{line['num_gpus']:,}",
                      fmt.duration(line.get("wall_clock_s")), total, budget,
                      ", ".join(line.get("flags") or []))
    return table


def render_quote(answer: dict[str, Any]) -> None:
    per_term = list(answer["cheapest_per_term"].values())
    out.print(_lines_table(f"Quote {answer['id']} — cheapest per term", per_term))
    summary = answer["summary"]
    out.print(f"{summary['lines']} lines ({summary['feasible_lines']} feasible); totals from "
              f"{fmt.money(summary['min_total'], summary['currency'])} to "
              f"{fmt.money(summary['max_total'], summary['currency'])}")
    verdict = answer.get("verdict")
    if verdict:
        colour = "green" if verdict == "approve" else "red"
        out.print(f"verdict: [bold {colour}]{verdict}[/]")
    for reason in answer.get("reasons", []):
        out.print(f"  · {reason}")
    out.print(f"catalogue {answer['catalog_version']}; stored as /v1/quotes/{answer['id']}")


def render_budget_plan(answer: dict[str, Any]) -> None:
    out.print(_lines_table("Soonest within budget", answer["soonest_within_budget"][:10]))
    out.print(_lines_table("Cheapest before the deadline",
                           answer["cheapest_before_deadline"][:10]))


def handled(function: Callable[..., None]) -> Callable[..., None]:
    """Problems and connection errors become a short message and a non-zero exit, never a
    traceback: 1 for a problem the service answered, 2 for anything else."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            function(*args, **kwargs)
        except ApiProblemError as problem:
            err.print(f"[bold red]{problem.status} {problem.title}:[/] {problem.detail}",
                      highlight=False)
            for error in problem.errors:
                where = error.get("field") or error.get("loc") or ""
                err.print(f"  · {where}: {error.get('message') or error.get('msg') or ''}",
                          highlight=False)
            raise typer.Exit(code=1) from None
        except CliError as exc:
            err.print(f"[bold red]error:[/] {exc}", highlight=False)
            raise typer.Exit(code=2) from None

    return wrapper


def register(app: typer.Typer) -> None:
    @app.command()
    @handled
    def estimate(
        model: Model = None, accelerator: Accelerator = None, gpus: Gpus = None,
        tokens: Tokens = None, seq_len: SeqLen = None, global_batch: Batch = None,
        tp: Annotated[int | None, typer.Option(help="Tensor-parallel size.")] = None,
        pp: Annotated[int | None, typer.Option(help="Pipeline stages.")] = None,
        dp: Annotated[int | None, typer.Option(help="Data-parallel size.")] = None,
        cp: Annotated[int | None, typer.Option(help="Context-parallel size.")] = None,
        micro_batch: Annotated[int | None, typer.Option(help="Sequences per micro-batch.")]
        = None,
        zero: Annotated[int | None, typer.Option(help="ZeRO stage (3 = FSDP).")] = None,
        recompute: Annotated[str | None, typer.Option(help="none, selective or full.")]
        = None,
        request: RequestFile = None, api: ApiUrl = DEFAULT_API_URL, api_key: ApiKey = None,
        local: Local = False, as_json: AsJson = False,
    ) -> None:
        """Time, memory, MFU, GPU-hours and energy of one training run on one layout."""
        body = _load(request)
        _put_model_and_training(body, model, tokens, seq_len, global_batch)
        for path, value in (("cluster.accelerator", accelerator), ("cluster.num_gpus", gpus),
                            ("parallelism.tp", tp), ("parallelism.pp", pp),
                            ("parallelism.dp", dp), ("parallelism.cp", cp),
                            ("parallelism.micro_batch", micro_batch),
                            ("parallelism.zero_stage", zero),
                            ("parallelism.recompute", recompute)):
            _put(body, path, value)
        _defaults(body)
        with connect(api, api_key, local) as client:
            answer = client.call("POST", "/v1/estimates", json=body).json()
        _emit(answer, as_json, render_estimate)

    @app.command()
    @handled
    def optimise(
        model: Model = None, accelerator: Accelerator = None, gpus: Gpus = None,
        gpus_range: GpuRange = None, tokens: Tokens = None, seq_len: SeqLen = None,
        global_batch: Batch = None,
        objective: Annotated[str | None, typer.Option(
            help="time, gpu_hours, cost, energy or pareto.")] = None,
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
        request: RequestFile = None, api: ApiUrl = DEFAULT_API_URL, api_key: ApiKey = None,
        local: Local = False, as_json: AsJson = False,
    ) -> None:
        """Price a workload against every matching offer, check the budget, store the quote."""
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
        key = idempotency_key or uuid.uuid4().hex
        with connect(api, api_key, local) as client, working("pricing"):
            answer = client.call("POST", "/v1/quotes", json=body,
                                 headers={"Idempotency-Key": key}).json()
        _emit(answer, as_json, render_quote)

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
        request: RequestFile = None, api: ApiUrl = DEFAULT_API_URL, api_key: ApiKey = None,
        local: Local = False, as_json: AsJson = False,
    ) -> None:
        """The soonest plans within a budget and the cheapest before a deadline."""
        body = _load(request)
        _put_model_and_training(body, model, tokens, seq_len, global_batch)
        if accelerator:
            cluster: dict[str, Any] = {"accelerator": accelerator}
            if gpus_range:
                cluster["num_gpus_range"] = _gpu_range(gpus_range)
            else:
                cluster["num_gpus"] = gpus
            body["clusters"] = [cluster]
        _put_budget_and_deadline(body, budget, currency, deadline_days)
        _defaults(body)
        with connect(api, api_key, local) as client, working("sweeping plans and offers"):
            answer = client.call("POST", "/v1/budget-plans", json=body).json()
        _emit(answer, as_json, render_budget_plan)

    @app.command()
    @handled
    def offers(
        accelerator: Accelerator = None,
        provider: Annotated[str | None, typer.Option(help="Provider id, e.g. aws.")] = None,
        region: Annotated[str | None, typer.Option(help="Region id.")] = None,
        term: Annotated[str | None, typer.Option(help="on_demand, spot, reserved_1y, ...")]
        = None,
        version: Annotated[str | None, typer.Option(help="Catalogue version (default "
                                                    "current).")] = None,
        limit: Annotated[int, typer.Option(help="Offers to show.", min=1, max=200)] = 20,
        api: ApiUrl = DEFAULT_API_URL, api_key: ApiKey = None, local: Local = False,
        as_json: AsJson = False,
    ) -> None:
        """Price offers, cheapest per GPU-hour first."""
        params = {"accelerator": accelerator, "provider": provider, "region": region,
                  "term": term, "version": version, "page_size": limit}
        with connect(api, api_key, local) as client:
            answer = client.call("GET", "/v1/offers", params=params).json()

        def render(page: dict[str, Any]) -> None:
            table = Table("offer", "provider", "region", "instance", "accelerator", "GPUs",
                          "term", "per hour", "as of", "flags", title="Offers",
                          title_justify="left")
            for o in page["items"]:
                table.add_row(o["id"], o["provider"], o["region"], o["instance_type"],
                              o["accelerator"], str(o["gpus_per_instance"]), o["term"],
                              fmt.money(o["price_per_hour"], o["currency"]), o["as_of"],
                              ", ".join(f["flag"] if isinstance(f, dict) else str(f)
                                        for f in o.get("quality_flags") or []))
            out.print(table)
            if page.get("next_page_token"):
                out.print("more offers match; narrow the filters or raise --limit")

        _emit(answer, as_json, render)

    @app.command()
    @handled
    def serve(
        host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
        port: Annotated[int, typer.Option(help="Port.")] = 8000,
    ) -> None:
        """Migrate and seed the database, then run the service (like make run)."""
        import uvicorn

        from service.catalog.migrate import migrate_and_seed
        from service.settings import Settings

        migrate_and_seed(Settings().resolved_database_url)
        uvicorn.run("service.main:create_app", factory=True, host=host, port=port,
                    access_log=False)


def _defaults(body: dict[str, Any]) -> None:
    """Only seq_len and the batch get defaults here (Llama 3's 8,192 tokens and 512
    sequences); any other missing field is left for the API to name in its problem."""
    if "training" in body or "model" in body:
        training = body.setdefault("training", {})
        training.setdefault("seq_len", 8192)
        training.setdefault("global_batch_seqs", 512)


def register_catalog(catalog_app: typer.Typer) -> None:
    @catalog_app.command("versions")
    @handled
    def versions(api: ApiUrl = DEFAULT_API_URL, api_key: ApiKey = None, local: Local = False,
                 as_json: AsJson = False) -> None:
        """Catalogue versions, newest first."""
        with connect(api, api_key, local) as client:
            answer = client.call("GET", "/v1/catalog/versions",
                                 params={"page_size": 100}).json()

        def render(page: dict[str, Any]) -> None:
            table = Table("version", "created", "by", "kind", "offers", "note",
                          title="Catalogue versions", title_justify="left")
            for v in page["items"]:
                table.add_row(v["id"], v["created_at"], v["created_by"], v["kind"],
                              str(v.get("offer_count", "")), v.get("note") or "")
            out.print(table)

        _emit(answer, as_json, render)

    @catalog_app.command("export")
    @handled
    def export(
        version: Annotated[str | None, typer.Option(help="Version id (default current).")]
        = None,
        export_format: Annotated[str, typer.Option("--format", help="csv or json.")] = "csv",
        output: Annotated[Path | None, typer.Option("--output", "-o", dir_okay=False,
                                                    help="File (default stdout).")] = None,
        api: ApiUrl = DEFAULT_API_URL, api_key: ApiKey = None, local: Local = False,
    ) -> None:
        """Write a catalogue version as CSV or JSON (imports read it back byte for byte)."""
        with connect(api, api_key, local) as client:
            current = version or client.call("GET", "/v1/catalog/versions",
                                             params={"page_size": 1}).json()["items"][0]["id"]
            data = client.call("GET", f"/v1/catalog/versions/{current}/export",
                               params={"format": export_format}).content
        if output is None:
            sys.stdout.buffer.write(data)
        else:
            output.write_bytes(data)
            err.print(f"wrote {current} to {output} ({len(data):,} bytes)")

    @catalog_app.command("import")
    @handled
    def import_(
        file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True,
                                             help="A CSV or JSON file of offers.")],
        mode: Annotated[str, typer.Option(help="replace (the file is the catalogue) or patch "
                                          "(upsert these offers).")] = "patch",
        note: Annotated[str | None, typer.Option(help="Why; kept on the version.")] = None,
        api: ApiUrl = DEFAULT_API_URL, api_key: ApiKey = None, local: Local = False,
        as_json: AsJson = False,
    ) -> None:
        """Import offers as a new catalogue version (all or nothing)."""
        media = "text/csv" if file.suffix.lower() == ".csv" else "application/json"
        with connect(api, api_key, local) as client:
            answer = client.call("POST", "/v1/catalog/imports", content=file.read_bytes(),
                                 params={"mode": mode, "note": note},
                                 headers={"Content-Type": media}).json()

        def render(v: dict[str, Any]) -> None:
            out.print(f"created catalogue version [bold]{v['id']}[/] "
                      f"({v.get('offer_count', '?')} offers)")

        _emit(answer, as_json, render)
