"""``cq serve-estimate|serve-quote|serve-plan``: serving a model at a load
(``POST /v1/serving-estimates``), a quote for the fleet (``POST /v1/quotes``,
``workload.serving``) and the cheapest deployments under the SLOs (``POST /v1/serving-plans``).
"""

from __future__ import annotations

import functools
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
    FailOnOption,
    Format,
    Local,
    Model,
    PolicyOption,
    RequestFile,
    Utilisation,
    _emit,
    _load,
    _model,
    _output,
    _price,
    _put,
    _put_accounting,
    _put_budget_and_deadline,
    _table,
    err,
    handled,
    labelled,
    out,
    working,
)
from service.cli.quote import _post_quote


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


def register(app: typer.Typer) -> None:
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
