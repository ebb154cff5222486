"""`triggers audit`: the ledger against the runtime; exit 1 with the findings."""

from __future__ import annotations

from dataclasses import asdict

import typer

from triggers.cli._app import app
from triggers.cli._common import (
    JsonOpt,
    clock,
    current_settings,
    emit,
    errors,
    table,
)


@app.command("audit")
def audit_command(as_json: JsonOpt = False) -> None:
    """Check the fire ledger against the runtime's runs; exit 1 listing what disagrees.

    Every launched or settled row must name a run in the matching state, every run of
    a trigger must have its row, no occurrence may be recorded twice, and each
    trigger's counters must equal the ledger.
    """
    from triggers.audit import RunFact, audit  # noqa: PLC0415 (only this command needs them)
    from triggers.cli._backend import open_reads  # noqa: PLC0415

    with errors(as_json), open_reads() as reads:
        settings = current_settings()
        runtime = reads.runs
        runs = [
            RunFact(
                run_id=run.run_id,
                trigger_id=str(run.attributes["trigger_id"])
                if run.attributes.get("trigger_id")
                else None,
                idempotency_key=run.idempotency_key,
                status=run.status,
                created_at=run.created_at,
                settled_at=run.settled_at,
            )
            for run in runtime.list_runs(limit=10_000_000)
        ]
        report = audit(
            reads.store,
            runs,
            lambda ids: {run_id: info.status for run_id, info in runtime.statuses(ids).items()},
            now=clock.now(),
            fire_retention=settings.fire_retention,
        )
    document = {
        "clean": report.clean,
        "rows": report.rows,
        "runs": report.runs,
        "triggers": report.triggers,
        "findings": [asdict(finding) for finding in report.findings],
    }
    if as_json:
        emit(document)
    elif report.clean:
        typer.echo(
            f"clean: {report.rows} ledger rows, {report.runs} runs, {report.triggers} triggers"
        )
    else:
        table(
            ["check", "trigger", "run", "occurrence", "finding"],
            [[f.check, f.trigger_id, f.run_id, f.occurrence, f.message] for f in report.findings],
        )
    if not report.clean:
        raise typer.Exit(1)
