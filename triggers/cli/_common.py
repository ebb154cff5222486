"""What every command shares: settings, errors and exit codes, output, times."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Annotated, Any

import structlog
import typer

from looms_runtime import DatabaseUnavailableError as LoomsDatabaseUnavailableError
from looms_runtime import (
    EffectNotRetryableError,
    InvalidRequestError,
    LoomsError,
    RunNotFoundError,
    SignalConflictError,
)
from triggers.cli._app import options
from triggers.clock import SystemClock, iso
from triggers.durations import parse_duration
from triggers.errors import ExitCode, InvalidTimeError, TriggersError
from triggers.log import configure_logging, wants_json
from triggers.model import FireRecord
from triggers.settings import Settings, load_settings

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
clock = SystemClock()


def current_settings(**overrides: Any) -> Settings:
    """Settings from the environment, the global options and `overrides`."""
    return load_settings(
        database_url=options.database_url, log_format=options.log_format, **overrides
    )


def quiet_logging(settings: Settings | None = None) -> None:
    log_format = settings.log_format if settings else options.log_format
    configure_logging(json=wants_json(log_format), level="warning")


@contextmanager
def errors(as_json: bool) -> Iterator[None]:
    """Render a known error on stderr and exit with its code; anything else is a bug (1)."""
    try:
        yield
    except typer.Exit:
        raise
    except TriggersError as err:
        print_error(err.to_dict(), as_json)
        raise typer.Exit(int(err.exit_code)) from err
    except LoomsError as err:
        details = getattr(err, "details", {})
        print_error({"code": err.code, "message": str(err), "details": details}, as_json)
        raise typer.Exit(int(_looms_exit_code(err))) from err
    except Exception as err:
        structlog.get_logger().exception("command_failed")
        print_error(
            {"code": "TRG-000", "message": f"internal error: {err!r}", "details": {}}, as_json
        )
        raise typer.Exit(int(ExitCode.FAILED)) from err


def _looms_exit_code(err: LoomsError) -> ExitCode:
    if isinstance(err, LoomsDatabaseUnavailableError):
        return ExitCode.TEMPORARY
    if isinstance(
        err,
        RunNotFoundError | InvalidRequestError | EffectNotRetryableError | SignalConflictError,
    ):
        return ExitCode.BAD_INPUT
    return ExitCode.FAILED


def print_error(error: dict[str, Any], as_json: bool) -> None:
    if as_json:
        sys.stderr.write(json.dumps({"error": error}) + "\n")
    else:
        sys.stderr.write(f"error: {error['message']}\n")


def emit(document: Any) -> None:
    sys.stdout.write(json.dumps(document, indent=2, default=str) + "\n")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[("" if v is None else str(v)) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    line = "  ".join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True))
    sys.stdout.write(line.rstrip() + "\n")
    for row in cells:
        sys.stdout.write(
            "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() + "\n"
        )


def parse_time(text: str, *, now: datetime) -> datetime:
    """`now`, `-2h` (ago), or ISO-8601 (`Z`/offset; a time without offset is UTC)."""
    value = text.strip()
    if value == "now":
        return now
    if value.startswith("-"):  # an ISO-8601 time starts with its year
        try:
            return now - parse_duration(value[1:])
        except ValueError as exc:
            raise InvalidTimeError(f"cannot parse time {text!r}: {exc}", value=text) from exc
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError as exc:
        raise InvalidTimeError(
            f"cannot parse time {text!r}: use ISO-8601 like 2026-01-01T00:00:00Z, 'now' or '-2h'",
            value=text,
        ) from exc
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def opt_iso(value: datetime | None) -> str | None:
    return None if value is None else iso(value)


def fire_json(record: FireRecord) -> dict[str, Any]:
    """The `history --json` shape of a ledger row."""
    return {
        "trigger_id": record.trigger_id,
        "occurrence": iso(record.occurrence_at),
        "outcome": record.outcome.value,
        "reason": record.reason.value if record.reason else None,
        "run_id": record.run_id,
        "claimed_at": opt_iso(record.claimed_at),
        "launched_at": opt_iso(record.launched_at),
        "settled_at": opt_iso(record.settled_at),
        "error": record.error,
        "last_occurrence": opt_iso(record.last_occurrence_at),
        "count": record.count,
        "revision": record.revision,
        "host": record.host,
        "manual_key": record.manual_key or None,
        "idempotency_key": record.idempotency_key,
        "blocked_by": record.blocked_by,
    }


@contextmanager
def open_store() -> Iterator[Any]:
    from triggers.daemon import open_database  # noqa: PLC0415
    from triggers.store.sql import SqlTriggerStore  # noqa: PLC0415

    settings = current_settings()
    quiet_logging(settings)
    db = open_database(settings)
    try:
        yield SqlTriggerStore(db)
    finally:
        db.dispose()
