"""The Typer application, its global options, and the process entry point.

This module and the command modules import only what parsing needs: each command
imports the store, the runtime or the scheduler when it runs, so `--help` and a
query start in a fraction of a second.
"""

from __future__ import annotations

import copy
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from triggers.cli._argv import arrange, command_path, wants_json_errors
from triggers.cli._output import Output

if TYPE_CHECKING:
    from triggers.locations import Environment

app = typer.Typer(
    name="triggers",
    help=(
        "A cron-style trigger scheduler daemon with an embedded durable runtime.\n\n"
        "Global options may be given before or after the command."
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)
db_app = typer.Typer(help="Database schema.", no_args_is_help=True)
runs_app = typer.Typer(help="The runs of the embedded runtime.", no_args_is_help=True)
alerts_app = typer.Typer(help="Alerts: what was sent, and testing a channel.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(alerts_app, name="alerts")
app.add_typer(runs_app, name="runs")


@dataclass(slots=True)
class Globals:
    """The global options of this invocation."""

    database_url: str | None = None
    config: Path | None = None
    log_format: str | None = None
    output: Output | None = None
    local: bool = False
    environment: Environment | None = None
    """Read once per invocation (`triggers.cli._backend.environment`)."""


options = Globals()


def _version(value: bool) -> None:
    if value:
        from triggers import __version__  # noqa: PLC0415

        sys.stdout.write(f"triggers {__version__}\n")
        raise typer.Exit


@app.callback()
def _main(
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            metavar="URL",
            help="sqlite:///PATH or postgresql+psycopg://...; default: $TRIGGERS_DATABASE_URL, "
            "the service's /etc/triggers/triggers.env and state directory, then a per-user file.",
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            metavar="FILE",
            help="Declarations file (YAML); default: $TRIGGERS_CONFIG.",
        ),
    ] = None,
    log_format: Annotated[
        str | None,
        typer.Option("--log-format", metavar="FORMAT", help="json or console (default: by TTY)."),
    ] = None,
    output: Annotated[
        Output | None,
        typer.Option("--output", "-o", help="table (default), json or jsonl.", show_default=False),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Same as --output json.")] = False,
    local: Annotated[
        bool,
        typer.Option(
            "--local/--utc",
            help="Show and read times in this machine's zone (default: UTC).",
        ),
    ] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    options.database_url = database_url
    options.config = config
    options.log_format = log_format
    options.output = output or (Output.JSON if as_json else None)
    options.local = local
    options.environment = None


def _command(args: Sequence[str]) -> Any:
    """The Click command for `args`: the application with only the command they name.

    Typer builds a Click command from every command function's signature and
    annotations, which costs more than most queries do; an invocation runs one
    command, so that one is built. Whatever does not name a command plainly (no
    command, `--help`, a misspelt one, completion) gets the whole application.
    """
    named = {
        info.name or typer.main.get_command_name(info.callback.__name__): info  # type: ignore[union-attr]
        for info in app.registered_commands
    }
    groups = {info.name: info for info in app.registered_groups}
    name = next((word for word in args if word in named or word in groups), None)
    if name is None or os.environ.get("_TRIGGERS_COMPLETE"):
        return typer.main.get_command(app)
    only = copy.copy(app)
    only.registered_commands = [named[name]] if name in named else []
    only.registered_groups = [groups[name]] if name in groups else []
    command = typer.main.get_command(only)
    if command_path(command, args)[:1] != [name]:
        # The first plain word was an option's value: parse with every command.
        return typer.main.get_command(app)
    return command


_SHELLS = ("bash", "zsh", "fish", "powershell", "pwsh")


def _show_completion(args: Sequence[str]) -> bool:
    """`--show-completion SHELL`: print that shell's completion script.

    Typer reads `--show-completion` as a flag and detects the shell from the process's
    ancestors, so a named shell was ignored and the command failed with "Shell  not
    supported" wherever no shell ran it (a provisioning tool, a service, `nohup`)."""
    match args:
        case ["--show-completion", str(shell)] if shell in _SHELLS:
            pass
        case _:
            return False
    from typer._completion_shared import get_completion_script  # noqa: PLC0415

    script = get_completion_script(
        prog_name="triggers", complete_var="_TRIGGERS_COMPLETE", shell=shell
    )
    sys.stdout.write(script + "\n")
    return True


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point: exit codes, usage errors and broken pipes handled here."""
    args = list(sys.argv[1:] if argv is None else argv)
    if _show_completion(args):
        raise SystemExit(0)
    command = _command(args)
    as_json = wants_json_errors(args)
    try:
        code = command.main(
            args=arrange(command, args), prog_name="triggers", standalone_mode=False
        )
        sys.stdout.flush()
    except BrokenPipeError:
        _quiet_broken_pipe()
    except typer.TyperException as err:  # a usage error, before any command ran
        _usage_error(err, as_json)
    except typer.Abort:
        sys.stderr.write("aborted\n")
        raise SystemExit(1) from None
    except SystemExit as exit_:
        if _stdout_broken():
            _quiet_broken_pipe()
        raise exit_ from None
    raise SystemExit(code if isinstance(code, int) else 0)


def _usage_error(err: Any, as_json: bool) -> None:
    from triggers.errors import ExitCode, UsageError  # noqa: PLC0415

    message = err.format_message()
    if as_json:
        from triggers.cli._common import print_error  # noqa: PLC0415

        print_error(UsageError(message).to_dict(), as_json=True)
    else:
        show = getattr(err, "show", None)
        if show is not None:
            show()
        else:
            sys.stderr.write(f"error: {message}\n")
    code = getattr(err, "exit_code", ExitCode.BAD_INPUT)
    raise SystemExit(int(code) if code else int(ExitCode.BAD_INPUT))


def _stdout_broken() -> bool:
    # Click swaps the stream for this wrapper when it meets EPIPE on stdout.
    return type(sys.stdout).__name__ == "PacifyFlushWrapper"


def _quiet_broken_pipe() -> None:
    """The reader of our output went away (`triggers list | head -1`): that is not an
    error, so exit 0 with nothing on stderr. stdout goes to /dev/null first, or the
    interpreter's final flush would fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    raise SystemExit(0)
