"""Commands about occurrences: history (the fire ledger), fire, backfill."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer

from triggers.cli._app import app, options
from triggers.cli._backend import actor, open_reads, open_stores
from triggers.cli._common import (
    FIRE_HEADERS,
    clock,
    errors,
    fire_table_row,
    instant,
    output_of,
    with_life_events,
)
from triggers.cli._output import JsonOpt, OutputOpt, emit, listing, table
from triggers.clock import iso
from triggers.documents import fired_json, history_json

if TYPE_CHECKING:
    from triggers.model import FireRecord

IdArg = Annotated[str, typer.Argument(metavar="ID")]
NoteOpt = Annotated[str | None, typer.Option(help="Why: kept in the audit log.")]


@app.command()
def history(
    trigger_id: Annotated[str | None, typer.Argument(metavar="[ID]")] = None,
    outcome: Annotated[
        list[str] | None, typer.Option("--outcome", help="Only these outcomes (repeatable).")
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="Occurrences at or after this time (`2h ago`, ISO).")
    ] = None,
    until: Annotated[str | None, typer.Option(help="Occurrences at or before this time.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=100_000)] = 50,
    as_json: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """The fire ledger, newest occurrence first (operator actions: `triggers audit-log`)."""
    from triggers import services  # noqa: PLC0415
    from triggers.arguments import history_query  # noqa: PLC0415

    shape = output_of(as_json, output)
    with errors(shape):
        query = history_query(
            trigger_id=trigger_id,
            outcomes=outcome or [],
            since=since,
            until=until,
            limit=limit + 1,  # one more than shown tells whether the list was cut
            now=clock.now(),
            local=options.local,
        )
        with open_reads() as reads:
            records = services.history(reads.store, query)
            shown_records = records[:limit]
            lives = services.history_lifecycles(
                reads.store, reads.audit, shown_records, trigger_id=trigger_id
            )

        def rows(shown: Sequence[FireRecord]) -> list[list[Any] | str]:
            if trigger_id is None:
                return [fire_table_row(record) for record in shown]
            return with_life_events(
                trigger_id,
                shown,
                lives.get(trigger_id),
                since=query.since,
                until=query.until,
                cut=len(records) > limit,
            )

        listing(
            records,
            shape,
            limit=limit,
            to_json=lambda record: history_json(record, lives.get(record.trigger_id)),
            to_table=lambda shown: table(FIRE_HEADERS, rows(shown)),
            what="ledger rows",
        )


def _owner(host: str) -> str:
    return f"cli:{host}:{os.getpid()}"


@app.command()
def fire(
    trigger_id: IdArg,
    key: Annotated[str | None, typer.Option(help="Idempotency key (default: the time).")] = None,
    overlap: Annotated[
        str | None, typer.Option(help="Override the overlap policy for this fire.")
    ] = None,
    note: NoteOpt = None,
    as_json: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Fire one occurrence now (manual); a daemon on this host launches it at once."""
    from triggers import actions, services  # noqa: PLC0415
    from triggers.arguments import parse_overlap  # noqa: PLC0415

    shape = output_of(as_json, output)
    with errors(shape), open_stores() as stores:
        who = actor()
        claim = actions.fire(
            stores.store,
            stores.audit,
            trigger_id,
            now=clock.now(),
            key=key,
            overlap=parse_overlap(overlap),
            owner=_owner(who.host),
            actor=who,
            note=note,
        )
        services.nudge_local_daemons(stores.store, host=who.host, now=clock.now())
        summary = fired_json(claim)
        if shape.machine:
            emit(summary, shape)
        else:
            sys.stdout.write(
                f"{trigger_id}: {summary['action']}"
                + (f" ({summary['reason']})" if summary["reason"] else "")
                + f" as {claim.idempotency_key}\n"
            )


@app.command()
def backfill(
    trigger_id: IdArg,
    start: Annotated[str, typer.Option("--from", help="First instant of the range (inclusive).")],
    end: Annotated[str, typer.Option("--to", help="Last instant of the range (inclusive).")],
    max_count: Annotated[
        int | None,
        typer.Option(
            "--max", min=1, max=100_000, help="Allow up to N occurrences (default cap: 1000)."
        ),
    ] = None,
    overlap: Annotated[
        str | None, typer.Option(help="Overlap policy for these occurrences (default buffer_all).")
    ] = None,
    note: NoteOpt = None,
    as_json: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Dispatch the occurrences of a past range, in order; the daemon launches them."""
    from triggers import actions, services  # noqa: PLC0415
    from triggers.arguments import parse_overlap  # noqa: PLC0415

    shape = output_of(as_json, output)
    with errors(shape), open_stores() as stores:
        now, who = clock.now(), actor()
        start_at, end_at = instant(start, now=now), instant(end, now=now)
        result = actions.backfill(
            stores.store,
            stores.audit,
            trigger_id,
            start_at=start_at,
            end_at=end_at,
            now=now,
            overlap=parse_overlap(overlap),
            max_count=max_count,
            owner=_owner(who.host),
            actor=who,
            note=note,
        )
        services.nudge_local_daemons(stores.store, host=who.host, now=clock.now())
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
        if shape.machine:
            emit(
                {
                    "trigger_id": result.trigger_id,
                    "from": iso(result.start_at),
                    "to": iso(result.end_at),
                    "overlap": result.overlap.value,
                    "occurrences": len(items),
                    "counts": result.counts(),
                    "items": items,
                },
                shape,
            )
            return
        table(
            ["occurrence", "status", "reason", "was"],
            [[i["occurrence"], i["status"], i["reason"], i["previous_outcome"]] for i in items],
        )
        counts = ", ".join(f"{n} {status}" for status, n in result.counts().items() if n)
        sys.stdout.write(f"{trigger_id}: {len(items)} occurrences ({counts or 'none'})\n")
