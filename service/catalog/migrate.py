"""Run Alembic migrations and seed the catalogue: ``python -m service.catalog.migrate``.

The app never migrates at start-up; deployment runs this once (a Kubernetes Job, or
``make run`` locally), and ``/readyz`` refuses readiness until the schema is at ``SCHEMA_HEAD``
or at a newer revision every step of which declares this code compatible (``readiness``: the
expand/contract rule of ``deploy/README.md``, issue 41).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine, inspect, text

from service.catalog.db import make_engine, make_session_factory, unit_of_work
from service.catalog.seed import SeedReport, seed_catalog
from service.settings import Settings

if TYPE_CHECKING:
    from alembic.config import Config

SCHEMA_HEAD = "0015"
"""The Alembic revision this code expects; a test checks it equals the migrations' head."""
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def alembic_config(url: str) -> Config:
    # Alembic is imported only to migrate: it was 1.9 of the 2.7 s this module took to import,
    # paid by every API process (for /readyz) and by a migrate that changes nothing (issue 38).
    from alembic.config import Config

    config = Config(str(PROJECT_ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(PROJECT_ROOT / "migrations"))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    from alembic import command

    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str) -> None:
    from alembic import command

    command.downgrade(alembic_config(url), revision)


def current_revision(engine: Engine) -> str | None:
    """The revision stored in ``alembic_version``, or None before the first migration."""
    with engine.connect() as conn:
        if not inspect(conn).has_table("alembic_version"):
            return None
        return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()


@dataclass(frozen=True, slots=True)
class Readiness:
    """Whether this code may serve on the database's schema, and why not."""

    ready: bool
    revision: str | None
    detail: str = ""
    newer: bool = False
    """The schema is past this code's head (and ``ready`` says whether it stays compatible)."""


def readiness(engine: Engine) -> Readiness:
    """This code (at ``SCHEMA_HEAD``) against the database's schema. At the head: ready, one
    SELECT. Behind it: not ready (run the migrations). Ahead of it (a later release's
    migration has run while this release's replicas still serve): ready when every applied
    step above ``SCHEMA_HEAD`` names, in ``schema_compatibility``, an oldest compatible code
    revision at or below ``SCHEMA_HEAD``; a contract step names itself, so it ends this
    code's readiness (issue 41). Revisions are zero-padded numbers, so they order as text."""
    revision = current_revision(engine)
    if revision == SCHEMA_HEAD:
        return Readiness(True, revision)
    if revision is None or revision < SCHEMA_HEAD:
        return Readiness(False, revision, f"schema revision is {revision!r}, this code needs "
                                          f"{SCHEMA_HEAD!r}; run the migrations")
    with engine.connect() as conn:
        floors: dict[str, str] = {str(step): str(floor) for step, floor in conn.execute(text(
            "SELECT revision, oldest_compatible_code FROM schema_compatibility "
            "WHERE revision > :head AND revision <= :current"),
            {"head": SCHEMA_HEAD, "current": revision}).all()}
    if revision not in floors:
        return Readiness(False, revision, f"schema revision {revision!r} is newer than this "
                         f"code's {SCHEMA_HEAD!r} and declares no compatibility; roll this "
                         "release forward", newer=True)
    needs = max(floors.values())
    if needs > SCHEMA_HEAD:
        step = min(r for r, floor in floors.items() if floor > SCHEMA_HEAD)
        return Readiness(False, revision, f"schema revision {revision!r} needs code at "
                         f"{needs!r} or later (step {step!r} is a contract step); this code is "
                         f"at {SCHEMA_HEAD!r}: roll this release forward", newer=True)
    return Readiness(True, revision, newer=True)


class SchemaAheadError(RuntimeError):
    """The database's schema is past this code's head and not compatible with it."""


def migrate_and_seed(url: str) -> SeedReport | None:
    """Migrate ``url`` to the head and seed the catalogue (idempotent: ``make migrate``,
    ``cq serve`` and ``cq --local`` all start here). On a schema a later release has already
    migrated: nothing is migrated or seeded (an older seed must not overwrite newer facts),
    and the answer is None while that schema stays compatible with this code
    (``readiness``), or ``SchemaAheadError`` when it does not."""
    engine = make_engine(url)  # creates the SQLite data directory when needed
    try:
        state = readiness(engine)  # one SELECT when already at the head
        if state.newer:
            if not state.ready:
                raise SchemaAheadError(state.detail)
            return None
        if not state.ready:
            upgrade(url)
        with unit_of_work(make_session_factory(engine)) as session:
            return seed_catalog(session)
    finally:
        engine.dispose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Migrate the database and seed the catalogue.")
    parser.add_argument("--no-seed", action="store_true", help="migrate only")
    args = parser.parse_args(argv)
    url = Settings().resolved_database_url
    if args.no_seed:
        make_engine(url).dispose()  # creates the SQLite data directory when needed
        upgrade(url)
    else:
        try:
            report = migrate_and_seed(url)
        except SchemaAheadError as error:
            print(json.dumps({"ts": _now(), "level": "error", "logger": "service.catalog.migrate",
                              "message": str(error)}))
            return 2
        if report is None:
            revision = readiness_of(url).revision
            print(json.dumps({"ts": _now(), "level": "info", "logger": "service.catalog.migrate",
                              "message": f"schema revision {revision!r} is newer than this "
                                         f"code's {SCHEMA_HEAD!r} and compatible with it: "
                                         "nothing migrated or seeded"}))
            return 0
        message = (f"seeded: {report.inserted} inserted, {report.updated} updated, "
                   f"{report.unchanged} unchanged accelerators; "
                   + (f"price catalogue {report.price_version} with {report.offers} offers"
                      if report.price_version else "price catalogue already present"))
        # One JSON line, in the service's log format (issue 18: every log line is JSON; the
        # migration Job prints only this).
        print(json.dumps({
            "ts": _now(), "level": "info", "logger": "service.catalog.migrate", "message": message,
            "accelerators_inserted": report.inserted, "accelerators_updated": report.updated,
            "price_version": report.price_version, "offers": report.offers}))
    return 0


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def readiness_of(url: str) -> Readiness:
    engine = make_engine(url)
    try:
        return readiness(engine)
    finally:
        engine.dispose()


if __name__ == "__main__":
    raise SystemExit(main())
