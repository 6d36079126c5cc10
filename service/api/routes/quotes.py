"""Quotes: price a workload across the catalogue, store it immutably, gate it on a budget,
verify and requote it; and the inverse question, budget plans."""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid
from typing import Annotated, Any, cast

from fastapi import APIRouter, Body, Depends, Header, HTTPException, Path, Query, Request, Response
from sqlalchemy.orm import Session

from service.api import calibrating
from service.api.auth import NO_STORE, Principal, read_access, reader_of, require
from service.api.budget_plans import budget_plan
from service.api.calibrating import StoredCalibration
from service.api.deps import (
    AcceleratorsDep,
    SessionDep,
    SettingsDep,
    commit_before_answer,
    state_cache,
)
from service.api.pagination import PageSize, PageToken, decode_token, encode_token
from service.api.problems import SEARCH_UNAVAILABLE, problem_responses
from service.api.quoting import ESTIMATOR_VERSION, OfferCache, compute_body, compute_text
from service.api.schemas.common import Page
from service.api.schemas.prices import as_utc
from service.api.schemas.quotes import (
    BUDGET_PLAN_EXAMPLE,
    QUOTE_EXAMPLE,
    BudgetPlanOut,
    BudgetPlanRequest,
    QuoteLinesPage,
    QuoteOut,
    QuoteRequest,
    QuoteSummaryOut,
    VerifyOut,
)
from service.api.work import ClientGoneDep, request_budget
from service.catalog import policies
from service.catalog import quotes as store
from service.catalog.errors import NotFoundError
from service.catalog.models import Quote
from service.catalog.prices import get_version, version_identity
from service.core.errors import InvalidSpecError
from service.core.policy import Policy
from service.core.units import SECONDS_PER_DAY

router = APIRouter(tags=["quotes"])

QuotesWrite = Annotated[Principal, require("quotes:write")]
QuotesRead = Annotated[Principal, read_access("quotes:read")]


def quote_reader(principal: Annotated[Principal, require("quotes:read")]) -> store.Reader:
    """Stored quotes always need a key with ``quotes:read``, whatever CQ_REQUIRE_READ_AUTH
    says: a quote belongs to the principal that made it (and its team); ``quotes:admin``
    reads every principal's (issue 14, OWASP API1:2023)."""
    return reader_of(principal, "quotes:admin")


ReaderDep = Annotated[store.Reader, Depends(quote_reader)]
Timestamp = Annotated[str | None, Query(
    pattern=r"^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:\d{2})?)?$",
    max_length=32, description="ISO 8601 date or date-time; UTC when no zone is given.",
    examples=["2026-11-01T00:00:00Z"])]
QUOTE_ID_PATTERN = r"^q_[0-9a-f]{32}$"


def _quote_id(quote_id: Annotated[str, Path(
        examples=["q_" + "0" * 32], json_schema_extra={"pattern": QUOTE_ID_PATTERN},
        description="q_ and 32 hexadecimal digits; any other value is 404, as an unknown id "
                    "is.")]) -> str:
    """An id of another form names no quote: 404, as an unknown one is (issue 18: it was a
    422 that showed the pattern)."""
    if re.fullmatch(QUOTE_ID_PATTERN, quote_id) is None:
        raise store.QuoteNotFoundError(quote_id)
    return quote_id


QuoteId = Annotated[str, Depends(_quote_id)]
IdempotencyKey = Annotated[str | None, Header(
    max_length=255, pattern=r"^[!-~]+$",
    description="Required (printable ASCII, at most 255). The same key and body replay the "
                "stored quote.")]

def _calibration(session: Session, body: QuoteRequest,
                 principal: Principal | None) -> StoredCalibration | None:
    """The stored calibration the quote names: one ``principal`` may read (a new quote or a
    requote), or, for ``verify`` (None), the stored quote's own, whoever reads the quote
    (calibrations are immutable, so it recomputes the same)."""
    if body.calibration_id is None:
        return None
    reader = None if principal is None else reader_of(principal, "calibrations:admin")
    return calibrating.load(session, body.calibration_id, reader)


def offer_cache(request: Request) -> OfferCache | None:
    """This replica's cache of quote offers by version and filters; none where the tests
    override sessions (their versions live in transactions that are rolled back)."""
    if state_cache(request) is None:
        return None
    cache: OfferCache = request.app.state.quote_offers
    return cache


def _policy(session: Session, name: str | None, default: str | None,
            revision: int | None = None) -> Policy:
    """The policy a request names; an unknown name is invalid input (422), not a 404."""
    try:
        return policies.resolve(session, name, default, revision)
    except NotFoundError as exc:
        raise InvalidSpecError(f"{exc}: create it with POST /v1/policies",
                               field="policy") from None


def _gated(request: QuoteRequest, policy_named: bool) -> bool:
    return request.budget is not None or request.deadline_s is not None or policy_named


def _version_in_body(session: Session, version_id: str | None) -> Any:
    """A body naming a version that does not exist is invalid input (422), not a missing URL."""
    try:
        return get_version(session, version_id)
    except NotFoundError as exc:
        raise InvalidSpecError(str(exc), field="catalog_version") from None


def _quoted_version(request: Request, session: Session, version_id: str | None,
                    ) -> tuple[str, str]:
    """(id, content hash) of the version a quote prices on (``None``: the current one): from
    this replica's state cache while no writer has changed the catalogue state (versions are
    immutable; which one is current is what changes), else one query. A body naming a version
    that does not exist is invalid input (422)."""
    cache = state_cache(request)
    key = ("quote-version", version_id)
    found, value, generation = cache.get(key) if cache else (False, None, None)
    if found:
        return cast(tuple[str, str], value)
    try:
        identity = version_identity(session, version_id)
    except NotFoundError as exc:
        raise InvalidSpecError(str(exc), field="catalog_version") from None
    if cache is not None:
        cache.put(key, identity, generation)
    return identity


def _body_text(body: dict[str, Any]) -> str:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


# OpenAPI links: what a client (and schemathesis' stateful phase) can do next with a quote.
QUOTE_LINKS: dict[str, Any] = {
    "GetQuote": {"operationId": "get_quote", "parameters": {"quote_id": "$response.body#/id"},
                 "description": "Read the stored quote back."},
    "VerifyQuote": {"operationId": "verify_quote",
                    "parameters": {"quote_id": "$response.body#/id"},
                    "description": "Recompute the quote and compare it to the cent."},
}
QUOTE_RESPONSES: dict[int | str, dict[str, Any]] = {
    201: {"description": "The stored quote (also on an idempotent replay, with "
                         "Idempotent-Replayed: true).", "model": QuoteOut,
          "headers": {"Location": {"description": "The quote's URL.",
                                   "schema": {"type": "string"}}},
          "links": QUOTE_LINKS},
    **problem_responses(400, 401, 403, 404, 409, 413, 422), **SEARCH_UNAVAILABLE,
}


@router.post("/v1/quotes", summary="Price a workload and store the quote", status_code=201,
             response_class=Response, responses=QUOTE_RESPONSES)
def create_quote(
    request: Request,
    body: Annotated[QuoteRequest, Body(openapi_examples={
        "70B on 256 H100": {"summary": "Llama 3.1 70B estimate, all terms, budget and deadline",
                            "value": QUOTE_EXAMPLE}})],
    session: SessionDep, accelerators: AcceleratorsDep, settings: SettingsDep,
    principal: QuotesWrite, gone: ClientGoneDep, idempotency_key: IdempotencyKey = None,
) -> Response:
    """Every matching offer of the catalogue version (default current) as a line: on-demand
    and spot with goodput loss, reserved (dedicated and amortised), capacity blocks and
    on-premises TCO, sorted by total, with the budget and deadline verdict. Needs an
    ``Idempotency-Key``: the same key and body replay the stored quote byte for byte."""
    if not idempotency_key:
        raise HTTPException(400, "the Idempotency-Key header is required")
    canonical = body.model_dump(mode="json")
    hash_ = store.request_hash(canonical)
    existing = store.find_by_key(session, principal.name, idempotency_key)
    if existing is not None:
        return _replay(store.replay_or_refuse(existing, hash_))
    version_id, content_hash = _quoted_version(request, session, body.catalog_version)
    policy = _policy(session, body.policy, settings.default_policy)
    now = dt.datetime.now(dt.UTC)
    computed, lines = compute_text(
        session, body, accelerators, version_id, request_budget(settings, gone),
        settings.search_workers, policy, now,
        gated=_gated(body, bool(body.policy or settings.default_policy)),
        offer_cache=offer_cache(request),
        max_reasonable_train_s=settings.max_reasonable_train_days * SECONDS_PER_DAY,
        calibration=_calibration(session, body, principal))
    row = _new_quote(request, principal, idempotency_key, hash_, canonical, version_id,
                     content_hash, computed, lines, policy, now,
                     settings.quote_ttl_days, None)
    return _store(request, session, row)


def _new_quote(request: Request, principal: Principal, key: str, hash_: str,
               canonical: dict[str, Any], version_id: str, content_hash: str,
               computed: dict[str, Any], lines: str, policy: Policy,
               now: dt.datetime, ttl_days: int, requote_of: str | None) -> Quote:
    quote_id = "q_" + uuid.uuid4().hex
    request_id = getattr(request.state, "request_id", None) or uuid.uuid4().hex
    expires = now + dt.timedelta(days=ttl_days)
    body = QuoteOut.model_validate({
        "id": quote_id, "created_at": now, "expires_at": expires,
        "principal": principal.name, "request_id": request_id,
        "catalog_version": version_id,
        "catalog_content_hash": content_hash, "estimator_version": ESTIMATOR_VERSION,
        "requote_of": requote_of, **computed,
    })
    return Quote(
        id=quote_id, principal=principal.name, team=principal.team, idempotency_key=key,
        request_hash=hash_,
        request_id=request_id, created_at=now, expires_at=expires,
        catalog_version_id=version_id, catalog_content_hash=content_hash,
        estimator_version=ESTIMATOR_VERSION, verdict=computed["verdict"],
        requote_of=requote_of, request=canonical, response=body.model_dump_json(),
        lines=None, lines_zstd=store.pack_lines(lines),
        policy_name=policy.name if policy.revision else None,
        policy_revision=policy.revision,
    )


def _store(request: Request, session: Session, row: Quote) -> Response:
    """Insert (or lose the race and replay), commit before answering, count."""
    stored = store.insert_quote(session, row)
    commit_before_answer(session)
    if stored is not row:
        return _replay(stored)
    metrics = request.app.state.metrics
    metrics.quotes_created.inc()
    if row.verdict == "reject":
        metrics.budget_rejections.inc()
    return Response(row.response, status_code=201, media_type="application/json",
                    headers={"Location": f"/v1/quotes/{row.id}", **NO_STORE})


def _replay(row: Quote) -> Response:
    return Response(row.response, status_code=201, media_type="application/json",
                    headers={"Idempotent-Replayed": "true", "Location": f"/v1/quotes/{row.id}",
                             **NO_STORE})


@router.get("/v1/quotes/{quote_id}", summary="Get a stored quote", response_class=Response,
            responses={200: {"description": "The quote as first answered.", "model": QuoteOut},
                       **problem_responses(401, 403, 404, 422)})
def get_quote(session: SessionDep, reader: ReaderDep, quote_id: QuoteId) -> Response:
    """The stored quote, byte for byte as it was first answered. Only its principal, keys of
    the same team and ``quotes:admin`` keys may read it; to anyone else it is 404."""
    return Response(store.get_quote(session, quote_id, reader).response,
                    media_type="application/json", headers=NO_STORE)


@router.get("/v1/quotes", summary="List stored quotes", response_model=Page[QuoteSummaryOut],
            responses=problem_responses(400, 401, 403, 422))
def list_quotes(
    session: SessionDep, reader: ReaderDep, response: Response,
    principal: Annotated[str | None, Query(max_length=128,
                                           pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")] = None,
    created_after: Timestamp = None, created_before: Timestamp = None,
    verdict: Annotated[str | None, Query(pattern="^(approve|reject)$")] = None,
    page_size: PageSize = 50, page_token: PageToken = None,
) -> Page[QuoteSummaryOut]:
    """Newest first, filtered by principal, creation time and verdict: only the quotes the
    key may read (its own and its team's; every principal's with ``quotes:admin``)."""
    after = None
    if (token := decode_token(page_token)) is not None:
        stamp, _sep, quote_id = token.partition("|")
        try:
            after = (dt.datetime.fromisoformat(stamp), quote_id)
        except ValueError:
            raise HTTPException(400, "page_token is not a token this API issued") from None
    rows = store.list_quotes(session, limit=page_size + 1, reader=reader, principal=principal,
                             created_after=_moment(created_after, "created_after"),
                             created_before=_moment(created_before, "created_before"),
                             verdict=verdict, after=after)
    items = [QuoteSummaryOut(id=r.id, created_at=as_utc(r.created_at),
                             expires_at=as_utc(r.expires_at), principal=r.principal,
                             verdict=r.verdict, catalog_version=r.catalog_version_id,
                             requote_of=r.requote_of) for r in rows[:page_size]]
    next_token = None
    if len(rows) > page_size:
        last = rows[page_size - 1]
        next_token = encode_token(f"{last.created_at.isoformat()}|{last.id}")
    response.headers.update(NO_STORE)
    return Page[QuoteSummaryOut](items=items, next_page_token=next_token)


def _moment(text: str | None, field: str) -> dt.datetime | None:
    """An ISO 8601 date or date-time, in UTC (a zoneless one is taken as UTC)."""
    if text is None:
        return None
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidSpecError(f"{field} must be an ISO 8601 date-time", field=field) from None
    if moment.tzinfo is not None:
        return moment.astimezone(dt.UTC)
    return moment.replace(tzinfo=dt.UTC)


VERIFIED_FIELDS = ("offer_id", "provider", "region", "zone", "instance_type", "term",
                   "instances", "unit_price", "total", "commitment_total", "job_cost_total",
                   "term_s", "billed_hours", "feasible", "reserved", "within_budget",
                   "meets_deadline", "policy_outcome", "rules", "uncertainty")


def _differences(stored: dict[str, Any], stored_lines: list[dict[str, Any]],
                 fresh: dict[str, Any], fresh_lines: list[dict[str, Any]],
                 ) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if len(stored_lines) != len(fresh_lines):
        found.append({"path": "lines.length", "stored": len(stored_lines),
                      "recomputed": len(fresh_lines)})
    for i, (old, new) in enumerate(zip(stored_lines, fresh_lines, strict=False)):
        for name in VERIFIED_FIELDS:
            if old.get(name) != new.get(name):
                found.append({"path": f"lines.{i}.{name}", "stored": old.get(name),
                              "recomputed": new.get(name)})
    for name in ("verdict", "summary", "reason_details", "policy_result", "rejected_offers",
                 "fx", "discount_book", "calibration"):
        if stored.get(name) != fresh.get(name):
            found.append({"path": name, "stored": stored.get(name), "recomputed": fresh.get(name)})
    return found


@router.post("/v1/quotes/{quote_id}/verify", summary="Recompute a quote and compare",
             response_model=VerifyOut,
             responses={**problem_responses(401, 403, 404, 422), **SEARCH_UNAVAILABLE})
def verify_quote(
    response: Response, session: SessionDep, reader: ReaderDep, accelerators: AcceleratorsDep,
    settings: SettingsDep, gone: ClientGoneDep, quote_id: QuoteId,
) -> VerifyOut:
    """Recompute from the stored request, catalogue version, policy revision and date; every
    amount, rule outcome and the verdict must match (a mismatch is a bug, or a different
    estimator version)."""
    row = store.get_quote(session, quote_id, reader)
    request = QuoteRequest.model_validate(row.request)
    stored = json.loads(row.response)
    policy = _policy(session, row.policy_name, None, row.policy_revision)
    named = stored.get("policy_result", {}).get("builtin") is False or bool(row.policy_name)
    fresh, fresh_lines = compute_body(
        session, request, accelerators, row.catalog_version_id, request_budget(settings, gone),
        settings.search_workers, policy, as_utc(row.created_at), gated=_gated(request, named),
        fx_version=(stored.get("fx") or {}).get("version"),
        book_revision=(stored.get("discount_book") or {}).get("revision"),
        calibration=_calibration(session, request, None))
    differences = _differences(
        stored, store.stored_lines(row), QuoteOut.model_validate({**stored, **fresh}).model_dump(
            mode="json"), fresh_lines)
    response.headers.update(NO_STORE)
    return VerifyOut.model_validate({
        "matches": not differences, "differences": differences,
        "catalog_version": row.catalog_version_id, "estimator_version": ESTIMATOR_VERSION,
        "stored_estimator_version": row.estimator_version})


@router.get("/v1/quotes/{quote_id}/lines", summary="Page through every line of a quote",
            response_model=QuoteLinesPage, responses=problem_responses(400, 401, 403, 404, 422))
def list_quote_lines(
    session: SessionDep, reader: ReaderDep, quote_id: QuoteId, page_size: PageSize = 50,
    page_token: PageToken = None,
) -> Response:
    """Every priced line of a stored quote, in the quote's order (the quote itself holds the
    best line per provider and term)."""
    lines = store.stored_lines(store.get_quote(session, quote_id, reader))
    start = 0
    if (token := decode_token(page_token)) is not None:
        if not token.isdigit():
            raise HTTPException(400, "page_token is not a token this API issued")
        start = int(token)
    page = lines[start:start + page_size]
    following = start + page_size
    body = {"items": page,
            "next_page_token": encode_token(str(following)) if following < len(lines) else None}
    return Response(_body_text(body), media_type="application/json", headers=NO_STORE)


@router.post("/v1/quotes/{quote_id}/requote", summary="Price a stored quote's request again",
             status_code=201, response_class=Response, responses=QUOTE_RESPONSES)
def requote_quote(
    request: Request, session: SessionDep, accelerators: AcceleratorsDep,
    settings: SettingsDep, principal: QuotesWrite, gone: ClientGoneDep, quote_id: QuoteId,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """A new quote from the same request on the current catalogue and the policy's newest
    revision, linked by ``requote_of``. Needs an ``Idempotency-Key``, as ``create_quote``
    does: a retried requote replays one quote instead of making another."""
    if not idempotency_key:
        raise HTTPException(400, "the Idempotency-Key header is required")
    old = store.get_quote(session, quote_id, reader_of(principal, "quotes:admin"))
    canonical = dict(old.request)
    canonical["catalog_version"] = None
    body = QuoteRequest.model_validate(canonical)
    canonical = body.model_dump(mode="json")
    key = idempotency_key
    hash_ = store.request_hash({**canonical, "requote_of": quote_id})
    existing = store.find_by_key(session, principal.name, key)
    if existing is not None:
        return _replay(store.replay_or_refuse(existing, hash_))
    version = get_version(session, None)
    policy = _policy(session, old.policy_name or body.policy, settings.default_policy)
    now = dt.datetime.now(dt.UTC)
    computed, lines = compute_text(
        session, body, accelerators, version.id, request_budget(settings, gone),
        settings.search_workers, policy, now,
        gated=_gated(body, bool(body.policy or settings.default_policy or old.policy_name)),
        offer_cache=offer_cache(request),
        max_reasonable_train_s=settings.max_reasonable_train_days * SECONDS_PER_DAY,
        calibration=_calibration(session, body, principal))
    row = _new_quote(request, principal, key, hash_, canonical, version.id,
                     version.content_hash, computed, lines, policy, now,
                     settings.quote_ttl_days, quote_id)
    return _store(request, session, row)


@router.post("/v1/budget-plans", summary="Best plans within a budget or before a deadline",
             response_model=BudgetPlanOut,
             responses={**problem_responses(401, 403, 413, 422), **SEARCH_UNAVAILABLE})
def plan_budget(
    body: Annotated[BudgetPlanRequest, Body(openapi_examples={
        "70B within 3M USD": {"summary": "Llama 3.1 70B, H100 or A100, 3M USD, 60 days",
                              "value": BUDGET_PLAN_EXAMPLE}})],
    session: SessionDep, accelerators: AcceleratorsDep, settings: SettingsDep,
    _: QuotesRead, gone: ClientGoneDep, response: Response,
) -> BudgetPlanOut:
    """For every candidate accelerator and GPU count, the optimiser's fastest plan is priced
    on every matching offer and judged by the policy. Answers the lines whose ``total`` (the
    commitment by default) is within the budget, soonest first, and the lines that meet the
    deadline, cheapest first; lines a policy rule fails are left out of both."""
    version = _version_in_body(session, body.catalog_version)
    policy = _policy(session, body.policy, settings.default_policy)
    response.headers.update(NO_STORE)
    return budget_plan(body, session, accelerators, settings, version.id, policy,
                       dt.datetime.now(dt.UTC), request_budget(settings, gone))
