"""RFC 9457 problem details: the one place errors become HTTP responses.

Every 4xx/5xx answer is ``application/problem+json`` with a stable ``type`` (a tag URI, as
RFC 9457 section 3.1.1 suggests for types that are not meant to be dereferenced), a constant
``title``, a per-occurrence ``detail``, the ``instance`` path, and extension members
(``errors`` for validation failures, ``field`` for domain rule violations). Request input is
never echoed back.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import Scope, Send

from service.api.work import ClientGoneError, SearchDeadlineError, SearchQueueTimeoutError
from service.catalog.errors import (
    AuthError,
    CommitFailedError,
    ConflictError,
    NotFoundError,
    PreconditionFailedError,
)
from service.catalog.offers import ImportRejectedError
from service.catalog.quotes import IdempotencyKeyReusedError
from service.core.errors import (
    InfeasiblePlanError,
    InvalidSpecError,
    NoFeasiblePlanError,
    NoLayoutError,
)

PROBLEM_MEDIA_TYPE = "application/problem+json"
MAX_INSTANCE_CHARS = 256
"""A problem's ``instance`` is the request's path cut to this many characters (issue 36: it
echoed paths of up to 5,000)."""
TYPE_PREFIX = "tag:computequote.dev,2026:problems/"
logger = logging.getLogger("service.api")


class FieldError(BaseModel):
    """One invalid input field."""

    field: str = Field(description="Dotted path of the field, e.g. training.seq_len.")
    message: str = Field(description="What is wrong and the limit it breaks.")
    code: str = Field(description="Machine-readable reason, e.g. less_than_equal.")
    row: int | None = Field(
        default=None, description="For catalogue imports: the 1-based data row of the field."
    )


class Problem(BaseModel):
    """RFC 9457 problem details."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(examples=[TYPE_PREFIX + "validation-error"])
    title: str = Field(examples=["Request validation failed"])
    status: int = Field(examples=[422])
    detail: str = Field(examples=["training.seq_len: Input should be less than or equal to "
                                  "100000000"])
    instance: str = Field(examples=["/v1/estimates"],
                          description=f"The request's path (its first {MAX_INSTANCE_CHARS} "
                                      "characters).")
    errors: list[FieldError] | None = Field(default=None)
    field: str | None = Field(default=None, description="The input a domain rule names.")
    request_id: str | None = Field(default=None, description="The X-Request-ID of the call.")


def problem_response(
    request: Request, *, status: int, slug: str, title: str, detail: str,
    headers: dict[str, str] | None = None, **extensions: Any,
) -> JSONResponse:
    body: dict[str, Any] = {
        "type": TYPE_PREFIX + slug,
        "title": title,
        "status": status,
        "detail": detail,
        "instance": request.url.path[:MAX_INSTANCE_CHARS],
    }
    request_id = getattr(request.state, "request_id", None)
    if request_id:
        body["request_id"] = request_id
    body.update({k: v for k, v in extensions.items() if v is not None})
    return JSONResponse(body, status_code=status, media_type=PROBLEM_MEDIA_TYPE, headers=headers)


async def send_problem(scope: Scope, send: Send, *, status: int, kind: str, title: str,
                       detail: str, headers: list[tuple[bytes, bytes]] | None = None,
                       **extra: Any) -> None:
    """A problem+json answer sent straight over ASGI, for middleware that answers before
    the app (and its exception handlers) runs. Adds the request id when one is set."""
    state = scope.get("state", {})
    body = json.dumps({
        "type": TYPE_PREFIX + kind, "title": title, "status": status, "detail": detail,
        "instance": str(scope.get("path", ""))[:MAX_INSTANCE_CHARS], **extra,
        **({"request_id": state["request_id"]} if "request_id" in state else {}),
    }).encode()
    await send({
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", PROBLEM_MEDIA_TYPE.encode()),
                    (b"content-length", str(len(body)).encode()),
                    (b"x-content-type-options", b"nosniff"), *(headers or [])],
    })
    await send({"type": "http.response.body", "body": body})


def _field_path(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return ".".join(parts) or "body"


def _validation_errors(exc: RequestValidationError) -> list[dict[str, str]]:
    errors = []
    for error in exc.errors():
        code = str(error.get("type", "invalid"))
        message = str(error.get("msg", "invalid value"))
        field = _field_path(tuple(error.get("loc", ())))
        if code == "json_invalid":
            message, field = "Request body is not valid JSON", "body"
        errors.append({"field": field, "message": message, "code": code})
    return errors


STATUS_TITLES = {
    400: ("bad-request", "Bad request"),
    401: ("unauthorized", "Authentication required"),
    403: ("forbidden", "Forbidden"),
    404: ("not-found", "Resource not found"),
    405: ("method-not-allowed", "Method not allowed"),
    406: ("not-acceptable", "Not acceptable"),
    413: ("payload-too-large", "Request body too large"),
    412: ("precondition-failed", "Precondition failed"),
    415: ("unsupported-media-type", "Unsupported media type"),
    428: ("precondition-required", "Precondition required"),
    503: ("unavailable", "Service unavailable"),
}


DOMAIN_ERRORS: dict[type[Exception], tuple[int, str, str, Callable[[Any], dict[str, Any]]]] = {
    InvalidSpecError: (422, "invalid-spec", "The request breaks a modelling rule",
                       lambda e: {"field": e.field}),
    InfeasiblePlanError: (422, "infeasible-plan", "The plan cannot run",
                          lambda e: {"reasons": e.reasons}),
    NoLayoutError: (422, "invalid-spec", "The request breaks a modelling rule",
                    lambda e: {"field": e.field}),
    # Before NoFeasiblePlanError's entry only for reading: a handler is looked up along the
    # exception's MRO, so this subclass gets its own (issue 38: no layout has the GPU count).
    NoFeasiblePlanError: (422, "no-feasible-plan", "No plan satisfies the request",
                          lambda e: {"closest": e.closest}),
    NotFoundError: (404, "not-found", "Resource not found", lambda e: {}),
    ConflictError: (409, "conflict", "Conflict with stored state", lambda e: {}),
    PreconditionFailedError: (412, "precondition-failed", "Precondition failed", lambda e: {}),
    IdempotencyKeyReusedError: (422, "idempotency-key-reused",
                                "Idempotency-Key reused with another body", lambda e: {}),
    MemoryError: (503, "search-memory", "The search needed too much memory",
                  lambda e: {}),
    ClientGoneError: (499, "client-closed-request", "The client closed the request",
                      lambda e: {}),
    ImportRejectedError: (
        422, "invalid-offers", "The offers are invalid; nothing was stored",
        lambda e: {"errors": [
            {"field": x.field, "message": x.message, "code": x.code,
             **({"row": x.row} if x.row else {})} for x in e.errors[:1000]
        ]},
    ),
}
"""Domain exception -> (status, type slug, constant title, extension members)."""


def _domain_handler(
    status: int, slug: str, title: str, extensions: Callable[[Any], dict[str, Any]]
) -> Callable[[Request, Exception], Awaitable[JSONResponse]]:
    async def handle(request: Request, exc: Exception) -> JSONResponse:
        return problem_response(
            request, status=status, slug=slug, title=title, detail=str(exc), **extensions(exc)
        )

    return handle


def _leaf_routes(routes: Any) -> Any:
    """Every route, including those inside included routers (FastAPI 0.165 wraps each
    ``include_router`` in an object whose own ``matches`` names no methods)."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            yield from _leaf_routes(inner.routes)
        else:
            yield route


def _allowed_methods(request: Request) -> set[str]:
    """The methods of every route whose path matches (for the 405's ``Allow``)."""
    methods: set[str] = set()
    for route in _leaf_routes(request.app.routes):
        methods_of = getattr(route, "methods", None)
        if not methods_of:
            continue
        for method in methods_of:
            match, _ = route.matches({**request.scope, "method": method})
            if match == Match.FULL:
                methods.add(method)
    return methods


def install_problem_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = _validation_errors(exc)
        detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors[:5])
        return problem_response(
            request, status=422, slug="validation-error", title="Request validation failed",
            detail=detail, errors=errors,
        )

    for exc_class, (status, slug, title, extensions) in DOMAIN_ERRORS.items():
        app.add_exception_handler(exc_class, _domain_handler(status, slug, title, extensions))

    @app.exception_handler(AuthError)
    async def _auth(request: Request, exc: AuthError) -> JSONResponse:
        slug, title = STATUS_TITLES[exc.status]
        headers = {"WWW-Authenticate": 'Bearer realm="computequote"'} if exc.status == 401 else None
        return problem_response(request, status=exc.status, slug=slug, title=title,
                                detail=str(exc), headers=headers)

    async def _database_unavailable(request: Request, exc: Exception) -> JSONResponse:
        logger.warning("database unavailable on %s %s: %s", request.method, request.url.path,
                       type(exc).__name__)
        return problem_response(
            request, status=503, slug="unavailable", title="Service unavailable",
            detail="the database is unavailable or busy; retry shortly",
            headers={"Retry-After": "1"},
        )

    @app.exception_handler(SearchDeadlineError)
    async def _deadline(request: Request, exc: SearchDeadlineError) -> JSONResponse:
        # The deadline is a safety net on the wall clock (issue 38): the same bounded work may
        # finish on a less loaded replica, so the refusal says when to try again. Every route
        # refuses through here (quotes, calibrations, plan searches, what-if sweeps).
        retry_after = search_retry_after_s(exc.deadline_s)
        return problem_response(
            request, status=503, slug="search-deadline",
            title="The searches did not finish in time", detail=str(exc),
            headers={"Retry-After": str(retry_after)}, deadline_s=exc.deadline_s,
            retry_after_s=retry_after)

    @app.exception_handler(SearchQueueTimeoutError)
    async def _queued_too_long(request: Request, exc: SearchQueueTimeoutError) -> JSONResponse:
        retry_after = search_retry_after_s(request.app.state.settings.search_deadline_s)
        return problem_response(
            request, status=503, slug="search-queue-timeout",
            title="No search worker was free in time", detail=str(exc),
            headers={"Retry-After": str(retry_after)}, waited_s=round(exc.waited_s, 3),
            retry_after_s=retry_after)

    app.add_exception_handler(OperationalError, _database_unavailable)
    app.add_exception_handler(CommitFailedError, _database_unavailable)
    app.add_exception_handler(PoolTimeoutError, _database_unavailable)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        slug, title = STATUS_TITLES.get(exc.status_code, ("http-error", "HTTP error"))
        detail = exc.detail if isinstance(exc.detail, str) else title
        headers = dict(exc.headers) if exc.headers else {}
        if exc.status_code == 405:
            # Starlette names only the first matching route's methods; list the path's all.
            headers["Allow"] = ", ".join(sorted(_allowed_methods(request)))
        return problem_response(
            request, status=exc.status_code, slug=slug, title=title, detail=detail,
            headers=headers or None,
        )

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unhandled error on %s %s", request.method, request.url.path)
        # Connection: close tells a pooled client not to reuse the connection, which the
        # server closes after a 500 (issue 14: the next request on it failed).
        return problem_response(
            request, status=500, slug="internal-error", title="Internal server error",
            detail="The server failed to handle this request; it has been logged.",
            headers={"Connection": "close"},
        )


def search_retry_after_s(deadline_s: float) -> int:
    """``Retry-After`` of a search refused for want of a worker: one deadline, the longest
    any search ahead of it may still run (at least 1 s)."""
    return max(1, math.ceil(deadline_s))


SEARCH_UNAVAILABLE: dict[int | str, dict[str, Any]] = {
    503: {
        "description": "The request's searches could not be done within CQ_SEARCH_DEADLINE_S. "
                       "Type search-queue-timeout: every search worker stayed busy until the "
                       "deadline, which counts the wait for a worker, so no search started; "
                       "retry after Retry-After seconds. Type search-deadline: the searches "
                       "themselves ran out of time; narrow the request, or retry after "
                       "Retry-After seconds (a less loaded replica may finish it). Type "
                       "search-memory: a search needed more than CQ_SEARCH_MEMORY_BYTES. "
                       "Also: the database is unavailable, or the replica is overloaded "
                       "(retry after Retry-After). Nothing is stored.",
        "headers": {"Retry-After": {
            "description": "Seconds to wait before retrying (search-queue-timeout and "
                           "search-deadline: one CQ_SEARCH_DEADLINE_S; overloaded or "
                           "database: 1).",
            "schema": {"type": "integer", "minimum": 1}}},
        "content": {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
    },
}
"""The 503 of every route that runs searches (plans, quotes, verify, requote, budget plans)."""


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for the given problem statuses."""
    descriptions = {
        400: "Bad request", 401: "Missing or unknown API key", 403: "The key lacks the scope",
        404: "Not found", 409: "Conflict", 412: "If-Match names a stale state",
        413: "Body too large", 415: "Unsupported media type", 428: "If-Match is required",
        422: "Invalid input or an impossible plan",
        500: "Internal error", 503: "Dependency unavailable",
    }
    return {
        status: {
            "description": descriptions.get(status, "Problem"),
            "content": {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        for status in statuses
    }
