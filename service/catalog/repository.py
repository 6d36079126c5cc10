"""Catalogue reads, and the one accelerator write. Functions take a Session and never
commit."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from service.catalog.errors import ConflictError, NotFoundError
from service.catalog.models import Accelerator


def list_accelerators(
    session: Session, *, limit: int | None = None, after_id: str | None = None
) -> Sequence[Accelerator]:
    """Accelerators ordered by id, starting after ``after_id`` (keyset pagination)."""
    query = select(Accelerator).order_by(Accelerator.id)
    if after_id is not None:
        query = query.where(Accelerator.id > after_id)
    if limit is not None:
        query = query.limit(limit)
    return session.scalars(query).all()


def get_accelerator(session: Session, accelerator_id: str) -> Accelerator:
    row = session.get(Accelerator, accelerator_id)
    if row is None:
        raise NotFoundError("accelerator", accelerator_id)
    return row


def create_accelerator(session: Session, values: Mapping[str, Any]) -> Accelerator:
    """Store a new accelerator (issue 17: custom parts). Stored rows are never edited by
    this path: an id that exists is a conflict, so a quote that used it reproduces. Flushes;
    the caller commits."""
    if session.get(Accelerator, values["id"]) is not None:
        raise ConflictError(f"accelerator {values['id']!r} exists; accelerators are immutable, "
                            "so store a corrected datasheet under a new id")
    row = Accelerator(**values)
    session.add(row)
    try:
        session.flush()
    except IntegrityError:
        raise ConflictError(f"accelerator {values['id']!r} was stored by another request") \
            from None
    return row
