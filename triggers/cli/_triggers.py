"""Commands about triggers: list, describe, pause, resume."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from triggers.cli._app import app
from triggers.cli._backend import actor, open_stores
from triggers.cli._common import (
    FIRE_HEADERS,
    clock,
    errors,
    fire_json,
    fire_table_row,
    opt_iso,
    output_of,
    shown,
    upcoming_json,
)
from triggers.cli._output import JsonOpt, Output, OutputOpt, emit, table, value_text
from triggers.clock import iso

if TYPE_CHECKING:
    from triggers.inspection import TriggerDescription
    from triggers.store.audit_log import AuditEntry

IdArg = Annotated[str, typer.Argument(metavar="ID")]
NoteOpt = Annotated[str | None, typer.Option(help="Why: kept in the audit log.")]


@app.command("list")
def list_command(as_json: JsonOpt = False, output: OutputOpt = None) -> None:
    """Triggers with schedule, zone, overlap, state, next fire, last outcome, active run."""
    from triggers import services  # noqa: PLC0415

    shape = output_of(as_json, output)
    with errors(shape), open_stores() as stores:
        found = services.list_triggers(stores.store, now=clock.now())
        rows = [_list_row(view) for view in found]
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
                    _next_fire_cell(view),
                    r["last_outcome"],
                    r["active_run_id"],
                ]
                for r, view in zip(rows, found, strict=True)
            ],
        )


def _list_row(view: Any) -> dict[str, Any]:
    from triggers import services  # noqa: PLC0415
    from triggers.inspection import trigger_state  # noqa: PLC0415

    trigger, spec = view.trigger, view.trigger.spec
    return {
        "id": trigger.id,
        "schedule": services.describe(trigger),
        "timezone": spec.timezone,
        "overlap": spec.overlap.value,
        "enabled": spec.enabled and not trigger.retired,
        "retired": trigger.retired,
        "paused": trigger.paused,
        "pause_note": trigger.pause_note,
        "state": trigger_state(trigger),
        "blocked_by": trigger.blocked_by,
        "revision": trigger.revision,
        "flow": spec.flow,
        "next_fire": opt_iso(view.next_fire_at),
        "no_next_fire_reason": view.no_next_fire,
        "next_fire_dst": view.next_fire.shift.kind
        if view.next_fire and view.next_fire.shift
        else None,
        "last_outcome": view.last.outcome.value if view.last else None,
        "last_occurrence": opt_iso(view.last.occurrence_at) if view.last else None,
        "active_run_id": view.active_run_id,
        "description": spec.description,
    }


def _next_fire_cell(view: Any) -> str | None:
    """The next fire, marked when DST moved it; or, when there is none, why."""
    if view.next_fire is None:
        return None if view.no_next_fire is None else f"none ({view.no_next_fire})"
    shift = view.next_fire.shift
    return f"{shown(view.next_fire_at)}" + (f" (DST {shift.kind})" if shift else "")


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

    shape = output_of(as_json, output)
    with errors(shape), open_stores() as stores:
        found = describe_trigger(
            stores.store, stores.audit, trigger_id, now=clock.now(), fires=fires, upcoming=upcoming
        )
        if shape.machine:
            emit(describe_json(found), shape)
        else:
            _describevalue_text(found)


def describe_json(found: TriggerDescription) -> dict[str, Any]:
    """The `describe --json` document."""
    trigger = found.trigger
    return {
        "id": trigger.id,
        "state": found.state,
        "revision": trigger.revision,
        "declaration": found.declaration,
        "paused": trigger.paused,
        "paused_at": opt_iso(trigger.paused_at),
        "pause_note": trigger.pause_note,
        "paused_by": _actor_json(found.paused_by) if found.paused_by else None,
        "blocked_by": trigger.blocked_by,
        "retired": trigger.retired,
        "watermark": iso(trigger.watermark_at),
        "runs_launched": trigger.runs_launched,
        "active_runs": found.active_runs,
        "created_at": iso(trigger.created_at),
        "updated_at": iso(trigger.updated_at),
        "revisions": [
            {
                "revision": view.revision,
                "applied_at": iso(view.applied_at),
                "first": view.first,
                "applied_by": _actor_json(view.applied_by) if view.applied_by else None,
                "changes": [change.to_json() for change in view.changes],
            }
            for view in found.revisions
        ],
        "last_fires": [fire_json(record) for record in found.last_fires],
        "next_fires": [upcoming_json(fire) for fire in found.next_fires],
        "no_next_fire_reason": found.no_next_fire,
        "actions": [entry_json(entry) for entry in found.actions],
    }


def entry_json(entry: AuditEntry) -> dict[str, Any]:
    """An audit log entry as `audit-log --json` prints it."""
    return {
        "id": entry.id,
        "at": iso(entry.at),
        "action": entry.action.value,
        "trigger_id": entry.trigger_id,
        "run_id": entry.run_id,
        "host": entry.actor.host,
        "user": entry.actor.user,
        "note": entry.note,
        "changes": dict(entry.changes),
    }


def _actor_json(entry: AuditEntry) -> dict[str, Any]:
    return {"at": iso(entry.at), "host": entry.actor.host, "user": entry.actor.user}


def _describevalue_text(found: TriggerDescription) -> None:
    from triggers.scheduler.occurrences import describe_shift  # noqa: PLC0415

    trigger, write = found.trigger, sys.stdout.write
    write(f"trigger {trigger.id} (revision {trigger.revision}): {found.state}\n")
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
    write(f"  decided up to {shown(trigger.watermark_at)}; {trigger.runs_launched} launched\n")
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
        write(f"  {shown(fire.occurrence_at)}  ({local}){note}\n")
    write("operator actions (triggers audit-log --trigger ID for more):\n")
    for entry in found.actions:
        note = f": {entry.note}" if entry.note else ""
        who = f"{entry.actor.user}@{entry.actor.host}"
        write(f"  {shown(entry.at)}  {entry.action.value} by {who}{note}\n")


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
        _paused_output(trigger.id, trigger.paused, trigger.pause_note, shape)


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
        _paused_output(trigger.id, trigger.paused, trigger.pause_note, shape)


def _paused_output(trigger_id: str, paused: bool, note: str | None, shape: Output) -> None:
    if shape.machine:
        emit({"id": trigger_id, "paused": paused, "pause_note": note}, shape)
    else:
        sys.stdout.write(f"{trigger_id}: {'paused' if paused else 'resumed'}\n")
