"""Storing a quote claims its (principal, Idempotency-Key) in the same statement as the
insert (``INSERT ... ON CONFLICT DO NOTHING`` on SQLite and PostgreSQL): a second insert with
the same key replays the stored quote or refuses a different body, and leaves the caller's
transaction usable."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.catalog import quotes as store
from service.catalog.models import Quote
from service.catalog.prices import current_version_id


def _row(session: Session, key: str, request_hash: str) -> Quote:
    now = dt.datetime(2026, 11, 27, tzinfo=dt.UTC)
    version = current_version_id(session)
    assert version is not None
    return Quote(
        id="q_" + uuid.uuid4().hex, principal="store-test", team=None, idempotency_key=key,
        request_hash=request_hash, request_id=uuid.uuid4().hex, created_at=now,
        expires_at=now + dt.timedelta(days=30), catalog_version_id=version,
        catalog_content_hash="0" * 64, estimator_version="test", verdict="approve",
        requote_of=None, request={"a": 1}, response='{"id":"x"}', lines='{"lines":[]}',
        policy_name=None, policy_revision=None)


def _count(session: Session, key: str) -> int:
    return session.scalar(select(func.count()).select_from(Quote).where(
        Quote.principal == "store-test", Quote.idempotency_key == key)) or 0


def test_a_new_key_inserts_the_row(db_session: Session) -> None:
    row = _row(db_session, "k-new", "h1")
    assert store.insert_quote(db_session, row) is row
    stored = store.find_by_key(db_session, "store-test", "k-new")
    assert stored is not None
    assert (stored.id, stored.response, stored.lines, stored.request) == (
        row.id, row.response, row.lines, row.request)


def test_a_claimed_key_replays_the_stored_quote(db_session: Session) -> None:
    first = _row(db_session, "k-same", "h1")
    assert store.insert_quote(db_session, first) is first
    again = store.insert_quote(db_session, _row(db_session, "k-same", "h1"))
    assert again.id == first.id
    assert _count(db_session, "k-same") == 1  # and the transaction still answers


def test_a_claimed_key_with_another_body_is_refused(db_session: Session) -> None:
    store.insert_quote(db_session, _row(db_session, "k-other", "h1"))
    with pytest.raises(store.IdempotencyKeyReusedError):
        store.insert_quote(db_session, _row(db_session, "k-other", "h2"))
    assert _count(db_session, "k-other") == 1
