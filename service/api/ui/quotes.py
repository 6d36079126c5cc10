"""``/ui/quotes/{id}``: a stored quote as an audit document, read through the API with the
caller's key (``GET /v1/quotes/{id}``), and verified on request (``POST .../verify``)."""

from __future__ import annotations

import json
import re
import time
from decimal import Decimal, InvalidOperation
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from service.api import presentation as fmt
from service.api.deps import SessionDep
from service.api.ui.common import (
    _api,
    _problem,
    _rendered,
)
from service.api.ui.links import LINK_PARAM, LinkRefusedError, LinkSigner, Refusal
from service.catalog.errors import NotFoundError
from service.catalog.keys import live_key_grants
from service.catalog.models import Quote
from service.catalog.quotes import Reader, get_quote

router = APIRouter(include_in_schema=False)

QUOTE_ID = re.compile(r"^q_[0-9a-f]{32}$")
PROBLEM_TITLES = {401: "Sign-in needed", 403: "Not allowed", 404: "Quote not found"}


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
    elif (token := request.query_params.get(LINK_PARAM)) is not None and not verify:
        return await _linked_quote(request, session, quote_id, token)
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
    return await _document(request, quote, row, verify=verified, verify_error=verify_error)


async def _document(request: Request, quote: dict[str, Any], row: Quote | None,
                    **context: Any) -> HTMLResponse:
    stored = row.request if row is not None and isinstance(row.request, dict) else None
    return await _quote_page(request, r=quote, req=stored, workload=workload_rows(stored, quote),
                             budget=budget_view(quote), **context)


LINK_REFUSED = {
    Refusal.EXPIRED: "This link expired: a link to a stored quote opens it for {minutes} "
                     "minutes after the quote is made. Sign in with your key to open it.",
    Refusal.INVALID: "This link is not valid for this quote (it was changed, or made for "
                     "another quote or server). Sign in with your key to open it.",
}
LINK_KEY_GONE = ("The key this link was made for can no longer read this quote (it was "
                 "revoked, or lost quotes:read). Sign in with your key to open it.")


def _owned_quote(session: Session, quote_id: str, principal: str) -> Quote | None:
    """The quote, if ``principal`` made it and still holds a live key with quotes:read (a
    revoked key's links stop at once, not when they expire); else None."""
    if not live_key_grants(session, principal, "quotes:read"):
        return None
    try:
        return get_quote(session, quote_id, Reader(principal=principal, team=None,
                                                   every_principal=False))
    except NotFoundError:
        return None


async def _linked_quote(request: Request, session: Session, quote_id: str,
                        token: str) -> HTMLResponse:
    """The page opened by a signed link (``links.py``): the token stands for the read of
    the principal the portal made the quote for, on this one quote, until it expires. The
    quote is read as the API's GET would read it for that principal (``Reader``), and shown
    as first answered; a refused token is the 401 page, which asks for the key."""
    signer = LinkSigner.from_settings(request.app.state.settings)
    try:
        principal = signer.principal(token, quote_id, int(time.time()))
    except LinkRefusedError as refused:
        detail = LINK_REFUSED[refused.reason].format(minutes=signer.ttl_s // 60)
        return await _quote_error(request, 401, detail, quote_id)
    row = await run_in_threadpool(_owned_quote, session, quote_id, principal)
    if row is None:
        return await _quote_error(request, 401, LINK_KEY_GONE, quote_id)
    return await _document(request, json.loads(row.response), row, verify=None,
                           verify_error=None)


@router.get("/ui/quotes/{quote_id}", response_class=HTMLResponse)
async def portal_quote(request: Request, quote_id: str, session: SessionDep) -> HTMLResponse:
    """A stored quote as an audit document (its JSON is at /v1/quotes/{id}); without an
    Authorization header or a valid signed link (``?t=``), a form asks for the key."""
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
