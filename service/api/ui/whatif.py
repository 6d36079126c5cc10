"""``/ui/what-if``: a what-if sweep (issue 42) as a page: the ``POST /v1/what-ifs`` body in a
text area (the documented example to start from), and its answer: the base's figures, each
variation's, and the tornado chart of their changes in training time (``tornado.py``), largest
first."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from service.api import presentation as fmt
from service.api.schemas.whatifs import WHAT_IF_EXAMPLE
from service.api.ui import charts, tornado
from service.api.ui.common import Outcome, _api, _problem, _rendered

router = APIRouter(include_in_schema=False)

MAX_BODY_CHARS = 64 * 1024
"""The longest body the text area takes (the API's body limit, CQ_MAX_BODY_BYTES, also
applies to the form)."""
EXAMPLE_TEXT = json.dumps(WHAT_IF_EXAMPLE, indent=2)


def tornado_bars(answer: dict[str, Any]) -> list[charts.Part]:
    """The ranking's variations (largest change in time first), in days."""
    names = {v["index"]: v["name"] for v in answer.get("variations", [])}
    return [charts.Part(f"{r['index']}: {names.get(r['index'], r['name'])}",
                        r["train_s_delta"] / fmt.DAY_S) for r in answer.get("ranking", [])]


def _draw(answer: dict[str, Any]) -> dict[str, str]:
    bars = tornado_bars(answer)
    title = "Change in training time against the base, largest first"
    wide = tornado.tornado("whatif-tornado", title, bars, unit="days")
    narrow = tornado.tornado("whatif-tornado-narrow", title, bars, unit="days",
                             width=charts.NARROW_W)
    return {"tornado": charts.responsive(wide, narrow)}


async def run_what_if(request: Request, outcome: Outcome) -> None:
    # The text as typed, not parsed and encoded again: the API's own parser and messages
    # judge it (and a NaN in it reaches the API, which names the field, instead of failing
    # the encoder here).
    async with _api(request) as client:
        response = await client.post("/v1/what-ifs", content=outcome.values["body"].encode(),
                                     headers={"Content-Type": "application/json"})
    if response.status_code != 200:
        problem = _problem(response)
        errors = problem.get("errors") or []
        outcome.errors["body"] = ([f"{e.get('field')}: {e.get('message')}" for e in errors]
                                  or [str(problem.get("detail") or "the sweep failed")])
        return
    outcome.result = response.json()
    answer = outcome.result
    outcome.drawings.append(lambda: _draw(answer))


async def _page(request: Request, outcome: Outcome, status: int = 200) -> HTMLResponse:
    return await _rendered(request, "whatif.html", status, outcome)


@router.get("/ui/what-if", response_class=HTMLResponse)
async def portal_what_if(request: Request) -> HTMLResponse:
    """The form, with the documented example to start from."""
    return await _page(request, Outcome(values={"body": EXAMPLE_TEXT}))


@router.post("/ui/what-if", response_class=HTMLResponse)
async def portal_what_if_submit(request: Request) -> HTMLResponse:
    """The sweep's answer: figures, a table and the tornado chart."""
    form = await request.form()
    text = form.get("body")
    outcome = Outcome(values={"body": text[:MAX_BODY_CHARS] if isinstance(text, str) else ""})
    await run_what_if(request, outcome)
    return await _page(request, outcome, status=422 if outcome.result is None else 200)
