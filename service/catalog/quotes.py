"""Stored quotes: immutable rows, idempotency keys claimed in the same transaction as the
insert, reads and listing. Functions take a Session; ``insert_quote`` inserts with ``ON
CONFLICT DO NOTHING`` (elsewhere a savepoint) so a lost race leaves the caller's transaction
usable for the replay."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import zstandard
from sqlalchemy import ColumnElement, Executable, Table, bindparam, select, true
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, defer

from service.catalog.errors import CatalogError, NotFoundError
from service.catalog.models import CatalogVersionOffer, OfferRevision, Quote


class IdempotencyKeyReusedError(CatalogError):
    """The key was used before with a different request body (HTTP 422)."""


class Owned(Protocol):
    """A stored row with an owner: a quote, a user calibration."""

    @property
    def principal(self) -> str: ...
    @property
    def team(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class Reader:
    """Who reads stored quotes and calibrations: a principal sees its own, its team's, or
    (``every_principal``, the ``quotes:admin`` or ``calibrations:admin`` scope) all of them.
    Issue 14, OWASP API1:2023."""

    principal: str
    team: str | None = None
    every_principal: bool = False

    def may_read(self, row: Owned) -> bool:
        return (self.every_principal or row.principal == self.principal
                or (self.team is not None and row.team == self.team))

    def visible(self, principal: Any, team: Any) -> ColumnElement[bool]:
        """``may_read`` as a WHERE clause over a table's owner columns."""
        if self.every_principal:
            return true()
        mine = principal == self.principal
        return cast(ColumnElement[bool], mine | (team == self.team) if self.team else mine)


def canonical_json(value: Any) -> str:
    """Sorted keys, no spaces: the form requests are hashed and stored in."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_hash(canonical_request: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(canonical_request).encode()).hexdigest()


LINES_ZSTD_LEVEL = -1
"""zstd's first "fast" level for a quote's stored lines (decisions 163 and 167). Measured on
the load benchmark's quote (197 lines, 524,734 bytes of JSON text), CPU to compress and to
decompress: level 1 gives 18,595 bytes in 0.37 ms and 0.15 ms, level -1 22,788 bytes in
0.18 ms and 0.06 ms, level -3 24,677 bytes in 0.13 ms and 0.06 ms, level 3 18,697 bytes in
0.63 ms (an earlier run); zlib level 1 38,266 bytes in 2.3 ms. Frames of any level decode
alike, so quotes stored at level 1 read the same."""
MAX_STORED_LINES_BYTES = 256 * 1024 * 1024
"""The largest decompressed lines text a stored quote may declare (a frame that declares more,
or no size, is damaged: reading it is refused before any memory is allocated for it)."""

_codecs = threading.local()
"""One zstd compressor and decompressor per thread (their contexts are reused between calls;
neither may be shared by two threads at once)."""


class StoredLinesDamagedError(CatalogError):
    """A stored quote's compressed lines do not decode (a damaged row)."""


def pack_lines(text: str) -> bytes:
    """A quote's every line (the JSON text ``{"lines":[...]}``) as stored: UTF-8, then zstd
    at ``LINES_ZSTD_LEVEL`` with the content size in the frame header."""
    compressor = getattr(_codecs, "compressor", None)
    if compressor is None:
        compressor = _codecs.compressor = zstandard.ZstdCompressor(
            level=LINES_ZSTD_LEVEL, write_content_size=True)
    packed: bytes = compressor.compress(text.encode())
    return packed


def unpack_lines(data: bytes) -> str:
    """``pack_lines``' input back, refusing a frame without a size or over
    ``MAX_STORED_LINES_BYTES`` before decompressing it."""
    try:
        size = zstandard.frame_content_size(data)
    except zstandard.ZstdError as exc:
        raise StoredLinesDamagedError(f"a stored quote's lines do not decode: {exc}") from None
    if size < 0 or size > MAX_STORED_LINES_BYTES:
        raise StoredLinesDamagedError(
            f"a stored quote's lines declare {size} bytes (at most {MAX_STORED_LINES_BYTES})")
    decompressor = getattr(_codecs, "decompressor", None)
    if decompressor is None:
        decompressor = _codecs.decompressor = zstandard.ZstdDecompressor()
    try:
        return bytes(decompressor.decompress(data)).decode()
    except (zstandard.ZstdError, UnicodeDecodeError) as exc:
        raise StoredLinesDamagedError(f"a stored quote's lines do not decode: {exc}") from None


def stored_lines(row: Quote) -> list[dict[str, Any]]:
    """Every line of a stored quote: compressed (schema 0010 on), as text (quotes stored
    before), or, for quotes stored before lines were paged, the response's lines."""
    if row.lines_zstd is not None:
        text = unpack_lines(row.lines_zstd)
    elif row.lines is not None:
        text = row.lines
    else:
        text = row.response
    lines: list[dict[str, Any]] = json.loads(text)["lines"]
    return lines


_KEY_LOOKUP = select(Quote.id).where(Quote.principal == bindparam("principal"),
                                     Quote.idempotency_key == bindparam("key"))
"""The id of the quote a (principal, Idempotency-Key) made: one statement, built once."""


def find_by_key(session: Session, principal: str, key: str) -> Quote | None:
    """The quote ``principal`` made with ``key``, if any. Every new quote asks (a replay is
    answered before any pricing), and almost every time the answer is no: the lookup is one
    prebuilt column query on the session's connection (issue 16: the ORM entity query was a
    tenth of a quote's CPU on PostgreSQL), and only a found id loads the row."""
    quote_id = session.connection().execute(
        _KEY_LOOKUP, {"principal": principal, "key": key}).scalar()
    return None if quote_id is None else session.get(Quote, quote_id)


def replay_or_refuse(existing: Quote, hash_: str) -> Quote:
    """The stored quote for a repeated key, if the body is the same; else an error."""
    if existing.request_hash != hash_:
        raise IdempotencyKeyReusedError(
            "this Idempotency-Key was used with a different request body; use a new key")
    return existing


_IDEMPOTENCY = ["principal", "idempotency_key"]


_QUOTES = cast(Table, Quote.__table__)
_INSERT_UNLESS_CLAIMED: dict[str, Executable] = {
    "postgresql": postgresql.insert(_QUOTES).on_conflict_do_nothing(
        index_elements=_IDEMPOTENCY).returning(_QUOTES.c.id),
    "sqlite": sqlite.insert(_QUOTES).on_conflict_do_nothing(
        index_elements=_IDEMPOTENCY).returning(_QUOTES.c.id),
}
"""``INSERT ... ON CONFLICT (principal, idempotency_key) DO NOTHING RETURNING id``, where the
database has it (a row count is not reliable across drivers): built once, the row's values
bound as parameters (building the statement with its values per quote made SQLAlchemy key
its compile cache on them every time)."""


def insert_quote(session: Session, row: Quote) -> Quote:
    """Insert, or return the row that won a race for the same (principal, key). On
    PostgreSQL and SQLite one ``INSERT ... ON CONFLICT (principal, idempotency_key) DO
    NOTHING`` in the caller's transaction (issue 16: the savepoint's round trips and the unit
    of work's flush were about 0.5 ms of the 3 ms that storing a quote cost on PostgreSQL);
    elsewhere a savepoint."""
    statement = _INSERT_UNLESS_CLAIMED.get(session.get_bind().dialect.name)
    if statement is not None:
        values = {column.key: getattr(row, column.key) for column in _QUOTES.columns}
        if session.connection().execute(statement, values).first() is not None:
            return row
        existing = find_by_key(session, row.principal, row.idempotency_key)
        if existing is None:  # the conflicting row is committed before DO NOTHING decides
            raise CatalogError("the quote's Idempotency-Key conflicted with no stored quote")
        return replay_or_refuse(existing, row.request_hash)
    try:
        with session.begin_nested():
            session.add(row)
            session.flush()
    except IntegrityError:
        existing = find_by_key(session, row.principal, row.idempotency_key)
        if existing is None:
            raise
        return replay_or_refuse(existing, row.request_hash)
    return row


class QuoteNotFoundError(NotFoundError):
    """No quote with the id that the reader may read; its message names no id, so a
    malformed one is not echoed back."""

    def __init__(self, quote_id: str) -> None:
        super().__init__("quote", quote_id)

    def __str__(self) -> str:
        return "No quote with this id"


def get_quote(session: Session, quote_id: str, reader: Reader) -> Quote:
    """The quote, if ``reader`` may read it. Another principal's quote is "not found", as a
    missing one is, so ids cannot be probed for existence."""
    row = session.get(Quote, quote_id)
    if row is None or not reader.may_read(row):
        raise QuoteNotFoundError(quote_id)
    return row


def list_quotes(
    session: Session, *, limit: int, reader: Reader, principal: str | None = None,
    created_after: dt.datetime | None = None, created_before: dt.datetime | None = None,
    verdict: str | None = None, after: tuple[dt.datetime, str] | None = None,
) -> Sequence[Quote]:
    """Newest first; keyset on (created_at, id); only the quotes ``reader`` may read. The
    request, the answer and the lines are not loaded (a summary needs none of them; the
    answer alone is tens of KB a quote): reading them from a listed row is a query each."""
    query = select(Quote).options(defer(Quote.request), defer(Quote.response),
                                  defer(Quote.lines), defer(Quote.lines_zstd)).order_by(
        Quote.created_at.desc(), Quote.id.desc())
    query = query.where(reader.visible(Quote.principal, Quote.team))
    if principal is not None:
        query = query.where(Quote.principal == principal)
    if created_after is not None:
        query = query.where(Quote.created_at >= created_after)
    if created_before is not None:
        query = query.where(Quote.created_at < created_before)
    if verdict is not None:
        query = query.where(Quote.verdict == verdict)
    if after is not None:
        at, quote_id = after
        query = query.where((Quote.created_at < at)
                            | ((Quote.created_at == at) & (Quote.id < quote_id)))
    return session.scalars(query.limit(limit)).all()


def prices_in(session: Session, currency: str, version_id: str) -> bool:
    """Whether catalogue version ``version_id`` has an offer priced in ``currency`` (a quote's
    budget in another currency is converted, ``api.quoting.budget_conversion``)."""
    return session.scalar(
        select(OfferRevision.id)
        .join(CatalogVersionOffer, CatalogVersionOffer.revision_id == OfferRevision.id)
        .where(CatalogVersionOffer.version_id == version_id,
               OfferRevision.currency == currency).limit(1)) is not None
