"""The Typer application and its global options."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import typer

app = typer.Typer(
    name="triggers",
    help="A cron-style trigger scheduler daemon with an embedded durable runtime.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    add_completion=False,
)
db_app = typer.Typer(help="Database schema.", no_args_is_help=True)
runs_app = typer.Typer(help="The runs of the embedded runtime.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(runs_app, name="runs")


@dataclass(slots=True)
class Globals:
    """Options given before the command (`triggers --database-url ... history`)."""

    database_url: str | None = None
    log_format: str | None = None


options = Globals()


@app.callback()
def _main(
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            envvar="TRIGGERS_DATABASE_URL",
            show_envvar=True,
            help="SQLAlchemy URL; default: the embedded SQLite file.",
        ),
    ] = None,
    log_format: Annotated[
        str | None, typer.Option("--log-format", help="json or console (default: by terminal).")
    ] = None,
) -> None:
    options.database_url = database_url
    options.log_format = log_format


def main() -> None:
    """Console-script entry point."""
    app()
