"""Bearer API keys: ``Authorization: Bearer cq_…``. Missing or unknown keys get 401 with
``WWW-Authenticate``; a key without the needed scope gets 403."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from service.api.deps import held
from service.catalog.errors import AuthError
from service.catalog.keys import authenticate, grants, key_digest
from service.catalog.quotes import Reader

ANONYMOUS = "anonymous"

SCOPE_CHECKS: dict[Callable[..., Any], tuple[str, bool]] = {}
"""Each dependency made by ``require`` or ``read_access``: its scope, and whether it is open
unless ``CQ_REQUIRE_READ_AUTH`` is set. ``service/api/openapi.py`` turns them into each
operation's ``security`` requirement."""


@dataclass(frozen=True, slots=True)
class Principal:
    """Who made the request: an API key's name, or ``anonymous`` for open reads."""

    name: str
    scopes: tuple[str, ...]
    team: str | None = None


NO_STORE = {"Cache-Control": "no-store"}
"""On every answer that holds what a principal owns or priced (issue 36): stored quotes,
budget plans and calibrations carry budgets, prices and measurements that a shared cache must
not keep, nor a browser's history."""


def reader_of(principal: Principal, admin_scope: str) -> Reader:
    """Who ``principal`` may read stored rows of: its own, its team's, and every principal's
    with ``admin_scope`` (``quotes:admin``, ``calibrations:admin``)."""
    return Reader(principal=principal.name, team=principal.team,
                  every_principal=admin_scope in principal.scopes)


def _verify(token: str, pepper: str) -> Callable[[Session], Principal | None]:
    def read(session: Session) -> Principal | None:
        row = authenticate(session, token, pepper)
        if row is None:
            return None
        return Principal(name=row.name, scopes=tuple(row.scopes.split()), team=row.team)

    return read


async def caller(request: Request) -> Principal | None:
    """The key's principal, or None without an Authorization header. A dependency, so an
    in-process caller (``cq --local``) can override who it is.

    A verified key's principal is held in memory, keyed by the key's HMAC, while no writer
    has changed the ``api_keys`` table (``service/catalog/changes.py``): a revocation, from
    this replica, another one or ``cq keys revoke``, ends it within a NOTIFY's delay. A miss
    reads the database in the thread pool; unknown keys are never held."""
    header = request.headers.get("authorization")
    if header is None:
        return None
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise AuthError("Authorization must be 'Bearer <API key>'", status=401)
    pepper = request.app.state.settings.api_key_pepper.get_secret_value()
    principal = await held(request, ("api-key", key_digest(token, pepper)),
                           _verify(token, pepper), keep=lambda found: found is not None)
    if principal is None:
        raise AuthError("the API key is unknown or revoked", status=401)
    return principal


CallerDep = Annotated[Principal | None, Depends(caller)]


def check_scope(principal: Principal | None, scope: str) -> Principal:
    if principal is None:
        raise AuthError(f"this operation needs an API key with scope {scope}", status=401)
    if not grants(principal.scopes, scope):
        raise AuthError(f"the API key {principal.name!r} lacks scope {scope}", status=403)
    return principal


def require(scope: str) -> Any:
    """A dependency that demands ``scope``."""

    async def dependency(principal: CallerDep) -> Principal:
        return check_scope(principal, scope)

    SCOPE_CHECKS[dependency] = (scope, False)
    return Depends(dependency)


def read_access(scope: str) -> Any:
    """Open unless ``CQ_REQUIRE_READ_AUTH`` is set; then it demands ``scope``."""

    async def dependency(request: Request, principal: CallerDep) -> Principal:
        if not request.app.state.settings.require_read_auth:
            return principal or Principal(name=ANONYMOUS, scopes=())
        return check_scope(principal, scope)

    SCOPE_CHECKS[dependency] = (scope, True)
    return Depends(dependency)


