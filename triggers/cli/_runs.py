"""`triggers runs list|show|events|cancel|retry|signal`: the embedded runtime's runs.

A request that changes a run (cancel, retry, signal) is recorded durably and the
daemon that owns the run acts on it within about a second.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, is_dataclass
from datetime import datetime
from typing import Annotated, Any

import typer

from looms_runtime import Runtime
from triggers.cli._app import runs_app
from triggers.cli._common import (
    JsonOpt,
    clock,
    current_settings,
    emit,
    errors,
    opt_iso,
    quiet_logging,
    table,
)
from triggers.errors import InputError

RunArg = Annotated[str, typer.Argument(metavar="RUN_ID")]


@contextmanager
def _runtime() -> Iterator[Runtime]:
    import os  # noqa: PLC0415

    from triggers.daemon import open_backend  # noqa: PLC0415

    settings = current_settings()
    quiet_logging(settings)
    backend = open_backend(settings, owner=f"cli:{settings.host}:{os.getpid()}", clock=clock)
    try:
        yield backend.runtime
    finally:
        backend.close()


def _plain(value: Any) -> Any:
    """A JSON-ready copy: dataclasses to dicts, instants to RFC 3339 UTC."""
    if is_dataclass(value) and not isinstance(value, type):
        return _plain(asdict(value))
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, datetime):
        return opt_iso(value)
    return value


@runs_app.command("list")
def list_runs(
    status: Annotated[
        str | None,
        typer.Option(help="active, completed, failed, cancelled, or parked (waiting for you)."),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=100_000)] = 50,
    as_json: JsonOpt = False,
) -> None:
    """The newest runs first."""
    with errors(as_json), _runtime() as runtime:
        runs = runtime.list_runs(status=status, limit=limit)
        if as_json:
            emit([_plain(run) for run in runs])
            return
        table(
            ["run", "flow", "state", "trigger", "occurrence", "created", "error"],
            [
                [
                    r.run_id,
                    r.flow,
                    r.state,
                    r.attributes.get("trigger_id"),
                    r.attributes.get("occurrence"),
                    opt_iso(r.created_at),
                    r.error,
                ]
                for r in runs
            ],
        )


@runs_app.command("show")
def show(run_id: RunArg, as_json: JsonOpt = False) -> None:
    """A run: its state, and every outstanding step with attempt, status, deadline, error."""
    with errors(as_json), _runtime() as runtime:
        info = runtime.inspect_run(run_id)
        if as_json:
            emit(_plain(info))
            return
        sys.stdout.write(
            f"run {info.run_id}\n  flow {info.flow} (version {info.version})\n"
            f"  state {info.state} ({info.status}); steps completed {info.completed_steps}\n"
            f"  key {info.idempotency_key}\n  owner {info.owner or '-'}\n"
            f"  created {opt_iso(info.created_at)}; settled {opt_iso(info.settled_at) or '-'}\n"
        )
        if info.park_reason:
            sys.stdout.write(f"  parked: {info.park_reason}\n")
        if info.error:
            sys.stdout.write(f"  error: {info.error}\n")
        if info.effects:
            table(
                ["step", "effect", "kind", "attempt", "status", "deadline", "last error"],
                [
                    [
                        e.step_id,
                        e.effect_id,
                        e.kind,
                        e.attempt,
                        e.status,
                        opt_iso(e.deadline),
                        e.last_error,
                    ]
                    for e in info.effects
                ],
            )


@runs_app.command("events")
def events(
    run_id: RunArg,
    from_seq: Annotated[int, typer.Option("--from", min=1, help="First sequence number.")] = 1,
    limit: Annotated[int | None, typer.Option(min=1)] = None,
    as_json: JsonOpt = False,
) -> None:
    """A run's event log, oldest first."""
    with errors(as_json), _runtime() as runtime:
        found = runtime.get_events(run_id, from_seq=from_seq, limit=limit)
        if as_json:
            emit([_plain(event) for event in found])
            return
        table(
            ["seq", "at", "type", "payload"],
            [
                [
                    e.seq,
                    opt_iso(e.created_at),
                    e.type,
                    json.dumps(_plain(e.payload), sort_keys=True)[:120],
                ]
                for e in found
            ],
        )


@runs_app.command("cancel")
def cancel(
    run_id: RunArg,
    reason: Annotated[str | None, typer.Option(help="Recorded with the cancellation.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Cancel a run gracefully (SIGTERM to a running command, SIGKILL after a grace)."""
    with errors(as_json), _runtime() as runtime:
        status = runtime.cancel(run_id, reason=reason or "cancelled by an operator")
        _status_output(status, as_json, "cancel requested")


@runs_app.command("retry")
def retry(
    run_id: RunArg,
    effect_id: Annotated[str, typer.Argument(metavar="EFFECT_ID")],
    as_json: JsonOpt = False,
) -> None:
    """Run again a step left `ambiguous` or `timed_out` by a crash (your decision)."""
    with errors(as_json), _runtime() as runtime:
        status = runtime.retry_effect(run_id, effect_id)
        _status_output(status, as_json, "retry requested")


@runs_app.command("signal")
def signal(
    run_id: RunArg,
    name: Annotated[str, typer.Argument(metavar="NAME")],
    payload: Annotated[str | None, typer.Option(help="A JSON value.")] = None,
    key: Annotated[
        str | None, typer.Option(help="Idempotency key (a repeat is applied once).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Deliver a named signal to a run waiting for it (`wait_signal` steps)."""
    with errors(as_json):
        try:
            value = json.loads(payload) if payload is not None else None
        except json.JSONDecodeError as exc:
            raise InputError(f"--payload is not JSON: {exc}") from exc
        with _runtime() as runtime:
            status = runtime.signal(run_id, name, value, idempotency_key=key)
        _status_output(status, as_json, f"signal {name!r} delivered")


def _status_output(status: Any, as_json: bool, what: str) -> None:
    if as_json:
        emit(_plain(status))
    else:
        sys.stdout.write(f"{status.run_id}: {what} (run is {status.status})\n")
