"""Storing a quote claims its (principal, Idempotency-Key) in the same statement as the
insert (``INSERT ... ON CONFLICT DO NOTHING`` on SQLite and PostgreSQL): a second insert with
the same key replays the stored quote or refuses a different body, and leaves the caller's
transaction usable."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import pytest
import zstandard
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


# Compressed lines (decision 163): what is stored decodes to what was written, older rows are
# still read, and a damaged frame is refused before it is decompressed.

LINES_TEXT = json.dumps({"lines": [
    {"provider": "aws", "region": f"r-{i}", "fabric_source": "EC2 user guide × table " * 20,
     "total": f"{i}.00"} for i in range(300)]}, ensure_ascii=False, separators=(",", ":"))


def test_packed_lines_decode_to_the_text_and_are_much_smaller() -> None:
    packed = store.pack_lines(LINES_TEXT)
    assert store.unpack_lines(packed) == LINES_TEXT
    assert len(packed) < len(LINES_TEXT.encode()) / 10


@pytest.mark.parametrize("level", [1, 3, -5])
def test_frames_written_at_another_level_read_the_same(level: int) -> None:
    """Quotes stored at level 1 (decision 163, before decision 167) decode like new ones."""
    older = zstandard.ZstdCompressor(level=level, write_content_size=True).compress(
        LINES_TEXT.encode())
    assert older != store.pack_lines(LINES_TEXT)
    assert store.unpack_lines(older) == LINES_TEXT


def test_the_newest_form_of_a_row_wins_and_older_rows_still_read(db_session: Session) -> None:
    row = _row(db_session, "k-forms", "h1")
    row.lines, row.lines_zstd = '{"lines":[{"old":1}]}', store.pack_lines(LINES_TEXT)
    assert store.stored_lines(row) == json.loads(LINES_TEXT)["lines"]
    row.lines_zstd = None  # a quote stored before schema 0010
    assert store.stored_lines(row) == [{"old": 1}]
    row.lines, row.response = None, '{"lines":[{"paged":false}]}'  # before lines were paged
    assert store.stored_lines(row) == [{"paged": False}]


def test_a_compressed_row_round_trips_through_the_database(db_session: Session) -> None:
    row = _row(db_session, "k-zstd", "h1")
    row.lines, row.lines_zstd = None, store.pack_lines(LINES_TEXT)
    store.insert_quote(db_session, row)
    db_session.expire_all()
    stored = store.find_by_key(db_session, "store-test", "k-zstd")
    assert stored is not None
    assert stored.lines is None
    assert store.stored_lines(stored) == json.loads(LINES_TEXT)["lines"]


@pytest.mark.parametrize("damage", ["truncated", "not zstd", "no size", "oversized"])
def test_a_damaged_frame_is_refused(damage: str, monkeypatch: pytest.MonkeyPatch) -> None:
    packed = store.pack_lines(LINES_TEXT)
    if damage == "truncated":
        data = packed[: len(packed) // 2]
    elif damage == "not zstd":
        data = b"{" + packed
    elif damage == "no size":
        data = zstandard.ZstdCompressor(write_content_size=False).compress(b'{"lines":[]}')
    else:
        monkeypatch.setattr(store, "MAX_STORED_LINES_BYTES", len(LINES_TEXT.encode()) - 1)
        data = packed
    with pytest.raises(store.StoredLinesDamagedError):
        store.unpack_lines(data)
