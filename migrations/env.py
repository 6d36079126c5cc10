"""Alembic environment. The URL comes from the caller (``-x url=...``, the config's
``sqlalchemy.url`` set by ``service.catalog.migrate``) or from CQ_DATABASE_URL via Settings."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from service.catalog.changes import compared_by_autogenerate
from service.catalog.db import make_engine
from service.catalog.models import Base
from service.settings import Settings

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option(
        "sqlalchemy.url"
    )
    return url or Settings().resolved_database_url


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        include_name=compared_by_autogenerate,
    )


def run_migrations_offline() -> None:
    context.configure(
        url=_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=_url().startswith("sqlite"),
        compare_type=True,
        include_name=compared_by_autogenerate,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = make_engine(_url())
    try:
        with engine.connect() as conn:
            _configure(conn)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
