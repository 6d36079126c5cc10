"""API keys: created by ``cq keys create``, stored as an HMAC-SHA256 of the whole key under a
server-side pepper (``CQ_API_KEY_PEPPER``), shown once, revocable.

A key reads ``cq_<id>_<secret>``: the id finds the row, the HMAC is compared in constant
time. Scopes are explicit; a ``:write`` scope also grants the ``:read`` of the same resource,
and ``quotes:admin`` grants ``quotes:read`` across every principal's quotes.

A key may belong to a ``team``: keys of one team read each other's quotes. Without a team a
key reads only the quotes it made (issue 14: object-level authorisation, OWASP API1:2023).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import re
import secrets
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.catalog.errors import ConflictError, NotFoundError
from service.catalog.models import ApiKey
from service.catalog.scopes import SCOPES

__all__ = ["SCOPES", "authenticate", "create_key", "grants", "key_digest", "list_keys",
           "revoke_key"]

KEY_PATTERN = re.compile(r"^cq_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$")
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def _digest(key: str, pepper: str) -> str:
    return hmac.new(pepper.encode(), key.encode(), hashlib.sha256).hexdigest()


def key_digest(key: str, pepper: str) -> str:
    """The HMAC a key is stored as; also what a replica's in-memory key cache is keyed by,
    so the cache never holds key text."""
    return _digest(key, pepper)


def grants(scopes: Sequence[str], wanted: str) -> bool:
    resource, _, action = wanted.partition(":")
    return wanted in scopes or (action == "read" and (
        f"{resource}:write" in scopes or f"{resource}:admin" in scopes))


def create_key(
    session: Session, *, name: str, scopes: Sequence[str], pepper: str,
    team: str | None = None,
) -> tuple[ApiKey, str]:
    """Store a new key; returns the row and the key text, which is never stored."""
    if not NAME_PATTERN.match(name):
        raise ValueError(f"key name must match {NAME_PATTERN.pattern}")
    if team is not None and not NAME_PATTERN.match(team):
        raise ValueError(f"team must match {NAME_PATTERN.pattern}")
    unknown = sorted(set(scopes) - set(SCOPES))
    if unknown or not scopes:
        raise ValueError(f"scopes must be some of {', '.join(SCOPES)}; got {unknown or 'none'}")
    if session.scalar(select(ApiKey.id).where(ApiKey.name == name)) is not None:
        raise ConflictError(f"an API key named {name!r} exists")
    key_id = secrets.token_hex(6)
    key = f"cq_{key_id}_{secrets.token_urlsafe(32)}"
    row = ApiKey(id=key_id, name=name, secret_hash=_digest(key, pepper),
                 scopes=" ".join(sorted(set(scopes))), created_at=dt.datetime.now(dt.UTC),
                 revoked_at=None, team=team)
    session.add(row)
    session.flush()
    return row, key


def authenticate(session: Session, key: str, pepper: str) -> ApiKey | None:
    """The live key row this text belongs to, or None."""
    match = KEY_PATTERN.match(key)
    if match is None:
        return None
    row = session.get(ApiKey, match.group(1))
    if row is None or row.revoked_at is not None:
        return None
    if not hmac.compare_digest(row.secret_hash, _digest(key, pepper)):
        return None
    return row


def list_keys(session: Session) -> Sequence[ApiKey]:
    return session.scalars(select(ApiKey).order_by(ApiKey.name)).all()


def _named(session: Session, name: str) -> ApiKey | None:
    return session.scalar(select(ApiKey).where(ApiKey.name == name))


def live_key_grants(session: Session, name: str, wanted: str) -> bool:
    """Whether the key named ``name`` is live (not revoked) and grants ``wanted``: a signed
    link made for it stops working as soon as it does not (``api/ui/links.py``)."""
    row = _named(session, name)
    return row is not None and row.revoked_at is None and grants(row.scopes.split(), wanted)


def revoke_key(session: Session, name: str) -> ApiKey:
    row = _named(session, name)
    if row is None:
        raise NotFoundError("API key", name)
    if row.revoked_at is None:
        row.revoked_at = dt.datetime.now(dt.UTC)
        session.flush()
    return row
