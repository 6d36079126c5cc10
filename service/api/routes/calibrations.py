"""User calibrations (issue 37): fit a user's measured runs, store the fit immutably, read
and list it with the quotes' owner/team/admin rule."""

from __future__ import annotations

import datetime as dt
import re
import uuid
from typing import Annotated, Any

import zstandard
from fastapi import APIRouter, Body, Depends, Header, HTTPException, Path, Query, Request, Response
from sqlalchemy.orm import Session

from service.api.auth import NO_STORE, Principal, reader_of, require
from service.api.calibrating import fit_json, fit_or_refuse, run_specs
from service.api.deps import AcceleratorsDep, SessionDep, SettingsDep, commit_before_answer
from service.api.pagination import PageSize, PageToken, decode_token, encode_token
from service.api.problems import problem_responses
from service.api.quoting import ESTIMATOR_VERSION
from service.api.schemas.calibrations import (
    CALIBRATION_EXAMPLE,
    CalibrationOut,
    CalibrationRequest,
    CalibrationSummaryOut,
)
from service.api.schemas.common import Page
from service.api.schemas.prices import as_utc
from service.catalog import calibrations as store
from service.catalog.models import UserCalibration
from service.catalog.quotes import Reader, canonical_json
from service.core.calibration import DEFAULT_CALIBRATION

router = APIRouter(tags=["calibrations"])

CalibrationsWrite = Annotated[Principal, require("calibrations:write")]


def calibration_reader(
        principal: Annotated[Principal, require("calibrations:read")]) -> Reader:
    """Stored calibrations always need a key with ``calibrations:read`` (or write/admin):
    they belong to the principal that made them and its team; ``calibrations:admin`` reads
    every principal's."""
    return reader_of(principal, "calibrations:admin")


ReaderDep = Annotated[Reader, Depends(calibration_reader)]
IdempotencyKey = Annotated[str | None, Header(
    max_length=255, pattern=r"^[!-~]+$",
    description="Optional (printable ASCII, at most 255): the same key and body replay the "
                "stored calibration; the same key with another body is 422.")]


def _calibration_id(calibration_id: Annotated[str, Path(
        examples=["cal_" + "0" * 32], json_schema_extra={"pattern": store.ID_PATTERN},
        description="cal_ and 32 hexadecimal digits; any other value is 404, as an unknown "
                    "id is.")]) -> str:
    if re.fullmatch(store.ID_PATTERN, calibration_id) is None:
        raise store.CalibrationNotFoundError(calibration_id)
    return calibration_id


CalibrationId = Annotated[str, Depends(_calibration_id)]


@router.post(
    "/v1/calibrations", summary="Calibrate the estimate on your own measured runs",
    status_code=201, response_class=Response,
    responses={201: {"description": "The stored calibration (also on an idempotent replay, "
                                    "with Idempotent-Replayed: true).",
                     "model": CalibrationOut,
                     "headers": {"Location": {"description": "The calibration's URL.",
                                              "schema": {"type": "string"}}}},
               **problem_responses(401, 403, 409, 413, 422, 503)},
)
def create_calibration(
    request: Request,
    body: Annotated[CalibrationRequest, Body(openapi_examples={
        "one torchtitan run": {"summary": "One measured Llama 3.1 8B step on 8 H100",
                               "value": CALIBRATION_EXAMPLE}})],
    session: SessionDep, accelerators: AcceleratorsDep, settings: SettingsDep,
    principal: CalibrationsWrite, idempotency_key: IdempotencyKey = None,
) -> Response:
    """Estimate every run under the project's fit, fit the user's compute, communication
    and overhead factors by partial pooling towards it (1 run moves them partway; many make
    them the runs' own), and store the factors with the runs' leave-one-out error and band.
    A run that does not fit in memory, has a non-positive time, needs a factor beyond
    [0.25, 4] or disagrees with the others beyond any plausible factor is refused with 422
    naming ``runs.N...``; nothing is stored. Then pass ``calibration_id`` to estimates,
    parallelism plans and quotes."""
    canonical = body.model_dump(mode="json")
    hash_ = store.request_hash(canonical)
    if idempotency_key:
        existing = store.find_by_key(session, principal.name, idempotency_key)
        if existing is not None:
            return _replay(store.replay_or_refuse(existing, hash_))
    user = fit_or_refuse(run_specs(body.runs, accelerators), settings.search_workers,
                         settings.search_deadline_s)
    row = _new_row(request, session, principal, body.name, idempotency_key, hash_,
                   canonical, user)
    stored = store.insert_calibration(session, row)
    commit_before_answer(session)
    if stored is not row:
        return _replay(stored)
    return Response(row.response, status_code=201, media_type="application/json",
                    headers={"Location": f"/v1/calibrations/{row.id}", **NO_STORE})


def _new_row(request: Request, session: Session, principal: Principal, name: str,
             key: str | None, hash_: str, canonical: dict[str, Any],
             user: Any) -> UserCalibration:
    calibration_id = "cal_" + uuid.uuid4().hex
    now = dt.datetime.now(dt.UTC)
    revision = store.next_revision(session, principal.name, name)
    body = CalibrationOut.from_fit(
        user, id=calibration_id, name=name, revision=revision, created_at=now,
        principal=principal.name, base_calibration_version=DEFAULT_CALIBRATION.version,
        estimator_version=ESTIMATOR_VERSION)
    runs_text = canonical_json(canonical["runs"])
    return UserCalibration(
        id=calibration_id, principal=principal.name, team=principal.team, name=name,
        revision=revision, idempotency_key=key, request_hash=hash_, created_at=now,
        base_calibration_version=DEFAULT_CALIBRATION.version,
        estimator_version=ESTIMATOR_VERSION, runs_used=user.runs_used, fit=fit_json(user),
        response=body.model_dump_json(),
        runs_zstd=zstandard.ZstdCompressor(level=3, write_content_size=True).compress(
            runs_text.encode()))


def _replay(row: UserCalibration) -> Response:
    return Response(row.response, status_code=201, media_type="application/json",
                    headers={"Idempotent-Replayed": "true",
                             "Location": f"/v1/calibrations/{row.id}", **NO_STORE})


@router.get("/v1/calibrations/{calibration_id}", summary="Get a stored calibration",
            response_class=Response,
            responses={200: {"description": "The calibration as first answered.",
                             "model": CalibrationOut},
                       **problem_responses(401, 403, 404)})
def get_calibration(session: SessionDep, reader: ReaderDep,
                    calibration_id: CalibrationId) -> Response:
    """The stored calibration, byte for byte as first answered. Only its principal, keys of
    the same team and ``calibrations:admin`` keys may read it; to anyone else it is 404."""
    row = store.get_calibration(session, calibration_id, reader)
    return Response(row.response, media_type="application/json", headers=NO_STORE)


@router.get("/v1/calibrations", summary="List stored calibrations",
            response_model=Page[CalibrationSummaryOut],
            responses=problem_responses(400, 401, 403, 422))
def list_calibrations(
    session: SessionDep, reader: ReaderDep, response: Response,
    name: Annotated[str | None, Query(max_length=64)] = None,
    page_size: PageSize = 50, page_token: PageToken = None,
) -> Page[CalibrationSummaryOut]:
    """Newest first, optionally one name's revisions: only the calibrations the key may read
    (its own and its team's; every principal's with ``calibrations:admin``)."""
    after = None
    if (token := decode_token(page_token)) is not None:
        stamp, _sep, last_id = token.partition("|")
        try:
            after = (dt.datetime.fromisoformat(stamp), last_id)
        except ValueError:
            raise HTTPException(400, "page_token is not a token this API issued") from None
    rows = store.list_calibrations(session, limit=page_size + 1, reader=reader, name=name,
                                   after=after)
    items = [CalibrationSummaryOut(id=r.id, name=r.name, revision=r.revision,
                                   created_at=as_utc(r.created_at), principal=r.principal,
                                   runs_used=r.runs_used) for r in rows[:page_size]]
    next_token = None
    if len(rows) > page_size:
        last = rows[page_size - 1]
        next_token = encode_token(f"{last.created_at.isoformat()}|{last.id}")
    response.headers.update(NO_STORE)
    return Page[CalibrationSummaryOut](items=items, next_page_token=next_token)

