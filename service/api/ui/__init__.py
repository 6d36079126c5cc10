"""``/ui``: a server-rendered portal page for planners and procurement.

The page builds the same JSON bodies a client would and sends them to this app's own API in
process (``httpx.ASGITransport``), so the figures, the validation and the error messages are
the API's. Field errors from a problem's ``errors`` list are shown next to their form fields.
No script, no build step, no CDN: HTML, one stylesheet from ``/static`` and inline SVG charts.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import re
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from html import escape
from typing import Any

import anyio
import anyio.to_thread
import httpx
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, PackageLoader, select_autoescape
from pydantic import TypeAdapter, ValidationError
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from service.api import presentation as fmt
from service.api.deps import SessionDep
from service.api.schemas.prices import MAX_PRICE_PER_GPU_HOUR, DecimalString, PricePerGpuHour
from service.api.schemas.quotes import ALL_TERM_NAMES, MAX_SERVING_DURATION_S
from service.api.tracing import traced_client
from service.api.ui import charts, latency_chart
from service.catalog.models import Quote
from service.core.plausibility import (
    COSTLY_PREFIX,
    IMPRACTICAL_COST,
    IMPRACTICAL_WALL_CLOCK,
    LONG_RUN_PREFIX,
)

router = APIRouter(include_in_schema=False)
templates = Environment(loader=PackageLoader("service.api.ui", "templates"),
                        autoescape=select_autoescape(["html"]), trim_blocks=True,
                        lstrip_blocks=True)
templates.globals["fmt"] = fmt

ACTIONS = ("estimate", "optimise", "quote", "budget_plan", "largest_model")
ACTION_LABELS: dict[str, str] = {
    "estimate": "Estimate", "optimise": "Optimise", "quote": "Quote",
    "budget_plan": "Budget plan", "largest_model": "Largest model"}
DEFAULTS: dict[str, str] = {
    "model": "llama3.1-70b", "tokens": "2e12", "seq_len": "8192", "global_batch": "512",
    "accelerator": "h100-sxm5-80gb", "gpus": "256", "gpus_min": "", "gpus_max": "",
    "gpus_step": "", "tp": "8", "pp": "4", "cp": "1", "micro_batch": "1", "zero_stage": "1",
    "recompute": "none", "budget": "", "currency": "USD", "deadline_days": "",
    "providers": "", "price_per_gpu_hour": "", "tokens_per_param": "20",
    "candidate_models": "", "api_key": "", "nonce": "", "objective": "time",
}
FIELD_LABELS: dict[str, str] = {
    "model": "Model preset", "tokens": "Training tokens", "seq_len": "Sequence length",
    "global_batch": "Global batch", "accelerator": "Accelerator", "gpus": "GPU count",
    "gpus_min": "GPU range: from", "gpus_max": "to", "gpus_step": "step",
    "tp": "Tensor parallel", "pp": "Pipeline stages", "cp": "Context parallel",
    "micro_batch": "Micro-batch", "zero_stage": "ZeRO stage", "recompute": "Recompute",
    "objective": "Optimise for", "budget": "Budget", "currency": "Currency",
    "deadline_days": "Deadline (days)", "price_per_gpu_hour": "Price per GPU-hour (USD)",
    "providers": "Providers (Quote, budget plans)", "api_key": "API key (Quote)",
    "tokens_per_param": "Tokens per parameter", "candidate_models": "Candidate presets",
}
"""Each form field's label, written once: the form and the error summary both use it."""
SUMMARY_LABELS: dict[str, str] = {"gpus_max": "GPU range: to", "gpus_step": "GPU range: step"}
"""Where a label leans on its neighbour on the form, the error summary's fuller name."""
OBJECTIVES: dict[str, str] = {
    "time": "Time: the fastest plan", "cost": "Cost: the cheapest plan",
    "cost_deadline": "Cost under a deadline: the cheapest that meets it"}
DEFAULT_DEADLINE_DAYS = 90
"""Optimise's deadline when 'cost under a deadline' is chosen and none is given: a quarter,
about the length of the largest published pre-training runs (Llama 3 405B: 54 days)."""
# Where an API field error belongs on the form (after the workload prefix is removed).
FIELD_OF: dict[str, str] = {
    "model": "model", "model.preset": "model", "training.tokens": "tokens",
    "training.seq_len": "seq_len", "training.global_batch_seqs": "global_batch",
    "training.global_batch_seqs_options": "global_batch",
    "cluster.accelerator": "accelerator", "cluster.num_gpus": "gpus",
    "cluster.num_gpus_range": "gpus_min", "cluster.num_gpus_range.start": "gpus_min",
    "cluster.num_gpus_range.stop": "gpus_max", "cluster.num_gpus_range.step": "gpus_step",
    "clusters.0.accelerator": "accelerator", "clusters.0.num_gpus": "gpus",
    "clusters.0.num_gpus_range": "gpus_min", "clusters.0.num_gpus_range.start": "gpus_min",
    "clusters.0.num_gpus_range.stop": "gpus_max", "clusters.0.num_gpus_range.step": "gpus_step",
    "parallelism.tp": "tp", "parallelism.pp": "pp", "parallelism.cp": "cp",
    "parallelism.micro_batch": "micro_batch", "parallelism.zero_stage": "zero_stage",
    "parallelism.recompute": "recompute", "budget.amount": "budget",
    "budget.currency": "currency", "budget": "budget", "deadline_s": "deadline_days",
    "constraints.max_train_s": "deadline_days",
    "providers": "providers", "providers.0": "providers",
    "constraints.price_per_gpu_hour_usd": "price_per_gpu_hour", "authorization": "api_key",
    "tokens_per_param": "tokens_per_param", "candidate_models": "candidate_models",
    "objective": "objective",
}
NUMBER_FIELDS = ("tokens", "seq_len", "global_batch", "gpus", "gpus_min", "gpus_max",
                 "gpus_step", "tp", "pp", "cp", "micro_batch", "zero_stage")


@dataclass
class Outcome:
    """What the page shows: the form's values, errors by field, and results."""

    values: dict[str, str]
    action: str | None = None
    errors: dict[str, list[str]] = field(default_factory=dict)
    general_errors: list[str] = field(default_factory=list)
    result: dict[str, Any] | None = None
    charts: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    drawings: list[Callable[[], dict[str, str]]] = field(default_factory=list)
    """Charts still to draw: drawn with the page, off the event loop (``_rendered``)."""

    def summary(self) -> list[tuple[str | None, str]]:
        """Every error for the summary at the top of the page (the GOV.UK error-summary
        pattern): the service's general errors, then each field's, in the form's order, with
        the id of the field it links to (None: no field)."""
        items: list[tuple[str | None, str]] = [(None, e) for e in self.general_errors]
        for name in FIELD_LABELS:
            label = SUMMARY_LABELS.get(name, FIELD_LABELS[name])
            items += [(f"f-{name}", f"{label}: {e}") for e in self.errors.get(name, [])]
        return items


def _number(text: str) -> Any:
    """A number for the API, or the text itself, so the API names the field and the rule.

    NaN, inf and 1e400 cannot travel as JSON (a 500, issue 14). NaN goes as its text (the API
    refuses it as not a number); ±inf, and numbers beyond a float (1e400, 400 nines), go as
    the largest float of their sign, so the API refuses them naming the field and its limit
    (issue 36)."""
    cleaned = text.strip().replace(",", "").replace("_", "")
    try:
        value = float(cleaned)
    except ValueError:
        return text
    if math.isnan(value):
        return text
    if math.isinf(value):
        return math.copysign(sys.float_info.max, value)
    if value == int(value) and "e" not in cleaned.lower() and "." not in cleaned:
        return int(value)
    return value


def _scaled(value: Any, factor: float) -> Any:
    """A number from the form times a unit's ``factor``, kept finite: a product that would
    overflow (1e308 days) is sent as the largest float of its sign, which the API refuses
    naming the field and its limit (an infinity cannot travel as JSON: a 500, issue 36)."""
    if not isinstance(value, int | float):
        return value
    product = float(value) * factor
    return product if math.isfinite(product) else math.copysign(sys.float_info.max, value)


def _days_as_s(text: str) -> Any:
    """Days from the form as seconds for the API, or the text itself for the API to refuse."""
    return _scaled(_number(text), fmt.DAY_S)


AMOUNT_RULES: dict[str, TypeAdapter[str]] = {
    "price_per_gpu_hour": TypeAdapter(PricePerGpuHour), "budget": TypeAdapter(DecimalString)}
"""The money fields of both forms, each with the API's own rule for it, checked on the form
before any arithmetic (the Estimate form's cost is worked out here, not by the API)."""
AMOUNT_MESSAGES = {
    "price_per_gpu_hour": f"Enter a price in USD of at most {MAX_PRICE_PER_GPU_HOUR:,f} per "
                          "GPU-hour, with up to 6 decimal places, such as 2.50",
    "budget": "Enter an amount of at most 9,999,999,999,999.999999 (up to 13 digits, then up "
              "to 6 decimal places), such as 5000000.00"}


def _amount(name: str, text: str) -> Decimal | None:
    """A money field (commas allowed) as the API reads it, or None when the API's rule
    refuses it (NaN, ±inf, 1e308, 400 nines, a negative): bounded before any quantize."""
    try:
        return Decimal(AMOUNT_RULES[name].validate_python(text.replace(",", "")))
    except ValidationError:
        return None


def _check_amounts(outcome: Outcome, *names: str) -> bool:
    """False, with the rule next to each field, when a money field holds a value the API
    would refuse; an empty field is fine (none given)."""
    refused = [name for name in names if outcome.values[name]
               and _amount(name, outcome.values[name]) is None]
    for name in refused:
        outcome.errors.setdefault(name, []).append(AMOUNT_MESSAGES[name])
    return not refused


def _values(form: dict[str, str]) -> dict[str, str]:
    return {name: str(form.get(name, default)).strip()[:200] for name, default in
            DEFAULTS.items()}


def _training(v: dict[str, str]) -> dict[str, Any]:
    return {"seq_len": _number(v["seq_len"]), "global_batch_seqs": _number(v["global_batch"]),
            "tokens": _number(v["tokens"])}


def _integer_or_text(text: str) -> Any:
    value = _number(text)
    return int(value) if isinstance(value, float) and value.is_integer() else value


def estimate_body(v: dict[str, str]) -> dict[str, Any]:
    return {
        "model": {"preset": v["model"]},
        "cluster": {"accelerator": v["accelerator"], "num_gpus": _integer_or_text(v["gpus"])},
        "parallelism": {"tp": _integer_or_text(v["tp"]), "pp": _integer_or_text(v["pp"]),
                        "cp": _integer_or_text(v["cp"]),
                        "micro_batch": _integer_or_text(v["micro_batch"]),
                        "zero_stage": _integer_or_text(v["zero_stage"]),
                        "recompute": v["recompute"]},
        "training": _training(v),
    }


def _cluster(v: dict[str, str]) -> dict[str, Any]:
    if v["gpus_min"] or v["gpus_max"]:
        return {"accelerator": v["accelerator"], "num_gpus_range": {
            "start": _integer_or_text(v["gpus_min"] or v["gpus"]),
            "stop": _integer_or_text(v["gpus_max"] or v["gpus"]),
            "step": _integer_or_text(v["gpus_step"] or v["gpus_min"] or "1")}}
    return {"accelerator": v["accelerator"], "num_gpus": _integer_or_text(v["gpus"])}


def optimise_body(v: dict[str, str]) -> dict[str, Any]:
    """The plan search for the chosen objective: time ranks by training time; cost by USD
    with a price, else by GPU-hours (the cost the service can compute without one); cost
    under a deadline as cost, with the deadline given or ``DEFAULT_DEADLINE_DAYS``."""
    by_cost = v["objective"] in ("cost", "cost_deadline")
    body: dict[str, Any] = {"model": {"preset": v["model"]}, "training": _training(v),
                            "cluster": _cluster(v), "top_k": 30,
                            "objective": ("cost" if v["price_per_gpu_hour"] else "gpu_hours")
                            if by_cost else "time"}
    if v["price_per_gpu_hour"]:
        body["constraints"] = {"price_per_gpu_hour_usd": v["price_per_gpu_hour"].replace(",", "")}
    deadline = v["deadline_days"] or (
        str(DEFAULT_DEADLINE_DAYS) if v["objective"] == "cost_deadline" else "")
    if deadline:
        body.setdefault("constraints", {})["max_train_s"] = _days_as_s(deadline)
    return body


def quote_body(v: dict[str, str]) -> dict[str, Any]:
    body: dict[str, Any] = {"workload": {"optimise": {
        "model": {"preset": v["model"]}, "training": _training(v),
        "clusters": [{"accelerator": v["accelerator"],
                      "num_gpus": _integer_or_text(v["gpus"])}]}}}
    return {**body, **_purchase(v)}


def _purchase(v: dict[str, str]) -> dict[str, Any]:
    """The fields a quote and a budget plan share: providers, budget and deadline."""
    fields: dict[str, Any] = {}
    if v["providers"]:
        fields["providers"] = _list(v["providers"])
    if v["budget"]:
        fields["budget"] = {"amount": v["budget"].replace(",", ""), "currency": v["currency"]}
    if v.get("deadline_days"):  # the Serve form has none: a fleet is held for its duration
        fields["deadline_s"] = _days_as_s(v["deadline_days"])
    return fields


def _list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def budget_plan_body(v: dict[str, str], largest: bool = False) -> dict[str, Any]:
    """POST /v1/budget-plans: the form's one candidate cluster (its GPU range, or its GPU
    count), budget, deadline and providers; for 'largest_model' the candidates and the
    tokens-per-parameter ratio instead of the model."""
    body: dict[str, Any] = {"training": _training(v), "clusters": [_cluster(v)]}
    if largest:
        body["objective"] = "largest_model"
        # Replaced by tokens_per_param × each candidate's parameters; the schema wants one.
        body["training"]["tokens"] = 1.0
        body["tokens_per_param"] = _number(v["tokens_per_param"] or "20")
        if candidates := _list(v["candidate_models"]):
            body["candidate_models"] = candidates
    else:
        body["model"] = {"preset": v["model"]}
    return {**body, **_purchase(v)}


SECONDS_LIMIT = re.compile(r"(less|greater) than (or equal to )?([0-9.e+]+)$")


def _in_days(message: str) -> str:
    """An API limit in seconds, as the form's field (in days) reads it: '... equal to
    10000000000' gains ' s (115,741 days)'."""
    match = SECONDS_LIMIT.search(message)
    if match is None:
        return message
    try:
        limit_s = float(match.group(3))
    except ValueError:
        return message
    return f"{message} s ({limit_s / fmt.DAY_S:,.0f} days)" if limit_s > 0 else message


def _place_errors(outcome: Outcome, problem: dict[str, Any], prefix: str = "") -> None:
    placed = False
    for error in problem.get("errors") or []:
        path = str(error.get("field", ""))
        if prefix and path.startswith(prefix):
            path = path[len(prefix):]
        name = FIELD_OF.get(path)
        if name is None and path.startswith("deadline_s"):
            name = "deadline_days"
        if name is None and path.startswith(("providers.", "candidate_models.")):
            name = path.split(".")[0]
        if name is not None:
            message = str(error.get("message", "invalid"))
            if name == "deadline_days":
                message = _in_days(message)
            outcome.errors.setdefault(name, []).append(message)
            placed = True
        else:
            outcome.general_errors.append(f"{path}: {error.get('message', 'invalid')}")
            placed = True
    if not placed:
        detail = str(problem.get("detail") or problem.get("title") or "the request failed")
        if problem.get("status") in (401, 403):
            outcome.errors.setdefault("api_key", []).append(detail)
        else:
            outcome.general_errors.append(detail)


def _api(request: Request) -> httpx.AsyncClient:
    return traced_client(request.app, httpx.AsyncClient(
        transport=httpx.ASGITransport(app=request.app), base_url="http://ui.internal",
        timeout=660.0))


def _problem(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        body = {}
    return body if isinstance(body, dict) else {"detail": response.text[:300]}


def _estimate_charts(answer: dict[str, Any], ident: str) -> dict[str, str]:
    memory = _both(
        charts.stacked_bar, f"{ident}-memory", "Memory per GPU",
        [charts.Part(label, size) for label, size in fmt.memory_parts(answer)],
        unit="GiB", scale=fmt.GIB_BYTES, limit=answer["memory"]["capacity_bytes_per_gpu"],
        limit_label="GPU memory")
    step = answer["time"]["step_s"]
    scale, unit = (1.0, "seconds per step") if step >= 1 else (1e-3, "milliseconds per step")
    timing = _both(
        charts.stacked_bar, f"{ident}-step", "Step time breakdown",
        [charts.Part(label, seconds) for label, seconds in fmt.step_parts(answer)],
        unit=unit, scale=scale)
    return {"memory": memory, "step": timing}


def _both(draw: Any, ident: str, *args: Any, **kwargs: Any) -> str:
    """A chart's wide and narrow drawings (the stylesheet shows one)."""
    return charts.responsive(draw(ident, *args, **kwargs),
                             draw(f"{ident}-narrow", *args, width=charts.NARROW_W, **kwargs))


async def _cheapest_on_demand(client: httpx.AsyncClient,
                              accelerator: str) -> dict[str, Any] | None:
    response = await client.get("/v1/offers", params={
        "accelerator": accelerator, "term": "on_demand", "page_size": 1})
    if response.status_code != 200:
        return None
    items = response.json().get("items") or []
    return items[0] if items else None


MAX_SHOWN_COST_USD = Decimal(10) ** 24
"""The largest cost the Estimate page works out and shows to the cent (27 digits, within
``Decimal``'s 28): a larger one (1e18 tokens at the largest price) is shown as above it."""
_COST_CONTEXT = decimal.Context(prec=400, Emax=999_999, Emin=-999_999)
"""Wide enough for any finite GPU-hours (a float, below 1.8e308) times a price that passed
``AMOUNT_RULES`` (at most 1,000,000), to the cent: the product is exact, then compared to the
cap."""


def _cost(gpu_hours: float, price: Decimal) -> dict[str, str]:
    """The page's cost figure: ``cost`` to the cent, or ``cost_over`` (the cap) when the
    cost is above ``MAX_SHOWN_COST_USD``; nothing for GPU-hours that are not a number."""
    if not math.isfinite(gpu_hours):
        return {}
    cost = _COST_CONTEXT.multiply(Decimal(str(gpu_hours)), price)
    if cost > MAX_SHOWN_COST_USD:
        return {"cost_over": str(MAX_SHOWN_COST_USD)}
    return {"cost": str(cost.quantize(Decimal("0.01"), context=_COST_CONTEXT))}


async def run_estimate(request: Request, outcome: Outcome) -> None:
    if not _check_amounts(outcome, "price_per_gpu_hour"):
        return
    async with _api(request) as client:
        response = await client.post("/v1/estimates", json=estimate_body(outcome.values))
        if response.status_code != 200:
            _place_errors(outcome, _problem(response))
            return
        answer = response.json()
        outcome.result = answer
        outcome.drawings.append(lambda: _estimate_charts(answer, "estimate"))
        price_text = outcome.values["price_per_gpu_hour"]
        offer = None if price_text else await _cheapest_on_demand(
            client, outcome.values["accelerator"])
    given = _amount("price_per_gpu_hour", price_text) if price_text else None
    if given is not None:
        price = given
        basis = f"{price} USD per GPU-hour as given"
    elif offer is not None:
        price = Decimal(offer["price_per_gpu_hour"])
        basis = (f"the cheapest on-demand offer: {offer['provider']} {offer['region']} at "
                 f"{price:.4f} {offer['currency']} per GPU-hour, as of "
                 f"{offer['as_of'] or 'an unknown date'}")
        if offer.get("stale"):
            age = ("its source gives no date" if offer["age_days"] is None
                   else f"{offer['age_days']} days old")
            basis += f" (stale: {age}; re-check the price before relying on it)"
    else:
        return  # no price given and no on-demand offer for this accelerator: no cost shown
    outcome.extra.update(_cost(float(answer["time"]["gpu_hours"]), price))
    outcome.extra["cost_basis"] = basis


async def run_optimise(request: Request, outcome: Outcome) -> None:
    if outcome.values["objective"] not in OBJECTIVES:
        outcome.errors["objective"] = ["choose time, cost, or cost under a deadline"]
        return
    if outcome.values["objective"] == "cost_deadline" and not outcome.values["deadline_days"]:
        outcome.extra["default_deadline_days"] = DEFAULT_DEADLINE_DAYS
    if not _check_amounts(outcome, "price_per_gpu_hour"):
        return
    async with _api(request) as client:
        response = await client.post("/v1/parallelism-plans", json=optimise_body(outcome.values))
    if response.status_code != 200:
        _place_errors(outcome, _problem(response))
        return
    answer = response.json()
    outcome.result = answer
    if not answer["plans"]:
        return
    by_cost = answer["cost_basis"] == "usd"

    def point(plan: dict[str, Any]) -> charts.Point:
        x = float(plan["cost_usd"]) if by_cost else plan["time"]["gpu_hours"]
        label = (f"#{plan['rank']} {plan['num_gpus']:,} GPUs, "
                 f"{fmt.layout(plan['parallelism'], short=True)}")
        return charts.Point(x=x, y=plan["time"]["train_s"] / fmt.DAY_S, label=label)

    def draw() -> dict[str, str]:
        pareto = _both(
            charts.scatter, "pareto",
            "Training time against cost: ranked plans and the Pareto front",
            [point(p) for p in answer["plans"]], [point(p) for p in answer["pareto"]],
            point(answer["plans"][0]), x_unit="cost (USD)" if by_cost else "cost (GPU-hours)",
            y_unit="training time (days)")
        return {"pareto": pareto, **_estimate_charts(answer["plans"][0], "best")}

    outcome.drawings.append(draw)


async def _store_quote(request: Request, outcome: Outcome, body: dict[str, Any],
                       key_prefix: str) -> httpx.Response:
    """POST /v1/quotes with the form's API key; the page's nonce (a fresh page is a fresh
    nonce) is the idempotency key, so submitting the same page twice replays one quote."""
    async with _api(request) as client:
        return await client.post(
            "/v1/quotes", json=body,
            headers={"Authorization": f"Bearer {outcome.values['api_key']}",
                     "Idempotency-Key": key_prefix + (outcome.values["nonce"]
                                                      or uuid.uuid4().hex)})


async def run_quote(request: Request, outcome: Outcome) -> None:
    key = outcome.values["api_key"]
    if not key:
        outcome.errors["api_key"] = ["Quote stores a quote: give an API key with quotes:write"]
        return
    if not _check_amounts(outcome, "budget"):
        return
    response = await _store_quote(request, outcome, quote_body(outcome.values), "ui-")
    if response.status_code != 201:
        _place_errors(outcome, _problem(response), prefix="workload.optimise.")
        return
    outcome.result = response.json()


async def run_budget_plan(request: Request, outcome: Outcome) -> None:
    """Budget plan and Largest model: a read, so no key is needed (one given is sent, for a
    server that requires keys for reads)."""
    if not _check_amounts(outcome, "budget"):
        return
    key = outcome.values["api_key"]
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = budget_plan_body(outcome.values, largest=outcome.action == "largest_model")
    async with _api(request) as client:
        response = await client.post("/v1/budget-plans", json=body, headers=headers)
    if response.status_code != 200:
        _place_errors(outcome, _problem(response))
        return
    outcome.result = response.json()


RUNNERS = {"estimate": run_estimate, "optimise": run_optimise, "quote": run_quote,
           "budget_plan": run_budget_plan, "largest_model": run_budget_plan}


async def _choices(request: Request) -> dict[str, list[str]]:
    async with _api(request) as client:
        models = (await client.get("/v1/models", params={"page_size": 100})).json()
        accelerators = (await client.get("/v1/accelerators", params={"page_size": 100})).json()
    return {"models": [m["name"] for m in models.get("items", [])],
            "accelerators": [a["id"] for a in accelerators.get("items", [])]}


TOO_SLOW_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>The page took too long to draw</title>
<link rel="stylesheet" href="/static/ui.css"></head><body><main>
<h1>The page took too long to draw</h1>
<p>This page was not drawn within {limit_s} s (CQ_SEARCH_DEADLINE_S), so it was given up.
Nothing was stored. <a href="{back}">Back to the form</a>.</p></main></body></html>
"""
"""The answer when drawing a page's charts and template overran its time (503)."""


async def _rendered(request: Request, template: str, status: int,
                    outcome: Outcome | None = None, **context: Any) -> HTMLResponse:
    """A page drawn off the event loop: ``outcome``'s pending charts, then ``template``, in
    a worker thread, within ``CQ_SEARCH_DEADLINE_S``; past it, 503 with ``Retry-After``.

    Drawing is bounded by construction (at most ``charts.MAX_TICKS`` ticks an axis, the
    API's bounded lists of plans and loads), so the deadline is a backstop that keeps a
    replica answering if that ever breaks (issue 36: an axis loop froze the event loop): the
    event loop stays free meanwhile, and a thread that overruns is abandoned, not waited for."""
    def render() -> str:
        if outcome is not None:
            for draw in outcome.drawings:
                outcome.charts.update(draw())
            outcome.drawings.clear()
        return templates.get_template(template).render(o=outcome, **context)

    limit_s = float(request.app.state.settings.search_deadline_s)
    html: str | None = None
    with anyio.move_on_after(limit_s):
        html = await anyio.to_thread.run_sync(render, abandon_on_cancel=True)
    if html is None:
        page = TOO_SLOW_PAGE.format(limit_s=f"{limit_s:g}", back=escape(request.url.path))
        return HTMLResponse(page, status_code=503, headers={"Retry-After": "1"})
    return HTMLResponse(html, status_code=status)


async def _page(request: Request, outcome: Outcome, status: int = 200) -> HTMLResponse:
    outcome.values["nonce"] = uuid.uuid4().hex  # a fresh page is a fresh quote
    return await _rendered(
        request, "portal.html", status, outcome, choices=await _choices(request),
        actions=ACTION_LABELS, labels=FIELD_LABELS, objectives=OBJECTIVES,
        default_deadline_days=DEFAULT_DEADLINE_DAYS)


@router.get("/ui", response_class=HTMLResponse)
async def portal(request: Request) -> HTMLResponse:
    """The empty form (query parameters pre-fill it)."""
    values = _values(dict(request.query_params))
    values["api_key"] = ""  # never from a URL
    return await _page(request, Outcome(values=values))


@router.post("/ui", response_class=HTMLResponse)
async def portal_submit(request: Request) -> HTMLResponse:
    form = await request.form()
    raw = {k: v for k, v in form.items() if isinstance(v, str)}
    outcome = Outcome(values=_values(raw), action=raw.get("action"))
    if outcome.action not in RUNNERS:
        outcome.general_errors.append("choose " + ", ".join(
            list(ACTION_LABELS.values())[:-1]) + " or " + list(ACTION_LABELS.values())[-1])
        return await _page(request, outcome, status=400)
    await RUNNERS[outcome.action](request, outcome)
    outcome.values["api_key"] = ""  # never echoed back into the page
    failed = bool(outcome.errors or outcome.general_errors) and outcome.result is None
    return await _page(request, outcome, status=422 if failed else 200)


# -- the Serve tab (issue 19): POST /v1/serving-estimates, with latency against throughput ----

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

    def summary(self) -> list[tuple[str | None, str]]:
        items: list[tuple[str | None, str]] = [(None, e) for e in self.general_errors]
        for name, label in SERVE_LABELS.items():
            items += [(f"f-{name}", f"{label}: {e}") for e in self.errors.get(name, [])]
        return items


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


QUOTE_ID = re.compile(r"^q_[0-9a-f]{32}$")
PROBLEM_TITLES = {401: "Sign-in needed", 403: "Not allowed", 404: "Quote not found"}


def _when(stamp: str | None) -> str:
    """An API timestamp for people: '2026-11-23 11:59:49 UTC'."""
    if not stamp:
        return "—"
    try:
        moment = dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return stamp
    if moment.tzinfo is not None:
        moment = moment.astimezone(dt.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _short(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _setting(value: Any) -> str:
    if value is None:
        return "not set"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) if value else "none"
    return _short(value) if isinstance(value, dict) else str(value)


def _days(line: dict[str, Any]) -> str:
    """A line's wall-clock p50 in days with its p10–p90 band: '8.2 (7.9–8.6)'."""
    band = (line.get("uncertainty") or {}).get("wall_clock_s")
    if not band:
        wall = line.get("wall_clock_s")
        return "—" if wall is None else f"{wall / fmt.DAY_S:,.1f}"
    return (f"{band['p50'] / fmt.DAY_S:,.1f} ({band['p10'] / fmt.DAY_S:,.1f}–"
            f"{band['p90'] / fmt.DAY_S:,.1f})")


def _sentence(text: str) -> str:
    """An API phrase as a sentence: its first letter capitalised (the rest kept), a full stop."""
    text = text.strip()
    if not text:
        return ""
    return text[0].upper() + text[1:] + ("" if text.endswith((".", "!", "?")) else ".")


templates.globals.update(when=_when, short=_short, setting=_setting, days=_days,
                         sentence=_sentence)


IMPRACTICAL_CODES = frozenset({IMPRACTICAL_WALL_CLOCK, IMPRACTICAL_COST})
"""The coded warnings that say a plan is one nobody would run (too long or too dear)."""


def _impractical(answer: Any) -> list[str]:
    """The sentences of the warnings of ``answer`` (an estimate, a plan, a quote line) that
    say it is a plan nobody would run, in their order, recognised by their codes
    (``warning_details``: ``impractical_wall_clock``, ``impractical_cost``)."""
    details = answer.get("warning_details") or []
    if details:
        return [d["message"] for d in details if d["code"] in IMPRACTICAL_CODES]
    # A quote line stored before the codes existed (2026-12-02) has warnings but no
    # warning_details. For such a line alone the sentence's opening words decide: the
    # prefixes service/core/plausibility.py has always written. Anything with codes is
    # classified by its codes only.
    return [w for w in answer.get("warnings") or []
            if w.startswith((LONG_RUN_PREFIX, COSTLY_PREFIX))]


templates.globals["impractical"] = _impractical


def _tokens(value: Any) -> str:
    return f"{fmt.si(value)} ({value:,.0f})" if isinstance(value, int | float) else str(value)


def _model_rows(model: dict[str, Any] | None) -> list[tuple[str, str]]:
    if not model:
        return []
    if model.get("preset"):
        return [("Model", str(model["preset"]))]
    shape = ", ".join(f"{label} {model[key]:,}" for key, label in (
        ("num_layers", "layers"), ("hidden_size", "hidden size")) if isinstance(
        model.get(key), int))
    return [("Model", f"{model.get('name') or 'custom'} (custom architecture"
                      f"{': ' + shape if shape else ''})")]


def _training_rows(training: dict[str, Any] | None) -> list[tuple[str, str]]:
    if not training:
        return []
    rows = [("Training tokens", _tokens(training.get("tokens"))),
            ("Sequence length", f"{training.get('seq_len', 0):,}")]
    if training.get("global_batch_seqs") is not None:
        rows.append(("Global batch", f"{training['global_batch_seqs']:,} sequences"))
    elif training.get("global_batch_seqs_options"):
        rows.append(("Global batch", "one of " + ", ".join(
            f"{b:,}" for b in training["global_batch_seqs_options"]) + " sequences"))
    elif isinstance(training.get("global_batch_range"), dict):
        span = training["global_batch_range"]
        rows.append(("Global batch", f"{span.get('start')}–{span.get('stop')} step "
                                     f"{span.get('step')} sequences"))
    if training.get("precision"):
        rows.append(("Precision", str(training["precision"])))
    return rows


def _cluster_text(cluster: dict[str, Any]) -> str:
    span = cluster.get("num_gpus_range")
    if isinstance(span, dict):
        count = f"{span.get('start'):,}–{span.get('stop'):,} step {span.get('step'):,}"
    else:
        count = f"{cluster.get('num_gpus', 0):,}"
    return f"{count} × {cluster.get('accelerator')}"


def workload_rows(stored: dict[str, Any] | None, quote: dict[str, Any]
                  ) -> list[tuple[str, str]]:
    """What was quoted, from the stored request (or, without it, from the quote's lines)."""
    rec = quote.get("recommended") or (quote.get("lines") or [None])[0]
    rows: list[tuple[str, str]] = []
    workload = (stored or {}).get("workload") or {}
    if estimate := workload.get("estimate"):
        rows.append(("Workload", "estimate: one cluster, one layout"))
        rows += _model_rows(estimate.get("model"))
        rows.append(("Cluster", _cluster_text(estimate.get("cluster") or {})))
        rows += _training_rows(estimate.get("training"))
    elif optimise := workload.get("optimise"):
        rows.append(("Workload", "optimise: the layout searched for each candidate cluster"))
        rows += _model_rows(optimise.get("model"))
        rows.append(("Candidate clusters", "; ".join(
            _cluster_text(c) for c in optimise.get("clusters") or [])))
        rows += _training_rows(optimise.get("training"))
    elif hours := workload.get("gpu_hours"):
        rows += [("Workload", "GPU-hours given"),
                 ("Accelerator", str(hours.get("accelerator"))),
                 ("GPU-hours", fmt.number(hours.get("gpu_hours") or 0)),
                 ("GPUs at once", f"{hours.get('num_gpus', 0):,}")]
    elif serving := workload.get("serving"):
        given = serving.get("estimate") or serving.get("plan") or {}
        traffic = given.get("traffic") or {}
        rows.append(("Workload", "serving: " + (
            "one deployment, sized for its load" if serving.get("estimate") else
            "the deployment with the fewest GPUs per candidate accelerator")))
        rows += _model_rows(given.get("model"))
        if traffic.get("requests_per_s") is not None:
            rows.append(("Load", f"{traffic['requests_per_s']:,} requests/s"))
        rows.append(("Duration", fmt.duration(serving.get("duration_s") or 0)))
    elif rec:
        rows += [("Accelerator", str(rec.get("accelerator"))),
                 ("GPUs", f"{rec.get('num_gpus', 0):,}")]
    if rec and rec.get("serving"):
        fleet = rec["serving"]
        rows.append(("Fleet (recommended line)", (
            f"{fleet['replicas']:,} × {fleet['gpus_per_replica']} {fleet['accelerator']} "
            f"(TP {fleet['tp']}, {fleet['weight_precision']} weights, {fleet['engine']}); "
            f"p99 TTFT {fleet['ttft_p99_s']:.3g} s, p99 TPOT {fleet['tpot_p99_s']:.3g} s")))
    if rec and rec.get("plan"):
        rows.append(("Layout (recommended line)", fmt.layout(rec["plan"])))
        if rec.get("global_batch_seqs"):
            rows.append(("Global batch (recommended line)",
                         f"{rec['global_batch_seqs']:,} sequences"))
    if stored:
        rows += [
            ("Providers", ", ".join(stored.get("providers") or []) or "all"),
            ("Regions", ", ".join(stored.get("regions") or []) or "all"),
            ("Terms", ", ".join(fmt.term_label(t) for t in stored.get("terms") or []) or "all"),
            ("Catalogue version asked for", stored.get("catalog_version") or "the current one"),
            ("Policy asked for", stored.get("policy") or "the server's default"),
        ]
        if stored.get("accounting") == "amortised":
            rows.append(("Reservation utilisation",
                         str(stored.get("reservation_utilisation_fraction"))))
    return rows


def budget_view(quote: dict[str, Any]) -> dict[str, Any]:
    """How far the judged amount (commitment, or job cost when amortised) is from the budget."""
    rec, budget = quote.get("recommended"), quote.get("budget")
    judged = "Job cost" if quote.get("accounting") == "amortised" else "Commitment"
    view: dict[str, Any] = {"difference": None, "within": None, "judged": judged}
    if not rec or not budget or rec.get("total") is None \
            or budget.get("currency") != rec.get("currency"):
        return view
    try:
        difference = Decimal(budget["amount"]) - Decimal(rec["total"])
    except (InvalidOperation, KeyError):
        return view
    view.update(difference=str(abs(difference)), within=difference >= 0)
    return view


async def _quote_page(request: Request, status: int = 200, **context: Any) -> HTMLResponse:
    context.setdefault("r", None)
    return await _rendered(request, "quote.html", status, **context)


async def _quote_error(request: Request, status: int, detail: str,
                       quote_id: str | None = None) -> HTMLResponse:
    """The error page; with a ``quote_id`` it offers the key form (401, 403, 404)."""
    title = PROBLEM_TITLES.get(status, "The quote could not be shown")
    return await _quote_page(request, status, quote_id=quote_id,
                             error={"status": status, "title": title, "detail": detail})


async def _form_key(request: Request) -> str | None:
    """The API key typed into a quote page's form (never taken from a URL)."""
    form = await request.form()
    key = form.get("api_key")
    return (key.strip() or None) if isinstance(key, str) else None


async def _stored_quote(request: Request, session: Session, quote_id: str,
                        key: str | None, verify: bool = False) -> HTMLResponse:
    """A stored quote is its owner's (issue 14): the page reads it through the API with the
    caller's key, from the Authorization header or the page's key form, so the API decides
    who may see it. Without a key the page asks for one."""
    if not QUOTE_ID.match(quote_id):
        return await _quote_error(request, 404, "No quote with this id: a quote id is q_ "
                                                "followed by 32 hexadecimal digits.")
    headers = {}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    elif auth := request.headers.get("authorization"):
        headers["Authorization"] = auth
    else:
        return await _quote_error(request, 401, "A stored quote can be read by the key that "
                                                "made it, keys of its team and quotes:admin "
                                                "keys. Give a key with quotes:read to open it.",
                                  quote_id)
    verified: dict[str, Any] | None = None
    verify_error = None
    async with _api(request) as client:
        response = await client.get(f"/v1/quotes/{quote_id}", headers=headers)
        if response.status_code != 200:
            problem = _problem(response)
            detail = str(problem.get("detail") or problem.get("title") or "the request failed")
            if response.status_code == 404:
                detail = (f"No quote with this id ({quote_id}) that this key may read: it "
                          "may not exist, or belong to another principal.")
            return await _quote_error(request, response.status_code, detail, quote_id)
        if verify:
            answer = await client.post(f"/v1/quotes/{quote_id}/verify", headers=headers)
            if answer.status_code == 200:
                verified = answer.json()
            else:
                problem = _problem(answer)
                verify_error = str(problem.get("detail") or problem.get("title")
                                   or f"the service answered {answer.status_code}")
    quote = response.json()
    # The API has let this caller read the quote; its stored request says what was quoted.
    row = await run_in_threadpool(session.get, Quote, quote_id)
    stored = row.request if row is not None and isinstance(row.request, dict) else None
    return await _quote_page(request, r=quote, req=stored, workload=workload_rows(stored, quote),
                       budget=budget_view(quote), verify=verified, verify_error=verify_error)


@router.get("/ui/quotes/{quote_id}", response_class=HTMLResponse)
async def portal_quote(request: Request, quote_id: str, session: SessionDep) -> HTMLResponse:
    """A stored quote as an audit document (its JSON is at /v1/quotes/{id}); without an
    Authorization header, a form asks for the key."""
    return await _stored_quote(request, session, quote_id, None)


@router.post("/ui/quotes/{quote_id}", response_class=HTMLResponse)
async def portal_quote_with_key(request: Request, quote_id: str,
                                session: SessionDep) -> HTMLResponse:
    """The stored quote's page, read with the key typed into the page's form."""
    return await _stored_quote(request, session, quote_id, await _form_key(request))


@router.post("/ui/quotes/{quote_id}/verify", response_class=HTMLResponse)
async def portal_quote_verify(request: Request, quote_id: str,
                              session: SessionDep) -> HTMLResponse:
    """The stored quote's page with the verification (POST /v1/quotes/{id}/verify) on top."""
    return await _stored_quote(request, session, quote_id, await _form_key(request),
                               verify=True)
