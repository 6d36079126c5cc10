"""Engine and session construction. Nothing connects at import time."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy import exc as exc_module
from sqlalchemy.orm import Session, sessionmaker


def make_engine(
    url: str, *, pool_size: int | None = None, max_overflow: int | None = None, **kwargs: Any
) -> Engine:
    """Create an engine; SQLite gets WAL, foreign keys and a busy timeout. The pool sizes
    apply to PostgreSQL (SQLite opens a connection per thread)."""
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            url, connect_args={"check_same_thread": False, "timeout": 30}, **kwargs
        )

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.close()

        return engine
    if pool_size is not None:
        kwargs["pool_size"] = pool_size
    if max_overflow is not None:
        kwargs["max_overflow"] = max_overflow
    engine = create_engine(url, pool_timeout=10, **kwargs)
    _ping_when_idle(engine)
    return engine


PING_AFTER_IDLE_S = 1.0
"""A pooled PostgreSQL connection that sat idle longer than this is pinged before use."""


def _ping_when_idle(engine: Engine) -> None:
    """SQLAlchemy's ``pool_pre_ping``, but only for a connection idle more than
    ``PING_AFTER_IDLE_S``. A restarted or failed-over database, or a firewall that drops
    quiet connections, leaves idle connections dead; those are pinged and replaced before a
    request sees them (raising ``DisconnectionError`` in a checkout listener makes the pool
    retry with a new connection: SQLAlchemy "Disconnect Handling - Pessimistic, custom").
    A connection in steady use is not pinged: under load the ping was a round trip per
    checkout (issue 16: "never pre-ping per request"). One that died within the last second
    fails its first statement instead; SQLAlchemy then invalidates the pool, and the request
    answers 503 with Retry-After like any database outage."""

    @event.listens_for(engine, "checkin")
    def _checked_in(_dbapi_connection: Any, record: Any) -> None:
        record.info["idle_since_s"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        idle_since_s = record.info.pop("idle_since_s", None)
        if idle_since_s is None or time.monotonic() - idle_since_s <= PING_AFTER_IDLE_S:
            return  # just connected, or in steady use
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as exc:
            raise exc_module.DisconnectionError(f"idle connection failed its ping: {exc}") \
                from exc


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(bind=engine, expire_on_commit=False)


@contextmanager
def unit_of_work(factory: sessionmaker[Session]) -> Iterator[Session]:
    """One session, committed once at the end, rolled back on any error."""
    session = factory()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()
