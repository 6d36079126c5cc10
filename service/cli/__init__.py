"""``cq``: the ComputeQuote command line.

``cq estimate|optimise|quote|budget-plan|offers|catalog|quotes`` talk to the API (``--api URL``, env
``CQ_API_URL``) or run the same app in process (``--local``); see ``service/cli/commands.py``.
``cq keys`` manages API keys in the database named by ``CQ_DATABASE_URL`` (or the embedded
SQLite default), so it runs where the database is reachable: a laptop, or a one-off pod.

The database layer, the settings and the in-process app are imported by the commands that
use them, not here: ``cq --help`` and the remote commands start without them (issue 16).
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from service.catalog.scopes import SCOPES
from service.cli import commands

# Plain help and error formatting (rich_markup_mode=None): typer's rich formatter imports
# rich.markdown and markdown-it, 0.19 s of every `cq --help` (issue 16: start in < 0.4 s).
app = typer.Typer(help="ComputeQuote: what will it take to train this model?",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  rich_markup_mode=None)
keys_app = typer.Typer(help="Create, list and revoke API keys.", no_args_is_help=True,
                       rich_markup_mode=None)
app.add_typer(keys_app, name="keys")
catalog_app = typer.Typer(help="Catalogue versions: list, export, import.", no_args_is_help=True,
                          rich_markup_mode=None)
app.add_typer(catalog_app, name="catalog")
quotes_app = typer.Typer(help="Stored quotes: get, verify, requote, diff.", no_args_is_help=True,
                         rich_markup_mode=None)
app.add_typer(quotes_app, name="quotes")
commands.register(app)
commands.register_catalog(catalog_app)
commands.register_quotes(quotes_app)
err = Console(stderr=True)


def _fail(message: str) -> typer.Exit:
    err.print(f"[bold red]error:[/] {message}")
    return typer.Exit(code=1)


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
    from service.catalog.db import make_engine, make_session_factory, unit_of_work
    from service.catalog.errors import CatalogError
    from service.catalog.keys import create_key
    from service.settings import Settings

    settings = Settings()
    engine = make_engine(settings.resolved_database_url)
    try:
        with unit_of_work(make_session_factory(engine)) as session:
            row, key = create_key(session, name=name, scopes=scope, team=team,
                                  pepper=settings.api_key_pepper.get_secret_value())
            scopes = row.scopes
    except (ValueError, CatalogError) as exc:
        raise _fail(str(exc)) from None
    finally:
        engine.dispose()
    err.print(f"created key [bold]{name}[/] with scopes {scopes}; it is shown only once:")
    print(key)


@keys_app.command("list")
def keys_list() -> None:
    """Every key with its scopes (never the key itself)."""
    from service.catalog.db import make_engine, make_session_factory, unit_of_work
    from service.catalog.keys import list_keys
    from service.settings import Settings

    settings = Settings()
    engine = make_engine(settings.resolved_database_url)
    try:
        with unit_of_work(make_session_factory(engine)) as session:
            rows = [(r.name, r.id, r.scopes, r.team or "", r.created_at.isoformat(),
                     r.revoked_at.isoformat() if r.revoked_at else "")
                    for r in list_keys(session)]
    finally:
        engine.dispose()
    table = Table("name", "id", "scopes", "team", "created_at", "revoked_at")
    for row in rows:
        table.add_row(*row)
    Console().print(table)


@keys_app.command("revoke")
def keys_revoke(name: Annotated[str, typer.Argument(help="The key's name.")]) -> None:
    """Revoke a key at once; requests with it get 401."""
    from service.catalog.db import make_engine, make_session_factory, unit_of_work
    from service.catalog.errors import CatalogError
    from service.catalog.keys import revoke_key
    from service.settings import Settings

    settings = Settings()
    engine = make_engine(settings.resolved_database_url)
    try:
        with unit_of_work(make_session_factory(engine)) as session:
            revoke_key(session, name)
    except CatalogError as exc:
        raise _fail(str(exc)) from None
    finally:
        engine.dispose()
    err.print(f"revoked {name}")


def main() -> None:
    app()
