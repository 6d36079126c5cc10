"""Discount books: an organisation's negotiated prices, named, with immutable revisions and
If-Match edits, under their own scope (``discounts:read`` / ``discounts:write``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Path, Query, Response

from service.api.auth import Principal, read_access, require
from service.api.deps import SessionDep, commit_before_answer
from service.api.etags import expected_revision
from service.api.pagination import PageSize, PageToken, decode_token, encode_token
from service.api.problems import problem_responses
from service.api.schemas.common import Page
from service.api.schemas.discounts import (
    DISCOUNT_BOOK_EXAMPLE,
    DiscountBookIn,
    DiscountBookOut,
    DiscountBookRevisionIn,
)
from service.api.schemas.prices import as_utc
from service.catalog import discounts as store
from service.catalog.models import DiscountBookRevision

router = APIRouter(tags=["catalog"])

DiscountsWrite = Annotated[Principal, require("discounts:write")]
DiscountsRead = Annotated[Principal, read_access("discounts:read")]
Name = Annotated[str, Path(pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$",
                           examples=["acme-enterprise-2026"])]
ETAG_HEADER: dict[str, Any] = {"description": 'The revision, "d<revision>": send it as '
                                              "If-Match to revise the book.",
                               "schema": {"type": "string"}}


def _out(row: DiscountBookRevision) -> DiscountBookOut:
    return DiscountBookOut(name=row.name, revision=row.revision,
                           created_at=as_utc(row.created_at), created_by=row.created_by,
                           description=row.description, entries=row.entries)


def _entries(body: DiscountBookRevisionIn) -> list[dict[str, Any]]:
    return [e.model_dump(mode="json", exclude_none=True) for e in body.entries]


def _etag(row: DiscountBookRevision) -> str:
    return f'"d{row.revision}"'


@router.post("/v1/discount-books", summary="Create a discount book", status_code=201,
             response_model=DiscountBookOut, responses={
                 201: {"headers": {"ETag": ETAG_HEADER, "Location": {
                     "description": "The book's URL.", "schema": {"type": "string"}}}},
                 **problem_responses(401, 403, 409, 413, 422)})
def create_discount_book(
    response: Response, session: SessionDep, principal: DiscountsWrite,
    body: Annotated[DiscountBookIn, Body(openapi_examples={
        "acme": {"summary": "A percentage and a fixed rate", "value": DISCOUNT_BOOK_EXAMPLE}})],
) -> DiscountBookOut:
    """Revision 1 of a new book (409 if the name exists); a quote prices with it when it
    names it in ``discount_book``. Committed before the answer."""
    row = store.create(session, name=body.name, description=body.description,
                       entries=_entries(body), created_by=principal.name)
    commit_before_answer(session)
    response.headers["ETag"] = _etag(row)
    response.headers["Location"] = f"/v1/discount-books/{row.name}"
    return _out(row)


@router.get("/v1/discount-books", summary="List discount books",
            response_model=Page[DiscountBookOut], responses=problem_responses(400, 401, 403, 422))
def list_discount_books(session: SessionDep, _: DiscountsRead, page_size: PageSize = 50,
                        page_token: PageToken = None) -> Page[DiscountBookOut]:
    """The newest revision of every book, by name."""
    rows = store.list_latest(session, limit=page_size + 1, after=decode_token(page_token))
    token = encode_token(rows[page_size - 1].name) if len(rows) > page_size else None
    return Page[DiscountBookOut](items=[_out(r) for r in rows[:page_size]],
                                 next_page_token=token)


@router.get("/v1/discount-books/{name}", summary="Get a discount book",
            response_model=DiscountBookOut, responses={
                200: {"headers": {"ETag": ETAG_HEADER}},
                **problem_responses(401, 403, 404, 422)})
def get_discount_book(
    response: Response, session: SessionDep, _: DiscountsRead, name: Name,
    revision: Annotated[int | None, Query(ge=1, le=1_000_000,
                                          description="Default: the newest.")] = None,
) -> DiscountBookOut:
    """A book's newest revision (or the one asked for), with its ETag."""
    row = (store.get_revision(session, name, revision) if revision
           else store.latest(session, name))
    response.headers["ETag"] = _etag(row)
    return _out(row)


@router.put("/v1/discount-books/{name}", summary="Revise a discount book",
            response_model=DiscountBookOut, responses={
                200: {"headers": {"ETag": ETAG_HEADER}},
                **problem_responses(401, 403, 404, 412, 413, 422, 428)})
def update_discount_book(
    response: Response, session: SessionDep, principal: DiscountsWrite, name: Name,
    body: DiscountBookRevisionIn,
    if_match: Annotated[str | None, Header(max_length=200,
                                           description="The book's ETag.")] = None,
) -> DiscountBookOut:
    """A new revision; quotes priced with earlier ones still verify. Needs ``If-Match``:
    the book's ETag: 428 without it (or with ``*``), 412 when another revision came first,
    even at the same moment."""
    expected = expected_revision(if_match, prefix="d", what="discount book",
                                 read_at="/v1/discount-books/{name}")
    row = store.revise(session, name=name, expected_revision=expected,
                       description=body.description, entries=_entries(body),
                       created_by=principal.name)
    commit_before_answer(session)
    response.headers["ETag"] = _etag(row)
    return _out(row)
