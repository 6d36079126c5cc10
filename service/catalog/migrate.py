"""Run Alembic migrations and seed the catalogue: ``python -m service.catalog.migrate``.

The app never migrates at start-up; deployment runs this once (a Kubernetes Job, or
``make run`` locally), and ``/readyz`` refuses readiness until the schema is at ``SCHEMA_HEAD``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine, inspect, text

from service.catalog.db import make_engine, make_session_factory, unit_of_work
from service.catalog.seed import SeedReport, seed_catalog
from service.settings import Settings

if TYPE_CHECKING:
    from alembic.config import Config

SCHEMA_HEAD = "0013"
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


def migrate_and_seed(url: str) -> SeedReport:
    """Migrate ``url`` to the head and seed the catalogue (idempotent: ``make migrate``,
    ``cq serve`` and ``cq --local`` all start here)."""
    engine = make_engine(url)  # creates the SQLite data directory when needed
    try:
        if current_revision(engine) != SCHEMA_HEAD:  # one SELECT when already at the head
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
        report = migrate_and_seed(url)
        message = (f"seeded: {report.inserted} inserted, {report.updated} updated, "
                   f"{report.unchanged} unchanged accelerators; "
                   + (f"price catalogue {report.price_version} with {report.offers} offers"
                      if report.price_version else "price catalogue already present"))
        # One JSON line, in the service's log format (issue 18: every log line is JSON; the
        # migration Job prints only this).
        print(json.dumps({
            "ts": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace(
                "+00:00", "Z"),
            "level": "info", "logger": "service.catalog.migrate", "message": message,
            "accelerators_inserted": report.inserted, "accelerators_updated": report.updated,
            "price_version": report.price_version, "offers": report.offers}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
