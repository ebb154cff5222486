"""Commands about triggers: run, validate, apply, list, next, history, fire, backfill,
pause, resume, status, db upgrade."""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

import typer

from triggers import __version__, services
from triggers.cli._app import app, db_app
from triggers.cli._common import (
    JsonOpt,
    clock,
    current_settings,
    emit,
    errors,
    fire_json,
    open_store,
    opt_iso,
    parse_time,
    quiet_logging,
    table,
)
from triggers.clock import iso
from triggers.declarations import Declarations, load_declarations
from triggers.durations import format_duration
from triggers.errors import InputError
from triggers.log import configure_logging, wants_json
from triggers.model import FireRecord, Outcome, Overlap
from triggers.store.protocol import HistoryQuery


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
    from triggers.daemon import Daemon  # noqa: PLC0415 (keeps the query commands light)

    with errors(as_json=False):
        settings = current_settings(config=config)
        configure_logging(json=wants_json(settings.log_format), level=settings.log_level)
        code = Daemon(settings).run()
    raise typer.Exit(code)


@app.command()
def validate(
    file: Annotated[Path, typer.Argument(help="Declarations file (YAML).")],
    as_json: JsonOpt = False,
) -> None:
    """Check a declarations file; exit 2 listing every problem."""
    with errors(as_json):
        quiet_logging()
        declarations = load_declarations(file)
        if as_json:
            emit(
                {
                    "valid": True,
                    "file": str(file),
                    "flows": len(declarations.flows),
                    "triggers": len(declarations.triggers),
                }
            )
        else:
            sys.stdout.write(
                f"{file}: valid ({len(declarations.flows)} flows, "
                f"{len(declarations.triggers)} triggers)\n"
            )


@app.command()
def apply(
    file: Annotated[Path, typer.Argument(help="Declarations file (YAML).")],
    as_json: JsonOpt = False,
) -> None:
    """Write declarations to the store (changed ones get a new revision; missing ones retire)."""
    from triggers.daemon import open_backend, owner_id  # noqa: PLC0415

    with errors(as_json):
        settings = current_settings()
        quiet_logging(settings)
        declarations = load_declarations(file)  # before touching the store
        backend = open_backend(settings, owner=owner_id(settings.host), clock=clock)
        try:
            result = services.apply_declarations(
                backend.store, backend.runtime.register_flow, declarations, now=clock.now()
            )
        finally:
            backend.close()
        document = {
            "created": result.created,
            "updated": result.updated,
            "unchanged": result.unchanged,
            "retired": result.retired,
        }
        if as_json:
            emit(document)
        else:
            for key, ids in document.items():
                sys.stdout.write(
                    f"{key}: {len(ids)}" + (f" ({', '.join(ids)})" if ids else "") + "\n"
                )


@app.command("list")
def list_command(as_json: JsonOpt = False) -> None:
    """Triggers with schedule, zone, overlap, state, next fire, last outcome, active run."""
    with errors(as_json), open_store() as store:
        views = services.list_triggers(store, now=clock.now())
        rows = []
        for view in views:
            trigger, spec = view.trigger, view.trigger.spec
            rows.append(
                {
                    "id": trigger.id,
                    "schedule": services.describe(trigger),
                    "timezone": spec.timezone,
                    "overlap": spec.overlap.value,
                    "enabled": spec.enabled and not trigger.retired,
                    "retired": trigger.retired,
                    "paused": trigger.paused,
                    "pause_note": trigger.pause_note,
                    "revision": trigger.revision,
                    "flow": spec.flow,
                    "next_fire": opt_iso(view.next_fire_at),
                    "last_outcome": view.last.outcome.value if view.last else None,
                    "last_occurrence": opt_iso(view.last.occurrence_at) if view.last else None,
                    "active_run_id": view.active_run_id,
                    "blocked_by": trigger.blocked_by,
                    "description": spec.description,
                }
            )
        if as_json:
            emit(rows)
            return
        table(
            ["id", "schedule", "tz", "overlap", "state", "next fire", "last", "active run"],
            [
                [
                    r["id"],
                    r["schedule"],
                    r["timezone"],
                    r["overlap"],
                    _state(r),
                    r["next_fire"],
                    r["last_outcome"],
                    r["active_run_id"],
                ]
                for r in rows
            ],
        )


def _reason(record: FireRecord) -> str | None:
    if record.blocked_by:
        return f"blocked by {record.blocked_by}"
    return record.reason.value if record.reason else None


def _state(row: dict[str, Any]) -> str:
    if row["retired"]:
        return "retired"
    if not row["enabled"]:
        return "disabled"
    if row["paused"]:
        return "paused"
    return f"blocked by {row['blocked_by']}" if row["blocked_by"] else "enabled"


@app.command("next")
def next_command(
    trigger_id: Annotated[str, typer.Argument(metavar="ID")],
    count: Annotated[int, typer.Option("-n", "--count", min=1, max=10_000)] = 5,
    after: Annotated[str | None, typer.Option("--after", help="Start after this time.")] = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="Read the trigger from this file, not the store."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """The next N occurrences of a trigger (UTC and local)."""
    with errors(as_json):
        quiet_logging()
        start = parse_time(after, now=clock.now()) if after else clock.now()
        if config is not None:
            declarations: Declarations = load_declarations(config)
            spec = services.find_spec(declarations, trigger_id)
        else:
            with open_store() as store:
                spec = services.require_trigger(store, trigger_id).spec
        found = services.next_occurrences(spec, after=start, count=count)
        if as_json:
            emit([{"occurrence": iso(utc), "local": local.isoformat()} for utc, local in found])
            return
        table(
            ["occurrence (utc)", f"local ({spec.timezone})"],
            [[iso(utc), local.isoformat()] for utc, local in found],
        )


@app.command()
def history(
    trigger_id: Annotated[str | None, typer.Argument(metavar="[ID]")] = None,
    outcome: Annotated[
        list[str] | None, typer.Option("--outcome", help="Only these outcomes (repeatable).")
    ] = None,
    since: Annotated[str | None, typer.Option(help="Occurrences at or after this time.")] = None,
    until: Annotated[str | None, typer.Option(help="Occurrences at or before this time.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=100_000)] = 50,
    as_json: JsonOpt = False,
) -> None:
    """The fire ledger, newest occurrence first."""
    with errors(as_json):
        now = clock.now()
        outcomes = frozenset(_outcome(o) for o in outcome or [])
        query = HistoryQuery(
            trigger_id=trigger_id,
            outcomes=outcomes,
            since=parse_time(since, now=now) if since else None,
            until=parse_time(until, now=now) if until else None,
            limit=limit,
        )
        with open_store() as store:
            records = services.history(store, query)
        if as_json:
            emit([fire_json(r) for r in records])
            return
        table(
            ["occurrence", "trigger", "outcome", "reason", "run", "latency", "error"],
            [
                [
                    _occurrence_text(r),
                    r.trigger_id,
                    r.outcome.value,
                    _reason(r),
                    r.run_id,
                    _latency(r),
                    r.error,
                ]
                for r in records
            ],
        )


def _outcome(text: str) -> Outcome:
    try:
        return Outcome(text)
    except ValueError:
        raise InputError(
            f"unknown outcome {text!r}; one of: {', '.join(o.value for o in Outcome)}"
        ) from None


def _occurrence_text(record: FireRecord) -> str:
    if record.count > 1 and record.last_occurrence_at is not None:
        return f"{iso(record.occurrence_at)} .. {iso(record.last_occurrence_at)} ({record.count})"
    return iso(record.occurrence_at)


def _latency(record: FireRecord) -> str | None:
    if record.launched_at is None:
        return None
    return f"{(record.launched_at - record.occurrence_at).total_seconds() * 1000:.0f}ms"


@app.command()
def fire(
    trigger_id: Annotated[str, typer.Argument(metavar="ID")],
    key: Annotated[str | None, typer.Option(help="Idempotency key (default: the time).")] = None,
    overlap: Annotated[
        str | None, typer.Option(help="Override the overlap policy for this fire.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Fire one occurrence now (manual); a daemon on this host launches it at once."""
    with errors(as_json), open_store() as store:
        settings = current_settings()
        policy = _overlap(overlap) if overlap else None
        claim = services.fire(
            store,
            trigger_id,
            now=clock.now(),
            key=key,
            overlap=policy,
            owner=f"cli:{settings.host}:{os.getpid()}",
            host=settings.host,
        )
        services.nudge_local_daemons(store, host=settings.host, now=clock.now())
        summary = services.claim_summary(claim) | {"occurrence": iso(claim.occurrence_at)}
        if as_json:
            emit(summary)
        else:
            sys.stdout.write(
                f"{trigger_id}: {summary['action']}"
                + (f" ({summary['reason']})" if summary["reason"] else "")
                + f" as {claim.idempotency_key}\n"
            )


@app.command()
def backfill(
    trigger_id: Annotated[str, typer.Argument(metavar="ID")],
    start: Annotated[str, typer.Option("--from", help="First instant of the range (inclusive).")],
    end: Annotated[str, typer.Option("--to", help="Last instant of the range (inclusive).")],
    max_count: Annotated[
        int | None,
        typer.Option("--max", min=1, help="Allow up to N occurrences (default cap: 1000)."),
    ] = None,
    overlap: Annotated[
        str | None, typer.Option(help="Overlap policy for these occurrences (default buffer_all).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Dispatch the occurrences of a past range, in order; the daemon launches them."""
    with errors(as_json), open_store() as store:
        settings = current_settings()
        now = clock.now()
        result = services.backfill(
            store,
            trigger_id,
            start_at=parse_time(start, now=now),
            end_at=parse_time(end, now=now),
            now=now,
            overlap=_overlap(overlap) if overlap else None,
            max_count=max_count,
            owner=f"cli:{settings.host}:{os.getpid()}",
            host=settings.host,
        )
        services.nudge_local_daemons(store, host=settings.host, now=clock.now())
        items = [
            {
                "occurrence": iso(item.occurrence_at),
                "idempotency_key": item.idempotency_key,
                "status": item.status.value,
                "reason": item.reason.value if item.reason else None,
                "previous_outcome": item.previous.value if item.previous else None,
            }
            for item in result.items
        ]
        if as_json:
            emit(
                {
                    "trigger_id": result.trigger_id,
                    "from": iso(result.start_at),
                    "to": iso(result.end_at),
                    "overlap": result.overlap.value,
                    "occurrences": len(items),
                    "counts": result.counts(),
                    "items": items,
                }
            )
            return
        table(
            ["occurrence", "status", "reason", "was"],
            [[i["occurrence"], i["status"], i["reason"], i["previous_outcome"]] for i in items],
        )
        counts = ", ".join(f"{n} {status}" for status, n in result.counts().items() if n)
        sys.stdout.write(f"{trigger_id}: {len(items)} occurrences ({counts or 'none'})\n")


def _overlap(text: str) -> Overlap:
    try:
        return Overlap(text)
    except ValueError:
        raise InputError(
            f"unknown overlap {text!r}; one of: {', '.join(o.value for o in Overlap)}"
        ) from None


@app.command()
def pause(
    trigger_id: Annotated[str, typer.Argument(metavar="ID")],
    note: Annotated[str | None, typer.Option(help="Why (shown by list).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Stop new claims for a trigger (kept across applies)."""
    with errors(as_json), open_store() as store:
        trigger = services.pause(store, trigger_id, note=note, now=clock.now())
        _paused_output(trigger.id, trigger.paused, trigger.pause_note, as_json)


@app.command()
def resume(
    trigger_id: Annotated[str, typer.Argument(metavar="ID")], as_json: JsonOpt = False
) -> None:
    """Restart claims; the paused period is recorded as skipped, never launched."""
    with errors(as_json), open_store() as store:
        trigger = services.resume(store, trigger_id, now=clock.now())
        _paused_output(trigger.id, trigger.paused, trigger.pause_note, as_json)


def _paused_output(trigger_id: str, paused: bool, note: str | None, as_json: bool) -> None:
    if as_json:
        emit({"id": trigger_id, "paused": paused, "pause_note": note})
    else:
        sys.stdout.write(f"{trigger_id}: {'paused' if paused else 'resumed'}\n")


@app.command()
def status(as_json: JsonOpt = False) -> None:
    """Daemons' heartbeats, the database, ledger counts."""
    with errors(as_json), open_store() as store:
        settings = current_settings()
        now = clock.now()
        beats = store.heartbeats()
        counts = store.counts()
        triggers = [t for t in store.list_triggers() if not isinstance(t, Exception)]
        document = {
            "version": __version__,
            "database": settings.redacted_database_url(),
            "daemons": [
                {
                    "owner": b.owner,
                    "host": b.host,
                    "pid": b.pid,
                    "version": b.version,
                    "started_at": iso(b.started_at),
                    "last_tick_at": iso(b.last_tick_at),
                    "last_tick_age_s": round((now - b.last_tick_at).total_seconds(), 3),
                    "stopped_at": opt_iso(b.stopped_at),
                    "alive": b.stopped_at is None
                    and now - b.last_tick_at < settings.poll_interval * 3 + timedelta(seconds=5),
                }
                for b in beats
            ],
            "triggers": {
                "total": len(triggers),
                "enabled": sum(1 for t in triggers if t.claimable),
                "paused": sum(1 for t in triggers if t.paused),
                "retired": sum(1 for t in triggers if t.retired),
            },
            "fires": counts,
        }
        if as_json:
            emit(document)
            return
        sys.stdout.write(f"database: {document['database']}\n")
        for daemon in document["daemons"]:
            state = (
                "alive" if daemon["alive"] else ("stopped" if daemon["stopped_at"] else "silent")
            )
            age = format_duration(timedelta(seconds=int(daemon["last_tick_age_s"])))
            sys.stdout.write(f"daemon {daemon['owner']}: {state}, last tick {age} ago\n")
        shown = document["triggers"]
        sys.stdout.write(
            f"triggers: {shown['total']} ({shown['enabled']} enabled, {shown['paused']} paused, "
            f"{shown['retired']} retired)\n"
        )
        ledger = ", ".join(f"{outcome} {count}" for outcome, count in sorted(counts.items()))
        sys.stdout.write(f"ledger: {ledger or 'empty'}\n")


@db_app.command("upgrade")
def db_upgrade(as_json: JsonOpt = False) -> None:
    """Apply the schema migrations."""
    from looms_runtime.db import Database  # noqa: PLC0415
    from triggers.store.migrate import upgrade  # noqa: PLC0415

    with errors(as_json):
        settings = current_settings()
        quiet_logging(settings)
        db = Database(settings.resolved_database_url())
        try:
            state = upgrade(db)
        finally:
            db.dispose()
        if as_json:
            emit({"revision": state.current, "head": state.head})
        else:
            sys.stdout.write(f"schema at {state.current} (head {state.head})\n")
