"""Quotes: price a workload across the catalogue, store it immutably, gate it on a budget,
verify and requote it; and the inverse question, budget plans."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import uuid
from decimal import Decimal
from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, HTTPException, Path, Query, Request, Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from service import __version__
from service.api.auth import Principal, read_access, require
from service.api.deps import AcceleratorCache, AcceleratorsDep, SessionDep, SettingsDep
from service.api.pagination import PageSize, PageToken, decode_token, encode_token
from service.api.problems import problem_responses
from service.api.schemas.common import Page
from service.api.schemas.estimate import EnergyIn, ModelIn, plan_dict
from service.api.schemas.plans import CandidateClusterIn, ConstraintsIn, PlanTrainingIn
from service.api.schemas.prices import as_utc
from service.api.schemas.quotes import (
    BUDGET_PLAN_EXAMPLE,
    QUOTE_EXAMPLE,
    BudgetPlanOut,
    BudgetPlanRequest,
    QuoteOut,
    QuoteRequest,
    QuoteSummaryOut,
    VerifyOut,
)
from service.api.workers import run_cpu_bound
from service.catalog import quotes as store
from service.catalog.errors import NotFoundError
from service.catalog.models import CatalogVersionOffer, OfferRevision, Quote
from service.catalog.prices import get_version
from service.catalog.quoting import PricingOptions, SizedJob, price_jobs
from service.core import pricing
from service.core.calibration import DEFAULT_CALIBRATION
from service.core.errors import InvalidSpecError, NoFeasiblePlanError
from service.core.estimate import average_power_w_per_gpu, estimate
from service.core.params import count_parameters
from service.core.search import SearchRequest, frozen_clock, search
from service.core.specs import EnergySpec, ModelSpec

router = APIRouter(tags=["quotes"])

QuotesWrite = Annotated[Principal, require("quotes:write")]
QuotesRead = Annotated[Principal, read_access("quotes:read")]
Timestamp = Annotated[str | None, Query(
    pattern=r"^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:\d{2})?)?$",
    max_length=32, description="ISO 8601 date or date-time; UTC when no zone is given.",
    examples=["2026-11-01T00:00:00Z"])]
QuoteId = Annotated[str, Path(pattern=r"^q_[0-9a-f]{32}$", examples=["q_" + "0" * 32])]
IdempotencyKey = Annotated[str | None, Header(
    max_length=255, pattern=r"^[!-~]+$",
    description="Required (printable ASCII, at most 255). The same key and body replay the "
                "stored quote.")]

ESTIMATOR_VERSION = "{}+cal.{}+{}".format(
    __version__, DEFAULT_CALIBRATION.version,
    hashlib.sha256((repr(DEFAULT_CALIBRATION) + repr(sorted(
        (k, repr(v)) for k, v in vars(pricing).items() if k.isupper()))).encode()
    ).hexdigest()[:12],
)
"""Package version, calibration version and a hash of every model and pricing constant."""


def _checkpoint_bytes(model: ModelSpec) -> float:
    return count_parameters(model).total * pricing.CHECKPOINT_BYTES_PER_PARAM


def _optimised_jobs(
    cache: AcceleratorCache, model_in: ModelIn, training_in: PlanTrainingIn,
    clusters_in: list[CandidateClusterIn], constraints: ConstraintsIn, energy: EnergySpec,
    prefix: str, workers: int, max_candidates: int,
) -> list[SizedJob]:
    """The fastest fitting plan for every candidate accelerator and GPU count."""
    model = model_in.to_core()
    batches = training_in.batches()
    training = training_in.to_core(batches[0])
    space = constraints.to_space()
    jobs: list[SizedJob] = []
    for index, candidate in enumerate(clusters_in):
        accelerator = cache.require(candidate.accelerator,
                                    f"{prefix}clusters.{index}.accelerator")
        for cluster in candidate.to_core(accelerator):
            count = cluster.num_gpus
            try:
                result = run_cpu_bound(workers, search, SearchRequest(
                    model=model, clusters=(cluster,), training=training,
                    global_batches=tuple(batches), space=space, top_k=1, energy=energy,
                    max_candidates=max_candidates,
                ), frozen_clock)
            except NoFeasiblePlanError:
                continue
            best = result.plans[0]
            jobs.append(SizedJob(
                accelerator=accelerator.id, num_gpus=count,
                wall_s=best.estimate.throughput.train_s,
                checkpoint_bytes=_checkpoint_bytes(model),
                power_w_per_gpu=average_power_w_per_gpu(accelerator.tdp_w, energy),
                plan=plan_dict(best.plan), global_batch_seqs=best.global_batch_seqs))
    if not jobs:
        raise NoFeasiblePlanError("no candidate accelerator and GPU count can run this model "
                                  "in memory")
    return jobs


def size_workload(request: QuoteRequest, cache: AcceleratorCache,
                  max_candidates: int, workers: int = 0) -> list[SizedJob]:
    energy = request.energy.to_core()
    workload = request.workload
    if workload.gpu_hours is not None:
        spec = workload.gpu_hours
        accelerator = cache.require(spec.accelerator, "workload.gpu_hours.accelerator")
        return [SizedJob(accelerator=accelerator.id, num_gpus=spec.num_gpus,
                         wall_s=spec.gpu_hours / spec.num_gpus * 3600.0,
                         checkpoint_bytes=spec.checkpoint_bytes,
                         power_w_per_gpu=average_power_w_per_gpu(accelerator.tdp_w, energy))]
    if workload.estimate is not None:
        est = workload.estimate
        model = est.model.to_core()
        accelerator = cache.require(est.cluster.accelerator,
                                    "workload.estimate.cluster.accelerator")
        cluster = est.cluster.to_core(accelerator)
        plan = est.parallelism.to_core(cluster.num_gpus)
        result = estimate(model, cluster, plan, est.training.to_core(), energy=energy)
        return [SizedJob(accelerator=accelerator.id, num_gpus=cluster.num_gpus,
                         wall_s=result.throughput.train_s,
                         checkpoint_bytes=_checkpoint_bytes(model),
                         power_w_per_gpu=average_power_w_per_gpu(accelerator.tdp_w, energy),
                         plan=plan_dict(plan),
                         global_batch_seqs=est.training.global_batch_seqs)]
    assert workload.optimise is not None  # noqa: S101 - the schema requires exactly one
    opt = workload.optimise
    return _optimised_jobs(cache, opt.model, opt.training, opt.clusters, opt.constraints,
                           energy, "workload.optimise.", workers, max_candidates)


def _options(request: QuoteRequest | BudgetPlanRequest, energy: EnergyIn) -> PricingOptions:
    budget = request.budget
    onprem = request.onprem.model_dump(mode="json")
    return PricingOptions(
        terms=tuple(request.terms), providers=tuple(request.providers),
        regions=tuple(request.regions),
        budget=Decimal(budget.amount) if budget is not None else None,
        currency=budget.currency if budget is not None else "USD",
        deadline_s=request.deadline_s,
        failure_rate_per_gpu_hour=request.reliability.failure_rate_per_gpu_hour,
        restart_s=request.reliability.restart_s,
        checkpoint_bytes_per_s=request.reliability.checkpoint_bytes_per_s,
        reserved_utilisation_fraction=Decimal(request.reserved_utilisation_fraction),
        pue=energy.pue, grid_gco2e_per_kwh=energy.grid_gco2e_per_kwh,
        onprem={k: v for k, v in onprem.items() if v is not None},
    )


def _check_currency(session: Session, currency: str, version_id: str) -> None:
    if currency != "USD":
        found = session.scalar(
            select(OfferRevision.id)
            .join(CatalogVersionOffer, CatalogVersionOffer.revision_id == OfferRevision.id)
            .where(CatalogVersionOffer.version_id == version_id,
                   OfferRevision.currency == currency).limit(1))
        if found is None:
            raise InvalidSpecError(
                f"budget.currency {currency} differs from the catalogue's offer currency (USD); "
                "there is no currency conversion", field="budget.currency")


def compute_body(session: Session, request: QuoteRequest, cache: AcceleratorCache,
                 version_id: str, max_candidates: int, workers: int = 0) -> dict[str, Any]:
    """Everything of a quote that is computed (no id or timestamps)."""
    if request.budget is not None:
        _check_currency(session, request.budget.currency, version_id)
    jobs = size_workload(request, cache, max_candidates, workers)
    priced = price_jobs(session, jobs, _options(request, request.energy), version_id)
    priced["budget"] = request.budget.model_dump() if request.budget else None
    priced["deadline_s"] = request.deadline_s
    return priced


def _version_in_body(session: Session, version_id: str | None) -> Any:
    """A body naming a version that does not exist is invalid input (422), not a missing URL."""
    try:
        return get_version(session, version_id)
    except NotFoundError as exc:
        raise InvalidSpecError(str(exc), field="catalog_version") from None


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
    **problem_responses(400, 401, 403, 404, 409, 413, 422),
}


@router.post("/v1/quotes", summary="Price a workload and store the quote", status_code=201,
             response_class=Response, responses=QUOTE_RESPONSES)
def create_quote(
    request: Request,
    body: Annotated[QuoteRequest, Body(openapi_examples={
        "70B on 256 H100": {"summary": "Llama 3.1 70B estimate, all terms, budget and deadline",
                            "value": QUOTE_EXAMPLE}})],
    session: SessionDep, accelerators: AcceleratorsDep, settings: SettingsDep,
    principal: QuotesWrite, idempotency_key: IdempotencyKey = None,
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
    version = _version_in_body(session, body.catalog_version)
    computed = compute_body(session, body, accelerators, version.id,
                            settings.search_max_candidates, settings.search_workers)
    row = _new_quote(request, principal.name, idempotency_key, hash_, canonical, version.id,
                     version.content_hash, computed, settings.quote_ttl_days, None)
    return _store(request, session, row)


def _new_quote(request: Request, principal: str, key: str, hash_: str,
               canonical: dict[str, Any], version_id: str, content_hash: str,
               computed: dict[str, Any], ttl_days: int, requote_of: str | None) -> Quote:
    now = dt.datetime.now(dt.UTC)
    quote_id = "q_" + uuid.uuid4().hex
    request_id = getattr(request.state, "request_id", None) or uuid.uuid4().hex
    expires = now + dt.timedelta(days=ttl_days)
    body = {
        "id": quote_id, "created_at": now.isoformat(), "expires_at": expires.isoformat(),
        "principal": principal, "request_id": request_id, "catalog_version": version_id,
        "catalog_content_hash": content_hash, "estimator_version": ESTIMATOR_VERSION,
        "requote_of": requote_of, **computed,
    }
    return Quote(
        id=quote_id, principal=principal, idempotency_key=key, request_hash=hash_,
        request_id=request_id, created_at=now, expires_at=expires,
        catalog_version_id=version_id, catalog_content_hash=content_hash,
        estimator_version=ESTIMATOR_VERSION, verdict=computed["verdict"],
        requote_of=requote_of, request=canonical, response=_body_text(body),
    )


def _store(request: Request, session: Session, row: Quote) -> Response:
    """Insert (or lose the race and replay), commit before answering, count."""
    stored = store.insert_quote(session, row)
    session.commit()
    if stored is not row:
        return _replay(stored)
    metrics = request.app.state.metrics
    metrics.quotes_created.inc()
    if row.verdict == "reject":
        metrics.budget_rejections.inc()
    return Response(row.response, status_code=201, media_type="application/json",
                    headers={"Location": f"/v1/quotes/{row.id}"})


def _replay(row: Quote) -> Response:
    return Response(row.response, status_code=201, media_type="application/json",
                    headers={"Idempotent-Replayed": "true", "Location": f"/v1/quotes/{row.id}"})


@router.get("/v1/quotes/{quote_id}", summary="Get a stored quote", response_class=Response,
            responses={200: {"description": "The quote as first answered.", "model": QuoteOut},
                       **problem_responses(401, 403, 404, 422)})
def get_quote(session: SessionDep, _: QuotesRead, quote_id: QuoteId) -> Response:
    """The stored quote, byte for byte as it was first answered."""
    return Response(store.get_quote(session, quote_id).response, media_type="application/json")


@router.get("/v1/quotes", summary="List stored quotes", response_model=Page[QuoteSummaryOut],
            responses=problem_responses(400, 401, 403, 422))
def list_quotes(
    session: SessionDep, _: QuotesRead,
    principal: Annotated[str | None, Query(max_length=128,
                                           pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")] = None,
    created_after: Timestamp = None, created_before: Timestamp = None,
    verdict: Annotated[str | None, Query(pattern="^(approve|reject)$")] = None,
    page_size: PageSize = 50, page_token: PageToken = None,
) -> Page[QuoteSummaryOut]:
    """Newest first, filtered by principal, creation time and verdict."""
    after = None
    if (token := decode_token(page_token)) is not None:
        stamp, _sep, quote_id = token.partition("|")
        try:
            after = (dt.datetime.fromisoformat(stamp), quote_id)
        except ValueError:
            raise HTTPException(400, "page_token is not a token this API issued") from None
    rows = store.list_quotes(session, limit=page_size + 1, principal=principal,
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
                   "instances", "unit_price", "total", "billed_hours", "feasible", "reserved",
                   "within_budget", "meets_deadline")


def _differences(stored: dict[str, Any], fresh: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    old_lines, new_lines = stored["lines"], fresh["lines"]
    if len(old_lines) != len(new_lines):
        found.append({"path": "lines.length", "stored": len(old_lines),
                      "recomputed": len(new_lines)})
    for i, (old, new) in enumerate(zip(old_lines, new_lines, strict=False)):
        for name in VERIFIED_FIELDS:
            if old.get(name) != new.get(name):
                found.append({"path": f"lines.{i}.{name}", "stored": old.get(name),
                              "recomputed": new.get(name)})
    for name in ("verdict", "summary"):
        if stored.get(name) != fresh.get(name):
            found.append({"path": name, "stored": stored.get(name), "recomputed": fresh.get(name)})
    return found


@router.post("/v1/quotes/{quote_id}/verify", summary="Recompute a quote and compare",
             response_model=VerifyOut, responses=problem_responses(401, 403, 404, 422))
def verify_quote(
    session: SessionDep, _: QuotesRead, accelerators: AcceleratorsDep, settings: SettingsDep,
    quote_id: QuoteId,
) -> VerifyOut:
    """Recompute from the stored request and catalogue version; every amount must match to
    the cent (a mismatch is a bug, or a different estimator version)."""
    row = store.get_quote(session, quote_id)
    request = QuoteRequest.model_validate(row.request)
    fresh = compute_body(session, request, accelerators, row.catalog_version_id,
                         settings.search_max_candidates, settings.search_workers)
    differences = _differences(json.loads(row.response), fresh)
    return VerifyOut.model_validate({
        "matches": not differences, "differences": differences,
        "catalog_version": row.catalog_version_id, "estimator_version": ESTIMATOR_VERSION,
        "stored_estimator_version": row.estimator_version})


@router.post("/v1/quotes/{quote_id}/requote", summary="Price a stored quote's request again",
             status_code=201, response_class=Response, responses=QUOTE_RESPONSES)
def requote_quote(
    request: Request, session: SessionDep, accelerators: AcceleratorsDep,
    settings: SettingsDep, principal: QuotesWrite, quote_id: QuoteId,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """A new quote from the same request on the current catalogue, linked by ``requote_of``."""
    old = store.get_quote(session, quote_id)
    canonical = dict(old.request)
    canonical["catalog_version"] = None
    body = QuoteRequest.model_validate(canonical)
    canonical = body.model_dump(mode="json")
    key = idempotency_key or f"requote:{quote_id}:{uuid.uuid4().hex}"
    hash_ = store.request_hash({**canonical, "requote_of": quote_id})
    existing = store.find_by_key(session, principal.name, key)
    if existing is not None:
        return _replay(store.replay_or_refuse(existing, hash_))
    version = get_version(session, None)
    computed = compute_body(session, body, accelerators, version.id,
                            settings.search_max_candidates, settings.search_workers)
    row = _new_quote(request, principal.name, key, hash_, canonical, version.id,
                     version.content_hash, computed, settings.quote_ttl_days, quote_id)
    return _store(request, session, row)


@router.post("/v1/budget-plans", summary="Best plans within a budget or before a deadline",
             response_model=BudgetPlanOut, responses=problem_responses(401, 403, 413, 422))
def plan_budget(
    body: Annotated[BudgetPlanRequest, Body(openapi_examples={
        "70B within 3M USD": {"summary": "Llama 3.1 70B, H100 or A100, 3M USD, 60 days",
                              "value": BUDGET_PLAN_EXAMPLE}})],
    session: SessionDep, accelerators: AcceleratorsDep, settings: SettingsDep,
    _: QuotesRead,
) -> BudgetPlanOut:
    """For every candidate accelerator and GPU count, the optimiser's fastest plan is priced
    on every matching offer. Answers the lines within the budget, soonest first, and the lines
    that meet the deadline, cheapest first."""
    version = _version_in_body(session, body.catalog_version)
    _check_currency(session, body.budget.currency, version.id)
    energy = body.energy.to_core()
    jobs = _optimised_jobs(accelerators, body.model, body.training, body.clusters,
                           body.constraints, energy, "", settings.search_workers,
                           settings.search_max_candidates)
    priced = price_jobs(session, jobs, _options(body, body.energy), version.id)
    feasible = [x for x in priced["lines"] if x["feasible"]]
    within = sorted((x for x in feasible if x["within_budget"]),
                    key=lambda x: (x["wall_clock_s"], Decimal(x["total"])))
    in_time = [x for x in feasible if x["meets_deadline"] is not False]
    return BudgetPlanOut.model_validate({
        "soonest_within_budget": within[: body.top_k],
        "cheapest_before_deadline": in_time[: body.top_k],
        "catalog_version": version.id, "budget": body.budget.model_dump(),
        "deadline_s": body.deadline_s,
    })
