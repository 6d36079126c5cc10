"""Catalogue reads. Functions take a Session and never commit."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.catalog.errors import NotFoundError
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
