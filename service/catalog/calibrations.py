"""Stored user calibrations (issue 37): immutable rows, append only; the revision of a
(principal, name) counted in the insert's transaction, an optional Idempotency-Key claimed by
a unique constraint, reads and keyset listing with the owner/team/admin rule of quotes.
Functions take a Session and never commit."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, defer

from service.catalog.errors import ConflictError, NotFoundError
from service.catalog.models import UserCalibration
from service.catalog.quotes import IdempotencyKeyReusedError, Reader, request_hash

__all__ = ["CalibrationNotFoundError", "Reader", "find_by_key", "get_calibration",
           "insert_calibration", "list_calibrations", "next_revision", "replay_or_refuse",
           "request_hash"]

ID_PATTERN = r"^cal_[0-9a-f]{32}$"


class CalibrationNotFoundError(NotFoundError):
    """No calibration with the id that the reader may read; the message names no id."""

    def __init__(self, calibration_id: str) -> None:
        super().__init__("calibration", calibration_id)

    def __str__(self) -> str:
        return "No calibration with this id"


def find_by_key(session: Session, principal: str, key: str) -> UserCalibration | None:
    return session.scalars(select(UserCalibration).where(
        UserCalibration.principal == principal,
        UserCalibration.idempotency_key == key)).first()


def replay_or_refuse(existing: UserCalibration, hash_: str) -> UserCalibration:
    if existing.request_hash != hash_:
        raise IdempotencyKeyReusedError(
            "this Idempotency-Key was used with a different request body; use a new key")
    return existing


def next_revision(session: Session, principal: str, name: str) -> int:
    newest = session.scalar(select(func.max(UserCalibration.revision)).where(
        UserCalibration.principal == principal, UserCalibration.name == name))
    return 1 if newest is None else int(newest) + 1


def insert_calibration(session: Session, row: UserCalibration) -> UserCalibration:
    """Insert ``row`` (its revision already counted) in a savepoint. A lost race for the same
    Idempotency-Key returns the winner's row (or refuses a different body); a lost race for
    the same revision of the name is a 409 (retry: the next attempt counts again)."""
    try:
        with session.begin_nested():
            session.add(row)
            session.flush()
    except IntegrityError:
        if row.idempotency_key is not None:
            existing = find_by_key(session, row.principal, row.idempotency_key)
            if existing is not None:
                return replay_or_refuse(existing, row.request_hash)
        raise ConflictError(
            f"another calibration named {row.name!r} was stored at the same time; "
            "retry") from None
    return row


def get_calibration(session: Session, calibration_id: str,
                    reader: Reader | None) -> UserCalibration:
    """The calibration, if ``reader`` may read it (None: any, for a stored quote's own
    reference). Another principal's is "not found", as a missing one is."""
    row = session.get(UserCalibration, calibration_id)
    if row is None or (reader is not None and not reader.may_read(row)):
        raise CalibrationNotFoundError(calibration_id)
    return row


def list_calibrations(
    session: Session, *, limit: int, reader: Reader, name: str | None = None,
    after: tuple[dt.datetime, str] | None = None,
) -> Sequence[UserCalibration]:
    """Newest first; keyset on (created_at, id); only what ``reader`` may read; the stored
    answer and runs are not loaded."""
    query = select(UserCalibration).options(
        defer(UserCalibration.response), defer(UserCalibration.runs_zstd),
        defer(UserCalibration.fit)).order_by(
        UserCalibration.created_at.desc(), UserCalibration.id.desc())
    query = query.where(reader.visible(UserCalibration.principal, UserCalibration.team))
    if name is not None:
        query = query.where(UserCalibration.name == name)
    if after is not None:
        at, last_id = after
        query = query.where((UserCalibration.created_at < at)
                            | ((UserCalibration.created_at == at)
                               & (UserCalibration.id < last_id)))
    return session.scalars(query.limit(limit)).all()
