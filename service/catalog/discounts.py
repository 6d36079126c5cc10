"""Named discount books: immutable revisions, the newest is the book (like policies). A quote
stores the (name, revision) it priced with, so ``verify`` prices it again alike."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from sqlalchemy.orm import Session

from service.catalog import revisions
from service.catalog.models import DiscountBookRevision
from service.core.discounts import DiscountBook, DiscountEntry

KIND, PATH = "discount book", "/v1/discount-books"


def latest(session: Session, name: str) -> DiscountBookRevision:
    return revisions.latest(session, DiscountBookRevision, KIND, name)


def get_revision(session: Session, name: str, revision: int) -> DiscountBookRevision:
    return revisions.get_revision(session, DiscountBookRevision, KIND, name, revision)


def list_latest(session: Session, *, limit: int,
                after: str | None) -> Sequence[DiscountBookRevision]:
    return revisions.list_latest(session, DiscountBookRevision, limit=limit, after=after)


def create(session: Session, *, name: str, description: str,
           entries: Sequence[Mapping[str, Any]], created_by: str) -> DiscountBookRevision:
    """Revision 1 of a new book; 409 if the name exists. Flushes; the caller commits."""
    return revisions.create(session, DiscountBookRevision, KIND, PATH, name=name,
                            created_by=created_by, description=description,
                            entries=[dict(e) for e in entries])


def revise(session: Session, *, name: str, expected_revision: int, description: str,
           entries: Sequence[Mapping[str, Any]], created_by: str) -> DiscountBookRevision:
    return revisions.revise(session, DiscountBookRevision, KIND, name=name,
                            expected_revision=expected_revision, created_by=created_by,
                            description=description, entries=[dict(e) for e in entries])


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
