"""``cq``: the ComputeQuote command line.

``cq estimate|optimise|quote|budget-plan|serve-estimate|serve-plan|offers|models|accelerators|
catalog|quotes|calibrate`` talk to
the API (``--api URL``, env ``CQ_API_URL``) or run the same app in process (``--local``); see
``service/cli/commands.py``. ``cq keys`` manages API keys in the database named by
``CQ_DATABASE_URL`` (or the embedded SQLite in ``CQ_DATA_DIR``, by default
``~/.local/share/computequote`` whatever the working directory), so it runs where the database
is reachable: a laptop, or a one-off pod. ``cq --version``; ``cq --install-completion``.

The database layer, the settings and the in-process app are imported by the commands that
use them, not here: ``cq --help`` and the remote commands start without them (issue 16).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.text import Text

from service.catalog.scopes import SCOPES
from service.cli import commands, tables
from service.cli.common import labelled, out

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

# Plain help and error formatting (rich_markup_mode=None): typer's rich formatter imports
# rich.markdown and markdown-it, 0.19 s of every `cq --help` (issue 16: start in < 0.4 s).
# add_completion: `cq --install-completion` installs tab completion for the current shell
# (bash, zsh, fish, PowerShell); `cq --show-completion` prints the script instead.
app = typer.Typer(help="ComputeQuote: what will it take to train this model?",
                  no_args_is_help=True, add_completion=True, pretty_exceptions_enable=False,
                  rich_markup_mode=None)
keys_app = typer.Typer(help="Create, list and revoke API keys.", no_args_is_help=True,
                       rich_markup_mode=None)
app.add_typer(keys_app, name="keys")
commands.register(app)  # every other command and group, one module per group
err = Console(stderr=True, markup=False, emoji=False)  # printed as written (common.py)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"cq {version('computequote')}")
        except PackageNotFoundError:
            print("cq (computequote, not installed as a package)")
        raise typer.Exit()


@app.callback()
def _root(
    _version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True,
        help="Print cq's version and exit.")] = False,
) -> None:
    """ComputeQuote: what will it take to train this model?"""


def _fail(message: str) -> typer.Exit:
    err.print(labelled("error:", "bold red", message))
    return typer.Exit(code=1)


@contextmanager
def _key_database() -> Iterator[tuple[Session, str]]:
    """A unit of work on the database of ``CQ_DATABASE_URL`` (or the embedded SQLite in
    ``CQ_DATA_DIR``, default ``~/.local/share/computequote``) and the pepper. A database that
    is missing or not migrated is a one-line error naming it, never a traceback, and an absent
    SQLite file is not created."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import DBAPIError

    from service.catalog.db import make_engine, make_session_factory, unit_of_work
    from service.settings import Settings

    settings = Settings()
    url = settings.resolved_database_url
    shown = make_url(url).render_as_string(hide_password=True)
    advice = ("migrate it first (make migrate, or cq serve), or point CQ_DATABASE_URL at the "
              "service's database")
    database = make_url(url).database
    if url.startswith("sqlite") and database and database != ":memory:" \
            and not Path(database).exists():
        raise _fail(f"no database at {database}: {advice}")
    engine = make_engine(url)
    try:
        with unit_of_work(make_session_factory(engine)) as session:
            yield session, settings.api_key_pepper.get_secret_value()
    except DBAPIError as exc:
        first = str(exc.orig).splitlines()[0] if exc.orig else type(exc).__name__
        raise _fail(f"cannot use the database {shown} ({first}): {advice}") from None
    finally:
        engine.dispose()


@keys_app.command("create")
def keys_create(
    name: Annotated[str, typer.Option(help="A unique name; it becomes created_by on writes.")],
    scope: Annotated[list[str], typer.Option(
        help=f"Repeat for several: {', '.join(SCOPES)}.")],
    team: Annotated[str | None, typer.Option(
        help="Keys of one team read each other's quotes; without one, a key reads only "
             "its own (quotes:admin reads all).")] = None,
) -> None:
    """Create a key and print it once; only its hash is stored."""
    from service.catalog.errors import CatalogError
    from service.catalog.keys import create_key

    try:
        with _key_database() as (session, pepper):
            row, key = create_key(session, name=name, scopes=scope, team=team, pepper=pepper)
            scopes = row.scopes
    except (ValueError, CatalogError) as exc:
        raise _fail(str(exc)) from None
    err.print(Text.assemble("created key ", (name, "bold"),
                            f" with scopes {scopes}; it is shown only once:"))
    print(key)


@keys_app.command("list")
def keys_list() -> None:
    """Every key with its scopes (never the key itself)."""
    from service.catalog.keys import list_keys

    with _key_database() as (session, _):
        rows = [(r.name, r.id, r.scopes, r.team or "", r.created_at.isoformat(),
                 r.revoked_at.isoformat() if r.revoked_at else "")
                for r in list_keys(session)]
    table = tables.table(f"API keys: {len(rows)}",
                         ["name", "id", tables.Col("scopes", max_width=30), "team",
                          "created_at", "revoked_at"], width=out.width)
    for row in rows:
        table.add_row(*row)
    out.print(table)


@keys_app.command("revoke")
def keys_revoke(name: Annotated[str, typer.Argument(help="The key's name.")]) -> None:
    """Revoke a key at once; requests with it get 401."""
    from service.catalog.errors import CatalogError
    from service.catalog.keys import revoke_key

    try:
        with _key_database() as (session, _):
            revoke_key(session, name)
    except CatalogError as exc:
        raise _fail(str(exc)) from None
    err.print(f"revoked {name}")


def main() -> None:
    app()
