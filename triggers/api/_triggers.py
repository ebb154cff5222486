"""`/api/v1/triggers`, `/history`, `/audit-log`: the CLI's trigger and ledger commands.

Each endpoint is the command of the same name (`list`, `describe`, `next`, `history`,
`fire`, `pause`, `resume`, `audit-log`): the same arguments, the same document as its
`--json`, the same errors. Writes are recorded in the audit log with the caller
(`api` or `api:NAME`, at its address) as the actor.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Path, Query

from triggers import actions, services
from triggers.api._context import Reader, Services, Writer
from triggers.api._routing import WRITE_ERRORS, Json, router
from triggers.api._schemas import (
    AlertRow,
    AuditRow,
    FireBody,
    Fired,
    HistoryRow,
    NextFire,
    NoteBody,
    Paused,
    PoolRow,
    TimeText,
    TriggerDescription,
    TriggerRow,
    some_of,
)
from triggers.arguments import audit_query, history_query, parse_overlap
from triggers.documents import (
    describe_json,
    entry_json,
    fired_json,
    history_json,
    next_json,
    paused_json,
    triggers_json,
)
from triggers.inspection import describe_trigger, pool_views
from triggers.model import Outcome, Trigger
from triggers.store.audit_log import ActionKind
from triggers.times import parse_time
from triggers.waits import open_waits

TriggerId = Annotated[str, Path(description="A trigger's id, as `triggers list` shows it.")]
Limit = Annotated[int, Query(ge=1, le=100_000, description="At most this many, newest first.")]
Since = Annotated[
    str | None,
    Query(description="At or after this time: ISO-8601, `now`, `-2h`, `2h ago`."),
    TimeText,
]
Until = Annotated[str | None, Query(description="At or before this time."), TimeText]
Outcomes = Annotated[
    list[str] | None,
    Query(description="Only these outcomes (repeatable)."),
    some_of(o.value for o in Outcome),
]


@router.get("/triggers", response_model=list[TriggerRow], tags=["triggers"])
def list_triggers(ctx: Services, _caller: Reader) -> Json:
    """Every trigger: schedule, zone, overlap, state, next fire, last outcome, active run
    (`triggers list --json`)."""
    found = services.list_triggers(ctx.store, now=ctx.clock.now())
    active = [view.active_run_id for view in found if view.active_run_id]
    return Json(triggers_json(found, open_waits(ctx.runs, active)))


@router.get("/pools", response_model=list[PoolRow], tags=["triggers"])
def list_pools(ctx: Services, _caller: Reader) -> Json:
    """Each pool the triggers name, with its slots and use (`pools` of `triggers status
    --json`)."""
    triggers = [row for row in ctx.store.list_triggers() if isinstance(row, Trigger)]
    return Json([pool.to_json() for pool in pool_views(ctx.store, triggers)])


@router.get("/triggers/{trigger_id}", response_model=TriggerDescription, tags=["triggers"])
def describe(
    ctx: Services,
    _caller: Reader,
    trigger_id: TriggerId,
    fires: Annotated[int, Query(ge=0, le=1000, description="The last N fires.")] = 10,
    next: Annotated[int, Query(ge=0, le=1000, description="The next N fires.")] = 5,  # noqa: A002 (the CLI's --next)
) -> Json:
    """One trigger whole: declaration, revisions, state and who changed it, last and next
    fires, operator actions (`triggers describe ID --json`)."""
    found = describe_trigger(
        ctx.store,
        ctx.audit,
        trigger_id,
        now=ctx.clock.now(),
        fires=fires,
        upcoming=next,
        alerts=ctx.alerts,
    )
    return Json(describe_json(found))


@router.get("/triggers/{trigger_id}/next", response_model=list[NextFire], tags=["triggers"])
def next_fires(
    ctx: Services,
    _caller: Reader,
    trigger_id: TriggerId,
    count: Annotated[int, Query(ge=1, le=10_000, description="How many.")] = 5,
    after: Annotated[
        str | None, Query(description="Start after this time, as if it were now."), TimeText
    ] = None,
) -> Json:
    """The next occurrences the daemon will fire, in UTC and in the trigger's zone, with
    what daylight-saving time did to them (`triggers next ID --json`)."""
    now = ctx.clock.now()
    trigger = services.require_trigger(ctx.store, trigger_id)
    # Occurrences up to the watermark are decided already (in the ledger).
    start = parse_time(after, now=now) if after is not None else max(now, trigger.watermark_at)
    found = services.upcoming(trigger.spec, trigger=trigger, after=start, count=count)
    return Json(next_json(found))


def _history(
    ctx: Services,
    trigger_id: str | None,
    outcome: list[str] | None,
    since: str | None,
    until: str | None,
    limit: int,
) -> Json:
    query = history_query(
        trigger_id=trigger_id,
        outcomes=outcome or [],
        since=since,
        until=until,
        limit=limit,
        now=ctx.clock.now(),
    )
    records = services.history(ctx.store, query)
    lives = services.history_lifecycles(ctx.store, ctx.audit, records, trigger_id=trigger_id)
    return Json([history_json(record, lives.get(record.trigger_id)) for record in records])


@router.get("/history", response_model=list[HistoryRow], tags=["history"])
def history(
    ctx: Services,
    _caller: Reader,
    outcome: Outcomes = None,
    since: Since = None,
    until: Until = None,
    limit: Limit = 50,
) -> Json:
    """The fire ledger of every trigger, newest occurrence first (`triggers history --json`)."""
    return _history(ctx, None, outcome, since, until, limit)


@router.get("/triggers/{trigger_id}/history", response_model=list[HistoryRow], tags=["history"])
def trigger_history(
    ctx: Services,
    _caller: Reader,
    trigger_id: TriggerId,
    outcome: Outcomes = None,
    since: Since = None,
    until: Until = None,
    limit: Limit = 50,
) -> Json:
    """One trigger's fire ledger, newest occurrence first (`triggers history ID --json`)."""
    return _history(ctx, trigger_id, outcome, since, until, limit)


@router.post(
    "/triggers/{trigger_id}/fire", responses=WRITE_ERRORS, response_model=Fired, tags=["operations"]
)
def fire(
    ctx: Services, caller: Writer, trigger_id: TriggerId, body: FireBody | None = None
) -> Json:
    """Fire one occurrence now (`triggers fire ID --json`); the daemon launches it at once.
    The same `key` fires once: a repeated request answers `duplicate`."""
    body = body or FireBody()
    overlap = parse_overlap(body.overlap)
    claim = actions.fire(
        ctx.store,
        ctx.audit,
        trigger_id,
        now=ctx.clock.now(),
        key=body.key,
        overlap=overlap,
        owner=ctx.owner,
        actor=caller.actor(),
        note=body.note,
        host=ctx.host,
    )
    ctx.wake()
    return Json(fired_json(claim))


@router.post(
    "/triggers/{trigger_id}/pause",
    responses=WRITE_ERRORS,
    response_model=Paused,
    tags=["operations"],
)
def pause(
    ctx: Services, caller: Writer, trigger_id: TriggerId, body: NoteBody | None = None
) -> Json:
    """Stop new claims (kept across applies) (`triggers pause ID --json`)."""
    trigger = actions.pause(
        ctx.store,
        ctx.audit,
        trigger_id,
        note=(body or NoteBody()).note,
        actor=caller.actor(),
        now=ctx.clock.now(),
    )
    return Json(paused_json(trigger))


@router.post(
    "/triggers/{trigger_id}/resume",
    responses=WRITE_ERRORS,
    response_model=Paused,
    tags=["operations"],
)
def resume(
    ctx: Services, caller: Writer, trigger_id: TriggerId, body: NoteBody | None = None
) -> Json:
    """Restart claims; the paused period is recorded as skipped (`triggers resume ID --json`)."""
    trigger = actions.resume(
        ctx.store,
        ctx.audit,
        trigger_id,
        note=(body or NoteBody()).note,
        actor=caller.actor(),
        now=ctx.clock.now(),
    )
    return Json(paused_json(trigger))


@router.get("/audit-log", response_model=list[AuditRow], tags=["history"])
def audit_log(
    ctx: Services,
    _caller: Reader,
    trigger: Annotated[str | None, Query(description="Only actions on this trigger.")] = None,
    run: Annotated[str | None, Query(description="Only actions on this run.")] = None,
    action: Annotated[
        list[str] | None,
        Query(description="Only these actions (repeatable)."),
        some_of(a.value for a in ActionKind),
    ] = None,
    since: Since = None,
    until: Until = None,
    limit: Limit = 50,
) -> Json:
    """Who did what, when, from where and why, newest first (`triggers audit-log --json`)."""
    query = audit_query(
        trigger_id=trigger,
        run_id=run,
        actions=action or [],
        since=since,
        until=until,
        limit=limit,
        now=ctx.clock.now(),
    )
    return Json([entry_json(entry) for entry in ctx.audit.entries(query)])


AlertStatus = Annotated[
    Literal["pending", "delivered", "failed"] | None,
    Query(description="Only alerts of this status."),
]
AlertTrigger = Annotated[
    str | None, Query(description="Only this trigger's alerts.", pattern="^[^\\x00]*$")
]


@router.get("/alerts", response_model=list[AlertRow], tags=["history"])
def list_alerts(
    ctx: Services,
    _caller: Reader,
    trigger: AlertTrigger = None,
    status: AlertStatus = None,
    limit: Limit = 100,
) -> Json:
    """The alerts raised, newest first (`triggers alerts list --json`)."""
    if ctx.alerts is None:
        return Json([])
    return Json([r.to_json() for r in ctx.alerts(trigger_id=trigger, status=status, limit=limit)])
