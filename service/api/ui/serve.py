"""``/ui/serve``: the Serve tab (issue 19): a serving estimate for one deployment at a load
(``POST /v1/serving-estimates``), with p99 latency against throughput per replica; or, with
action=quote, the quote of the fleet it sizes (``POST /v1/quotes``, ``workload.serving``)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from service.api import presentation as fmt
from service.api.schemas.quotes import ALL_TERM_NAMES, MAX_SERVING_DURATION_S
from service.api.ui import latency_chart
from service.api.ui.common import (
    Outcome,
    _api,
    _both,
    _check_amounts,
    _choices,
    _integer_or_text,
    _list,
    _number,
    _problem,
    _purchase,
    _rendered,
    _scaled,
    _store_quote,
)

router = APIRouter(include_in_schema=False)

SERVE_DEFAULTS: dict[str, str] = {
    "model": "llama3.1-70b", "accelerator": "h100-sxm5-80gb", "gpus_per_replica": "4",
    "tp": "4", "pp": "1", "weight_precision": "fp8", "kv_cache_precision": "fp8",
    "engine": "trtllm", "max_batch": "256", "mode": "online", "requests_per_s": "10",
    "batch_size": "", "prompt_tokens": "1024", "output_tokens": "256", "ttft_p99": "2",
    "tpot_p99": "0.1", "price_per_gpu_hour": "",
    "duration_months": "12", "budget": "", "currency": "USD", "providers": "", "terms": "",
    "api_key": "",
}
"""The issue's example: Llama 3.1 70B in FP8 on 4 H100 (TP4), TensorRT-LLM, 10 requests/s;
then the fleet quote's fields (a year, every provider and term, no budget)."""
SERVE_LABELS: dict[str, str] = {
    "model": "Model preset", "accelerator": "Accelerator",
    "gpus_per_replica": "GPUs per replica", "tp": "Tensor parallel (TP)",
    "pp": "Pipeline stages (PP)", "weight_precision": "Weight precision",
    "kv_cache_precision": "KV-cache precision", "engine": "Serving engine",
    "max_batch": "Max batch", "mode": "Traffic", "requests_per_s": "Requests per second",
    "batch_size": "Batch size (fixed batch)", "prompt_tokens": "Prompt tokens (mean)",
    "output_tokens": "Output tokens (mean)", "ttft_p99": "TTFT p99 SLO (s)",
    "tpot_p99": "TPOT p99 SLO (s)", "price_per_gpu_hour": "Price per GPU-hour (USD)",
    "duration_months": "Duration (months)", "budget": "Budget", "currency": "Currency",
    "providers": "Providers", "terms": "Terms", "api_key": "API key",
}
"""The Serve form's labels, written once: the form and the error summary both use them."""
SERVE_FIELD_OF: dict[str, str] = {
    "model": "model", "model.preset": "model", "deployment.accelerator": "accelerator",
    "deployment.gpus_per_replica": "gpus_per_replica", "deployment.tp": "tp",
    "deployment.pp": "pp", "deployment.weight_precision": "weight_precision",
    "deployment.kv_cache_precision": "kv_cache_precision", "deployment.engine": "engine",
    "deployment.max_batch": "max_batch", "deployment.price_per_gpu_hour_usd":
        "price_per_gpu_hour", "traffic.mode": "mode",
    "traffic.requests_per_s": "requests_per_s", "traffic.batch_size": "batch_size",
    "traffic.prompt_tokens": "prompt_tokens", "traffic.prompt_tokens.mean": "prompt_tokens",
    "traffic.output_tokens": "output_tokens", "traffic.output_tokens.mean": "output_tokens",
    "traffic.slo.ttft_p99_s": "ttft_p99", "traffic.slo.tpot_p99_s": "tpot_p99",
}
"""Where an API field error belongs on the Serve form."""
SERVING_ESTIMATE_PREFIX = "workload.serving.estimate."
"""A serving quote's deployment and traffic errors, under this prefix, are the estimate's."""
SERVE_QUOTE_FIELD_OF: dict[str, str] = {
    "workload.serving.duration_s": "duration_months", "budget": "budget",
    "budget.amount": "budget", "budget.currency": "currency", "providers": "providers",
    "terms": "terms", "authorization": "api_key",
    # A deployment that does not fit (a modelling rule): more GPUs per replica is the remedy
    # the message gives first.
    "deployment": "gpus_per_replica",
}
"""Where a serving quote's own field errors belong on the Serve form."""
MONTH_S = fmt.MONTH_S
WEIGHT_PRECISIONS = {"bf16": "BF16", "fp8": "FP8", "int4": "INT4 (weight-only)"}
KV_PRECISIONS = {"bf16": "BF16", "fp8": "FP8"}
ENGINES = {"trtllm": "TensorRT-LLM", "vllm": "vLLM", "sglang": "SGLang",
           "unknown": "Unknown (the most conservative)"}
TRAFFIC_MODES = {"online": "Online: requests per second",
                 "offline": "Offline: the largest batch that fits",
                 "fixed_batch": "Fixed batch: sequences in lock-step"}
SWEEP_FRACTIONS = tuple((i + 0.5) / 10 for i in range(10))
"""The chart's loads, as shares of one replica's capacity: 5 %, 15 %, ..., 95 %. Below
capacity one replica serves each load (no SLO is sent with them, so sizing adds none), and the
curve is one replica's, as the figures are."""


@dataclass
class ServeOutcome(Outcome):
    """The Serve tab's outcome: its error summary follows the Serve form's fields."""

    def summary_labels(self) -> dict[str, str]:
        return SERVE_LABELS


def _serve_values(form: dict[str, str]) -> dict[str, str]:
    values = {name: str(form.get(name, default)).strip()[:200]
              for name, default in SERVE_DEFAULTS.items()}
    # The quote's idempotency nonce (a hidden field, as on the Train tab).
    values["nonce"] = str(form.get("nonce", "")).strip()[:64]
    return values


def serving_body(v: dict[str, str]) -> dict[str, Any]:
    """POST /v1/serving-estimates from the Serve form: empty optional fields are left out
    (max batch: the largest that fits; an SLO: not judged; the price: no cost block)."""
    deployment: dict[str, Any] = {
        "accelerator": v["accelerator"],
        "gpus_per_replica": _integer_or_text(v["gpus_per_replica"]),
        "tp": _integer_or_text(v["tp"]), "pp": _integer_or_text(v["pp"] or "1"),
        "weight_precision": v["weight_precision"],
        "kv_cache_precision": v["kv_cache_precision"], "engine": v["engine"]}
    if v["max_batch"]:
        deployment["max_batch"] = _integer_or_text(v["max_batch"])
    if v["price_per_gpu_hour"]:
        deployment["price_per_gpu_hour_usd"] = v["price_per_gpu_hour"].replace(",", "")
    traffic: dict[str, Any] = {"mode": v["mode"],
                               "prompt_tokens": {"mean": _number(v["prompt_tokens"])},
                               "output_tokens": {"mean": _number(v["output_tokens"])}}
    if v["mode"] == "online" and v["requests_per_s"]:
        traffic["requests_per_s"] = _number(v["requests_per_s"])
    if v["mode"] == "fixed_batch" and v["batch_size"]:
        traffic["batch_size"] = _integer_or_text(v["batch_size"])
    slo = {key: _number(v[name]) for key, name in (("ttft_p99_s", "ttft_p99"),
                                                   ("tpot_p99_s", "tpot_p99")) if v[name]}
    if slo:
        traffic["slo"] = slo
    return {"model": {"preset": v["model"]}, "deployment": deployment, "traffic": traffic}


def sweep_bodies(body: dict[str, Any], capacity_requests_per_s: float
                 ) -> list[dict[str, Any]]:
    """The request's deployment and lengths at ``SWEEP_FRACTIONS`` of one replica's capacity,
    online, without SLOs or a price (each is one replica's latency at that load)."""
    deployment = {k: val for k, val in body["deployment"].items()
                  if k != "price_per_gpu_hour_usd"}
    return [{"model": body["model"], "deployment": deployment,
             "traffic": {"mode": "online", "prompt_tokens": body["traffic"]["prompt_tokens"],
                         "output_tokens": body["traffic"]["output_tokens"],
                         "requests_per_s": capacity_requests_per_s * share}}
            for share in SWEEP_FRACTIONS]


def _serve_field(path: str, mode: str) -> str | None:
    path = path.removeprefix(SERVING_ESTIMATE_PREFIX)
    if path in SERVE_FIELD_OF:
        return SERVE_FIELD_OF[path]
    if path in SERVE_QUOTE_FIELD_OF:
        return SERVE_QUOTE_FIELD_OF[path]
    if path.startswith(("providers.", "terms.")):
        return path.split(".")[0]
    if path == "traffic":  # the mode's own field is missing or misplaced
        return {"online": "requests_per_s", "fixed_batch": "batch_size"}.get(mode, "mode")
    if path.startswith("traffic.slo"):
        return "ttft_p99" if "ttft" in path else "tpot_p99"
    return None


def _place_serve_errors(outcome: Outcome, problem: dict[str, Any]) -> None:
    """A problem's field errors next to their Serve fields; a modelling rule's single
    ``field`` and ``detail`` (tp × pp ≠ GPUs, an unknown accelerator) likewise."""
    mode = outcome.values["mode"]
    found = [(str(e.get("field", "")), str(e.get("message", "invalid")), e.get("code"))
             for e in problem.get("errors") or []]
    if not found and problem.get("field"):
        found = [(str(problem["field"]), str(problem.get("detail") or "invalid"), None)]
    for path, message, code in found:
        name = _serve_field(path, mode)
        if name is None:
            outcome.general_errors.append(f"{path}: {message}" if path else message)
            continue
        if name == "duration_months" and code == "less_than_equal":
            # The API's limit is in seconds; the form's field is in months.
            message = (f"Input should be at most {MAX_SERVING_DURATION_S / MONTH_S:,.0f} "
                       f"months ({MAX_SERVING_DURATION_S:,.0f} s)")
        outcome.errors.setdefault(name, []).append(message.removeprefix("Value error, "))
    if not found:
        detail = str(problem.get("detail") or problem.get("title") or "the request failed")
        if problem.get("status") in (401, 403):
            outcome.errors.setdefault("api_key", []).append(detail)
        else:
            outcome.general_errors.append(detail)


def _serve_charts(answer: dict[str, Any], sweep: list[dict[str, Any]],
                  values: dict[str, str], online: bool) -> dict[str, str]:
    """p99 TTFT (s) and p99 TPOT (ms) against output tokens/s per replica, with the SLOs
    and, for an online load, the requested load."""
    x_unit = "output tokens/s per replica"
    throughput = answer["throughput"]["output_tokens_per_s"]
    drawn: dict[str, str] = {}
    for key, name, scale, unit, slo_field in (
            ("ttft_s", "TTFT", 1.0, "s", "ttft_p99"), ("tpot_s", "TPOT", 1e3, "ms", "tpot_p99")):
        points = [latency_chart.CurvePoint(
            x=s["throughput"]["output_tokens_per_s"], y=s["latency"][key]["p99"] * scale,
            label=f"{s['throughput']['requests_per_s']:,.3g} requests/s per replica, "
                  f"{s['throughput']['output_tokens_per_s']:,.0f} output tokens/s")
            for s in sweep]
        marked = latency_chart.CurvePoint(
            x=throughput, y=answer["latency"][key]["p99"] * scale,
            label=f"{answer['throughput']['requests_per_s']:,.3g} requests/s per replica "
                  f"({answer['sizing']['replicas']:,} replicas), {throughput:,.0f} output "
                  "tokens/s") if online else None
        limit = _number(values[slo_field]) if values[slo_field] else None
        slo = float(limit) * scale if isinstance(limit, int | float) else None
        drawn[name.lower()] = _both(
            latency_chart.latency_curve, f"serve-{name.lower()}",
            f"p99 {name} against throughput per replica", points, marked=marked, limit=slo,
            limit_label=f"SLO p99 {name} {slo:g} {unit}" if slo is not None else "SLO",
            series=f"p99 {name}", x_unit=x_unit, y_label=f"p99 {name} ({unit})", y_unit=unit)
    return drawn


async def run_serve(request: Request, outcome: Outcome) -> None:
    """The estimate, then (when it fits) the sweep for the chart, through the API."""
    if not _check_amounts(outcome, "price_per_gpu_hour"):
        return
    body = serving_body(outcome.values)
    async with _api(request) as client:
        response = await client.post("/v1/serving-estimates", json=body)
        if response.status_code != 200:
            _place_serve_errors(outcome, _problem(response))
            return
        answer = response.json()
        outcome.result = answer
        capacity = answer["throughput"]["capacity_requests_per_s"]
        if not answer["memory"]["fits"] or not capacity > 0:
            return  # no load is served: nothing to draw
        sweep = []
        for point_body in sweep_bodies(body, capacity):
            point = await client.post("/v1/serving-estimates", json=point_body)
            if point.status_code == 200 and point.json()["sizing"]["replicas"] == 1:
                sweep.append(point.json())
    outcome.extra["sweep"] = sweep
    if not sweep:
        return
    online = outcome.values["mode"] == "online"
    outcome.drawings.append(lambda: _serve_charts(answer, sweep, outcome.values, online))


def _months_as_s(text: str) -> Any:
    """Months from the form as seconds (``MONTH_S`` each), or the text for the API to
    refuse naming ``workload.serving.duration_s``."""
    return _scaled(_number(text), MONTH_S)


def serving_quote_body(v: dict[str, str]) -> dict[str, Any]:
    """POST /v1/quotes for the Serve form's fleet: its serving estimate without the price
    (a quote prices every line from the catalogue, and refuses one), held for the duration,
    with the budget, providers and terms given (empty: all)."""
    estimate = serving_body(v)
    estimate["deployment"].pop("price_per_gpu_hour_usd", None)
    body: dict[str, Any] = {"workload": {"serving": {
        "estimate": estimate, "duration_s": _months_as_s(v["duration_months"])}}}
    if v["terms"]:
        body["terms"] = _list(v["terms"])
    return {**body, **_purchase(v)}


async def run_serve_quote(request: Request, outcome: Outcome) -> None:
    """The fleet's quote through POST /v1/quotes with the form's key; the page's nonce is
    the idempotency key, so submitting the same page twice replays one stored quote."""
    key = outcome.values["api_key"]
    if not key:
        outcome.errors["api_key"] = ["a quote is stored: give an API key with quotes:write"]
        return
    if not _check_amounts(outcome, "budget"):
        return
    response = await _store_quote(request, outcome, serving_quote_body(outcome.values),
                                  "ui-serve-")
    if response.status_code not in (200, 201):
        _place_serve_errors(outcome, _problem(response))
        return
    outcome.result = response.json()


SERVE_RUNNERS = {"serve": run_serve, "quote": run_serve_quote}
SERVE_ACTION_LABELS = {"serve": "Estimate serving", "quote": "Quote this fleet"}


async def _serve_page(request: Request, outcome: Outcome, status: int = 200) -> HTMLResponse:
    outcome.values["api_key"] = ""  # never echoed back into the page, nor taken from a URL
    outcome.values["nonce"] = uuid.uuid4().hex  # a fresh page is a fresh quote
    return await _rendered(
        request, "serve.html", status, outcome, choices=await _choices(request),
        labels=SERVE_LABELS, weight_precisions=WEIGHT_PRECISIONS, kv_precisions=KV_PRECISIONS,
        engines=ENGINES, modes=TRAFFIC_MODES, actions=SERVE_ACTION_LABELS,
        all_terms=ALL_TERM_NAMES)


@router.get("/ui/serve", response_class=HTMLResponse)
async def portal_serve(request: Request) -> HTMLResponse:
    """The Serve tab's form (query parameters pre-fill it)."""
    outcome = ServeOutcome(values=_serve_values(dict(request.query_params)))
    return await _serve_page(request, outcome)


@router.post("/ui/serve", response_class=HTMLResponse)
async def portal_serve_submit(request: Request) -> HTMLResponse:
    """The serving estimate for the form, its figures, and latency against throughput; or,
    with action=quote, the quote of the fleet it sizes (POST /v1/quotes)."""
    form = await request.form()
    raw = {k: v for k, v in form.items() if isinstance(v, str)}
    outcome = ServeOutcome(values=_serve_values(raw), action=raw.get("action") or "serve")
    if outcome.action not in SERVE_RUNNERS:
        outcome.general_errors.append("choose " + " or ".join(SERVE_ACTION_LABELS.values()))
        return await _serve_page(request, outcome, status=400)
    await SERVE_RUNNERS[outcome.action](request, outcome)
    failed = bool(outcome.errors or outcome.general_errors) and outcome.result is None
    return await _serve_page(request, outcome, status=422 if failed else 200)
