"""What the trigger list, a trigger's page, a run's page, the audit log and status show.

Each function calls what the API's endpoint of the same facts calls (`services`,
`inspection`, the runtime's reads) and returns its document (`triggers.documents`),
with the few additions a page needs (a page of the list, the sparkline's outcomes).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from triggers import services
from triggers.api._context import ApiServices
from triggers.arguments import audit_query, history_query
from triggers.clock import iso
from triggers.documents import (
    describe_json,
    entry_json,
    event_json,
    fire_json,
    plain,
    run_json,
    status_json,
    triggers_json,
)
from triggers.errors import StoreError
from triggers.inspection import describe_trigger, status_report
from triggers.model import Outcome, Trigger
from triggers.step_output import attempt_outputs
from triggers.store.protocol import LISTED_STATES, ListedState, TriggerListQuery
from triggers.waits import open_waits, waiting_runs

PAGE = 50
"""Triggers on a page of the list."""
SPARK = 20
"""Recent outcomes drawn in a trigger's sparkline."""
STATES = LISTED_STATES
EVENTS_SHOWN = 500
"""A run's events shown, the newest (`triggers runs events` reads them all)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ListFilter:
    """The trigger list's filter: words in the id or description, and a state."""

    search: str = ""
    state: ListedState = "all"
    after: str | None = None
    """The page after this id (None: the first page)."""


def trigger_list(ctx: ApiServices, chosen: ListFilter) -> dict[str, Any]:
    """A page of triggers (by id), each as `list --json` shows it, with its sparkline.

    The store picks the page's triggers (`find_triggers`: the search and the state in
    SQL, one more than a page to tell whether another follows), then their newest rows
    in one query (`recent_records`) and their sparklines in another, all in one read
    transaction; nothing counts or reads every trigger."""
    now = ctx.clock.now()
    query = TriggerListQuery(
        search=chosen.search, state=chosen.state, after_id=chosen.after, limit=PAGE + 1
    )
    with ctx.store.reading():
        listed = ctx.store.find_triggers(query)
        more = len(listed) > PAGE
        listed = listed[:PAGE]
        shown = [row for row in listed if isinstance(row, Trigger)]
        ids = [trigger.id for trigger in shown]
        active: dict[str, str] = {}
        for run in ctx.store.active_runs():
            active.setdefault(run.trigger_id, run.run_id)
        last = ctx.store.recent_records(ids, limit=1)
        bars = ctx.store.recent_outcomes(ids, limit=SPARK)
    views = [
        services.trigger_view(
            trigger,
            now=now,
            last=last[trigger.id][0] if trigger.id in last else None,
            active_run_id=active.get(trigger.id),
        )
        for trigger in shown
    ]
    # What each shown trigger's active run waits for, as `list` says it.
    waits = open_waits(ctx.runs, [active[t.id] for t in shown if t.id in active])
    rows = [
        row | {"sparkline": spark_json(bars.get(row["id"], []))}
        for row in triggers_json(views, waits)
    ]
    return {"triggers": rows, "next_after": _row_id(listed[-1]) if more else None}


def _row_id(row: Trigger | StoreError) -> str | None:
    """A listed row's trigger id (an undecodable row's error names it)."""
    if isinstance(row, Trigger):
        return row.id
    named = row.details.get("trigger_id")
    return named if isinstance(named, str) else None


def spark_json(recent: list[tuple[datetime, Outcome]]) -> list[dict[str, Any]]:
    """A sparkline's bars, oldest first: each row's outcome and occurrence (as
    `history --json` prints them)."""
    return [{"outcome": outcome.value, "occurrence": iso(at)} for at, outcome in recent[::-1]]


def trigger_page(
    ctx: ApiServices,
    trigger_id: str,
    *,
    outcomes: list[str],
    since: str | None,
    until: str | None,
    limit: int,
) -> dict[str, Any]:
    """`describe --json` of one trigger, with its history as `history ID` filters it."""
    now = ctx.clock.now()
    found = describe_trigger(ctx.store, ctx.audit, trigger_id, now=now, fires=1, upcoming=10)
    query = history_query(
        trigger_id=trigger_id,
        outcomes=outcomes,
        since=since,
        until=until,
        limit=limit,
        now=now,
    )
    document = describe_json(found)
    document["history"] = [fire_json(record) for record in services.history(ctx.store, query)]
    document["schedule"] = services.describe(found.trigger)
    return document


def run_page(ctx: ApiServices, run_id: str) -> dict[str, Any]:
    """`runs show --json` of one run, with every attempt's output (`runs logs`), its
    newest events (`runs events`), the signal it waits for and, parked, its decisions."""
    info = ctx.runs.inspect_run(run_id)
    events = ctx.runs.get_events(run_id)
    document = run_json(info, events)
    document["attempts"] = [attempt.to_json() for attempt in attempt_outputs(events)]
    document["events"] = [event_json(event) for event in events[-EVENTS_SHOWN:]]
    document["events_hidden"] = max(len(events) - EVENTS_SHOWN, 0)
    document["waiting_for"] = waiting_signals(events)
    document["decisions"] = [
        effect
        for effect in document.get("effects", [])
        if effect["status"] in ("ambiguous", "timed_out")
    ]
    return document


def waiting_signals(events: Any) -> list[dict[str, Any]]:
    """The signals a run waits for now: each started wait of kind `signal` not finished."""
    waits: dict[str, dict[str, Any]] = {}
    for event in events:
        payload = event.payload
        if event.type == "wait_started" and payload.get("kind") == "signal":
            waits[str(payload.get("wait_id"))] = {
                "wait_id": str(payload.get("wait_id")),
                "signal": payload.get("signal"),
                "until": payload.get("until"),
                "since": event.created_at,
            }
        elif event.type == "wait_finished":
            waits.pop(str(payload.get("wait_id")), None)
    found: list[dict[str, Any]] = plain(list(waits.values()))
    return found


def audit_page(
    ctx: ApiServices,
    *,
    trigger_id: str | None,
    run_id: str | None,
    actions: list[str],
    since: str | None,
    until: str | None,
    limit: int,
) -> list[dict[str, Any]]:
    """`audit-log --json` with its filters."""
    query = audit_query(
        trigger_id=trigger_id,
        run_id=run_id,
        actions=actions,
        since=since,
        until=until,
        limit=limit,
        now=ctx.clock.now(),
    )
    return [entry_json(entry) for entry in ctx.audit.entries(query)]


def status_page(ctx: ApiServices) -> dict[str, Any]:
    """`status --json`, as the daemon answering sees it."""
    from triggers import __version__  # noqa: PLC0415

    report = status_report(
        ctx.store,
        now=ctx.clock.now(),
        poll_interval=ctx.poll_interval,
        parked_runs=ctx.runs.list_runs(status="parked", limit=1000),
        waiting_runs=waiting_runs(ctx.runs),
    )
    return status_json(report) | {"version": __version__, "database": ctx.database}
