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
    trigger_json,
)
from triggers.inspection import describe_trigger, status_report
from triggers.model import Outcome, Trigger
from triggers.step_output import attempt_outputs
from triggers.waits import waiting_runs

PAGE = 50
"""Triggers on a page of the list."""
SPARK = 20
"""Recent outcomes drawn in a trigger's sparkline."""
_SCAN = 500
"""Triggers read from the store at a time while a filter looks for a page's worth."""
STATES = ("all", "enabled", "paused", "blocked", "disabled", "retired", "failing")
EVENTS_SHOWN = 500
"""A run's events shown, the newest (`triggers runs events` reads them all)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ListFilter:
    """The trigger list's filter: words in the id or description, and a state."""

    search: str = ""
    state: str = "all"
    after: str | None = None
    """The page after this id (None: the first page)."""

    @property
    def plain(self) -> bool:
        """No search and every state: nearly every trigger read is shown."""
        return not self.search and self.state == "all"

    def wants(self, trigger: Trigger) -> bool:
        words = self.search.casefold()
        if words and words not in trigger.id.casefold():
            described = (trigger.spec.description or "").casefold()
            if words not in described:
                return False
        from triggers.inspection import trigger_state  # noqa: PLC0415

        state = trigger_state(trigger)
        if self.state in ("all", "failing"):
            return state != "retired"  # retired triggers only when asked for
        return state == self.state


def trigger_list(ctx: ApiServices, chosen: ListFilter) -> dict[str, Any]:
    """A page of triggers (by id), each as `list --json` shows it, with its sparkline.

    Reads no more than the page needs: the triggers after the cursor a page's worth at
    a time (more only while a filter leaves too few), and their recent ledger rows in
    one query per batch (`recent_records`); nothing counts or reads every trigger."""
    now = ctx.clock.now()
    active: dict[str, str] = {}
    for run in ctx.store.active_runs():
        active.setdefault(run.trigger_id, run.run_id)
    rows: list[dict[str, Any]] = []
    cursor, more = chosen.after, True
    size = PAGE + 1 if chosen.plain else _SCAN  # one more: is there a next page?
    failed = ctx.store.triggers_with(Outcome.FAILED) if chosen.state == "failing" else None
    while more and len(rows) < PAGE:
        if failed is None:
            listed = ctx.store.list_triggers(after_id=cursor, limit=size)
        else:  # only triggers that ever failed: the ledger's outcome index names them
            chunk = sorted(t for t in failed if cursor is None or t > cursor)[:size]
            listed = ctx.store.list_triggers(ids=chunk) if chunk else []
        batch = [row for row in listed if isinstance(row, Trigger)]
        more = len(listed) == size
        wanted = [trigger for trigger in batch if chosen.wants(trigger)]
        if failed is not None:  # whose newest row failed
            newest = ctx.store.recent_records([t.id for t in wanted], limit=1)
            wanted = [t for t in wanted if newest.get(t.id, [None])[0] is not None]
            wanted = [t for t in wanted if newest[t.id][0].outcome is Outcome.FAILED]
        shown = [trigger.id for trigger in wanted[: PAGE - len(rows)]]
        last = ctx.store.recent_records(shown, limit=1)
        bars = ctx.store.recent_outcomes(shown, limit=SPARK)
        for trigger in batch:
            cursor = trigger.id
            if trigger.id not in shown:
                continue
            view = services.trigger_view(
                trigger,
                now=now,
                last=last[trigger.id][0] if trigger.id in last else None,
                active_run_id=active.get(trigger.id),
            )
            rows.append(trigger_json(view) | {"sparkline": spark_json(bars.get(trigger.id, []))})
            if len(rows) == PAGE:
                more = more or trigger is not batch[-1]
                break
    return {"triggers": rows, "next_after": cursor if more and rows else None}


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
