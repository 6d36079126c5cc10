"""Procurement policies: named, with immutable revisions and If-Match edits."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Path, Query, Response

from service.api.auth import Principal, read_access, require
from service.api.deps import SessionDep, commit_before_answer
from service.api.etags import expected_revision
from service.api.pagination import PageSize, PageToken, decode_token, encode_token
from service.api.problems import problem_responses
from service.api.schemas.common import Page
from service.api.schemas.policies import (
    POLICY_EXAMPLE,
    PolicyIn,
    PolicyOut,
    PolicyRevisionIn,
    PolicyRulesIn,
)
from service.api.schemas.prices import as_utc
from service.catalog import policies as store
from service.catalog.models import PolicyRevision

router = APIRouter(tags=["policies"])

PoliciesWrite = Annotated[Principal, require("policies:write")]
PoliciesRead = Annotated[Principal, read_access("policies:read")]
Name = Annotated[str, Path(pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$", examples=["finance-2027"])]
ETAG_HEADER: dict[str, Any] = {"description": 'The revision, "p<revision>": send it as '
                                              "If-Match to revise the policy.",
                               "schema": {"type": "string"}}


def _out(row: PolicyRevision) -> PolicyOut:
    return PolicyOut(name=row.name, revision=row.revision, created_at=as_utc(row.created_at),
                     created_by=row.created_by, description=row.description, rules=row.rules)


def _rules(rules: PolicyRulesIn) -> dict[str, Any]:
    return rules.model_dump(mode="json")


def _etag(row: PolicyRevision) -> str:
    return f'"p{row.revision}"'


@router.post("/v1/policies", summary="Create a policy", status_code=201,
             response_model=PolicyOut, responses={
                 201: {"headers": {"ETag": ETAG_HEADER, "Location": {
                     "description": "The policy's URL.", "schema": {"type": "string"}}}},
                 **problem_responses(401, 403, 409, 413, 422)})
def create_policy(
    response: Response, session: SessionDep, principal: PoliciesWrite,
    body: Annotated[PolicyIn, Body(openapi_examples={
        "finance": {"summary": "A 2M USD commitment limit", "value": POLICY_EXAMPLE}})],
) -> PolicyOut:
    """Revision 1 of a new named policy (409 if the name exists). Committed before the
    answer: a 201 means stored."""
    row = store.create(session, name=body.name, description=body.description,
                       rules=_rules(body.rules), created_by=principal.name)
    commit_before_answer(session)
    response.headers["ETag"] = _etag(row)
    response.headers["Location"] = f"/v1/policies/{row.name}"
    return _out(row)


@router.get("/v1/policies", summary="List policies", response_model=Page[PolicyOut],
            responses=problem_responses(400, 401, 403, 422))
def list_policies(session: SessionDep, _: PoliciesRead, page_size: PageSize = 50,
                  page_token: PageToken = None) -> Page[PolicyOut]:
    """The newest revision of every policy, by name."""
    rows = store.list_latest(session, limit=page_size + 1, after=decode_token(page_token))
    token = encode_token(rows[page_size - 1].name) if len(rows) > page_size else None
    return Page[PolicyOut](items=[_out(r) for r in rows[:page_size]], next_page_token=token)


@router.get("/v1/policies/{name}", summary="Get a policy", response_model=PolicyOut,
            responses={200: {"headers": {"ETag": ETAG_HEADER}},
                       **problem_responses(401, 403, 404, 422)})
def get_policy(
    response: Response, session: SessionDep, _: PoliciesRead, name: Name,
    revision: Annotated[int | None, Query(ge=1, le=1_000_000,
                                          description="Default: the newest.")] = None,
) -> PolicyOut:
    """A policy's newest revision (or the one asked for), with its ETag."""
    row = store.get_revision(session, name, revision) if revision else store.latest(
        session, name)
    response.headers["ETag"] = _etag(row)
    return _out(row)


@router.put("/v1/policies/{name}", summary="Revise a policy", response_model=PolicyOut,
            responses={200: {"headers": {"ETag": ETAG_HEADER}},
                       **problem_responses(401, 403, 404, 412, 413, 422, 428)})
def update_policy(
    response: Response, session: SessionDep, principal: PoliciesWrite, name: Name,
    body: PolicyRevisionIn,
    if_match: Annotated[str | None, Header(max_length=200,
                                           description="The policy's ETag.")] = None,
) -> PolicyOut:
    """A new revision; earlier revisions stay, and quotes judged by them still verify. Needs
    ``If-Match`` with the policy's ETag: 428 without it (or with ``*``), 412 when another
    revision came first, even at the same moment."""
    expected = expected_revision(if_match, prefix="p", what="policy",
                                 read_at="/v1/policies/{name}")
    row = store.revise(session, name=name, expected_revision=expected,
                       description=body.description, rules=_rules(body.rules),
                       created_by=principal.name)
    commit_before_answer(session)
    response.headers["ETag"] = _etag(row)
    return _out(row)
