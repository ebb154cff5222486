"""Commands about triggers: list, describe, pause, resume."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from triggers.cli._app import app
from triggers.cli._backend import actor, open_reads, open_stores
from triggers.cli._common import (
    FIRE_HEADERS,
    clock,
    errors,
    fire_table_row,
    life_event_text,
    output_of,
    quiet_logging,
    shown,
    shown_with_relative,
)
from triggers.cli._output import JsonOpt, Output, OutputOpt, emit, table, value_text
from triggers.documents import describe_json, paused_json, triggers_json
from triggers.waits import open_waits

if TYPE_CHECKING:
    from datetime import datetime

    from triggers.inspection import TriggerDescription
    from triggers.model import Trigger

IdArg = Annotated[str, typer.Argument(metavar="ID")]
NoteOpt = Annotated[str | None, typer.Option(help="Why: kept in the audit log.")]


@app.command("list")
def list_command(as_json: JsonOpt = False, output: OutputOpt = None) -> None:
    """Triggers with schedule, zone, overlap, state, next fire, last outcome, active run."""
    from triggers import services  # noqa: PLC0415

    shape = output_of(as_json, output)
    with errors(shape), open_reads() as reads:
        now = clock.now()
        found = services.list_triggers(reads.store, now=now)
        active = [view.active_run_id for view in found if view.active_run_id]
        # Reading an active run's waits folds its log (whose logging goes to stderr).
        waits = open_waits(reads.runs, active, prepare=quiet_logging) if active else {}
        rows = triggers_json(found, waits)
        if shape.machine:
            emit(rows, shape)
            return
        table(
            ["id", "schedule", "tz", "overlap", "state", "next fire", "last", "active run"],
            [
                [
                    r["id"],
                    r["schedule"],
                    r["timezone"],
                    r["overlap"],
                    r["state"] + (f" by {r['blocked_by']}" if r["blocked_by"] else ""),
                    _next_fire_cell(view, now=now),
                    _last_cell(view, now=now),
                    _active_cell(r),
                ]
                for r, view in zip(rows, found, strict=True)
            ],
        )


def _next_fire_cell(view: Any, *, now: datetime) -> str | None:
    """The next fire and how soon, marked when DST moved it; or, when there is none, why."""
    if view.next_fire is None:
        return None if view.no_next_fire is None else f"none ({view.no_next_fire})"
    shift = view.next_fire.shift
    cell = shown_with_relative(view.next_fire_at, now=now)
    return f"{cell}" + (f" (DST {shift.kind})" if shift else "")


def _active_cell(row: dict[str, Any]) -> str | None:
    """The active run, and what it waits for: `RUN (waiting for 'approved')`."""
    run_id = row["active_run_id"]
    signals = [w["signal"] for w in row["active_run_waiting"] if w["kind"] == "signal"]
    if run_id and signals:
        return f"{run_id} (waiting for {', '.join(repr(s) for s in signals)})"
    return run_id  # type: ignore[no-any-return]


def _last_cell(view: Any, *, now: datetime) -> str | None:
    """The last decided occurrence's outcome, when it was and how long ago."""
    last = view.last
    if last is None:
        return None
    return f"{last.outcome.value} {shown_with_relative(last.occurrence_at, now=now)}"


@app.command()
def describe(
    trigger_id: IdArg,
    fires: Annotated[int, typer.Option("--fires", min=0, max=1000, help="Last N fires.")] = 10,
    upcoming: Annotated[int, typer.Option("--next", min=0, max=1000, help="Next N fires.")] = 5,
    as_json: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """One trigger whole: declaration, revisions, state and who changed it, last and next fires."""
    from triggers.inspection import describe_trigger  # noqa: PLC0415
    from triggers.store.sql_alerts import SqlAlertOutbox  # noqa: PLC0415

    shape = output_of(as_json, output)
    with errors(shape), open_reads() as reads:
        now = clock.now()
        found = describe_trigger(
            reads.store,
            reads.audit,
            trigger_id,
            now=now,
            fires=fires,
            upcoming=upcoming,
            alerts=SqlAlertOutbox(reads.db).list,
        )
        if shape.machine:
            emit(describe_json(found), shape)
        else:
            _describevalue_text(found, now=now)


def _describevalue_text(found: TriggerDescription, *, now: datetime) -> None:
    from triggers.scheduler.occurrences import describe_shift  # noqa: PLC0415

    trigger, write = found.trigger, sys.stdout.write
    write(f"trigger {trigger.id} (revision {trigger.revision}): {found.state}\n")
    life = found.lifecycle
    for event in (life.retirement, life.revival):
        if event is not None:
            write(f"  {life_event_text(event)}\n")
    created = life.events[-1]
    write(f"  {life_event_text(created)}\n")
    if trigger.paused:
        who = (
            f" by {found.paused_by.actor.user}@{found.paused_by.actor.host}"
            if found.paused_by
            else (" by pause_on_failure" if trigger.spec.pause_on_failure else "")
        )
        write(f"  paused since {shown(trigger.paused_at)}{who}: {trigger.pause_note or '-'}\n")
    if trigger.blocked_by:
        write(f"  blocked by run {trigger.blocked_by} (waiting for an operator: runs show)\n")
    if found.active_runs:
        write(f"  active runs: {', '.join(found.active_runs)}\n")
    _relations_text(found)
    write(
        f"  decided up to {shown(trigger.watermark_at)}; {trigger.runs_launched} launched by its"
        " schedule (what max_runs counts; manual fires and backfills are not counted)\n"
    )
    write("declaration:\n")
    for key, value in found.declaration.items():
        if isinstance(value, dict) and value:
            for inner, item in value.items():
                write(f"  {key}.{inner}: {value_text(item)}\n")
        else:
            write(f"  {key}: {value_text(value)}\n")
    write("revisions (newest first):\n")
    for view in found.revisions:
        what = "first kept" if view.first else f"{len(view.changes)} change(s)"
        who = (
            f" by {view.applied_by.actor.user}@{view.applied_by.actor.host}"
            if view.applied_by
            else ""
        )
        write(f"  {view.revision}  {shown(view.applied_at)}  {what}{who}\n")
        for change in view.changes:
            write(f"      {change.key}: {value_text(change.old)} -> {value_text(change.new)}\n")
    write(f"last {len(found.last_fires)} fires:\n")
    table(FIRE_HEADERS, [fire_table_row(record) for record in found.last_fires])
    why = f" (then none: {found.no_next_fire})" if found.no_next_fire else ""
    write(f"next {len(found.next_fires)} fires{why}:\n")
    for fire in found.next_fires:
        local = f"{fire.local.isoformat()} {trigger.spec.timezone}"
        note = f"  {describe_shift(fire.shift)}" if fire.shift else ""
        if fire.excluded:
            note += f"  skipped: calendar {fire.excluded}"
        write(f"  {shown_with_relative(fire.occurrence_at, now=now)}  ({local}){note}\n")
    write("operator actions (triggers audit-log --trigger ID for more):\n")
    for entry in found.actions:
        note = f": {entry.note}" if entry.note else ""
        who = f"{entry.actor.user}@{entry.actor.host}"
        write(f"  {shown(entry.at)}  {entry.action.value} by {who}{note}\n")
    if found.declaration.get("alert") or found.alerts:
        write("alerts (triggers alerts list --trigger ID for more):\n")
        if not found.alerts:
            write("  none raised\n")
    for alert in found.alerts:
        answer = alert.last_error if alert.status != "delivered" else None
        said = f": {answer}" if answer else ""
        write(
            f"  {shown(alert.created_at)}  {alert.event} to {alert.channel}: {alert.status}"
            f" after {alert.attempts} attempt{'' if alert.attempts == 1 else 's'}{said}\n"
        )


def _relations_text(found: TriggerDescription) -> None:
    """The state lines of its pool and its dependencies."""
    write = sys.stdout.write
    if found.pool is not None:
        pool = found.pool
        waiting = f", {pool.waiting} waiting" if pool.waiting else ""
        write(
            f"  pool {pool.name}: {pool.active} of {pool.slots} slots in use{waiting}"
            f" (members: {', '.join(pool.members)})\n"
        )
    if found.upstreams:
        write(f"  upstreams: {'; '.join(link.text() for link in found.upstreams)}\n")
    if found.dependents:
        write(f"  dependents: {'; '.join(link.text() for link in found.dependents)}\n")


@app.command()
def pause(
    trigger_id: IdArg, note: NoteOpt = None, as_json: JsonOpt = False, output: OutputOpt = None
) -> None:
    """Stop new claims for a trigger (kept across applies); the note is kept in the audit log."""
    from triggers import actions  # noqa: PLC0415

    shape = output_of(as_json, output)
    with errors(shape), open_stores() as stores:
        trigger = actions.pause(
            stores.store, stores.audit, trigger_id, note=note, actor=actor(), now=clock.now()
        )
        _paused_output(trigger, shape)


@app.command()
def resume(
    trigger_id: IdArg, note: NoteOpt = None, as_json: JsonOpt = False, output: OutputOpt = None
) -> None:
    """Restart claims; the paused period is recorded as skipped, never launched."""
    from triggers import actions  # noqa: PLC0415

    shape = output_of(as_json, output)
    with errors(shape), open_stores() as stores:
        trigger = actions.resume(
            stores.store, stores.audit, trigger_id, note=note, actor=actor(), now=clock.now()
        )
        _paused_output(trigger, shape)


def _paused_output(trigger: Trigger, shape: Output) -> None:
    if shape.machine:
        emit(paused_json(trigger), shape)
    else:
        sys.stdout.write(f"{trigger.id}: {'paused' if trigger.paused else 'resumed'}\n")
