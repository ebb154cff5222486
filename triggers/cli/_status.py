"""`triggers status` (the service's health) and `triggers audit-log` (operator actions)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated, Any

import typer

from triggers.cli._app import app, options
from triggers.cli._backend import location, open_reads, poll_interval_setting
from triggers.cli._common import clock, errors, output_of, quiet_logging, shown
from triggers.cli._output import JsonOpt, OutputOpt, emit, listing, table
from triggers.documents import entry_json, status_json
from triggers.errors import ExitCode

if TYPE_CHECKING:
    from triggers.inspection import StatusReport
    from triggers.store.audit_log import AuditEntry


@app.command()
def status(
    every: Annotated[
        bool,
        typer.Option(
            "--all", help="Each daemon a live one replaced on its host too (one line else)."
        ),
    ] = False,
    as_json: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """The service's health: daemons (alive, stale, stopped), the database and why it is
    this one, occurrences by outcome, runs waiting for an operator or a signal.

    Exit 0 when healthy; 3 when no daemon is alive or a run waits for an operator."""
    from triggers import __version__  # noqa: PLC0415
    from triggers.inspection import status_report  # noqa: PLC0415
    from triggers.waits import waiting_runs  # noqa: PLC0415

    shape = output_of(as_json, output)
    with errors(shape):
        found, poll_interval = location(), poll_interval_setting()
        with open_reads() as reads:
            report = status_report(
                reads.store,
                now=clock.now(),
                poll_interval=poll_interval,
                parked_runs=reads.runs.list_runs(status="parked", limit=1000),
                waiting_runs=waiting_runs(reads.runs, prepare=quiet_logging),
            )
        document = status_json(report) | {
            "version": __version__,
            "database": found.redacted,
            "database_source": found.source,
        }
        if shape.machine:
            emit(document, shape)
        else:
            _status_text(document, report, every=every)
    if report.problems:
        raise typer.Exit(int(ExitCode.ATTENTION))


def _status_text(document: dict[str, Any], report: StatusReport, *, every: bool) -> None:
    from triggers.durations import format_duration  # noqa: PLC0415

    write = sys.stdout.write
    verdict = "healthy" if not report.problems else "needs attention: " + "; ".join(report.problems)
    write(f"status: {verdict}\n")
    write(f"database: {document['database']} (from {document['database_source']})\n")
    replaced: dict[str, list[str]] = {}
    for view in report.daemons:
        if view.replaced_by is not None and not every:
            replaced.setdefault(view.replaced_by, []).append(view.state)
            continue
        age = format_duration(timedelta(seconds=int(max(view.age.total_seconds(), 0))))
        successor = f", replaced by {view.replaced_by}" if view.replaced_by else ""
        write(
            f"daemon {view.beat.owner}: {view.state}, last tick {age} ago"
            f" (version {view.beat.version}){successor}\n"
        )
    for successor, states in replaced.items():
        said = ", ".join(f"{states.count(s)} {s}" for s in ("stale", "stopped") if s in states)
        write(f"earlier daemons: {len(states)} ({said}) replaced by {successor} (--all)\n")
    if not report.daemons:
        write("daemons: none has ever run on this database\n")
    counts = report.triggers
    write(
        f"triggers: {counts['total']} ({counts['enabled']} enabled, {counts['paused']} paused, "
        f"{counts['disabled']} disabled, {counts['retired']} retired, "
        f"{counts['blocked']} blocked)\n"
    )
    occurrences = ", ".join(f"{outcome} {n}" for outcome, n in sorted(report.occurrences.items()))
    write(f"occurrences: {occurrences or 'none yet'}\n")
    for pool in report.pools:
        waiting = f", {pool.waiting} waiting" if pool.waiting else ""
        write(
            f"pool {pool.name}: {pool.active} of {pool.slots} slots in use{waiting}"
            f" ({len(pool.members)} triggers)\n"
        )
    for run in report.parked_runs:
        trigger = run.attributes.get("trigger_id") or "-"
        write(f"parked run {run.run_id} (trigger {trigger}): triggers runs show {run.run_id}\n")
    from triggers.waits import waiting_text  # noqa: PLC0415

    for run, waits in report.waiting_runs:
        trigger = run.attributes.get("trigger_id") or "-"
        for wait in waits:
            text = waiting_text(run.run_id, wait, show=shown)
            write(f"run {run.run_id} (trigger {trigger}) {text}\n")


@app.command("audit-log")
def audit_log(
    trigger_id: Annotated[
        str | None, typer.Option("--trigger", metavar="ID", help="Only actions on this trigger.")
    ] = None,
    run_id: Annotated[
        str | None, typer.Option("--run", metavar="RUN_ID", help="Only actions on this run.")
    ] = None,
    action: Annotated[
        list[str] | None,
        typer.Option(help="Only these actions (repeatable): apply, pause, resume, fire, ..."),
    ] = None,
    since: Annotated[str | None, typer.Option(help="At or after this time (`1d ago`).")] = None,
    until: Annotated[str | None, typer.Option(help="At or before this time.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=100_000)] = 50,
    as_json: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Who did what, when, from where and why: every apply, pause, resume, fire, backfill,
    and a run's cancel, retry and signal, newest first."""
    from triggers.arguments import audit_query  # noqa: PLC0415

    shape = output_of(as_json, output)
    with errors(shape):
        query = audit_query(
            trigger_id=trigger_id,
            run_id=run_id,
            actions=action or [],
            since=since,
            until=until,
            limit=limit + 1,  # one more than shown tells whether the list was cut
            now=clock.now(),
            local=options.local,
        )
        with open_reads() as reads:
            entries = reads.audit.entries(query)
        listing(
            entries, shape, limit=limit, to_json=entry_json, to_table=_audit_table, what="actions"
        )


def _audit_table(entries: Sequence[AuditEntry]) -> None:
    table(
        ["at", "action", "trigger", "run", "by", "note", "changes"],
        [
            [
                shown(entry.at),
                entry.action.value,
                entry.trigger_id,
                entry.run_id,
                f"{entry.actor.user}@{entry.actor.host}",
                entry.note,
                _summary(entry),
            ]
            for entry in entries
        ],
    )


def _summary(entry: AuditEntry) -> str:
    """The gist of what an action changed, for a table cell."""
    changes = entry.changes
    if entry.action.value == "apply":
        diff = [f"{len(changes.get(key) or [])} {key}" for key in ("added", "changed", "retired")]
        return ", ".join(diff)
    if entry.action.value == "fire":
        return f"{changes.get('action')} {changes.get('reason') or ''}".strip()
    if entry.action.value == "backfill":
        return (
            f"{changes.get('occurrences')} occurrences {changes.get('from')}..{changes.get('to')}"
        )
    if entry.action.value == "resume" and changes.get("pause_note"):
        return f"was paused: {changes['pause_note']}"
    return ", ".join(f"{key}={value}" for key, value in changes.items() if value is not None)
