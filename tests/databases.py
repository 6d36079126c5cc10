"""Fresh migrated (and seeded) databases for tests, copied from a template.

Migrating and seeding a database takes about 1 s on SQLite and 2 s on PostgreSQL; about sixty
tests need a database of their own (replicas, killed servers, CLI modules), which made this
a tenth of the suite. The first call per backend (per PostgreSQL cluster) in a test process
runs the service's own ``service.catalog.migrate`` functions on a template database; each
later call copies it: a file copy on SQLite, ``CREATE DATABASE ... TEMPLATE`` on PostgreSQL
(about 0.08 s). The copy is the same schema and rows as a fresh run, seeded at the template's
time instead of the test's, so a test that checks what migrating or seeding does itself
(``tests/catalog/test_migrations_and_seed.py``, the session's ``migrated_engine``, ``cq serve``
and ``make run`` in their own tests) calls the service's functions directly.

A target that is not empty (an existing SQLite file, a PostgreSQL database with tables), or a
cluster's own ``postgres`` database (the fault tests' private clusters), is migrated for real,
as the service would: the template only stands in for a first migration of a new database.
"""

from __future__ import annotations

import atexit
import contextlib
import shutil
import sqlite3
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import OperationalError

from service.catalog import migrate

_templates: dict[tuple[str, ...], str] = {}
"""(kind, backend and cluster) -> the template: a SQLite path or a PostgreSQL database name."""


def migrate_and_seed(url: str) -> None:
    """``service.catalog.migrate.migrate_and_seed(url)`` on a new, empty database."""
    _fresh(url, "seeded", migrate.migrate_and_seed)


def upgrade(url: str) -> None:
    """``service.catalog.migrate.upgrade(url)`` (to the head, no seed) on a new database."""
    _fresh(url, "migrated", migrate.upgrade)


def _fresh(url: str, kind: str, build: Callable[[str], object]) -> None:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        _sqlite(parsed, kind, build)
    elif parsed.get_backend_name() == "postgresql":
        _postgres(parsed, kind, build)
    else:  # pragma: no cover - only the two supported backends are tested
        build(url)


def _sqlite(target: URL, kind: str, build: Callable[[str], object]) -> None:
    path = Path(target.database or "")
    if not target.database or path.exists():
        build(target.render_as_string(hide_password=False))
        return
    key = (kind, "sqlite")
    if key not in _templates:
        template = Path(tempfile.mkdtemp(prefix="cq-template-")) / f"{kind}.sqlite3"
        build(f"sqlite:///{template}")
        with sqlite3.connect(template) as connection:  # fold the WAL into the file
            connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        connection.close()
        _templates[key] = str(template)
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_templates[key], path)


def _postgres(target: URL, kind: str, build: Callable[[str], object]) -> None:
    if target.database in (None, "postgres", "template0", "template1"):
        # a cluster's own database (a fault test's private cluster): it cannot be re-created
        build(target.render_as_string(hide_password=False))
        return
    admin_url = target.set(database="postgres")
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        engine = create_engine(target)
        try:
            empty = not inspect(engine).get_table_names()
        finally:
            engine.dispose()
        if not empty:
            build(target.render_as_string(hide_password=False))
            return
        key = (kind, "postgresql", str(target.host), str(target.port), str(target.username))
        if key in _templates:  # a private cluster on the same port may be a new one
            with admin.connect() as connection:
                if connection.execute(text("SELECT 1 FROM pg_database WHERE datname = :n"),
                                      {"n": _templates[key]}).first() is None:
                    del _templates[key]
        if key not in _templates:
            name = f"cq_template_{kind}_{uuid.uuid4().hex[:10]}"
            with admin.connect() as connection:
                connection.execute(text(f'CREATE DATABASE "{name}"'))
            build(target.set(database=name).render_as_string(hide_password=False))
            _templates[key] = name
            atexit.register(_drop, admin_url.render_as_string(hide_password=False), name)
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE "{target.database}" WITH (FORCE)'))
            connection.execute(text(
                f'CREATE DATABASE "{target.database}" TEMPLATE "{_templates[key]}"'))
    finally:
        admin.dispose()


def _drop(admin_url: str, name: str) -> None:
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    # The cluster may be gone at exit (a fault test's private one): nothing to drop then.
    with contextlib.suppress(OperationalError), admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()
