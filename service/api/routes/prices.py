"""The price catalogue: versions, offers, imports, exports and single-offer edits."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, HTTPException, Path, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from typing_extensions import TypeAliasType

from service.api.auth import Principal, read_access, require
from service.api.deps import (
    SessionDep,
    SettingsDep,
    commit_before_answer,
    held,
    request_session,
)
from service.api.etags import expected_revision
from service.api.pagination import PageSize, PageToken, decode_token, encode_token
from service.api.problems import problem_responses
from service.api.schemas.common import NoteText, Page
from service.api.schemas.prices import (
    CatalogVersionDetail,
    CatalogVersionOut,
    OfferOut,
    OfferUpdate,
)
from service.catalog import prices
from service.catalog.offers import (
    COLUMNS,
    MAX_IMPORT_ROWS,
    ImportRejectedError,
    OfferRowError,
    Term,
)
from service.catalog.text import text_problem

router = APIRouter()

VersionId = Annotated[str, Path(max_length=16, pattern=r"^cv_\d{6}$", examples=["cv_000001"])]
VersionQuery = Annotated[
    str | None,
    Query(max_length=16, pattern=r"^cv_\d{6}$", description="Catalogue version; default current."),
]
OfferId = Annotated[
    str, Path(max_length=40, pattern=r"^off_[0-9a-f]{24}$",
              examples=["off_3f0c2b6e9c1d4a7b8e5f6a1b"]),
]
Slug = Annotated[str | None, Query(max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
CatalogRead = Annotated[Principal, read_access("catalog:read")]
CatalogWrite = Annotated[Principal, require("catalog:write")]
ExportFormat = TypeAliasType("ExportFormat", Literal["csv", "json"])

CSV_MEDIA_TYPE = "text/csv"
IMPORT_BODY_OPENAPI: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "Offers in the export format: CSV with the export's header, or JSON "
                       "{\"offers\": [...]} (an export document imports as it is).",
        "content": {
            CSV_MEDIA_TYPE: {
                "schema": {"type": "string"},
                "example": ",".join(COLUMNS) + "\n,acme,eu-1,,gpu-8x-h100,h100-sxm5-80gb,8,,,80,"
                           ",on_demand,,USD,20.00,,,,,,,,ACME price list 2026-11,2026-11-01,"
                           "false,,,,",
            },
            "application/json": {
                "schema": {"type": "object", "required": ["offers"], "properties": {
                    "offers": {"type": "array", "items": {"type": "object"}},
                }},
                "example": {"offers": [{
                    "provider": "acme", "region": "eu-1", "instance_type": "gpu-8x-h100",
                    "accelerator": "h100-sxm5-80gb", "gpus_per_instance": 8,
                    "term": "on_demand", "currency": "USD", "price_per_hour": "20.00",
                    "source": "ACME price list 2026-11", "as_of": "2026-11-01",
                    "indicative": False,
                }]},
            },
        },
    }
}


def _version_out(session: SessionDep, version_id: str | None) -> CatalogVersionDetail:
    row = prices.get_version(session, version_id)
    return CatalogVersionDetail.from_row(row, prices.current_version_id(session))


@router.get(
    "/v1/catalog/versions", tags=["catalog"], summary="List catalogue versions",
    response_model=Page[CatalogVersionOut], responses=problem_responses(400, 401, 403, 422),
)
def list_catalog_versions(
    session: SessionDep, _: CatalogRead, page_size: PageSize = 50, page_token: PageToken = None,
) -> Page[CatalogVersionOut]:
    """Every catalogue version, newest first. Exactly one is ``current``."""
    before = decode_token(page_token)
    try:
        before_number = int(before) if before is not None else None
    except ValueError:
        raise HTTPException(400, "page_token is not a token this API issued") from None
    rows = prices.list_versions(session, limit=page_size + 1, before_number=before_number)
    current = prices.current_version_id(session)
    items = [CatalogVersionOut.from_row(r, current) for r in rows[:page_size]]
    token = encode_token(str(items[-1].number)) if len(rows) > page_size else None
    return Page[CatalogVersionOut](items=items, next_page_token=token)


@router.get(
    "/v1/catalog/versions/{version_id}", tags=["catalog"], summary="Get a catalogue version",
    response_model=CatalogVersionDetail, responses=problem_responses(401, 403, 404, 422),
)
def get_catalog_version(
    session: SessionDep, _: CatalogRead, version_id: VersionId,
) -> CatalogVersionDetail:
    """A version with its counts per provider and term and its data-quality report."""
    return _version_out(session, version_id)


@router.get(
    "/v1/catalog/versions/{version_id}/export", tags=["catalog"],
    summary="Export a catalogue version", responses={
        200: {"description": "The version's offers in the import format.",
              "content": {CSV_MEDIA_TYPE: {"schema": {"type": "string"}},
                          "application/json": {"schema": {"type": "object"}}}},
        **problem_responses(401, 403, 404, 422),
    },
)
def export_catalog_version(
    session: SessionDep, _: CatalogRead, version_id: VersionId,
    format: Annotated[ExportFormat, Query(description="csv or json")] = "csv",  # noqa: A002
) -> Response:
    """Every offer of the version, ordered by id, in the format imports take."""
    version = prices.get_version(session, version_id)
    rows = prices.version_revisions(session, version.id)
    headers = {"Content-Disposition": f'attachment; filename="{version.id}.{format}"',
               "X-Content-Hash": version.content_hash}
    if format == "csv":
        return Response(prices.export_csv(rows), media_type=CSV_MEDIA_TYPE, headers=headers)
    return Response(prices.export_json(version, rows), media_type="application/json",
                    headers=headers)


MAX_IMPORT_OBJECTS = MAX_IMPORT_ROWS * 8
"""JSON objects an import body may hold: each row, its quality flags and the document."""


def _parse_import_body(body: bytes, content_type: str) -> list[dict[str, Any]]:
    media_type = content_type.split(";")[0].strip().lower()
    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise HTTPException(400, "the body is not UTF-8 text") from None
    if media_type == CSV_MEDIA_TYPE:
        return list(prices.parse_csv(text))
    if media_type != "application/json":
        raise HTTPException(415, "send text/csv or application/json")

    def no_constants(name: str) -> Any:
        raise ValueError(f"{name} is not a number")

    objects = 0

    def counted(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        # Stop building objects past what a full import can hold (a row and a few quality
        # flags each), so a body of millions of tiny objects is refused before it is built.
        nonlocal objects
        objects += 1
        if objects > MAX_IMPORT_OBJECTS:
            raise ImportRejectedError([OfferRowError(
                0, "offers", f"at most {MAX_IMPORT_ROWS} rows per import", "too_long")])
        return dict(pairs)

    try:
        document = json.loads(text, parse_float=Decimal, parse_constant=no_constants,
                              object_pairs_hook=counted)
    except ImportRejectedError:
        raise
    except (ValueError, RecursionError):
        raise ImportRejectedError([OfferRowError(0, "body", "is not valid JSON",
                                                 "json_invalid")]) from None
    if not isinstance(document, dict) or not isinstance(document.get("offers"), list):
        raise ImportRejectedError([OfferRowError(0, "offers", "the body must be an object "
                                                 "with an 'offers' array", "missing")])
    extra = sorted(set(document) - {"offers", "catalog_version", "content_hash"})
    if extra:
        name = str(extra[0])[:64]
        raise ImportRejectedError([OfferRowError(
            0, "body" if text_problem(name) else name, "is not a field of an import",
            "extra_forbidden")])
    offers: list[dict[str, Any]] = document["offers"]
    prices.check_json_types(offers)
    return offers


@router.post(
    "/v1/catalog/imports", tags=["catalog"], summary="Import offers as a new version",
    status_code=201, response_model=CatalogVersionDetail, openapi_extra=IMPORT_BODY_OPENAPI,
    responses=problem_responses(400, 401, 403, 413, 415, 422),
)
async def import_catalog(
    request: Request, response: Response, session: SessionDep, principal: CatalogWrite,
    mode: Annotated[prices.ImportMode, Query(
        description="replace: the import is the whole new version; patch: its offers are "
                    "added to, or replace same-id offers of, the current version.")
    ] = prices.ImportMode.REPLACE,
    note: Annotated[NoteText, Query(description="Stored on the new version; no control "
                                                "characters.")] = "",
) -> CatalogVersionDetail:
    """Validate every row, then store a new current version; one bad row rejects the whole
    import with 422 listing each bad row and field, and nothing changes."""
    body = await request.body()
    # Parsing an 8 MiB body is CPU work: off the event loop, like the import itself.
    rows = await run_in_threadpool(_parse_import_body, body,
                                   request.headers.get("content-type", ""))

    def work() -> CatalogVersionDetail:
        version = prices.import_offers(session, rows, mode=mode, created_by=principal.name,
                                       note=note)
        detail = CatalogVersionDetail.from_row(version, version.id)
        commit_before_answer(session)
        return detail

    detail = await run_in_threadpool(work)
    response.headers["Location"] = f"/v1/catalog/versions/{detail.id}"
    return detail


@router.get(
    "/v1/offers", tags=["catalog"], summary="List price offers",
    response_model=Page[OfferOut], responses={
        200: {"links": {"GetOffer": {
            "operationId": "get_offer", "parameters": {"offer_id": "$response.body#/items/0/id"},
            "description": "Read the first offer of the page, with its ETag."}}},
        **problem_responses(400, 401, 403, 404, 422)},
)
async def list_offers(
    request: Request, _: CatalogRead,
    accelerator: Slug = None, provider: Slug = None, region: Slug = None,
    term: Term | None = None, version: VersionQuery = None,
    page_size: PageSize = 50, page_token: PageToken = None,
) -> Response:
    """Offers of a version (default current), cheapest per GPU-hour first."""
    # The hot path has no session and no thread hand-off: the version id comes from the
    # generation cache (service/catalog/changes.py) and the page from the page cache.
    # Either miss reads the database in the thread pool.
    version_id = await _version_id(request, version)
    # Staleness is relative to today, so a page is cached per day as well.
    today = dt.datetime.now(dt.UTC).date()
    stale_after = request.app.state.settings.stale_after_days
    key = (version_id, accelerator, provider, region, term, page_size, page_token, today)
    after: tuple[int, str] | None = None
    if (token := decode_token(page_token)) is not None:
        price, _sep, offer_id = token.partition(":")
        if not price.isdigit() or not offer_id:
            raise HTTPException(400, "page_token is not a token this API issued")
        after = (int(price), offer_id)

    def build() -> bytes:
        with request_session(request) as session:
            rows = prices.list_offers(
                session, version_id,
                prices.OfferFilter(accelerator=accelerator, provider=provider, region=region,
                                   term=term),
                limit=page_size + 1, after=after,
            )
            items = [OfferOut.from_row(r, version_id, today=today,
                                       stale_after_days=stale_after)
                     for r in rows[:page_size]]
        next_token = None
        if len(rows) > page_size:
            last = rows[page_size - 1]
            next_token = encode_token(f"{last.price_per_gpu_hour_micros}:{last.offer_id}")
        # Serialised once: returning the model would make FastAPI dump, re-validate and
        # encode every offer again.
        return Page[OfferOut](items=items, next_page_token=next_token).model_dump_json().encode()

    # Versions are immutable, so a page is cached by version id and query (page_cache.py).
    pages = request.app.state.offer_pages
    page = pages.get(key)
    if page is None:
        page = await run_in_threadpool(pages.get_or_build, key, build)
    return Response(page, media_type="application/json")


async def _version_id(request: Request, version: str | None) -> str:
    """The id of ``version`` (None: the current one), from memory while no writer has changed
    the catalogue state; otherwise one read in the thread pool."""
    return await held(request, ("catalog-version", version),
                      lambda session: prices.resolve_version_id(session, version))


ETAG_HEADER: dict[str, Any] = {
    "description": "The offer revision's entity tag, for If-Match on PUT.",
    "schema": {"type": "string", "pattern": r'^"r\d+"$'}}


def _etag(revision_id: int) -> str:
    return f'"r{revision_id}"'


@router.get(
    "/v1/offers/{offer_id}", tags=["catalog"], summary="Get a price offer",
    response_model=OfferOut, responses={
        200: {"headers": {"ETag": ETAG_HEADER}, "links": {"UpdateOffer": {
            "operationId": "update_offer",
            "parameters": {"offer_id": "$request.path.offer_id",
                           "header.If-Match": "$response.header.ETag"},
            "description": "Edit this offer, guarded by the ETag just read."}}},
        **problem_responses(401, 403, 404, 422)},
)
def get_offer(
    response: Response, session: SessionDep, settings: SettingsDep, _: CatalogRead,
    offer_id: OfferId, version: VersionQuery = None,
) -> OfferOut:
    """One offer as a version (default current) holds it, with an ``ETag`` for edits."""
    version_id = prices.resolve_version_id(session, version)
    row = prices.get_offer(session, offer_id, version_id)
    response.headers["ETag"] = _etag(row.id)
    return OfferOut.from_row(row, version_id, today=dt.datetime.now(dt.UTC).date(),
                             stale_after_days=settings.stale_after_days)


@router.put(
    "/v1/offers/{offer_id}", tags=["catalog"], summary="Edit a price offer",
    response_model=OfferOut, responses={
        200: {"headers": {"ETag": ETAG_HEADER}},
        **problem_responses(401, 403, 404, 412, 422, 428)},
)
def update_offer(
    response: Response, session: SessionDep, settings: SettingsDep, principal: CatalogWrite,
    offer_id: OfferId, update: OfferUpdate,
    if_match: Annotated[str | None, Header(max_length=200, description="The offer's ETag.")] = None,
) -> OfferOut:
    """Change one offer of the current version; this creates a new version. Needs the
    ``If-Match`` ETag of the copy being edited: 428 without it, 412 when it is stale."""
    expected = expected_revision(if_match, prefix="r", what="offer",
                                 read_at="/v1/offers/{id}")
    version, row = prices.edit_offer(
        session, offer_id, expected_revision_id=expected, changes=update.changes(),
        created_by=principal.name, note=update.note,
    )
    answer = OfferOut.from_row(row, version.id, today=dt.datetime.now(dt.UTC).date(),
                               stale_after_days=settings.stale_after_days)
    commit_before_answer(session)
    response.headers["ETag"] = _etag(row.id)
    return answer
