"""Named documents with immutable, numbered revisions, the newest being the document:
procurement policies and discount books. A quote stores the (name, revision) it used, so
``verify`` reads the same revision again. ``kind`` names the document in errors and
``path`` is where a client revises it.

Concurrent writers (issue 36): ``create`` and ``revise`` read the newest revision, then store
the next; two writers that read the same newest revision both store the same (name,
revision), and the primary key lets exactly one of them commit. On PostgreSQL the second
insert waits for the first transaction and fails once it commits; on SQLite the second
waits for the write lock and then finds the row. The loser's ``IntegrityError`` is mapped,
with the session rolled back (a failed flush leaves it unusable) and the winner's row read
back to tell a lost race from any other integrity fault:

- a lost ``create`` is a ``ConflictError`` (409): the name exists now;
- a lost ``revise`` is a ``PreconditionFailedError`` (412): the revision its If-Match named
  is no longer the newest, exactly as if it had come a moment later (``If-Match: *`` is
  refused with 428 before any read, ``service/api/etags.py``).

No lock is taken, so writers of different documents never wait for each other, and nothing
is stored twice or lost: the loser stores nothing, the winner's revision is the one it
answered."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any, TypeVar

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
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
    """Revision 1 of a new document; 409 if the name exists, or if another request created it
    at the same moment (module docstring). Flushes; the caller commits."""
    exists = (f"a {kind} named {name!r} exists; PUT {path}/{name} with If-Match makes a new "
              "revision")
    if session.scalar(select(model.name).where(model.name == name).limit(1)) is not None:
        raise ConflictError(exists)
    row = _insert(session, model, name, 1, created_by, description, content)
    if row is None:
        raise ConflictError(f"{exists} (another request created it at the same moment)")
    return row


def revise(session: Session, model: type[R], kind: str, *, name: str,
           expected_revision: int, created_by: str, description: str,
           **content: Any) -> R:
    """A new revision, if the newest is still ``expected_revision``: 412 if it is not, or if
    another revision was stored at the same moment (module docstring). Flushes; the caller
    commits."""
    current = latest(session, model, kind, name)
    if current.revision != expected_revision:
        raise PreconditionFailedError(
            f"{kind} {name} has changed (now revision {current.revision}); GET it again")
    revision = current.revision + 1
    row = _insert(session, model, name, revision, created_by, description, content)
    if row is not None:
        return row
    raise PreconditionFailedError(
        f"{kind} {name} has changed (another request stored revision {revision} at the "
        "same moment); GET it again and send the edit with its ETag")


def _insert(session: Session, model: type[R], name: str, revision: int, created_by: str,
            description: str, content: dict[str, Any]) -> R | None:
    """The new row, flushed; None if another transaction stored (name, revision) first, with
    the session rolled back. Any other integrity fault is raised as it is."""
    row = model(name=name, revision=revision, created_at=dt.datetime.now(dt.UTC),
                created_by=created_by, description=description, **content)
    session.add(row)
    try:
        session.flush()
    except IntegrityError:
        session.rollback()
        if session.get(model, (name, revision)) is None:
            raise
        return None
    return row
