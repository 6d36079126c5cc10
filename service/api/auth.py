"""Bearer API keys: ``Authorization: Bearer cq_…``. Missing or unknown keys get 401 with
``WWW-Authenticate``; a key without the needed scope gets 403."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request

from service.api.deps import SessionDep, SettingsDep
from service.catalog.errors import AuthError
from service.catalog.keys import authenticate, grants

ANONYMOUS = "anonymous"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who made the request: an API key's name, or ``anonymous`` for open reads."""

    name: str
    scopes: tuple[str, ...]
    team: str | None = None


def caller(request: Request, session: SessionDep, settings: SettingsDep) -> Principal | None:
    """The key's principal, or None without an Authorization header. A dependency, so an
    in-process caller (``cq --local``) can override who it is."""
    header = request.headers.get("authorization")
    if header is None:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthError("Authorization must be 'Bearer <API key>'", status=401)
    row = authenticate(session, token.strip(), settings.api_key_pepper.get_secret_value())
    if row is None:
        raise AuthError("the API key is unknown or revoked", status=401)
    return Principal(name=row.name, scopes=tuple(row.scopes.split()), team=row.team)


CallerDep = Annotated[Principal | None, Depends(caller)]


def check_scope(principal: Principal | None, scope: str) -> Principal:
    if principal is None:
        raise AuthError(f"this operation needs an API key with scope {scope}", status=401)
    if not grants(principal.scopes, scope):
        raise AuthError(f"the API key {principal.name!r} lacks scope {scope}", status=403)
    return principal


def require(scope: str) -> Any:
    """A dependency that demands ``scope``."""

    async def dependency(principal: CallerDep) -> Principal:  # no I/O: no thread hand-off
        return check_scope(principal, scope)

    return Depends(dependency)


def read_access(scope: str) -> Any:
    """Open unless ``CQ_REQUIRE_READ_AUTH`` is set; then it demands ``scope``."""

    async def dependency(principal: CallerDep, settings: SettingsDep) -> Principal:
        if not settings.require_read_auth:
            return principal or Principal(name=ANONYMOUS, scopes=())
        return check_scope(principal, scope)

    return Depends(dependency)


