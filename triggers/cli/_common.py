"""What every command shares: errors and exit codes, the output choice, times, the clock.

Nothing heavy is imported here at module level; see `triggers.cli._backend` for
opening the database.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

import typer

from triggers.cli._app import options
from triggers.cli._output import JsonOpt, Output, emit, table
from triggers.clock import SystemClock
from triggers.documents import fire_json, opt_iso, upcoming_json
from triggers.durations import human_duration
from triggers.errors import ExitCode, TriggersError
from triggers.times import parse_time, relative_time, show_time

if TYPE_CHECKING:
    from triggers.lifecycle import Lifecycle, LifeEvent
    from triggers.model import FireRecord
    from triggers.settings import Settings

# Commands import these from here as well as from their own modules.
__all__ = [
    "JsonOpt",
    "clock",
    "current_settings",
    "emit",
    "errors",
    "fire_json",
    "opt_iso",
    "output_of",
    "parse_time",
    "quiet_logging",
    "table",
    "upcoming_json",
]

clock = SystemClock()


def output_of(as_json: bool = False, output: Output | None = None) -> Output:
    """The format this command prints: its own `--output`/`--json`, else the global one."""
    if output is not None:
        return output
    if as_json:
        return Output.JSON
    return options.output or Output.TABLE


def when(text: str | None, *, now: datetime | None = None) -> datetime | None:
    """A time option's instant (`--since 2h ago`), read as `--local`/`--utc` says."""
    return None if text is None else instant(text, now=now)


def instant(text: str, *, now: datetime | None = None) -> datetime:
    """The instant a required time option names (`--from yesterday`)."""
    return parse_time(text, now=now or clock.now(), local=options.local)


def shown(value: datetime | None) -> str | None:
    """A table cell for an instant, in UTC or local time as `--local`/`--utc` says."""
    return show_time(value, local=options.local)


def shown_with_relative(value: datetime | None, *, now: datetime) -> str | None:
    """A table cell for an instant with how far it is from now: `... (in 3h12m)`."""
    if value is None:
        return None
    return f"{shown(value)} ({relative_time(value, now=now)})"


def quiet_logging(_settings: object = None, *, level: str = "warning") -> None:
    """Send logs (the runtime's, a library's) to stderr at warning level (or `level`),
    never to stdout.

    Only commands that load code which logs call this: structlog costs start-up time."""
    from triggers.log import configure_logging, wants_json  # noqa: PLC0415

    configure_logging(json=wants_json(options.log_format), level=level)


def current_settings(**overrides: Any) -> Settings:
    """Every setting, as `triggers.cli._backend.settings` reads them."""
    from triggers.cli._backend import settings  # noqa: PLC0415 (it imports this module)

    return settings(**overrides)


@contextmanager
def errors(output: Output | bool) -> Iterator[None]:
    """Render a known error on stderr and exit with its code; anything else is a bug (1).

    A reader that goes away (`| head`) ends the command quietly with 0."""
    as_json = output.machine if isinstance(output, Output) else bool(output)
    try:
        yield
    except typer.Exit:
        raise
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        raise typer.Exit(int(ExitCode.OK)) from None
    except TriggersError as err:
        print_error(err.to_dict(), as_json)
        raise typer.Exit(int(err.exit_code)) from err
    except Exception as err:
        # The runtime's errors arrive translated (`triggers.runner.door`): this is a bug.
        _report_bug(err)
        print_error(
            {"code": "TRG-000", "message": f"internal error: {err!r}", "details": {}}, as_json
        )
        raise typer.Exit(int(ExitCode.FAILED)) from err


def _report_bug(err: Exception) -> None:
    """Log an unexpected error with its traceback (never its locals: they hold inputs)."""
    quiet_logging()
    import structlog  # noqa: PLC0415

    structlog.get_logger().error("command_failed", exc_info=err)


def print_error(error: dict[str, Any], as_json: bool) -> None:
    if as_json:
        sys.stderr.write(json.dumps({"error": error}, default=str) + "\n")
    else:
        sys.stderr.write(f"error: {error['message']}\n")


def fire_table_row(record: FireRecord) -> list[Any]:
    """The `history` table's cells of a ledger row."""
    occurrence = shown(record.occurrence_at)
    if record.count > 1 and record.last_occurrence_at is not None:
        occurrence = f"{occurrence} .. {shown(record.last_occurrence_at)} ({record.count})"
    latency = None
    if record.launched_at is not None:
        latency = human_duration(record.launched_at - record.occurrence_at)
    reason = record.reason.value if record.reason else None
    if record.blocked_by:
        reason = f"{reason} by {record.blocked_by}"
    if record.reason_detail:
        reason = f"{reason} {record.reason_detail}"
    ran = record.run_id is not None and record.launched_at is not None
    ended = record.settled_at if ran and record.settled_at is not None else None
    took = human_duration(ended - record.launched_at) if ended and record.launched_at else None
    return [
        occurrence,
        record.trigger_id,
        record.outcome.value,
        reason,
        record.run_id,
        latency,
        took,
        shown(ended),
        record.error,
    ]


FIRE_HEADERS = [
    "occurrence",
    "trigger",
    "outcome",
    "reason",
    "run",
    "latency",
    "duration",
    "ended",
    "error",
]


def life_event_text(event: LifeEvent) -> str:
    """`retired at 01:55:01 by apply (revision 4, by ops@host)`, as `history` and
    `describe` say it."""
    entry = event.applied_by
    revision = f"revision {event.revision}" if event.revision is not None else "revision ?"
    if event.at is None:
        return f"{event.milestone.value} ({revision}; its apply is no longer in the audit log)"
    if entry is None:
        return f"{event.milestone.value} at {shown(event.at)} ({revision})"
    note = f": {entry.note}" if entry.note else ""
    who = f"{entry.actor.user}@{entry.actor.host}"
    return f"{event.milestone.value} at {shown(event.at)} by apply ({revision}, by {who}{note})"


def with_life_events(
    trigger_id: str,
    rows: Sequence[FireRecord],
    life: Lifecycle | None,
    *,
    since: datetime | None,
    until: datetime | None,
    cut: bool,
) -> list[list[Any] | str]:
    """`history ID`'s table: the ledger rows, newest first, and between them where they
    fell the trigger's retirements, revivals and creation, within the rows' window (all
    of it back to `since` when the rows were not `cut` by the limit); the retirement in
    force is shown for any window that ends after it."""
    if cut and rows:
        since = max(since, rows[-1].occurrence_at) if since else rows[-1].occurrence_at
    in_force = life.retirement if life else None
    events = [
        event
        for event in (life.events if life else ())
        if event.at is None
        or (
            (until is None or event.at <= until)
            # A retirement in force explains every later window, however late it starts.
            and (since is None or event.at >= since or event is in_force)
        )
    ]
    shown_rows: list[list[Any] | str] = []
    pending = list(events)
    for record in rows:
        while pending and (pending[0].at is None or pending[0].at > record.occurrence_at):
            shown_rows.append(_life_line(trigger_id, pending.pop(0)))
        shown_rows.append(fire_table_row(record))
    shown_rows.extend(_life_line(trigger_id, event) for event in pending)
    return shown_rows


def _life_line(trigger_id: str, event: LifeEvent) -> str:
    retired = event.milestone.value == "retired"
    tail = "; no longer declared: no occurrence after it is decided" if retired else ""
    return f"-- {trigger_id} {life_event_text(event)}{tail}"
