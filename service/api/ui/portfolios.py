"""``/ui/portfolios/{id}``: a stored commitment portfolio (issue 44) as a page: the verdict,
the totals against the baselines, a monthly stacked chart of committed capacity against the
demand, and the cash-flow curve (billed per month and cumulative, against the effective
cost). The plan is read through the API with the caller's key (Authorization header or the
page's key form), so the API's ownership rules decide who may see it."""

from __future__ import annotations

import re
from decimal import Decimal
from html import escape
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from service.api.ui.common import _api, _problem, _rendered

router = APIRouter()
PORTFOLIO_ID = re.compile(r"^pf_[0-9a-f]{32}$")
WIDTH, HEIGHT, PAD = 720, 260, 48


def capacity_chart(months: list[dict[str, Any]]) -> str:
    """A bar per month: committed GPUs, and on top the base demand above them (on-demand);
    a line marks the base demand. Inline SVG, no script."""
    if not months:
        return ""
    top = max([1.0, *(max(float(m["committed_gpus"]), float(m["base_demand_gpus"]))
                      for m in months)])
    step = (WIDTH - 2 * PAD) / len(months)
    scale = (HEIGHT - 2 * PAD) / top
    parts = [f'<svg id="capacity-chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
             'aria-labelledby="capacity-title"><title id="capacity-title">Committed GPUs '
             'against the base demand, per month</title>']
    points = []
    for i, m in enumerate(months):
        committed = float(m["committed_gpus"])
        demand = float(m["base_demand_gpus"])
        over = max(0.0, demand - committed)
        x = PAD + i * step + step * 0.15
        w = step * 0.7
        y0 = HEIGHT - PAD
        h1 = committed * scale
        parts.append(f'<rect class="committed" x="{x:.1f}" y="{y0 - h1:.1f}" width="{w:.1f}" '
                     f'height="{h1:.1f}"><title>{escape(m["month"])}: {committed:g} committed '
                     'GPUs</title></rect>')
        if over > 0:
            h2 = over * scale
            parts.append(f'<rect class="on-demand" x="{x:.1f}" y="{y0 - h1 - h2:.1f}" '
                         f'width="{w:.1f}" height="{h2:.1f}"><title>{escape(m["month"])}: '
                         f'{over:g} GPUs above the commitments</title></rect>')
        parts.append(f'<text x="{x + w / 2:.1f}" y="{HEIGHT - PAD + 16}" '
                     f'text-anchor="middle" font-size="10">{escape(m["month"][2:])}</text>')
        points.append(f"{x + w / 2:.1f},{y0 - demand * scale:.1f}")
    parts.append(f'<polyline class="demand" fill="none" stroke="currentColor" '
                 f'points="{" ".join(points)}"><title>base demand, GPUs</title></polyline>')
    parts.append(f'<text x="{PAD}" y="{PAD - 12}" font-size="11">GPUs (max {top:g})</text>')
    parts.append("</svg>")
    return "".join(parts)


def cash_chart(months: list[dict[str, Any]]) -> str:
    """Billed cash per month as a cumulative curve, with the effective (amortised) cost's
    cumulative curve beside it."""
    if not months:
        return ""
    billed, effective = Decimal(0), Decimal(0)
    cum_b, cum_e = [], []
    for m in months:
        billed += Decimal(m["billed_cost_usd"])
        effective += Decimal(m["effective_cost_usd"])
        cum_b.append(billed)
        cum_e.append(effective)
    top = max(max(cum_b), max(cum_e), Decimal(1))
    step = (WIDTH - 2 * PAD) / max(1, len(months) - 1)

    def line(values: list[Decimal], name: str) -> str:
        pts = " ".join(f"{PAD + i * step:.1f},"
                       f"{HEIGHT - PAD - float(v / top) * (HEIGHT - 2 * PAD):.1f}"
                       for i, v in enumerate(values))
        return (f'<polyline class="{name}" fill="none" stroke="currentColor" points="{pts}">'
                f"<title>{name.replace('-', ' ')}, cumulative USD</title></polyline>")

    labels = "".join(f'<text x="{PAD + i * step:.1f}" y="{HEIGHT - PAD + 16}" font-size="10" '
                     f'text-anchor="middle">{escape(m["month"][2:])}</text>'
                     for i, m in enumerate(months))
    return (f'<svg id="cash-chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
            'aria-labelledby="cash-title"><title id="cash-title">Cumulative billed cash '
            'against cumulative effective cost</title>'
            f'{line(cum_b, "billed")}{line(cum_e, "effective")}{labels}'
            f'<text x="{PAD}" y="{PAD - 12}" font-size="11">USD (max {top:,.2f})</text></svg>')


async def _page(request: Request, status: int, **context: Any) -> HTMLResponse:
    context.setdefault("p", None)
    context.setdefault("error", None)
    return await _rendered(request, "portfolio.html", status, **context)


async def _stored(request: Request, portfolio_id: str, key: str | None) -> HTMLResponse:
    if not PORTFOLIO_ID.match(portfolio_id):
        return await _page(request, 404, error={
            "status": 404, "detail": "No portfolio with this id: an id is pf_ and 32 "
                                     "hexadecimal digits."})
    headers = {}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    elif auth := request.headers.get("authorization"):
        headers["Authorization"] = auth
    else:
        return await _page(request, 401, portfolio_id=portfolio_id, error={
            "status": 401, "detail": "A stored portfolio can be read by the key that made it, "
                                     "keys of its team and quotes:admin keys. Give a key "
                                     "with quotes:read to open it."})
    async with _api(request) as client:
        response = await client.get(f"/v1/portfolios/{portfolio_id}", headers=headers)
    if response.status_code != 200:
        problem = _problem(response)
        return await _page(request, response.status_code, portfolio_id=portfolio_id, error={
            "status": response.status_code,
            "detail": str(problem.get("detail") or problem.get("title") or "refused")})
    plan = response.json()
    return await _page(request, 200, p=plan, capacity=capacity_chart(plan.get("months", [])),
                       cash=cash_chart(plan.get("months", [])))


@router.get("/ui/portfolios/{portfolio_id}", response_class=HTMLResponse)
async def portal_portfolio(request: Request, portfolio_id: str) -> HTMLResponse:
    """A stored portfolio's page; without an Authorization header a form asks for the key."""
    return await _stored(request, portfolio_id, None)


@router.post("/ui/portfolios/{portfolio_id}", response_class=HTMLResponse)
async def portal_portfolio_with_key(request: Request, portfolio_id: str) -> HTMLResponse:
    """The stored portfolio's page, read with the key typed into the page's form."""
    form = await request.form()
    key = form.get("api_key")
    return await _stored(request, portfolio_id,
                         (key.strip() or None) if isinstance(key, str) else None)
