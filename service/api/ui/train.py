"""``/ui``: the Train tab, for planners and procurement: Estimate, Optimise, Quote, Budget plan
and Largest model for one training workload, each through the API
(``POST /v1/estimates``, ``/v1/parallelism-plans``, ``/v1/quotes``, ``/v1/budget-plans``).

Field errors from a problem's ``errors`` list are shown next to their form fields. No script,
no build step, no CDN: HTML, one stylesheet from ``/static`` and inline SVG charts.
"""

from __future__ import annotations

import decimal
import math
import re
import uuid
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import httpx
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from service.api import presentation as fmt
from service.api.ui import charts
from service.api.ui.common import (
    Outcome,
    _amount,
    _api,
    _both,
    _check_amounts,
    _choices,
    _days_as_s,
    _integer_or_text,
    _list,
    _number,
    _problem,
    _purchase,
    _rendered,
    _store_quote,
    templates,
)

router = APIRouter(include_in_schema=False)

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
    "method": "pretrain", "lora_rank": "", "optimizer": "adamw", "loss_kernel": "",
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
    "method": "Training method", "lora_rank": "LoRA rank", "optimizer": "Optimizer",
    "loss_kernel": "Loss kernel",
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
    "objective": "objective", "training.method": "method", "training.lora": "lora_rank",
    "training.lora.rank": "lora_rank", "training.optimizer": "optimizer",
    "training.loss_kernel": "loss_kernel",
}
METHODS: dict[str, str] = {
    "pretrain": "Pre-training (every weight)", "full_finetune": "Full fine-tuning",
    "lora": "LoRA (frozen bf16 base)", "qlora": "QLoRA (frozen 4-bit base)"}
"""The Train tab's methods (issue 43). RL needs its rollouts described (training.rl), which
this form does not hold: ``cq estimate --method rl`` and the API take it."""
OPTIMIZERS: dict[str, str] = {
    "adamw": "AdamW (two fp32 moments)", "adamw_8bit": "8-bit AdamW (bitsandbytes)",
    "sgd": "SGD (no optimizer state)"}
"""The Train tab's optimizers (``training.optimizer``)."""
LOSS_KERNELS: dict[str, str] = {
    "": "The stack's own", "standard": "Standard (fp32 logits)",
    "chunked": "Chunked (torchtune)", "fused": "Fused (Liger, Cut Cross-Entropy)"}
"""The Train tab's loss kernels (``training.loss_kernel``); empty: the stack's figure."""


@dataclass
class TrainOutcome(Outcome):
    """The Train tab's outcome: its error summary follows the Train form's fields."""

    def summary_labels(self) -> dict[str, str]:
        return {name: SUMMARY_LABELS.get(name, label) for name, label in FIELD_LABELS.items()}


def _values(form: dict[str, str]) -> dict[str, str]:
    return {name: str(form.get(name, default)).strip()[:200] for name, default in
            DEFAULTS.items()}


def _training(v: dict[str, str]) -> dict[str, Any]:
    """The form's training; method and LoRA rank only where they differ from the API's
    defaults (pretrain; rank 16 for lora and qlora), so a pre-training body is as before."""
    body: dict[str, Any] = {"seq_len": _number(v["seq_len"]),
                            "global_batch_seqs": _number(v["global_batch"]),
                            "tokens": _number(v["tokens"])}
    if v["method"] and v["method"] != "pretrain":
        body["method"] = v["method"]
    if v["lora_rank"]:
        body["lora"] = {"rank": _integer_or_text(v["lora_rank"])}
    if v["optimizer"] and v["optimizer"] != "adamw":
        body["optimizer"] = v["optimizer"]
    if v["loss_kernel"]:
        body["loss_kernel"] = v["loss_kernel"]
    return body


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


templates.globals.update(architecture=fmt.architecture_text, models_by_size=fmt.models_by_size,
                         stopped_size=fmt.stopped_size)


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
        domain = str(problem.get("field") or "")
        if prefix and domain.startswith(prefix):
            domain = domain[len(prefix):]
        if problem.get("status") in (401, 403):
            outcome.errors.setdefault("api_key", []).append(detail)
        elif domain in ("training.lora.rank", "training.method"):
            # A domain error (InvalidSpecError) names one field: the LoRA rank or the
            # method (issue 43) sit next to theirs; the others stay in the summary as before.
            outcome.errors.setdefault(FIELD_OF[domain], []).append(detail)
        else:
            outcome.general_errors.append(detail)


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
        unit=unit, scale=scale, band=_step_band(answer))
    return {"memory": memory, "step": timing}


def _step_band(answer: dict[str, Any]) -> charts.Band | None:
    """The estimate's 80% band on the step-time bar: the step time at each end, labelled
    with the figures ``cq estimate`` prints (tokens/s and training time at each end)."""
    band = fmt.estimate_band(answer)
    if band is None:
        return None
    label = (f"80% band: {fmt.duration(band.step_s_low)} – {fmt.duration(band.step_s_high)} "
             f"per step; {fmt.number(band.tokens_per_s_low)} – "
             f"{fmt.number(band.tokens_per_s_high)} tokens/s; training "
             f"{fmt.duration(band.train_s_low)} – {fmt.duration(band.train_s_high)}")
    return charts.Band(low=band.step_s_low, high=band.step_s_high, label=label)


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


async def _page(request: Request, outcome: Outcome, status: int = 200) -> HTMLResponse:
    outcome.values["nonce"] = uuid.uuid4().hex  # a fresh page is a fresh quote
    return await _rendered(
        request, "portal.html", status, outcome, choices=await _choices(request),
        actions=ACTION_LABELS, labels=FIELD_LABELS, objectives=OBJECTIVES, methods=METHODS,
        optimizers=OPTIMIZERS, loss_kernels=LOSS_KERNELS,
        default_deadline_days=DEFAULT_DEADLINE_DAYS)


@router.get("/ui", response_class=HTMLResponse)
async def portal(request: Request) -> HTMLResponse:
    """The empty form (query parameters pre-fill it)."""
    values = _values(dict(request.query_params))
    values["api_key"] = ""  # never from a URL
    return await _page(request, TrainOutcome(values=values))


@router.post("/ui", response_class=HTMLResponse)
async def portal_submit(request: Request) -> HTMLResponse:
    form = await request.form()
    raw = {k: v for k, v in form.items() if isinstance(v, str)}
    outcome = TrainOutcome(values=_values(raw), action=raw.get("action"))
    if outcome.action not in RUNNERS:
        outcome.general_errors.append("choose " + ", ".join(
            list(ACTION_LABELS.values())[:-1]) + " or " + list(ACTION_LABELS.values())[-1])
        return await _page(request, outcome, status=400)
    await RUNNERS[outcome.action](request, outcome)
    outcome.values["api_key"] = ""  # never echoed back into the page
    failed = bool(outcome.errors or outcome.general_errors) and outcome.result is None
    return await _page(request, outcome, status=422 if failed else 200)
