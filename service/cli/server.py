"""``cq serve``: migrate and seed the database, then run the service."""

from __future__ import annotations

from typing import Annotated

import typer

from service.cli.client import CliError
from service.cli.common import handled


def register(app: typer.Typer) -> None:
    @app.command()
    @handled
    def serve(
        host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
        port: Annotated[int, typer.Option(help="Port.")] = 8000,
    ) -> None:
        """Migrate and seed the database, then run the service (like make run)."""
        import uvicorn

        from service.catalog.migrate import SchemaAheadError, migrate_and_seed
        from service.settings import Settings

        try:
            migrate_and_seed(Settings().resolved_database_url)
        except SchemaAheadError as error:
            raise CliError(str(error)) from None
        from service.api.connections import HTTP_PROTOCOL
        from service.api.observability import UVICORN_LOG_CONFIG

        # The protocol that bounds request heads and connections per address, as make run
        # and the image run it (service/api/connections.py).
        uvicorn.run("service.main:create_app", factory=True, host=host, port=port,
                    access_log=False, server_header=False, log_config=str(UVICORN_LOG_CONFIG),
                    http=HTTP_PROTOCOL)
