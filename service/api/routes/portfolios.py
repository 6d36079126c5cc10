"""Commitment portfolios (issue 44): plan a horizon of jobs and fleets as one purchase,
store the plan immutably, read it back, verify it (docs/portfolio.md)."""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid
from dataclasses import replace
from decimal import Decimal
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Header, HTTPException, Path, Request, Response

from service.api.auth import NO_STORE, Principal, reader_of, require
from service.api.deps import AcceleratorsDep, SessionDep, SettingsDep, commit_before_answer
from service.api.portfolios import plan_body, resolve, solve_request
from service.api.problems import SEARCH_UNAVAILABLE, problem_responses
from service.api.quoting import ESTIMATOR_VERSION, OfferCache
from service.api.routes.quotes import _policy, _version_in_body, offer_cache
from service.api.schemas.portfolios import (
    PORTFOLIO_EXAMPLE,
    PortfolioOut,
    PortfolioRequest,
    PortfolioVerifyOut,
    PortfolioWhatIfIn,
    PortfolioWhatIfOut,
    month_index,
)
from service.api.schemas.prices import as_utc
from service.api.work import ClientGoneDep, request_budget
from service.catalog import quotes as store
from service.catalog.errors import NotFoundError
from service.catalog.models import Portfolio
from service.core.errors import InvalidSpecError
from service.core.policy import Policy

router = APIRouter(tags=["portfolios"])

PORTFOLIO_ID_PATTERN = r"^pf_[0-9a-f]{32}$"

class PortfolioNotFoundError(NotFoundError):
    def __init__(self, portfolio_id: str) -> None:
        super().__init__("portfolio", portfolio_id)

    def __str__(self) -> str:
        return "No portfolio with this id"


def _portfolio_id(portfolio_id: Annotated[str, Path(
        examples=["pf_" + "0" * 32], json_schema_extra={"pattern": PORTFOLIO_ID_PATTERN},
        description="pf_ and 32 hexadecimal digits; any other value is 404.")]) -> str:
    if re.fullmatch(PORTFOLIO_ID_PATTERN, portfolio_id) is None:
        raise PortfolioNotFoundError(portfolio_id)
    return portfolio_id


PortfolioId = Annotated[str, Depends(_portfolio_id)]
IdempotencyKey = Annotated[str | None, Header(
    max_length=255, pattern=r"^[!-~]+$",
    description="Required (printable ASCII, at most 255). The same key and body replay the "
                "stored plan.")]


def portfolio_reader(principal: Annotated[Principal, require("quotes:read")]) -> store.Reader:
    """The ownership rules of quotes: the principal, its team, or ``quotes:admin``."""
    return reader_of(principal, "quotes:admin")


ReaderDep = Annotated[store.Reader, Depends(portfolio_reader)]


def _get(session: SessionDep, portfolio_id: str, reader: store.Reader) -> Portfolio:
    row = session.get(Portfolio, portfolio_id)
    if row is None or not reader.may_read(row):
        raise PortfolioNotFoundError(portfolio_id)
    return row


def _compute(body: PortfolioRequest, session: SessionDep, accelerators: AcceleratorsDep,
             settings: SettingsDep, gone: ClientGoneDep, version_id: str, policy: Policy,
             now: dt.datetime, cache: OfferCache | None = None) -> dict[str, Any]:
    budget = request_budget(settings, gone)
    resolved = resolve(body, session, accelerators, version_id, policy, now, budget, cache)
    solution, free = solve_request(body, resolved, budget.seconds_left())
    return plan_body(body, resolved, solution, free)


@router.post("/v1/portfolios", summary="Plan a commitment portfolio and store it",
             status_code=201, response_class=Response, responses={
                 201: {"description": "The stored plan (also on an idempotent replay, with "
                                      "Idempotent-Replayed: true).", "model": PortfolioOut},
                 **problem_responses(400, 401, 403, 409, 413, 422), **SEARCH_UNAVAILABLE})
def create_portfolio(
    request: Request,
    body: Annotated[PortfolioRequest, Body(openapi_examples={
        "pretraining": {"summary": "One 400k GPU-hour run over six months",
                        "value": PORTFOLIO_EXAMPLE}})],
    session: SessionDep, accelerators: AcceleratorsDep, settings: SettingsDep,
    principal: Annotated[Principal, require("quotes:write")], gone: ClientGoneDep,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Solve the portfolio's mixed-integer programme (HiGHS) over the catalogue version's
    offers: commitments per term, offer and month, each job's placement, on-demand and spot
    for the peaks, within the policy's capacity limits and the budget per period."""
    if not idempotency_key:
        raise HTTPException(400, "the Idempotency-Key header is required")
    canonical = body.model_dump(mode="json")
    hash_ = store.request_hash(canonical)
    existing = session.query(Portfolio).filter_by(
        principal=principal.name, idempotency_key=idempotency_key).one_or_none()
    if existing is not None:
        if existing.request_hash != hash_:
            raise store.IdempotencyKeyReusedError(
                "this Idempotency-Key was used with a different request body; use a new key")
        return _answer(existing, replay=True)
    version = _version_in_body(session, body.catalog_version)
    policy = _policy(session, body.policy, settings.default_policy)
    now = dt.datetime.now(dt.UTC)
    computed = _compute(body, session, accelerators, settings, gone, version.id, policy, now,
                        offer_cache(request))
    portfolio_id = "pf_" + uuid.uuid4().hex
    out = PortfolioOut.model_validate({
        "id": portfolio_id, "name": body.name, "created_at": now.isoformat(),
        "principal": principal.name, "catalog_version": version.id,
        "estimator_version": ESTIMATOR_VERSION,
        "policy": {"name": policy.name, "revision": policy.revision},
        "horizon": body.horizon.model_dump(mode="json"), "accounting": body.accounting,
        **computed})
    row = Portfolio(
        id=portfolio_id, principal=principal.name, team=principal.team,
        idempotency_key=idempotency_key, request_hash=hash_, created_at=now,
        catalog_version_id=version.id, estimator_version=ESTIMATOR_VERSION,
        policy_name=policy.name if policy.revision else None,
        policy_revision=policy.revision, verdict=out.verdict, request=canonical,
        response=out.model_dump_json())
    session.add(row)
    session.flush()
    commit_before_answer(session)
    return _answer(row, replay=False)


def _answer(row: Portfolio, *, replay: bool) -> Response:
    headers = {"Location": f"/v1/portfolios/{row.id}", **NO_STORE}
    if replay:
        headers["Idempotent-Replayed"] = "true"
    return Response(row.response, status_code=201, media_type="application/json",
                    headers=headers)


@router.get("/v1/portfolios/{portfolio_id}", summary="Get a stored portfolio plan",
            response_class=Response,
            responses={200: {"description": "The plan as first answered.",
                             "model": PortfolioOut}, **problem_responses(401, 403, 404)})
def get_portfolio(session: SessionDep, reader: ReaderDep, portfolio_id: PortfolioId,
                  ) -> Response:
    """The stored plan, byte for byte; to anyone but its principal, its team and
    ``quotes:admin`` it is 404."""
    return Response(_get(session, portfolio_id, reader).response,
                    media_type="application/json", headers=NO_STORE)


VERIFIED = ("solver", "purchases", "jobs", "fleets", "months", "utilisation", "totals",
            "baselines", "budget", "verdict", "reasons")


@router.post("/v1/portfolios/{portfolio_id}/verify", summary="Solve a stored portfolio again "
             "and compare", response_model=PortfolioVerifyOut,
             responses={**problem_responses(401, 403, 404, 422), **SEARCH_UNAVAILABLE})
def verify_portfolio(
    response: Response, session: SessionDep, reader: ReaderDep, accelerators: AcceleratorsDep,
    settings: SettingsDep, gone: ClientGoneDep, portfolio_id: PortfolioId,
) -> PortfolioVerifyOut:
    """Solve the stored request again on its catalogue version, policy revision and date;
    every purchase, placement, cent and the verdict must match."""
    row = _get(session, portfolio_id, reader)
    body = PortfolioRequest.model_validate(row.request)
    stored = json.loads(row.response)
    policy = _policy(session, row.policy_name, None, row.policy_revision)
    fresh = _compute(body, session, accelerators, settings, gone, row.catalog_version_id,
                     policy, as_utc(row.created_at))
    fresh = json.loads(PortfolioOut.model_validate({**stored, **fresh}).model_dump_json())
    differences = [{"path": name, "stored": stored.get(name), "recomputed": fresh.get(name)}
                   for name in VERIFIED if stored.get(name) != fresh.get(name)]
    response.headers.update(NO_STORE)
    return PortfolioVerifyOut(matches=not differences, differences=differences,
                              catalog_version=row.catalog_version_id,
                              estimator_version=ESTIMATOR_VERSION,
                              stored_estimator_version=row.estimator_version)


def _purchase_counts(purchases: list[dict[str, Any]]) -> dict[tuple[str, ...], int]:
    counts: dict[tuple[str, ...], int] = {}
    for p in purchases:
        key = (p["term"], p["provider"], p["instance_type"], p["region"], p["start"])
        counts[key] = counts.get(key, 0) + int(p["count"])
    return counts


def _purchase_delta(before: dict[tuple[str, ...], int], after: dict[tuple[str, ...], int],
                    ) -> list[dict[str, Any]]:
    names = ("term", "provider", "instance_type", "region", "start")
    return [{**dict(zip(names, key, strict=True)), "count": after[key] - before.get(key, 0)}
            for key in sorted(after) if after[key] > before.get(key, 0)]


@router.post("/v1/portfolios/{portfolio_id}/what-if", summary="Re-solve a stored portfolio "
             "with one price or one demand changed", response_model=PortfolioWhatIfOut,
             responses={**problem_responses(401, 403, 404, 422), **SEARCH_UNAVAILABLE})
def what_if_portfolio(
    response: Response, session: SessionDep, reader: ReaderDep, accelerators: AcceleratorsDep,
    settings: SettingsDep, gone: ClientGoneDep, portfolio_id: PortfolioId,
    change: Annotated[PortfolioWhatIfIn, Body(openapi_examples={
        "3-year prices drop 10 %": {"value": {"change": "price", "term": "reserved_3y",
                                              "factor": 0.9}}})],
) -> PortfolioWhatIfOut:
    """The stored request solved again on its catalogue version and policy with one change:
    the change in total and in purchases against the stored plan. Nothing is stored."""
    row = _get(session, portfolio_id, reader)
    stored = json.loads(row.response)
    request = dict(row.request)
    if change.change == "demand":
        fleets = [dict(f) for f in request.get("fleets", [])]
        ids = [f["id"] for f in fleets]
        if change.fleet not in ids:
            raise InvalidSpecError(f"fleet {change.fleet!r} is not a fleet of the portfolio",
                                   field="fleet")
        start = month_index(request["horizon"]["start"])
        assert change.month is not None  # noqa: S101 - the schema requires it
        m = month_index(change.month) - start
        if not 0 <= m < request["horizon"]["months"]:
            raise InvalidSpecError(f"month {change.month} is outside the horizon",
                                   field="month")
        fleet = fleets[ids.index(change.fleet)]
        rates = list(fleet["monthly_requests_per_s"])
        rates[m] = rates[m] * change.factor
        fleet["monthly_requests_per_s"] = rates
        fleets[ids.index(change.fleet)] = fleet
        request["fleets"] = fleets
    body = PortfolioRequest.model_validate(request)
    policy = _policy(session, row.policy_name, None, row.policy_revision)
    budget = request_budget(settings, gone)
    resolved = resolve(body, session, accelerators, row.catalog_version_id, policy,
                       as_utc(row.created_at), budget)
    if change.change == "price":
        problem = resolved.problem
        factor = Decimal(repr(change.factor))
        offers = tuple(
            replace(o, rate_usd_per_instance_hour=o.rate_usd_per_instance_hour * factor)
            if o.term == change.term and (change.provider is None
                                          or problem.pools[o.pool].provider == change.provider)
            else o for o in problem.offers)
        resolved = replace(resolved, problem=replace(problem, offers=offers))
    solution, free = solve_request(body, resolved, budget.seconds_left())
    fresh = plan_body(body, resolved, solution, free)
    base_total = Decimal(stored["totals"].get("objective_usd", "0"))
    new_total = Decimal(fresh["totals"].get("objective_usd", "0"))
    before, after = _purchase_counts(stored["purchases"]), _purchase_counts(fresh["purchases"])
    response.headers.update(NO_STORE)
    return PortfolioWhatIfOut(
        change=change.model_dump(mode="json", exclude_none=True),
        base_total_usd=str(base_total), changed_total_usd=str(new_total),
        delta_usd=str(new_total - base_total),
        purchases_added=_purchase_delta(before, after),
        purchases_removed=_purchase_delta(after, before), solver=fresh["solver"],
        verdict=fresh["verdict"])
