"""Commands about the daemon and declarations files: run, validate, db upgrade."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Annotated

import typer

from triggers.cli._app import app, db_app, options
from triggers.cli._backend import environment, open_database_for_upgrade
from triggers.cli._common import errors, output_of
from triggers.cli._output import JsonOpt, OutputOpt, emit
from triggers.errors import InputError


def declarations_file(file: Path | None) -> Path:
    """FILE, else `--config`, else `TRIGGERS_CONFIG` (environment, then the service's file)."""
    if file is not None:
        return file
    if options.config is not None:
        return options.config
    configured = environment().get("TRIGGERS_CONFIG")
    if configured:
        return Path(configured)
    raise InputError("no declarations file: give FILE, --config FILE or TRIGGERS_CONFIG")


FileArg = Annotated[
    Path | None,
    typer.Argument(
        metavar="[FILE]", help="Declarations file (YAML); default: --config, $TRIGGERS_CONFIG."
    ),
]


@app.command()
def run(
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            envvar="TRIGGERS_CONFIG",
            help="Declarations file to apply at start and on SIGHUP.",
        ),
    ] = None,
) -> None:
    """Run the daemon in the foreground (logs on stderr)."""
    # A stop asked for while the daemon is still importing ends in a clean exit (0),
    # not in death by signal: held here, handed to the daemon once it exists.
    asked: list[int] = []
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda signum, _frame: asked.append(signum))
    from triggers.daemon import Daemon  # noqa: PLC0415 (keeps the query commands light)
    from triggers.log import configure_logging, wants_json  # noqa: PLC0415
    from triggers.settings import load_settings  # noqa: PLC0415

    with errors(False):
        # The daemon takes its environment as systemd gives it (EnvironmentFile=
        # already applied), never reading the file itself: it may be root's only.
        settings = load_settings(
            database_url=options.database_url, log_format=options.log_format, config=config
        )
        configure_logging(json=wants_json(settings.log_format), level=settings.log_level)
        daemon = Daemon(settings)
        code = daemon.run(stop_asked=asked)
    raise typer.Exit(code)


@app.command()
def validate(file: FileArg = None, as_json: JsonOpt = False, output: OutputOpt = None) -> None:
    """Check a declarations file; exit 2 listing every problem."""
    from triggers.declarations import load_declarations  # noqa: PLC0415

    shape = output_of(as_json, output)
    with errors(shape):
        path = declarations_file(file)
        declarations = load_declarations(path)
        if shape.machine:
            emit(
                {
                    "valid": True,
                    "file": str(path),
                    "flows": len(declarations.flows),
                    "triggers": len(declarations.triggers),
                },
                shape,
            )
        else:
            sys.stdout.write(
                f"{path}: valid ({len(declarations.flows)} flows, "
                f"{len(declarations.triggers)} triggers)\n"
            )


@db_app.command("upgrade")
def db_upgrade(as_json: JsonOpt = False, output: OutputOpt = None) -> None:
    """Apply the schema migrations (creates the schema in an empty database)."""
    from triggers.store.migrate import upgrade  # noqa: PLC0415

    shape = output_of(as_json, output)
    with errors(shape):
        db = open_database_for_upgrade()
        try:
            state = upgrade(db)
        finally:
            db.dispose()
        if shape.machine:
            emit({"revision": state.current, "head": state.head}, shape)
        else:
            sys.stdout.write(f"schema at {state.current} (head {state.head})\n")
