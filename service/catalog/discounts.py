"""Named discount books: immutable revisions, the newest is the book (like policies). A quote
stores the (name, revision) it priced with, so ``verify`` prices it again alike."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.catalog.errors import ConflictError, NotFoundError, PreconditionFailedError
from service.catalog.models import DiscountBookRevision
from service.core.discounts import DiscountBook, DiscountEntry


def latest(session: Session, name: str) -> DiscountBookRevision:
    row = session.scalar(select(DiscountBookRevision).where(DiscountBookRevision.name == name)
                         .order_by(DiscountBookRevision.revision.desc()).limit(1))
    if row is None:
        raise NotFoundError("discount book", name)
    return row


def get_revision(session: Session, name: str, revision: int) -> DiscountBookRevision:
    row = session.get(DiscountBookRevision, (name, revision))
    if row is None:
        raise NotFoundError("discount book revision", f"{name}@{revision}")
    return row


def list_latest(session: Session, *, limit: int,
                after: str | None) -> Sequence[DiscountBookRevision]:
    newest = (select(DiscountBookRevision.name,
                     func.max(DiscountBookRevision.revision).label("revision"))
              .group_by(DiscountBookRevision.name).subquery())
    query = (select(DiscountBookRevision)
             .join(newest, (DiscountBookRevision.name == newest.c.name)
                   & (DiscountBookRevision.revision == newest.c.revision))
             .order_by(DiscountBookRevision.name))
    if after is not None:
        query = query.where(DiscountBookRevision.name > after)
    return session.scalars(query.limit(limit)).all()


def create(session: Session, *, name: str, description: str,
           entries: Sequence[Mapping[str, Any]], created_by: str) -> DiscountBookRevision:
    """Revision 1 of a new book; 409 if the name exists. Flushes; the caller commits."""
    if session.scalar(select(DiscountBookRevision.name)
                      .where(DiscountBookRevision.name == name).limit(1)) is not None:
        raise ConflictError(f"a discount book named {name!r} exists; PUT "
                            f"/v1/discount-books/{name} with If-Match makes a new revision")
    return _insert(session, name, 1, description, entries, created_by)


def revise(session: Session, *, name: str, expected_revision: int | None, description: str,
           entries: Sequence[Mapping[str, Any]], created_by: str) -> DiscountBookRevision:
    current = latest(session, name)
    if expected_revision is not None and current.revision != expected_revision:
        raise PreconditionFailedError(
            f"discount book {name} has changed (now revision {current.revision}); GET it "
            "again")
    return _insert(session, name, current.revision + 1, description, entries, created_by)


def _insert(session: Session, name: str, revision: int, description: str,
            entries: Sequence[Mapping[str, Any]], created_by: str) -> DiscountBookRevision:
    row = DiscountBookRevision(name=name, revision=revision,
                               created_at=dt.datetime.now(dt.UTC), created_by=created_by,
                               description=description, entries=[dict(e) for e in entries])
    session.add(row)
    session.flush()
    return row


def _decimal(value: Any) -> Decimal | None:
    return None if value is None else Decimal(str(value))


def to_core(row: DiscountBookRevision) -> DiscountBook:
    """A stored revision as the core's ``DiscountBook`` (entries stored in the API's JSON
    shape: decimal strings and ISO dates)."""
    return DiscountBook(name=row.name, revision=row.revision, entries=tuple(
        DiscountEntry(
            provider=e["provider"], term=e.get("term"), accelerator=e.get("accelerator"),
            region=e.get("region"), percent_off=_decimal(e.get("percent_off")),
            price_per_gpu_hour=_decimal(e.get("price_per_gpu_hour")),
            currency=e.get("currency"),
            valid_from_day=dt.date.fromisoformat(e["valid_from"]).toordinal(),
            valid_until_day=dt.date.fromisoformat(e["valid_until"]).toordinal())
        for e in row.entries))
