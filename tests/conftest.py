"""Shared fixtures: a migrated database per backend (SQLite file, throw-away PostgreSQL
database), a session per test rolled back afterwards, and an app bound to that session."""

from __future__ import annotations

import os
import random
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# Bytecode, when the environment forbids writing it (PYTHONDONTWRITEBYTECODE=1): then every
# process the suite starts (two xdist workers, about a hundred server and CLI processes)
# compiled alembic, uvicorn, httpx, psycopg, hypothesis, schemathesis and pytest from source
# again, about 0.8 s of CPU each. The compiled files go to a folder of their own under the
# temporary directory, so the tree and the virtual environment stay as clean as the variable
# asked; Python checks each file against its source's size and mtime, as in __pycache__.
# Set here, before the imports below and before pytest-xdist starts its workers, which
# inherit the environment (as do the subprocesses: tests/live_server.py).
if sys.dont_write_bytecode and not sys.pycache_prefix:
    sys.pycache_prefix = os.path.join(tempfile.gettempdir(), f"cq-pycache-{os.getuid()}")
    sys.dont_write_bytecode = False
    os.environ["PYTHONPYCACHEPREFIX"] = sys.pycache_prefix
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from service.api.deps import get_session
from service.api.workers import share_between_apps
from service.catalog.db import make_engine
from service.catalog.keys import create_key
from service.catalog.migrate import upgrade
from service.catalog.seed import seed_catalog
from service.main import create_app, dispose
from service.settings import Settings
from tests import live_server

# Apps and live servers in the tests skip the start-up warm-up (a plan search per app start,
# and /readyz 503 until it is done); tests/api/test_warm_up.py turns it on.
os.environ.setdefault("CQ_WARM_UP", "0")
# The CLI's tables are 200 columns wide when piped without COLUMNS (service/cli/common.py);
# pytest-xdist's workers export COLUMNS=80, so the width would depend on how the suite is run.
os.environ.pop("COLUMNS", None)
os.environ.pop("LINES", None)
# Hundreds of apps run in turn in this process: they share one search pool instead of each
# starting and ending two workers (a real server ends its pool at shutdown:
# tests/faults/test_worker_shutdown.py).
share_between_apps()
# Replica processes (killed servers, shutdown faults) are forked from one process per test
# process that has imported the service already, not started as fresh interpreters: the
# imports were about 2.5 s of CPU a replica (tests/forkserver.py says what is the same).
# CQ_TEST_FORK_SERVERS=0 starts each as a fresh interpreter, as before.
live_server.FORK_SERVERS = os.environ.get("CQ_TEST_FORK_SERVERS", "1") != "0"

# No per-example deadline: Hypothesis' default 200 ms fails a correct property on a loaded
# machine (seen: a pricing property under a concurrent suite), so speed never decides a test.
hypothesis_settings.register_profile("computequote", deadline=None,
                                    suppress_health_check=[HealthCheck.too_slow])
hypothesis_settings.load_profile("computequote")

POSTGRES_URL = os.environ.get(
    "CQ_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """One Hypothesis seed for the run (schemathesis included), drawn at random unless given,
    so any failure can be replayed with ``pytest --hypothesis-seed=N``. Under pytest-xdist
    (``make pytest``) every worker takes the controller's seed (``pytest_configure_node``)."""
    worker_input = getattr(config, "workerinput", None)
    if worker_input is not None and config.getoption("hypothesis_seed", None) is None:
        config.option.hypothesis_seed = worker_input["hypothesis_seed"]
    if config.getoption("hypothesis_seed", None) is None:
        config.option.hypothesis_seed = str(random.SystemRandom().randrange(2**32))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist: hand the run's seed to each worker (read in ``pytest_configure``)."""
    node.workerinput["hypothesis_seed"] = node.config.getoption("hypothesis_seed")


def pytest_report_header(config: pytest.Config) -> str:
    return f"hypothesis seed: {config.getoption('hypothesis_seed')}"


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int,
                            config: pytest.Config) -> None:
    if exitstatus != 0:
        seed = config.getoption("hypothesis_seed")
        terminalreporter.write_line(
            f"replay the generated data of this run: pytest --hypothesis-seed={seed} ...")


BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def _throwaway_postgres() -> Iterator[str]:
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    name = f"cq_test_{uuid.uuid4().hex[:12]}"
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:  # pragma: no cover - environment problem, reported loudly
        admin.dispose()
        pytest.fail(f"PostgreSQL at {POSTGRES_URL} is not usable: {exc}")
    try:
        yield make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(scope="session")
def database_url_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """Creates empty databases per backend; all are removed at the end of the run."""
    cleanups: list[Iterator[str]] = []

    def make(backend: str) -> str:
        if backend == "sqlite":
            path = tmp_path_factory.mktemp("db") / f"{uuid.uuid4().hex}.sqlite3"
            return f"sqlite:///{path}"
        generator = _throwaway_postgres()
        cleanups.append(generator)
        return next(generator)

    yield make
    for generator in cleanups:
        for _ in generator:
            pass


def _real_sqlite_savepoints(engine: Engine) -> None:
    """pysqlite delays BEGIN until the first write, so a SAVEPOINT's RELEASE can commit for
    real and leak one test's writes into the next. SQLAlchemy's documented fix: let SQLAlchemy
    emit BEGIN itself (docs: "Serializable isolation / Savepoints / Transactional DDL")."""

    @event.listens_for(engine, "connect")
    def _no_pysqlite_transactions(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN")


@pytest.fixture(scope="session", params=BACKENDS)
def migrated_engine(
    request: pytest.FixtureRequest, database_url_factory: object
) -> Iterator[Engine]:
    """A database at the Alembic head with the seed catalogue, one per backend."""
    url = database_url_factory(request.param)  # type: ignore[operator]
    upgrade(url)
    engine = make_engine(url)
    if request.param == "sqlite":
        _real_sqlite_savepoints(engine)
    with Session(engine) as session:
        seed_catalog(session)
        session.commit()
    yield engine
    engine.dispose()


@pytest.fixture
def db_session(migrated_engine: Engine) -> Iterator[Session]:
    """A session whose work is rolled back after the test (savepoints for inner commits)."""
    connection = migrated_engine.connect()
    transaction = connection.begin()
    session = Session(bind=connection, join_transaction_mode="create_savepoint")
    try:
        yield session
    finally:
        session.close()
        transaction.rollback()
        connection.close()


@pytest.fixture
def app_with(migrated_engine: Engine,
             db_session: Session) -> Iterator[Callable[..., TestClient]]:
    """``app_with(search_deadline_s=...)``: the app on the migrated database with those
    settings; request sessions join the test's transaction. Every app made is closed and
    disposed after the test."""
    made: list[tuple[Any, TestClient]] = []

    def make(**overrides: Any) -> TestClient:
        settings = Settings(database_url=migrated_engine.url.render_as_string(
            hide_password=False), **overrides)
        app = create_app(settings)

        def session_override() -> Iterator[Session]:
            yield db_session
            db_session.flush()

        app.dependency_overrides[get_session] = session_override
        test_client = TestClient(app, raise_server_exceptions=False)
        test_client.__enter__()
        made.append((app, test_client))
        return test_client

    yield make
    for app, test_client in made:
        test_client.__exit__(None, None, None)
        dispose(app)


@pytest.fixture
def client(app_with: Callable[..., TestClient]) -> TestClient:
    """The app on the migrated database; request sessions join the test's transaction."""
    return app_with()


@pytest.fixture
def repo_root() -> Path:
    return Path(__file__).resolve().parents[1]


@pytest.fixture
def api_key(db_session: Session) -> object:
    """Makes API keys in the test's database: ``api_key("catalog:write")`` -> headers."""

    def make(*scopes: str) -> dict[str, str]:
        _, key = create_key(db_session, name=f"test-{uuid.uuid4().hex[:8]}", scopes=scopes,
                            pepper=Settings().api_key_pepper.get_secret_value())
        return {"Authorization": f"Bearer {key}"}

    return make
