"""``cq estimate|optimise|quote|budget-plan|serve-estimate|serve-plan|serve-quote|offers|models|
accelerators|catalog|quotes|serve``: the API from a terminal.

Every command builds the same JSON body the API takes (from flags, or ``--request FILE``),
sends it (``--api URL`` or ``--local``), and prints a table, or the raw answer with ``--json``.
Quotes also print Markdown (``--format markdown``) and gate CI jobs (``--fail-on``): exit 3
when the verdict is reject, 4 when the policy warned (see ``service/cli/report.py``). Tables
are built by ``service/cli/tables.py`` to stay legible at 80 columns; with ``--json`` an error
is JSON on stdout too.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import sys
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console, ConsoleDimensions
from rich.table import Table
from rich.text import Text

from service.api import presentation as fmt
from service.cli import report
from service.cli import tables as tb
from service.cli.client import (
    DEFAULT_API_URL,
    Api,
    ApiProblemError,
    CliError,
    _httpx,
    connect,
)
from service.cli.report import FailOn, OutputFormat

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
Format = Annotated[OutputFormat | None, typer.Option(
    "--format", help="json (the API's answer, like --json), table (default) or markdown "
                     "(a pull-request comment).")]
FailOnOption = Annotated[FailOn | None, typer.Option(
    "--fail-on", help="CI gate: exit 3 when the verdict is reject (reject or warn); exit 4 "
                      "when the policy only warned (warn). The output is printed first.")]
Accounting = Annotated[str | None, typer.Option(
    "--accounting", help="commitment (default: cash signed for) or amortised (the job's "
                         "share; needs --utilisation).")]
Utilisation = Annotated[str | None, typer.Option(
    "--utilisation", help="reservation_utilisation_fraction in (0, 1], e.g. 0.7; implies "
                          "--accounting amortised.")]
PolicyOption = Annotated[str | None, typer.Option(
    "--policy", help="A stored policy's name to judge by (default: the server's).")]

class WeightPrecision(StrEnum):
    """service/core/serving.py's closed sets, repeated here so that ``cq --help`` does not
    import the core (a test keeps the two equal)."""

    bf16 = "bf16"
    fp8 = "fp8"
    int4 = "int4"


class KvPrecision(StrEnum):
    bf16 = "bf16"
    fp8 = "fp8"


class Engine(StrEnum):
    vllm = "vllm"
    sglang = "sglang"
    trtllm = "trtllm"
    unknown = "unknown"


class TrafficMode(StrEnum):
    offline = "offline"
    fixed_batch = "fixed_batch"
    online = "online"


EngineOption = Annotated[Engine | None, typer.Option(
    help="Serving engine, each with its documented efficiency (docs/serving.md); the API's "
         "default: unknown, the most conservative.")]
Mode = Annotated[TrafficMode | None, typer.Option(
    help="offline (the largest batch that fits), fixed_batch (--batch-size in lock-step) or "
         "online (--qps or --concurrency); default: online with --qps or --concurrency, "
         "fixed_batch with --batch-size.")]
PromptTokens = Annotated[float | None, typer.Option(
    "--prompt-tokens", help="Mean prompt length (tokens); or --prompt-p50 with --prompt-p99.")]
PromptP50 = Annotated[float | None, typer.Option("--prompt-p50", help="Median prompt length.")]
PromptP99 = Annotated[float | None, typer.Option("--prompt-p99", help="p99 prompt length.")]
OutputTokens = Annotated[float | None, typer.Option(
    "--output-tokens", help="Mean output length (tokens); or --output-p50 with --output-p99.")]
OutputP50 = Annotated[float | None, typer.Option("--output-p50", help="Median output length.")]
OutputP99 = Annotated[float | None, typer.Option("--output-p99", help="p99 output length.")]
Qps = Annotated[float | None, typer.Option(
    "--qps", "--requests-per-s", help="Online load, requests per second (open loop).")]
Concurrency = Annotated[int | None, typer.Option(
    help="Online load as concurrent requests (closed loop), instead of --qps.")]
TtftP50 = Annotated[float | None, typer.Option("--ttft-p50", help="SLO: median TTFT, s.")]
TtftP99 = Annotated[float | None, typer.Option("--ttft-p99", help="SLO: p99 TTFT, s.")]
TpotP50 = Annotated[float | None, typer.Option("--tpot-p50",
                                               help="SLO: median time per output token, s.")]
TpotP99 = Annotated[float | None, typer.Option("--tpot-p99",
                                               help="SLO: p99 time per output token, s.")]
# One serving deployment's flags (serve-estimate and serve-quote).
ReplicaGpus = Annotated[int | None, typer.Option(
    help="GPUs per replica (default tp × pp; the API requires them equal).")]
ReplicaTp = Annotated[int | None, typer.Option(help="Tensor-parallel size.")]
ReplicaPp = Annotated[int | None, typer.Option(help="Pipeline stages.")]
WeightPrecisionOption = Annotated[WeightPrecision | None, typer.Option(
    help="Weights: bf16, fp8 or int4 (weight-only).")]
KvPrecisionOption = Annotated[KvPrecision | None, typer.Option(help="KV cache: bf16 or fp8.")]
MaxBatch = Annotated[int | None, typer.Option(help="Largest running batch (max_num_seqs).")]
PrefixCaching = Annotated[bool | None, typer.Option(
    "--prefix-caching/--no-prefix-caching", help="Prefix caching (on needs --prefix-cache-hit).")]
PrefixCacheHit = Annotated[float | None, typer.Option(
    help="Share of prompt tokens found in the prefix cache, [0, 1); implies "
         "--prefix-caching.")]
SpecAcceptRate = Annotated[float | None, typer.Option(
    help="Speculative decoding: the share of draft tokens accepted, [0, 1).")]
SpecDraftTokens = Annotated[int | None, typer.Option(
    help="Speculative decoding: draft tokens per step (needs --spec-accept-rate).")]
BatchSize = Annotated[int | None, typer.Option(help="fixed_batch: sequences in lock-step.")]

PIPED_WIDTH = 200


class _Screen(Console):
    """stdout at the terminal's width, or ``COLUMNS`` when set; piped without ``COLUMNS``, 200
    columns, so that tables stay one row per line for grep and logs. Read at each print, so
    ``COLUMNS=80 cq ...`` (and a test's environment) takes effect."""

    @property
    def size(self) -> ConsoleDimensions:
        if self._width is None and not self.is_terminal and not self._environ.get("COLUMNS"):
            return ConsoleDimensions(PIPED_WIDTH, 25)
        return super().size

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        Console.size.fset(self, new_size)  # type: ignore[attr-defined]


# Text from the service (warnings, problem details, offer names, policy messages) is printed
# as written: no console markup ("[docs/x]" would vanish, "[bold]" would style) and no emoji
# codes (":warning:" would become a symbol). The few styled labels are ``Text`` parts.
out = _Screen(markup=False, emoji=False)
err = Console(stderr=True, markup=False, emoji=False)


def labelled(label: str, style: str, text: str) -> Text:
    """``label`` in ``style``, a space, then ``text`` exactly as written: the one way ``cq``
    prefixes a warning, note or error to text it did not write."""
    return Text.assemble((label, style), " ", text)


def _table(title: str | None, columns: list[tb.Col | str]) -> Table:
    return tb.table(title, columns, width=out.width)


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


def _put_accounting(body: dict[str, Any], accounting: str | None, utilisation: str | None,
                    policy: str | None) -> None:
    _put(body, "accounting", accounting)
    if utilisation is not None:
        body.setdefault("accounting", "amortised")
        body["reservation_utilisation_fraction"] = utilisation
    _put(body, "policy", policy)


def _gpu_range(text: str) -> dict[str, int]:
    try:
        start, stop, step = (int(x) for x in text.split(":"))
    except ValueError:
        raise typer.BadParameter("use START:STOP:STEP, e.g. 512:4096:512",
                                 param_hint="--gpus-range") from None
    return {"start": start, "stop": stop, "step": step}


def _count_or_auto(text: str | None) -> int | str | None:
    """--vp and --micro-batch: a count, or "auto" (the API names any other word)."""
    if text is None:
        return None
    return int(text) if text.isdigit() else text


def _price(text: str) -> str:
    try:
        price = Decimal(text)
    except InvalidOperation:
        price = Decimal(-1)
    if not price.is_finite() or price < 0:
        raise typer.BadParameter("a price per GPU-hour, e.g. 2.10", param_hint="--price")
    return text


def _provider_price(client: Api, accelerator: str, provider: str) -> dict[str, Any]:
    """The provider's cheapest on-demand offer of the accelerator, per GPU-hour (the offers
    list is sorted by it)."""
    page = client.call("GET", "/v1/offers", params={
        "accelerator": accelerator, "provider": provider, "term": "on_demand",
        "page_size": 1}).json()
    if not page["items"]:
        raise CliError(f"the catalogue has no on-demand offer of {accelerator} from "
                       f"{provider}; cq offers --accelerator {accelerator} lists who has one")
    offer = page["items"][0]
    where = " ".join(p for p in (offer["provider"], offer["region"], offer.get("zone"),
                                 offer["instance_type"]) if p)
    return {"price_per_gpu_hour": offer["price_per_gpu_hour"], "currency": offer["currency"],
            "source": f"{where} on demand, offer {offer['id']}", "offer_id": offer["id"]}


def _cost_json(answer: dict[str, Any], cost: dict[str, Any]) -> dict[str, Any]:
    """--json with a price: the API's answer plus a ``cost`` block (amounts as decimal
    strings, like the API's money)."""
    time = answer["time"]
    total = Decimal(cost["price_per_gpu_hour"]) * Decimal(str(time["gpu_hours"]))
    tps = time["tokens_per_s"]
    return {"price_per_gpu_hour": cost["price_per_gpu_hour"], "currency": cost["currency"],
            "source": cost["source"], "offer_id": cost.get("offer_id"),
            "total": f"{total:.2f}",
            "total_low": f"{total * Decimal(str(tps / time['tokens_per_s_high'])):.2f}",
            "total_high": f"{total * Decimal(str(tps / time['tokens_per_s_low'])):.2f}"}


def _model(model: str | None) -> dict[str, Any] | None:
    return {"preset": model} if model else None


def _length(mean: float | None, p50: float | None, p99: float | None,
            ) -> dict[str, float] | None:
    """A length distribution from its flags (None when none is given); the API names a
    mixture of forms, or a p50 without its p99."""
    given = {k: v for k, v in (("mean", mean), ("p50", p50), ("p99", p99)) if v is not None}
    return given or None


def _put_traffic(body: dict[str, Any], *, mode: TrafficMode | None, prompt: dict[str, float] | None,
                 output: dict[str, float] | None, qps: float | None, concurrency: int | None,
                 batch_size: int | None, slo: dict[str, float | None]) -> None:
    """traffic.* from the flags: a length given by flags replaces the file's, and one load
    flag (--qps or --concurrency) replaces the other's field. Without --mode (here or in
    the file), --qps or --concurrency means online and --batch-size fixed_batch; anything
    still missing is left for the API to name."""
    traffic: dict[str, Any] = body.setdefault("traffic", {})
    _put(traffic, "prompt_tokens", prompt)
    _put(traffic, "output_tokens", output)
    if (qps is None) != (concurrency is None):
        traffic.pop("concurrency" if qps is not None else "requests_per_s", None)
    _put(traffic, "requests_per_s", qps)
    _put(traffic, "concurrency", concurrency)
    _put(traffic, "batch_size", batch_size)
    for name, value in slo.items():
        _put(traffic, f"slo.{name}", value)
    if mode is not None:
        traffic["mode"] = mode.value
    elif "mode" not in traffic:
        if "requests_per_s" in traffic or "concurrency" in traffic:
            traffic["mode"] = TrafficMode.online.value
        elif "batch_size" in traffic:
            traffic["mode"] = TrafficMode.fixed_batch.value


def _slo(ttft_p50: float | None, ttft_p99: float | None, tpot_p50: float | None,
         tpot_p99: float | None) -> dict[str, float | None]:
    return {"ttft_p50_s": ttft_p50, "ttft_p99_s": ttft_p99, "tpot_p50_s": tpot_p50,
            "tpot_p99_s": tpot_p99}


def _replica_default(deployment: dict[str, Any]) -> None:
    """GPUs per replica default to tp × pp (the API requires them equal). A tp or pp below 1
    counts as 1 here, so that the API's problem names that flag alone."""
    tp, pp = deployment.get("tp", 1), deployment.get("pp", 1)
    if "gpus_per_replica" not in deployment and isinstance(tp, int) and isinstance(pp, int):
        deployment["gpus_per_replica"] = max(tp, 1) * max(pp, 1)


def _put_deployment_and_traffic(
        body: dict[str, Any], *, model: str | None, accelerator: str | None,
        gpus_per_replica: int | None, tp: int | None, pp: int | None,
        weight_precision: WeightPrecision | None, kv_cache_precision: KvPrecision | None,
        engine: Engine | None, max_batch: int | None, prefix_caching: bool | None,
        prefix_cache_hit: float | None, spec_accept_rate: float | None,
        spec_draft_tokens: int | None, price: str | None, mode: TrafficMode | None,
        batch_size: int | None, prompt: dict[str, float] | None,
        output: dict[str, float] | None, qps: float | None, concurrency: int | None,
        slo: dict[str, float | None]) -> None:
    """A serving estimate's body (POST /v1/serving-estimates) from its flags: flags given
    replace the fields of ``body`` (a --request file's), the rest are kept."""
    _put(body, "model", _model(model))
    deployment: dict[str, Any] = body.setdefault("deployment", {})
    if prefix_cache_hit is not None and prefix_caching is None:
        prefix_caching = True
    for path, value in (
            ("accelerator", accelerator), ("gpus_per_replica", gpus_per_replica),
            ("tp", tp), ("pp", pp),
            ("weight_precision", weight_precision.value if weight_precision else None),
            ("kv_cache_precision", kv_cache_precision.value if kv_cache_precision else None),
            ("engine", engine.value if engine else None), ("max_batch", max_batch),
            ("prefix_caching", prefix_caching),
            ("prefix_cache_hit_fraction", prefix_cache_hit),
            ("speculative.acceptance_rate", spec_accept_rate),
            ("speculative.draft_tokens", spec_draft_tokens),
            ("price_per_gpu_hour_usd", None if price is None else _price(price))):
        _put(deployment, path, value)
    _replica_default(deployment)
    _put_traffic(body, mode=mode, prompt=prompt, output=output, qps=qps,
                 concurrency=concurrency, batch_size=batch_size, slo=slo)


def _serving_quote_body(loaded: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the quote's body, its serving estimate) from a --request file: a quote body whose
    workload is ``serving.estimate``, or a serving estimate's body (what ``cq serve-estimate
    --request`` takes), wrapped. From the latter a price per GPU-hour is left out (a quote
    prices every line from the catalogue, and refuses one; a note says so) and ``energy`` goes
    to the quote's top level (where it prices every line)."""
    if "workload" not in loaded:
        estimate = loaded
        body: dict[str, Any] = {"workload": {"serving": {"estimate": estimate}}}
        price = (estimate.get("deployment") or {}).pop("price_per_gpu_hour_usd", None)
        if price is not None:
            err.print(labelled(
                "note:", "yellow", "a quote prices every line from the catalogue; the "
                f"file's price_per_gpu_hour_usd ({price}) is not sent"), highlight=False)
        if "energy" in estimate:
            body["energy"] = estimate.pop("energy")
        return body, estimate
    workload = loaded["workload"]
    serving = workload.get("serving") if isinstance(workload, dict) else None
    if not isinstance(serving, dict) or len(workload) != 1 or "plan" in serving:
        raise typer.BadParameter(
            "serve-quote's flags describe one deployment: give a serving estimate's body, or "
            "a quote body with workload.serving.estimate (cq quote --request takes any quote)",
            param_hint="--request")
    estimate = serving.setdefault("estimate", {})
    if not isinstance(estimate, dict):
        raise typer.BadParameter("workload.serving.estimate must be a JSON object",
                                 param_hint="--request")
    return loaded, estimate


def _plan_prices(prices: list[str]) -> str | dict[str, str] | None:
    """--price for serve-plan: one price for every accelerator, or ACCELERATOR=PRICE once per
    accelerator."""
    if not prices:
        return None
    named = [p for p in prices if "=" in p]
    if not named:
        if len(prices) > 1:
            raise typer.BadParameter("give one price for every accelerator, or "
                                     "ACCELERATOR=PRICE for each", param_hint="--price")
        return _price(prices[0])
    if len(named) != len(prices):
        raise typer.BadParameter("give one price for every accelerator, or ACCELERATOR=PRICE "
                                 "for each, not both", param_hint="--price")
    pairs = [p.split("=", 1) for p in named]
    return {accelerator.strip(): _price(price.strip()) for accelerator, price in pairs}


@contextmanager
def working(label: str) -> Iterator[None]:
    """A progress bar with elapsed time on a terminal; nothing when piped."""
    if not err.is_terminal:
        yield
        return
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                  TimeElapsedColumn(), console=err, transient=True) as progress:
        progress.add_task(label, total=None)
        yield


def _emit(answer: Any, as_json: bool, render: Callable[[Any], None]) -> None:
    if as_json:
        sys.stdout.write(json.dumps(answer, indent=2) + "\n")
    else:
        render(answer)


def _output(chosen: OutputFormat | None, as_json: bool,
            allowed: tuple[OutputFormat, ...] = tuple(OutputFormat)) -> OutputFormat:
    """--format, with --json as its alias for json; table by default."""
    if as_json and chosen not in (None, OutputFormat.json):
        raise typer.BadParameter(f"--json and --format {chosen.value} disagree; give one",
                                 param_hint="--format")
    output = OutputFormat.json if as_json else chosen or OutputFormat.table
    if output not in allowed:
        raise typer.BadParameter(f"use {' or '.join(a.value for a in allowed)}",
                                 param_hint="--format")
    return output


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


def _figures_table(title: str, rows: list[tuple[str, str]]) -> Table:
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("figure", style="bold")
    table.add_column("value")
    for name, value in rows:
        table.add_row(name, value)
    return table


def band_figures(answer: dict[str, Any], cost: dict[str, Any] | None = None,
                 ) -> list[tuple[str, str]]:
    """The 80% band (time.tokens_per_s_low/high) as throughput, training time and, with a
    price, cost: time and cost scale with tokens/s ÷ the band's end."""
    time = answer["time"]
    tps, low, high = time["tokens_per_s"], time["tokens_per_s_low"], time["tokens_per_s_high"]
    rows = [("tokens/s, 80% band", f"{fmt.number(low)} – {fmt.number(high)}"),
            ("time, 80% band", f"{fmt.duration(time['train_s'] * tps / high)} – "
                               f"{fmt.duration(time['train_s'] * tps / low)}")]
    if cost is not None:
        price, currency = Decimal(cost["price_per_gpu_hour"]), cost["currency"]
        total = price * Decimal(str(time["gpu_hours"]))
        rows.insert(0, ("cost", f"{fmt.money(str(total), currency)} at "
                                f"{fmt.money(str(price), currency)} per GPU-hour "
                                f"({cost['source']})"))
        rows.append(("cost, 80% band",
                     f"{fmt.money(str(total * Decimal(str(tps / high))), currency)} – "
                     f"{fmt.money(str(total * Decimal(str(tps / low))), currency)}"))
    return rows


def render_estimate(answer: dict[str, Any], cost: dict[str, Any] | None = None) -> None:
    figures = fmt.estimate_figures(answer)
    at = next(i for i, (name, _) in enumerate(figures) if name == "training time") + 1
    out.print(_figures_table("Estimate", [*figures[:at], *band_figures(answer, cost),
                                          *figures[at:]]))
    step = answer["time"]["step_s"]
    parts = _table("Step time", [tb.Col("step time part", max_width=40), tb.num("time"),
                                   tb.num("share")])
    for label, seconds in fmt.step_parts(answer):
        parts.add_row(label, fmt.duration(seconds), fmt.percent(seconds / step))
    out.print(parts)
    memory = _table("Memory per GPU", [tb.Col("memory part", max_width=40),
                                         tb.num("per GPU")])
    for label, size in fmt.memory_parts(answer):
        memory.add_row(label, fmt.gib(size))
    memory.add_row("capacity", fmt.gib(answer["memory"]["capacity_bytes_per_gpu"]))
    out.print(memory)
    for warning in answer.get("warnings", []):
        out.print(labelled("warning:", "yellow", warning))


def _plan_figures(plan: dict[str, Any]) -> tuple[Any, ...]:
    """What a plans table shows of a plan besides its layout: plans equal in these are
    permutations with identical figures, and share a row."""
    return (plan["accelerator"], plan["num_gpus"], plan["global_batch_seqs"],
            fmt.duration(plan["time"]["train_s"]), fmt.number(plan["time"]["gpu_hours"]),
            fmt.percent(plan["time"]["mfu_fraction"]),
            fmt.gib(plan["memory"]["peak_bytes_per_gpu"]), plan.get("cost_usd"))


def render_plans(answer: dict[str, Any]) -> None:
    plans = answer["plans"]
    search = answer["search"]
    accelerators = {p["accelerator"] for p in plans}
    batches = {p["global_batch_seqs"] for p in plans}
    costed = any(p.get("cost_usd") for p in plans)
    rows = tb.group_alike(plans, _plan_figures)
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
        figures = _plan_figures(plan)
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


def _lines_table(title: str, lines: list[dict[str, Any]],
                 recommended: dict[str, Any] | None = None) -> Table:
    """Commitment (cash signed for) first, then the job's own cost; under amortised
    accounting also the amount judged."""
    amortised = any(line.get("accounting") == "amortised" for line in lines)
    serving = any(line.get("serving") for line in lines)
    currency = tb.common_currency(lines)
    columns: list[tb.Col | str] = [
        "line", tb.Col("days held" if serving else "days p50 (p10–p90)", max_width=11),
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
    table.caption = letters.legend() or None
    table.caption_justify = "left"
    return table


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
        return report.commitment(line), "—"
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


MAX_PAGES = 1_000
"""The most pages one paged read follows (200,000 items at 200 a page; the seed's longest
list is about 3,000): a server that kept answering a next page would otherwise loop the CLI
for ever (issue 36's loop audit)."""


def _paged(client: Api, path: str, params: dict[str, Any],
           max_pages: int = MAX_PAGES) -> list[dict[str, Any]]:
    """Every item of a paged list, following ``next_page_token`` for at most ``max_pages``
    pages; a token the server already gave (a loop) or more pages than that is a CliError."""
    items: list[dict[str, Any]] = []
    token: str | None = None
    seen: set[str] = set()
    for _ in range(max_pages):
        page = client.call("GET", path, params={**params, "page_token": token}).json()
        items += page["items"]
        token = page.get("next_page_token")
        if not token:
            return items
        if token in seen:
            raise CliError(f"{path} answered a page token it had already given: the server "
                           "is paging in a loop, so the list was not read to its end")
        seen.add(token)
    raise CliError(f"{path} has more than {max_pages:,} pages; the CLI reads at most that many")


def _every_item(client: Api, path: str) -> list[dict[str, Any]]:
    """Every item of a paged list (models and accelerators are a few dozen)."""
    return _paged(client, path, {"page_size": 200})


def render_models(answer: dict[str, Any]) -> None:
    items = answer["items"]
    table = _table(f"Model presets: {len(items)}",
                     ["preset", tb.num("params"), tb.num("active"), tb.num("layers"),
                      tb.num("hidden"), tb.num("heads"), tb.num("experts")])
    for m in items:
        experts = (f"{m['experts_per_token']} of {m['num_experts']}" if m["num_experts"] > 1
                   else "—")
        table.add_row(m["name"], fmt.si(m["params_total"]), fmt.si(m["params_active"]),
                      f"{m['num_layers']:,}", f"{m['hidden_size']:,}", f"{m['num_heads']:,}",
                      experts)
    out.print(table)


def render_accelerators(answer: dict[str, Any]) -> None:
    items = answer["items"]
    table = _table(f"Accelerators: {len(items)}",
                     [tb.Col("id", max_width=22), tb.num("memory"), tb.num("HBM TB/s"),
                      tb.num("BF16 TFLOP/s"), tb.num("TDP W"), tb.num("NVLink"),
                      "calibrated"])
    for a in items:
        table.add_row(a["id"], f"{a['memory_gib']:,.0f} GiB", f"{a['hbm_tbytes_per_s']:,.2f}",
                      f"{a['bf16_tflops']:,.0f}" if a.get("bf16_tflops") else "—",
                      f"{a['tdp_w']:,.0f}", f"{a['scaleup_domain_size']:,}",
                      "yes" if a.get("calibrated") else "no")
    out.print(table)


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


PLAN_ROWS = 10
"""Rows of each budget-plan table (the title says how many lines there are)."""


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
        tb.Col("days p50 (p10–p90)", max_width=11), tb.Col("line", max_width=14),
        tb.Col("policy", max_width=6), tb.Col("flags", max_width=6)]
    table = _table(title, columns)
    letters = tb.FlagLetters()
    for rank, line in enumerate(lines, 1):
        judged = ([tb.amount(line.get("total"), line["currency"], currency)]
                  if amortised else [])
        table.add_row(str(rank), *_line_amounts(line, currency), *judged, report.days(line),
                      _line_label(line), line.get("policy_outcome") or "—",
                      letters.cell(line.get("flags") or []))
    table.caption = letters.legend() or None
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


def _render_largest(answer: dict[str, Any]) -> None:
    largest = answer.get("largest_model")
    if largest:
        line = largest["line"]
        out.print(f"largest model: {largest['preset']}, {fmt.si(largest['params'])} "
                  f"parameters on {fmt.si(largest['tokens'])} tokens "
                  f"({largest['tokens'] / largest['params']:,.1f} per parameter)",
                  highlight=False)
        out.print(f"its best line: commitment {report.commitment(line)}, job cost "
                  f"{report.job_cost(line)}, {report.days(line)} days, "
                  f"{fmt.line_where(line)}, {line['term']}, {line['num_gpus']:,} GPUs",
                  highlight=False)
    else:
        out.print("largest model: none: no candidate has a line within the budget and "
                  "deadline that the policy passes (the lists are the smallest candidate's)",
                  highlight=False)
    tried = Table("model", "parameters", "tokens", "lines within", "note",
                  title="Models tried, smallest first", title_justify="left")
    for model in answer.get("models_tried") or []:
        tried.add_row(model["preset"], fmt.si(model["params"]), fmt.si(model["tokens"]),
                      f"{model['lines_within']:,}", model["note"])
    out.print(tried)


def _figures(title: str, rows: list[tuple[str, str]], *, name_width: int = 24) -> Table:
    """Two columns, figure and value, without a header; the value folds at 80 columns."""
    table = _table(title, [tb.Col("figure", max_width=name_width),
                           tb.Col("value", max_width=78 - name_width)])
    table.show_header = False
    for name, value in rows:
        table.add_row(name, value)
    return table


def render_serving(answer: dict[str, Any], request: dict[str, Any] | None = None) -> None:
    """A serving estimate: what was asked, memory per GPU, latency against the SLOs,
    throughput, sizing, cost and energy, then the warnings."""
    request = request or {}
    out.print(_figures("Serving estimate", report.serving_setup(request)))
    out.print(_figures("Memory per GPU", report.serving_memory_rows(answer)))
    latency = _table("Latency under the load",
                     [tb.Col("", max_width=18), tb.num("p50"), tb.num("p99"),
                      tb.num("SLO p50"), tb.num("SLO p99")])
    for row in report.serving_latency_rows(answer, (request.get("traffic") or {}).get("slo")):
        latency.add_row(*row)
    out.print(latency)
    out.print(f"queueing model: {answer['latency']['queueing_model']}", highlight=False)
    out.print(_figures("Throughput, sizing and cost", report.serving_figures(answer)))
    for warning in answer.get("warnings", []):
        out.print(labelled("warning:", "yellow", warning), highlight=False)


def _serving_plan_figures(plan: dict[str, Any]) -> tuple[Any, ...]:
    """What a serving-plans table shows of a plan besides its max batch: plans equal in these
    differ only in a max batch that does not bind, and share a row."""
    d, e = plan["deployment"], plan["estimate"]
    return (d["accelerator"], d.get("tp"), d.get("pp"), d.get("weight_precision"),
            d.get("kv_cache_precision"), d.get("engine"), e["sizing"]["num_gpus"],
            e["sizing"]["replicas"], (e.get("cost") or {}).get("usd_per_hour"),
            fmt.duration(e["latency"]["ttft_s"]["p99"]),
            fmt.duration(e["latency"]["tpot_s"]["p99"]))


def _serving_plans_table(title: str, plans: list[dict[str, Any]], *,
                         accelerators: set[str], costed: bool, engines: bool) -> Table:
    """Ranked deployments: layout, GPUs (replicas × per replica), cost per hour, p99
    latency. Cost per million output tokens is left to the footer: every plan serves the same
    load, so it ranks exactly as the cost per hour, and the table keeps to 80 columns."""
    columns: list[tb.Col | str] = [
        tb.num("#"), *([tb.Col("accelerator", max_width=14)] if len(accelerators) > 1 else []),
        tb.Col("layout", max_width=17), tb.num("GPUs"), *([tb.num("USD/h")] if costed else []),
        tb.num("TTFT\np99"), tb.num("TPOT\np99")]
    rows = tb.group_alike(plans, _serving_plan_figures)
    alike = sum(more for _, more in rows)
    table = _table(title + (f", {alike} alike folded" if alike else ""), columns)
    for plan, more in rows:
        d, e = plan["deployment"], plan["estimate"]
        sizing, cost = e["sizing"], e.get("cost") or {}
        table.add_row(
            str(plan["rank"]), *([d["accelerator"]] if len(accelerators) > 1 else []),
            report.serving_plan_layout(d, engine=engines)
            + (f" (+{more} alike)" if more else ""),
            f"{sizing['num_gpus']:,} ({sizing['replicas']:,}×{d['gpus_per_replica']})",
            *([tb.amount(cost.get("usd_per_hour"), "USD", "USD")] if costed else []),
            fmt.duration(e["latency"]["ttft_s"]["p99"]),
            fmt.duration(e["latency"]["tpot_s"]["p99"]))
    return table


SERVING_PLAN_ROWS = 10
"""Rows of the ranked plans and of the Pareto front tables (the API's top_k and front may hold
more; the titles say how many, --json has all)."""


def render_serving_plans(answer: dict[str, Any], request: dict[str, Any] | None = None) -> None:
    """The cheapest deployments that meet the SLOs ("10 of N"), the cost against p99 TTFT
    Pareto front, and, when nothing meets the SLOs, the closest misses."""
    request = request or {}
    plans, pareto, closest = answer["plans"], answer["pareto"], answer.get("closest") or []
    search = answer["search"]
    everything = [*plans, *pareto, *closest]
    accelerators = {p["deployment"]["accelerator"] for p in everything}
    costed = any(p["estimate"].get("cost") for p in everything)
    engines = len({p["deployment"].get("engine") for p in everything}) > 1
    on = f"; on {next(iter(accelerators))}" if len(accelerators) == 1 else ""
    order = "cost per hour" if costed else "GPUs"
    traffic = request.get("traffic") or {}
    if plans:
        shown = plans[:SERVING_PLAN_ROWS]
        out.print(_serving_plans_table(
            f"Cheapest deployments by {order}: "
            f"{tb.shown_of(len(shown), search['feasible'], 'that meet the SLOs')}{on}",
            shown, accelerators=accelerators, costed=costed, engines=engines))
        front = pareto[:SERVING_PLAN_ROWS]
        out.print(_serving_plans_table(
            "Pareto front, cost against p99 TTFT: "
            f"{tb.shown_of(len(front), len(pareto), 'plans')}",
            front, accelerators=accelerators, costed=costed, engines=engines))
    else:
        out.print(f"no deployment meets the SLOs ({report.slo_text(traffic.get('slo'))}) at "
                  "the load", highlight=False)
        if closest:
            out.print(_serving_plans_table(
                f"Closest misses: {len(closest)}", closest, accelerators=accelerators,
                costed=costed, engines=engines))
    cost = plans[0]["estimate"].get("cost") if plans else None
    if cost:
        out.print(f"the cheapest: {fmt.money(cost['usd_per_hour'])} per hour, "
                  f"{report.per_million(cost['usd_per_million_output_tokens'])} USD per million "
                  f"output tokens, {report.per_million(cost['usd_per_million_total_tokens'])} "
                  "USD per million tokens in + out", highlight=False)
    load = traffic.get("requests_per_s")
    out.print(f"{search['candidates_total']:,} candidate deployments sized"
              + (f" for {load:,g} requests/s" if load is not None else "")
              + f"; {search['feasible']:,} fit and meet the SLOs", highlight=False)


def handled(function: Callable[..., None]) -> Callable[..., None]:
    """Problems and connection errors become a short message and a non-zero exit, never a
    traceback: 1 for a problem the service answered, 2 for anything else."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        as_json = bool(kwargs.get("as_json")) or kwargs.get("output_format") == OutputFormat.json
        try:
            function(*args, **kwargs)
        except ApiProblemError as problem:
            if as_json:
                _json_error(problem.body or {"title": problem.title, "status": problem.status,
                                             "detail": problem.detail}, exit_code=1)
            err.print(labelled(f"{problem.status} {problem.title}:", "bold red",
                               str(problem.detail)), highlight=False)
            for error in problem.errors:
                where = error.get("field") or error.get("loc") or ""
                err.print(f"  · {where}: {error.get('message') or error.get('msg') or ''}",
                          highlight=False)
            if not problem.errors and problem.body.get("field"):
                err.print(f"  · field: {problem.body['field']}", highlight=False)
            raise typer.Exit(code=1) from None
        except CliError as exc:
            if as_json:
                _json_error({"title": "cq could not complete the command", "detail": str(exc)},
                            exit_code=2)
            err.print(labelled("error:", "bold red", str(exc)), highlight=False)
            raise typer.Exit(code=2) from None
        except typer.BadParameter as exc:
            if as_json:
                _json_error({"title": "Invalid option", "detail": exc.format_message(),
                             "option": exc.param_hint}, exit_code=2)
            raise

    return wrapper


def _json_error(problem: dict[str, Any], exit_code: int) -> None:
    """With --json an error is JSON on stdout too (the problem document the service sent, or
    one in its shape), so a script reads one stream; the exit code still tells failure."""
    sys.stdout.write(json.dumps({**problem, "exit_code": exit_code}, indent=2) + "\n")
    raise typer.Exit(code=exit_code)


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
        ep: Annotated[int | None, typer.Option(help="Expert-parallel size (MoE).")] = None,
        vp: Annotated[str | None, typer.Option(
            help="Virtual pipeline stages per GPU, or auto.")] = None,
        micro_batch: Annotated[str | None, typer.Option(
            help="Sequences per micro-batch, or auto.")] = None,
        zero_stage: Annotated[int | None, typer.Option(
            "--zero-stage", "--zero", min=0, max=3, help="ZeRO stage (3 = FSDP).")] = None,
        dp_shard: Annotated[int | None, typer.Option(
            help="Hybrid sharding (HSDP): data-parallel ranks per shard group, a divisor "
                 "of dp.")] = None,
        recompute: Annotated[str | None, typer.Option(
            help="none, selective, full or auto.")] = None,
        sequence_parallel: Annotated[bool | None, typer.Option(
            "--sequence-parallel/--no-sequence-parallel",
            help="Megatron sequence parallelism (the API's default: on).")] = None,
        price: Annotated[str | None, typer.Option(
            help="USD per GPU-hour, to show a cost (and its 80% band).")] = None,
        provider: Annotated[str | None, typer.Option(
            help="Show the cost at this provider's cheapest on-demand offer of the "
                 "accelerator (per GPU-hour), named.")] = None,
        request: RequestFile = None, api: ApiUrl = DEFAULT_API_URL, api_key: ApiKey = None,
        local: Local = False, as_json: AsJson = False,
    ) -> None:
        """Time, memory, MFU, GPU-hours and energy of one training run on one layout, with
        the 80% band; a cost with --price or --provider."""
        if price is not None and provider is not None:
            raise typer.BadParameter("give --price or --provider, not both",
                                     param_hint="--price")
        cost = None if price is None else {"price_per_gpu_hour": _price(price),
                                           "currency": "USD", "source": "--price"}
        body = _load(request)
        _put_model_and_training(body, model, tokens, seq_len, global_batch)
        for path, value in (("cluster.accelerator", accelerator), ("cluster.num_gpus", gpus),
                            ("parallelism.tp", tp), ("parallelism.pp", pp),
                            ("parallelism.dp", dp), ("parallelism.cp", cp),
                            ("parallelism.ep", ep), ("parallelism.vp", _count_or_auto(vp)),
                            ("parallelism.micro_batch", _count_or_auto(micro_batch)),
                            ("parallelism.zero_stage", zero_stage),
                            ("parallelism.dp_shard", dp_shard),
                            ("parallelism.recompute", recompute),
                            ("parallelism.sequence_parallel", sequence_parallel)):
            _put(body, path, value)
        _defaults(body)
        with connect(api, api_key, local) as client:
            answer = client.call("POST", "/v1/estimates", json=body).json()
            if provider is not None:
                cost = _provider_price(client, answer["resolved"]["accelerator"], provider)
        if as_json and cost is not None:
            answer = {**answer, "cost": _cost_json(answer, cost)}
        _emit(answer, as_json, functools.partial(render_estimate, cost=cost))

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

    @app.command("serve-estimate")
    @handled
    def serve_estimate(
        model: Model = None, accelerator: Accelerator = None,
        gpus_per_replica: ReplicaGpus = None, tp: ReplicaTp = None, pp: ReplicaPp = None,
        weight_precision: WeightPrecisionOption = None,
        kv_cache_precision: KvPrecisionOption = None, engine: EngineOption = None,
        max_batch: MaxBatch = None, prefix_caching: PrefixCaching = None,
        prefix_cache_hit: PrefixCacheHit = None, spec_accept_rate: SpecAcceptRate = None,
        spec_draft_tokens: SpecDraftTokens = None,
        price: Annotated[str | None, typer.Option(
            help="USD per GPU-hour, for the cost per hour and per million tokens.")] = None,
        mode: Mode = None, batch_size: BatchSize = None,
        prompt_tokens: PromptTokens = None, prompt_p50: PromptP50 = None,
        prompt_p99: PromptP99 = None, output_tokens: OutputTokens = None,
        output_p50: OutputP50 = None, output_p99: OutputP99 = None,
        qps: Qps = None, concurrency: Concurrency = None,
        ttft_p50: TtftP50 = None, ttft_p99: TtftP99 = None, tpot_p50: TpotP50 = None,
        tpot_p99: TpotP99 = None,
        request: RequestFile = None, api: ApiUrl = DEFAULT_API_URL, api_key: ApiKey = None,
        local: Local = False, as_json: AsJson = False,
    ) -> None:
        """Serve a model at a load: memory per GPU, TTFT/TPOT/end-to-end at p50 and p99,
        throughput, the replicas and GPUs the load needs under the SLOs, and cost per million
        tokens with --price (POST /v1/serving-estimates)."""
        body = _load(request)
        _put_deployment_and_traffic(
            body, model=model, accelerator=accelerator, gpus_per_replica=gpus_per_replica,
            tp=tp, pp=pp, weight_precision=weight_precision,
            kv_cache_precision=kv_cache_precision, engine=engine, max_batch=max_batch,
            prefix_caching=prefix_caching, prefix_cache_hit=prefix_cache_hit,
            spec_accept_rate=spec_accept_rate, spec_draft_tokens=spec_draft_tokens,
            price=price, mode=mode, batch_size=batch_size,
            prompt=_length(prompt_tokens, prompt_p50, prompt_p99),
            output=_length(output_tokens, output_p50, output_p99), qps=qps,
            concurrency=concurrency, slo=_slo(ttft_p50, ttft_p99, tpot_p50, tpot_p99))
        with connect(api, api_key, local) as client:
            answer = client.call("POST", "/v1/serving-estimates", json=body).json()
        _emit(answer, as_json, functools.partial(render_serving, request=body))

    @app.command("serve-quote")
    @handled
    def serve_quote(
        model: Model = None, accelerator: Accelerator = None,
        gpus_per_replica: ReplicaGpus = None, tp: ReplicaTp = None, pp: ReplicaPp = None,
        weight_precision: WeightPrecisionOption = None,
        kv_cache_precision: KvPrecisionOption = None, engine: EngineOption = None,
        max_batch: MaxBatch = None, prefix_caching: PrefixCaching = None,
        prefix_cache_hit: PrefixCacheHit = None, spec_accept_rate: SpecAcceptRate = None,
        spec_draft_tokens: SpecDraftTokens = None, mode: Mode = None,
        batch_size: BatchSize = None,
        prompt_tokens: PromptTokens = None, prompt_p50: PromptP50 = None,
        prompt_p99: PromptP99 = None, output_tokens: OutputTokens = None,
        output_p50: OutputP50 = None, output_p99: OutputP99 = None,
        qps: Qps = None, concurrency: Concurrency = None,
        ttft_p50: TtftP50 = None, ttft_p99: TtftP99 = None, tpot_p50: TpotP50 = None,
        tpot_p99: TpotP99 = None,
        months: Annotated[float | None, typer.Option(
            help="How long the fleet is held, in months of 365.25 / 12 days (12 months: "
                 "31,557,600 s); default 12, or the --request file's duration_s.")] = None,
        replicas: Annotated[int | None, typer.Option(
            help="Replicas to hold instead of those sized for the load.")] = None,
        provider: Annotated[list[str] | None, typer.Option(
            help="Only this provider; repeat for several ('onprem' included).")] = None,
        term: Annotated[list[str] | None, typer.Option(
            help="on_demand, spot, reserved_1y, reserved_3y, capacity_block, onprem; repeat "
                 "for several (default all).")] = None,
        budget: Annotated[str | None, typer.Option(help="Budget amount, e.g. 250000.")]
        = None,
        currency: Annotated[str, typer.Option(help="Budget currency.")] = "USD",
        idempotency_key: Annotated[str | None, typer.Option(
            help="Retry-safe key; default a new random one.")] = None,
        accounting: Accounting = None, utilisation: Utilisation = None,
        policy: PolicyOption = None, fail_on: FailOnOption = None,
        request: RequestFile = None, api: ApiUrl = DEFAULT_API_URL, api_key: ApiKey = None,
        local: Local = False, as_json: AsJson = False, output_format: Format = None,
    ) -> None:
        """Quote a serving fleet held for --months against every matching offer, judge it
        against the budget and policy, store the quote (POST /v1/quotes, workload.serving).

        The fleet is the serve-estimate deployment, sized for --qps (the peak) and held for
        the whole duration; every line is priced from the catalogue. --request takes a serving
        estimate's body or a serving quote's. Exit 0, or 1 for a problem, 2 when unreachable,
        3 reject and 4 warn (--fail-on), as cq quote."""
        output = _output(output_format, as_json)
        body, estimate = _serving_quote_body(_load(request))
        _put_deployment_and_traffic(
            estimate, model=model, accelerator=accelerator,
            gpus_per_replica=gpus_per_replica, tp=tp, pp=pp, weight_precision=weight_precision,
            kv_cache_precision=kv_cache_precision, engine=engine, max_batch=max_batch,
            prefix_caching=prefix_caching, prefix_cache_hit=prefix_cache_hit,
            spec_accept_rate=spec_accept_rate, spec_draft_tokens=spec_draft_tokens,
            price=None, mode=mode, batch_size=batch_size,
            prompt=_length(prompt_tokens, prompt_p50, prompt_p99),
            output=_length(output_tokens, output_p50, output_p99), qps=qps,
            concurrency=concurrency, slo=_slo(ttft_p50, ttft_p99, tpot_p50, tpot_p99))
        serving = body["workload"]["serving"]
        if months is not None or "duration_s" not in serving:
            serving["duration_s"] = (12 if months is None else months) * report.MONTH_S
        _put(serving, "replicas", replicas)
        _put(body, "providers", provider)
        _put(body, "terms", term)
        _put_budget_and_deadline(body, budget, currency, None)
        _put_accounting(body, accounting, utilisation, policy)
        _post_quote(body, idempotency_key, api, api_key, local, output, fail_on)

    @app.command("serve-plan")
    @handled
    def serve_plan(
        model: Model = None,
        accelerator: Annotated[list[str] | None, typer.Option(
            help="A candidate accelerator id; repeat for several (up to 8).")] = None,
        engine: Annotated[list[Engine] | None, typer.Option(
            help="Serving engine (docs/serving.md; the API's default: unknown, the most "
                 "conservative); repeat to try several.")] = None,
        weight_precision: Annotated[list[WeightPrecision] | None, typer.Option(
            help="Weight precision to try; repeat for several (default bf16).")] = None,
        kv_cache_precision: Annotated[list[KvPrecision] | None, typer.Option(
            help="KV-cache precision to try; repeat for several (default bf16).")] = None,
        max_batch: Annotated[list[int] | None, typer.Option(
            help="max_batch to try; repeat for several (default: the largest that fits).")]
        = None,
        max_tp: Annotated[int | None, typer.Option(
            help="Largest tensor-parallel size to try (default: the NVLink domain).")] = None,
        price: Annotated[list[str] | None, typer.Option(
            help="USD per GPU-hour for every accelerator, or ACCELERATOR=PRICE, repeated; "
                 "without prices plans are ranked by GPUs.")] = None,
        top_k: Annotated[int | None, typer.Option(help="Plans to return (API default 10).")]
        = None,
        prompt_tokens: PromptTokens = None, prompt_p50: PromptP50 = None,
        prompt_p99: PromptP99 = None, output_tokens: OutputTokens = None,
        output_p50: OutputP50 = None, output_p99: OutputP99 = None, qps: Qps = None,
        ttft_p50: TtftP50 = None, ttft_p99: TtftP99 = None, tpot_p50: TpotP50 = None,
        tpot_p99: TpotP99 = None,
        request: RequestFile = None, api: ApiUrl = DEFAULT_API_URL, api_key: ApiKey = None,
        local: Local = False, as_json: AsJson = False,
    ) -> None:
        """The cheapest deployments (accelerator, tp, precision, max batch, replicas) that
        serve --qps under the SLOs, and the cost against p99 TTFT Pareto front
        (POST /v1/serving-plans)."""
        body = _load(request)
        _put(body, "model", _model(model))
        _put(body, "accelerators", accelerator)
        if engine:
            engines = [e.value for e in engine]
            body.pop("engines" if len(engines) == 1 else "engine", None)
            _put(body, "engine" if len(engines) == 1 else "engines",
                 engines[0] if len(engines) == 1 else engines)
        _put(body, "weight_precisions",
             [w.value for w in weight_precision] if weight_precision else None)
        _put(body, "kv_cache_precisions",
             [k.value for k in kv_cache_precision] if kv_cache_precision else None)
        _put(body, "max_batches", max_batch)
        _put(body, "max_tp", max_tp)
        _put(body, "price_per_gpu_hour_usd", _plan_prices(price or []))
        _put(body, "top_k", top_k)
        _put_traffic(body, mode=None, prompt=_length(prompt_tokens, prompt_p50, prompt_p99),
                     output=_length(output_tokens, output_p50, output_p99), qps=qps,
                     concurrency=None, batch_size=None,
                     slo=_slo(ttft_p50, ttft_p99, tpot_p50, tpot_p99))
        body["traffic"].setdefault("mode", TrafficMode.online.value)
        with connect(api, api_key, local) as client, working("sizing deployments"):
            answer = client.call("POST", "/v1/serving-plans", json=body).json()
        _emit(answer, as_json, functools.partial(render_serving_plans, request=body))

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
        """Price offers per GPU-hour, cheapest first: on-demand and spot side by side (or the
        --term given), one row per instance type and zone.

        --json prints the API's page of offers (the --limit cheapest, --term's or of every
        term)."""
        params = {"accelerator": accelerator, "provider": provider, "region": region,
                  "term": term, "version": version}
        with connect(api, api_key, local) as client:
            if as_json:
                answer = client.call("GET", "/v1/offers",
                                     params={**params, "page_size": limit}).json()
                _emit(answer, True, lambda _: None)
                return
            terms = [term] if term else list(OFFER_TERMS)
            found = [o for t in terms for o in _every_offer(client, {**params, "term": t})]
        render_offers(found, terms, limit)

    @app.command()
    @handled
    def models(api: ApiUrl = DEFAULT_API_URL, api_key: ApiKey = None, local: Local = False,
               as_json: AsJson = False) -> None:
        """Model presets (--model takes their names): parameters, layers, width, experts."""
        with connect(api, api_key, local) as client:
            items = _every_item(client, "/v1/models")
        _emit({"items": items}, as_json, render_models)

    @app.command()
    @handled
    def accelerators(api: ApiUrl = DEFAULT_API_URL, api_key: ApiKey = None,
                     local: Local = False, as_json: AsJson = False) -> None:
        """The hardware catalogue (--accelerator takes its ids): memory, bandwidth, peak
        BF16, power, NVLink domain, and whether the model is calibrated on it."""
        with connect(api, api_key, local) as client:
            items = _every_item(client, "/v1/accelerators")
        _emit({"items": items}, as_json, render_accelerators)

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
        from service.api.connections import HTTP_PROTOCOL
        from service.api.observability import UVICORN_LOG_CONFIG

        # The protocol that bounds request heads and connections per address, as make run
        # and the image run it (service/api/connections.py).
        uvicorn.run("service.main:create_app", factory=True, host=host, port=port,
                    access_log=False, server_header=False, log_config=str(UVICORN_LOG_CONFIG),
                    http=HTTP_PROTOCOL)


OFFER_TERMS = ("on_demand", "spot")
"""The terms `cq offers` puts side by side when no --term is given."""
OFFER_PAGES = 50
"""At most 10,000 offers per term are read to pair and count (the seed has about 3,000)."""


def _every_offer(client: Api, params: dict[str, Any]) -> list[dict[str, Any]]:
    offers: list[dict[str, Any]] = []
    token: str | None = None
    for _ in range(OFFER_PAGES):
        page = client.call("GET", "/v1/offers",
                           params={**params, "page_size": 200, "page_token": token}).json()
        offers += page["items"]
        token = page.get("next_page_token")
        if not token:
            break
    return offers


def _offer_row_key(offer: dict[str, Any]) -> tuple[Any, ...]:
    return (offer["provider"], offer["region"], offer.get("zone") or "",
            offer["instance_type"], offer["accelerator"], offer["gpus_per_instance"],
            offer["currency"])


def render_offers(offers: list[dict[str, Any]], terms: list[str], limit: int) -> None:
    """One row per instance type and zone with each term's price per GPU-hour, sorted by the
    first term's (on-demand unless --term), rows without it after, by the next term's."""
    rows: dict[tuple[Any, ...], dict[str, dict[str, Any]]] = {}
    for offer in offers:
        rows.setdefault(_offer_row_key(offer), {}).setdefault(offer["term"], offer)

    def order(by_term: dict[str, dict[str, Any]]) -> tuple[Decimal, ...]:
        missing = Decimal("Infinity")
        return tuple(Decimal(by_term[t]["price_per_gpu_hour"]) if t in by_term else missing
                     for t in terms)

    ranked = sorted(rows.items(), key=lambda item: order(item[1]))
    currency = tb.common_currency([o for _, by_term in ranked for o in by_term.values()])
    accelerators = {key[4] for key in rows}
    sort_label = fmt.term_label(terms[0])
    title = (f"Offers: {tb.shown_of(min(limit, len(ranked)), len(ranked), 'instance types')}"
             f" ({len(offers):,} offers), cheapest {sort_label} price per GPU-hour first"
             + (f"; {next(iter(accelerators))}" if len(accelerators) == 1 else ""))
    columns: list[tb.Col | str] = [
        tb.Col("where", max_width=18), tb.Col("instance", max_width=26),
        *(["accelerator"] if len(accelerators) > 1 else []), tb.num("GPUs"),
        *[tb.num(f"{t.replace('_', '-')}{' ▲' if t == terms[0] else ''}\n"
                 f"{currency + '/' if currency else 'per '}GPU-h") for t in terms],
        tb.Col("as of", max_width=10), tb.Col("flags", max_width=6)]
    table = _table(title, columns)
    letters = tb.FlagLetters()
    for key, by_term in ranked[:limit]:
        provider, region, zone, instance, accelerator, per_instance, _ = key
        present = list(by_term.values())
        dates = sorted(o["as_of"] for o in present if o.get("as_of"))
        flags = [f for o in present for f in o.get("quality_flags") or []]
        table.add_row(" ".join(p for p in (provider, region, zone) if p), instance,
                      *([accelerator] if len(accelerators) > 1 else []), tb.gpus(per_instance),
                      *[tb.amount(by_term[t]["price_per_gpu_hour"], by_term[t]["currency"],
                                  currency) if t in by_term else "—" for t in terms],
                      dates[0] if dates else "undated", letters.cell(flags, unique=True))
    table.caption = letters.legend() or None
    table.caption_justify = "left"
    out.print(table)
    if len(ranked) > limit:
        out.print(f"{len(ranked) - limit:,} more; narrow the filters or raise --limit",
                  highlight=False)


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
            table = _table(f"Catalogue versions: {len(page['items'])}"
                           + (" (the newest 100)" if page.get("next_page_token") else ""),
                           ["version", tb.Col("created (UTC)", max_width=10), "by", "kind",
                            tb.num("offers"), tb.Col("note", max_width=24)])
            for v in page["items"]:
                table.add_row(v["id"], v["created_at"][:16].replace("T", " "),
                              v["created_by"], v["kind"],
                              f"{v['offer_count']:,}" if v.get("offer_count") is not None
                              else "", v.get("note") or "")
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
            out.print(Text.assemble("created catalogue version ", (str(v["id"]), "bold"),
                                    f" ({v.get('offer_count', '?')} offers)"))

        _emit(answer, as_json, render)

    @catalog_app.command("refresh")
    @handled
    def refresh(
        provider: Annotated[str, typer.Option(help="aws, azure, gcp, or (with --format "
                                              "skypilot) the cloud of a SkyPilot vms.csv.")],
        from_file: Annotated[Path | None, typer.Option(
            "--from-file", exists=True, dir_okay=False, readable=True,
            help="A downloaded price document; without it, fetch live (azure: the Retail "
                 "Prices API; skypilot: the catalog's vms.csv on GitHub).")] = None,
        source_format: Annotated[str | None, typer.Option(
            "--format", help="aws, azure, gcp or skypilot (default: the provider's own).")]
        = None,
        as_of: Annotated[str | None, typer.Option(
            help="YYYY-MM-DD the prices held (default: the document's own date, or today "
                 "for a live fetch).")] = None,
        threshold: Annotated[str, typer.Option(help="Flag price moves over this fraction.")]
        = "0.20",
        dry_run: Annotated[bool, typer.Option("--dry-run", help="Report only.")] = False,
        hold_on_moves: Annotated[bool, typer.Option(
            "--hold-on-moves", help="Store nothing, and exit 4, when a price moves by more "
                                    "than the threshold: a person reviews it first.")] = False,
        api: ApiUrl = DEFAULT_API_URL, api_key: ApiKey = None, local: Local = False,
        as_json: AsJson = False,
    ) -> None:
        """Replace one provider's offers with its current public prices, as one new catalogue
        version, and print the diff: added, changed, removed, and price moves to review."""
        kind = source_format or provider
        if kind not in ("aws", "azure", "gcp", "skypilot"):
            raise typer.BadParameter("use --format skypilot for this provider's SkyPilot "
                                     "catalog, or aws/azure/gcp", param_hint="--provider")
        if from_file is not None:
            body = from_file.read_bytes()
        else:
            body = fetch_live(kind, provider)
            as_of = as_of or dt.date.today().isoformat()
        params: dict[str, Any] = {"format": kind, "threshold": threshold,
                                  "dry_run": str(dry_run).lower()}
        if kind == "skypilot":
            params["provider"] = provider
        if as_of:
            params["as_of"] = as_of
        media = "text/csv" if kind == "skypilot" else "application/json"
        held = False
        with connect(api, api_key, local) as client:
            if hold_on_moves and not dry_run:
                answer = client.call("POST", "/v1/catalog/refreshes", content=body,
                                     params={**params, "dry_run": "true"},
                                     headers={"Content-Type": media}).json()
                held = bool(answer["moves_over_threshold"])
            if not held:
                answer = client.call("POST", "/v1/catalog/refreshes", content=body,
                                     params=params, headers={"Content-Type": media}).json()

        def render(r: dict[str, Any]) -> None:
            if held:
                out.print(Text.assemble(("held", "bold"),
                                        ": prices moved over the threshold; nothing stored"))
            where = (Text.assemble("catalogue version ", (str(r["version_id"]), "bold"))
                     if r["version_id"] else Text("dry run, nothing stored"))
            out.print(Text.assemble(
                f"{r['provider']}: ", where, f": +{r['added']} added, ~{r['changed']} "
                f"changed, -{r['removed']} removed, {r['unchanged']} unchanged"))
            for reason, count in sorted(r["skipped"].items()):
                out.print(f"  skipped {count}: {reason}")
            if r["moves_over_threshold"]:
                table = Table("offer", "instance", "region", "term", "before", "after",
                              "change", title=f"Price moves over {r['threshold_fraction']}",
                              title_justify="left")
                for m in r["moves_over_threshold"]:
                    table.add_row(m["offer_id"], m["instance_type"], m["region"], m["term"],
                                  m["before"], m["after"],
                                  f"{float(m['change_fraction']):+.1%}")
                out.print(table)

        _emit(answer, as_json, render)
        if held:
            raise typer.Exit(4)


LIVE_SOURCES = {
    "skypilot": "https://raw.githubusercontent.com/skypilot-org/skypilot-catalog/master/"
                "catalogs/v8/{provider}/vms.csv",
    "azure": "https://prices.azure.com/api/retail/prices",
}
AZURE_FILTER = ("serviceName eq 'Virtual Machines' and priceType ne 'DevTestConsumption' and "
                "(startswith(armSkuName, 'Standard_ND') or startswith(armSkuName, "
                "'Standard_NC'))")
MAX_LIVE_PAGES = 200
AZURE_HOST = "prices.azure.com"
"""The only host a live Azure refresh talks to: its NextPageLink and any redirect must stay
on https://prices.azure.com (issue 36: a NextPageLink was followed to any host)."""


def fetch_live(kind: str, provider: str) -> bytes:
    """The provider's current public document (network permitting). AWS's regional offer
    files are hundreds of megabytes: download one and pass --from-file."""
    if kind == "gcp":
        raise typer.BadParameter(
            "the Cloud Billing Catalog API needs your API key: save the Compute Engine SKUs "
            "(https://cloudbilling.googleapis.com/v1/services/6F81-5844-456A/skus?key=KEY, "
            "every page, as a JSON array) and pass --from-file", param_hint="--from-file")
    if kind == "aws":
        raise typer.BadParameter(
            "download the region's offer file (https://pricing.us-east-1.amazonaws.com/offers/"
            "v1.0/aws/AmazonEC2/current/<region>/index.json), or its Savings Plans file "
            "(https://pricing.us-east-1.amazonaws.com/savingsPlan/v1.0/aws/"
            "AWSComputeSavingsPlan/current/region_index.json lists each region's), and pass "
            "--from-file",
            param_hint="--from-file")
    httpx = _httpx()
    try:
        return _fetch(httpx, kind, provider)
    except httpx.HTTPError as exc:
        raise CliError(f"could not fetch {kind} prices live ({exc}); download the document "
                       "and pass --from-file") from None


def _pinned_to_azure(url: str) -> None:
    """Refuse a URL that is not https://prices.azure.com (default port, no credentials)."""
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if (parts.scheme != "https" or parts.hostname != AZURE_HOST or port not in (None, 443)
            or parts.username is not None or parts.password is not None):
        where = f"{parts.scheme}://{parts.hostname or ''}"[:100]
        raise CliError(
            f"the Azure Retail Prices API sent the refresh to {where!r}; a live Azure refresh "
            f"only follows pages on https://{AZURE_HOST}, so nothing was fetched from there "
            "and nothing was stored")


def _fetch(httpx: Any, kind: str, provider: str, transport: Any = None) -> bytes:
    hooks = ({"request": [lambda request: _pinned_to_azure(str(request.url))]}
             if kind == "azure" else {})
    with httpx.Client(timeout=60, follow_redirects=True, event_hooks=hooks,
                      transport=transport) as web:
        if kind == "skypilot":
            answer = web.get(LIVE_SOURCES["skypilot"].format(provider=provider))
            answer.raise_for_status()
            content: bytes = answer.content
            return content
        pages: list[Any] = []
        url: str | None = LIVE_SOURCES["azure"]
        params: dict[str, str] | None = {"$filter": AZURE_FILTER}
        while url and len(pages) < MAX_LIVE_PAGES:
            answer = web.get(url, params=params)
            answer.raise_for_status()
            page = answer.json()
            pages.append(page)
            url, params = page.get("NextPageLink"), None
            if url:
                if not isinstance(url, str):
                    raise CliError("the Azure Retail Prices API answered a NextPageLink that "
                                   f"is not a URL on https://{AZURE_HOST}; nothing was stored")
                _pinned_to_azure(url)
        return json.dumps(pages).encode()


QuoteId = Annotated[str, typer.Argument(help="A stored quote's id (q_...).")]
LINES_PAGE_SIZE = 200


def _all_lines(client: Api, quote_id: str) -> list[dict[str, Any]]:
    """Every line of a stored quote, through GET /v1/quotes/{id}/lines page by page."""
    return _paged(client, f"/v1/quotes/{quote_id}/lines", {"page_size": LINES_PAGE_SIZE})


def register_quotes(quotes_app: typer.Typer) -> None:
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
