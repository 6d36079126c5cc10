"""FX reference rates: read one day's rates, import the ECB's CSV as a new version."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request, Response
from fastapi.concurrency import run_in_threadpool

from service.api.auth import Principal, read_access, require
from service.api.deps import SessionDep, commit_before_answer
from service.api.problems import problem_responses
from service.api.schemas.common import NoteText
from service.api.schemas.fx import FxImportOut, FxRatesOut, FxVersionOut
from service.catalog import fx
from service.catalog.offers import ImportRejectedError, OfferRowError

router = APIRouter()

FxRead = Annotated[Principal, read_access("catalog:read")]
FxWrite = Annotated[Principal, require("catalog:write")]
FxVersionQuery = Annotated[str | None, Query(
    max_length=16, pattern=r"^fx_\d{6}$", description="FX table version; default the newest.")]
CSV_EXAMPLE = ("Date,USD,JPY,GBP,CHF,\n2025-06-02,1.1444,163.48,0.84410,0.9351,\n"
               "2025-05-30,1.1357,163.14,0.84175,0.9338,\n")
IMPORT_BODY_OPENAPI: dict[str, Any] = {"requestBody": {
    "required": True,
    "description": "The ECB's eurofxref-hist.csv or eurofxref.csv as downloaded from "
                   "https://www.ecb.europa.eu/stats/eurofxref/ (unzipped): a Date column, then "
                   "one column per currency in units per 1 EUR; N/A or empty where a currency "
                   "had no fixing.",
    "content": {"text/csv": {"schema": {"type": "string"}, "example": CSV_EXAMPLE}}}}


@router.get("/v1/fx-rates", tags=["catalog"], summary="ECB reference rates of one day",
            response_model=FxRatesOut, responses=problem_responses(401, 403, 404, 422))
def get_fx_rates(
    session: SessionDep, _: FxRead, version: FxVersionQuery = None,
    date: Annotated[dt.date | None, Query(
        description="The day wanted; the latest fixing on or before it is answered. Default "
                    "today (UTC).")] = None,
    currency: Annotated[list[str] | None, Query(
        max_length=40, description="Currencies to answer (ISO 4217); default every one in "
                                   "the table.")] = None,
) -> FxRatesOut:
    """The rates a quote made on ``date`` would use, from the FX table at ``version``."""
    row = fx.get_fx_version(session, version)
    wanted = currency or fx.known_currencies(session, row)
    for code in wanted:
        if len(code) != 3 or not code.isupper() or not code.isalpha():
            raise HTTPException(422, f"currency: {code[:16]!r} is not an ISO 4217 code")
    requested = date or dt.datetime.now(dt.UTC).date()
    fixing, rates = fx.rates_on(session, wanted, requested, row)
    return FxRatesOut(version=row.id, requested_date=requested, fixing_date=fixing,
                      rates_per_eur={k: f"{v:f}" for k, v in sorted(rates.items())},
                      source=row.source)


@router.post("/v1/fx-rates/imports", tags=["catalog"], summary="Import ECB reference rates",
             status_code=201, response_model=FxImportOut, openapi_extra=IMPORT_BODY_OPENAPI,
             responses={200: {"description": "Every rate was already stored: no new version.",
                              "model": FxImportOut},
                        **problem_responses(400, 401, 403, 409, 413, 415, 422)})
async def import_fx_rates(
    request: Request, response: Response, session: SessionDep, principal: FxWrite,
    note: Annotated[NoteText, Query(description="Stored on the new version.")] = "",
) -> FxImportOut:
    """Validate every cell (all or nothing), then store the rates new to the table as a new
    version. A rate that differs from a stored one for the same day and currency is 409 and
    nothing is stored: published ECB rates never change. The answer comes after the commit."""
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type != "text/csv":
        raise HTTPException(415, "send the ECB CSV as text/csv")
    body = await request.body()
    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise HTTPException(400, "the body is not UTF-8 text") from None
    today = dt.datetime.now(dt.UTC).date()

    def parse() -> list[fx.FxRate]:
        try:
            return fx.parse_ecb_csv(text, latest_allowed=today)
        except fx.FxImportRejectedError as exc:
            raise ImportRejectedError([OfferRowError(p.row, p.column, p.message, "fx_rate")
                                       for p in exc.problems]) from None

    rates = await run_in_threadpool(parse)

    def work() -> FxImportOut:
        outcome = fx.import_rates(session, rates, created_by=principal.name, note=note,
                                  source=fx.ECB_SOURCE, now=dt.datetime.now(dt.UTC))
        answer = FxImportOut(version=FxVersionOut.from_row(outcome.version),
                             added=outcome.added, unchanged=outcome.unchanged)
        commit_before_answer(session)
        return answer

    answer = await run_in_threadpool(work)
    if not answer.added:
        response.status_code = 200
    return answer
