"""The overview: what needs attention first, what runs now, and the next fires.

Each part reads what the CLI's commands read (heartbeats as `status`, the ledger as
`history`, parked runs as `runs list --status parked`, the scheduler's timetable as
`next`) and is shaped by `triggers.documents` where a document exists. No part reads
every trigger or every ledger row: with ten thousand triggers and a million rows
the page still answers in milliseconds.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from triggers.api._context import ApiServices
from triggers.clock import iso
from triggers.documents import daemon_json, fire_json
from triggers.inspection import daemon_views
from triggers.model import AFTER_KEY_PREFIX, Outcome
from triggers.store.protocol import HistoryQuery
from triggers.waits import DECISIONS

FAILING_WINDOW = timedelta(hours=24)
"""A trigger whose newest row failed within this long is listed as failing."""
LATE_AFTER = timedelta(minutes=1)
"""An occurrence claimed this long ago and still not launched (or still buffered) is late."""
SHOWN = 20
"""Rows of each list shown at most (the pages they link to show the rest)."""


def overview(ctx: ApiServices) -> dict[str, Any]:
    """The overview's document."""
    now = ctx.clock.now()
    parked = ctx.runs.list_runs(status="parked", limit=SHOWN)
    return {
        "daemons": daemons(ctx),
        "parked": [parked_json(ctx, run) for run in parked],
        "blocked": blocked(ctx, parked),
        "failing": failing(ctx),
        "late": late(ctx),
        "alerts": undelivered_alerts(ctx),
        "running": running(ctx),
        "next": next_fires(ctx),
        "now": iso(now),
    }


def daemons(ctx: ApiServices) -> list[dict[str, Any]]:
    """Every daemon's heartbeat, as `status --json` lists them."""
    beats = ctx.store.heartbeats()
    views = daemon_views(beats, now=ctx.clock.now(), poll_interval=ctx.poll_interval)
    return [daemon_json(view) for view in views]


def parked_json(ctx: ApiServices, run: Any) -> dict[str, Any]:
    """A run waiting for an operator, with the step to decide on."""
    info = ctx.runs.inspect_run(run.run_id)
    stuck = [e for e in info.effects if e.status in ("ambiguous", "timed_out", "failed")]
    return {
        "run_id": run.run_id,
        "flow": run.flow,
        "trigger_id": run.attributes.get("trigger_id"),
        "occurrence": run.attributes.get("occurrence"),
        "created_at": iso(run.created_at),
        "error": run.error,
        "step": stuck[0].effect_id if stuck else None,
        "step_status": stuck[0].status if stuck else None,
        "decisions": DECISIONS,
    }


def blocked(ctx: ApiServices, parked: list[Any]) -> list[dict[str, Any]]:
    """Triggers a parked run holds: no launch until the run is retried or cancelled."""
    found = []
    for trigger_id in dict.fromkeys(run.attributes.get("trigger_id") for run in parked):
        trigger = ctx.store.get_trigger(str(trigger_id)) if trigger_id else None
        if trigger is not None and trigger.blocked_by and not trigger.retired:
            found.append({"trigger_id": trigger.id, "blocked_by": trigger.blocked_by})
    return found


def failing(ctx: ApiServices) -> list[dict[str, Any]]:
    """Triggers whose newest ledger row failed (in the last day), newest failure first."""
    since = ctx.clock.now() - FAILING_WINDOW
    # One outcome, no `since` (a range row's bound is not indexed): the newest failed
    # rows come straight off the ledger's outcome index; the window is applied here.
    query = HistoryQuery(outcomes=frozenset({Outcome.FAILED}), limit=SHOWN * 5)
    recent = [r for r in ctx.store.history(query) if r.occurrence_at >= since]
    found = []
    for record in _first_per_trigger(recent):
        newest = ctx.store.history(HistoryQuery(trigger_id=record.trigger_id, limit=1))
        if newest and newest[0].outcome is Outcome.FAILED:
            found.append(fire_json(newest[0]))
        if len(found) == SHOWN:
            break
    return found


def late(ctx: ApiServices) -> list[dict[str, Any]]:
    """Occurrences claimed a while ago and still not launched, or still buffered."""
    until = ctx.clock.now() - LATE_AFTER
    found = []
    for outcome in (Outcome.LAUNCHING, Outcome.BUFFERED):  # one each: the outcome index
        query = HistoryQuery(outcomes=frozenset({outcome}), until=until, limit=SHOWN)
        found += ctx.store.history(query)
    found.sort(key=lambda record: record.occurrence_at, reverse=True)
    return [fire_json(record) for record in found[:SHOWN]]


FAILED_ALERTS_SHOWN_FOR = timedelta(days=1)
"""An alert that failed for good stays on the overview this long (`alerts list` keeps it)."""


def undelivered_alerts(ctx: ApiServices) -> list[dict[str, Any]]:
    """Alerts that did not reach their channel: still retried after a failed attempt,
    or failed for good in the last day; newest first."""
    if ctx.alerts is None:
        return []
    since = ctx.clock.now() - FAILED_ALERTS_SHOWN_FOR
    failed = ctx.alerts(trigger_id=None, status="failed", limit=SHOWN)
    retried = [a for a in ctx.alerts(trigger_id=None, status="pending", limit=SHOWN) if a.attempts]
    found = [a for a in failed if a.created_at >= since] + retried
    found.sort(key=lambda a: a.created_at, reverse=True)
    return [alert.to_json() for alert in found[:SHOWN]]


def running(ctx: ApiServices) -> list[dict[str, Any]]:
    """The runs the ledger holds active, oldest occurrence first."""
    active = sorted(ctx.store.active_runs(), key=lambda run: run.occurrence_at)
    return [
        {
            "trigger_id": run.trigger_id,
            "occurrence": iso(run.occurrence_at),
            "run_id": run.run_id,
            # A dependent trigger's occurrence is keyed by its upstream run, not an operator.
            "manual": bool(run.manual_key) and not run.manual_key.startswith(AFTER_KEY_PREFIX),
        }
        for run in active[:SHOWN]
    ]


def next_fires(ctx: ApiServices) -> list[dict[str, Any]] | None:
    """The scheduler's next fires (None when no scheduler runs in this process)."""
    soonest = ctx.soonest(SHOWN)
    if soonest is None:
        return None
    return [{"trigger_id": trigger_id, "fires_at": iso(at)} for at, trigger_id in soonest]


def _first_per_trigger(records: list[Any]) -> list[Any]:
    seen: dict[str, Any] = {}
    for record in records:
        seen.setdefault(record.trigger_id, record)
    return list(seen.values())
