"""What the portal's pages share: the templates and their helpers, a page's ``Outcome``, the
numbers and amounts read from a form, the in-process API client, and drawing a page off the
event loop within its deadline.

The pages build the same JSON bodies a client would and send them to this app's own API in
process (``httpx.ASGITransport``), so the figures, the validation and the error messages are
the API's.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from html import escape
from typing import Any

import anyio
import anyio.to_thread
import httpx
from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, PackageLoader, select_autoescape
from pydantic import TypeAdapter, ValidationError

from service.api import presentation as fmt
from service.api.schemas.prices import MAX_PRICE_PER_GPU_HOUR, DecimalString, PricePerGpuHour
from service.api.tracing import traced_client
from service.api.ui import charts
from service.core.plausibility import (
    COSTLY_PREFIX,
    IMPRACTICAL_COST,
    IMPRACTICAL_WALL_CLOCK,
    LONG_RUN_PREFIX,
)

templates = Environment(loader=PackageLoader("service.api.ui", "templates"),
                        autoescape=select_autoescape(["html"]), trim_blocks=True,
                        lstrip_blocks=True)
templates.globals["fmt"] = fmt


@dataclass
class Outcome:
    """What a page shows: the form's values, errors by field, and results."""

    values: dict[str, str]
    action: str | None = None
    errors: dict[str, list[str]] = field(default_factory=dict)
    general_errors: list[str] = field(default_factory=list)
    result: dict[str, Any] | None = None
    charts: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    drawings: list[Callable[[], dict[str, str]]] = field(default_factory=list)
    """Charts still to draw: drawn with the page, off the event loop (``_rendered``)."""

    def summary_labels(self) -> dict[str, str]:
        """Each field's name in the error summary, in the form's order: each page's own."""
        return {}

    def summary(self) -> list[tuple[str | None, str]]:
        """Every error for the summary at the top of the page (the GOV.UK error-summary
        pattern): the service's general errors, then each field's, in the form's order, with
        the id of the field it links to (None: no field)."""
        items: list[tuple[str | None, str]] = [(None, e) for e in self.general_errors]
        for name, label in self.summary_labels().items():
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


def _integer_or_text(text: str) -> Any:
    value = _number(text)
    return int(value) if isinstance(value, float) and value.is_integer() else value


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


def _both(draw: Any, ident: str, *args: Any, **kwargs: Any) -> str:
    """A chart's wide and narrow drawings (the stylesheet shows one)."""
    return charts.responsive(draw(ident, *args, **kwargs),
                             draw(f"{ident}-narrow", *args, width=charts.NARROW_W, **kwargs))


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
