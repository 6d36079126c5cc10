"""Named documents with immutable, numbered revisions, the newest being the document:
procurement policies and discount books. A quote stores the (name, revision) it used, so
``verify`` reads the same revision again. ``kind`` names the document in errors and
``path`` is where a client revises it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any, TypeVar

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.catalog.errors import ConflictError, NotFoundError, PreconditionFailedError
from service.catalog.models import DiscountBookRevision, PolicyRevision

R = TypeVar("R", PolicyRevision, DiscountBookRevision)


def latest(session: Session, model: type[R], kind: str, name: str) -> R:
    row = session.scalar(select(model).where(model.name == name)
                         .order_by(model.revision.desc()).limit(1))
    if row is None:
        raise NotFoundError(kind, name)
    return row


def get_revision(session: Session, model: type[R], kind: str, name: str, revision: int) -> R:
    row = session.get(model, (name, revision))
    if row is None:
        raise NotFoundError(f"{kind} revision", f"{name}@{revision}")
    return row


def list_latest(session: Session, model: type[R], *, limit: int,
                after: str | None) -> Sequence[R]:
    """The newest revision of each document, by name."""
    newest = (select(model.name, func.max(model.revision).label("revision"))
              .group_by(model.name).subquery())
    query = (select(model)
             .join(newest, (model.name == newest.c.name) & (model.revision == newest.c.revision))
             .order_by(model.name))
    if after is not None:
        query = query.where(model.name > after)
    return session.scalars(query.limit(limit)).all()


def create(session: Session, model: type[R], kind: str, path: str, *, name: str,
           created_by: str, description: str, **content: Any) -> R:
    """Revision 1 of a new document; 409 if the name exists. Flushes; the caller commits."""
    if session.scalar(select(model.name).where(model.name == name).limit(1)) is not None:
        raise ConflictError(f"a {kind} named {name!r} exists; PUT {path}/{name} with "
                            "If-Match makes a new revision")
    return _insert(session, model, name, 1, created_by, description, content)


def revise(session: Session, model: type[R], kind: str, *, name: str,
           expected_revision: int | None, created_by: str, description: str,
           **content: Any) -> R:
    """A new revision, if the newest is still ``expected_revision`` (None: ``If-Match: *``)."""
    current = latest(session, model, kind, name)
    if expected_revision is not None and current.revision != expected_revision:
        raise PreconditionFailedError(
            f"{kind} {name} has changed (now revision {current.revision}); GET it again")
    return _insert(session, model, name, current.revision + 1, created_by, description,
                   content)


def _insert(session: Session, model: type[R], name: str, revision: int, created_by: str,
            description: str, content: dict[str, Any]) -> R:
    row = model(name=name, revision=revision, created_at=dt.datetime.now(dt.UTC),
                created_by=created_by, description=description, **content)
    session.add(row)
    session.flush()
    return row
