"""PostgreSQL connections are pinged before use only after sitting idle (service.catalog.db:
issue 16 asked for no pre-ping per request), and an idle connection that died is replaced
before a request sees it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, text

from service.catalog import db
from tests.conftest import POSTGRES_URL

pytestmark = pytest.mark.postgres


@pytest.fixture
def engine(database_url_factory: Callable[[str], str]) -> Iterator[Engine]:
    made = db.make_engine(database_url_factory("postgres"), pool_size=1, max_overflow=0)
    yield made
    made.dispose()


@pytest.fixture
def pings(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the dialect's pings on this engine."""
    seen: list[int] = []
    ping = engine.dialect.do_ping

    def counted(dbapi_connection: Any) -> bool:
        seen.append(1)
        return ping(dbapi_connection)

    monkeypatch.setattr(engine.dialect, "do_ping", counted)
    return seen


def _backend_pid(engine: Engine) -> int:
    with engine.connect() as connection:
        return int(connection.execute(text("SELECT pg_backend_pid()")).scalar_one())


def test_a_connection_in_steady_use_is_not_pinged(engine: Engine, pings: list[int]) -> None:
    first = _backend_pid(engine)
    assert [_backend_pid(engine) for _ in range(20)] == [first] * 20  # one pooled connection
    assert pings == []


def test_an_idle_connection_is_pinged(engine: Engine, pings: list[int],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    _backend_pid(engine)
    monkeypatch.setattr(db, "PING_AFTER_IDLE_S", -1.0)  # every checkout counts as idle
    _backend_pid(engine)
    assert pings == [1]


def test_an_idle_connection_that_died_is_replaced_before_use(
        engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    dead = _backend_pid(engine)
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:  # as a database restart would
            connection.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": dead})
    finally:
        admin.dispose()
    monkeypatch.setattr(db, "PING_AFTER_IDLE_S", -1.0)
    replacement = _backend_pid(engine)  # no error: the ping failed and the pool reconnected
    assert replacement != dead
