"""What the CLI commands do, below the parsing and above the store.

Each function is one operation a command performs; the CLI parses, calls one of
these, and renders the result. Nothing here reads the environment or settings.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from triggers.declarations import Declarations
from triggers.errors import ConfigError, InputError, UnknownTriggerError
from triggers.model import (
    Action,
    Catchup,
    CatchupPolicy,
    FireRecord,
    Outcome,
    Overlap,
    Reason,
    Trigger,
    TriggerSpec,
    describe_schedule,
)
from triggers.scheduler.occurrences import compile_schedule, plan_due
from triggers.store.protocol import (
    ApplyResult,
    Claim,
    ClaimRequest,
    HistoryQuery,
    RangeRecord,
    TriggerStore,
)

RegisterFlow = Callable[[str, Mapping[str, Any]], str]
"""Stores a flow definition in the runtime; returns its version."""

_FOREVER = timedelta(days=365 * 200)


def apply_declarations(
    store: TriggerStore, register_flow: RegisterFlow, declarations: Declarations, *, now: datetime
) -> ApplyResult:
    """Register every flow version with the runtime, then upsert the triggers.

    Flows go first, so no stored trigger ever names a flow version the runtime
    does not know."""
    for flow in declarations.flows.values():
        version = register_flow(flow.name, flow.definition)
        if version != flow.version:
            raise ConfigError(
                f"flow {flow.name!r}: the runtime versioned it {version}, expected {flow.version}",
                flow=flow.name,
            )
    return store.apply(declarations.triggers, now=now)


@dataclass(frozen=True, slots=True, kw_only=True)
class TriggerView:
    """One row of `triggers list`."""

    trigger: Trigger
    next_fire_at: datetime | None
    last: FireRecord | None
    active_run_id: str | None


def list_triggers(store: TriggerStore, *, now: datetime) -> list[TriggerView]:
    """Every trigger with its next fire, last outcome and active run."""
    last = store.last_records()
    active: dict[str, str] = {}
    for run in store.active_runs():
        active.setdefault(run.trigger_id, run.run_id)
    views = []
    for row in store.list_triggers():
        if not isinstance(row, Trigger):
            continue
        views.append(
            TriggerView(
                trigger=row,
                next_fire_at=next_fire(row, now=now),
                last=last.get(row.id),
                active_run_id=active.get(row.id),
            )
        )
    return views


def next_fire(trigger: Trigger, *, now: datetime) -> datetime | None:
    """The next occurrence a claimable trigger will fire (None when paused, done, ...)."""
    spec = trigger.spec
    if not trigger.claimable:
        return None
    if spec.max_runs is not None and trigger.runs_launched >= spec.max_runs:
        return None
    schedule = compile_schedule(
        spec.schedule,
        trigger_id=spec.id,
        timezone=spec.timezone,
        start_at=spec.start_at,
        end_at=spec.end_at,
    )
    return schedule.next_after(max(now, trigger.watermark_at))


def next_occurrences(
    spec: TriggerSpec, *, after: datetime, count: int
) -> list[tuple[datetime, datetime]]:
    """The next `count` occurrences after `after`, as (UTC, local in the trigger's zone)."""
    schedule = compile_schedule(
        spec.schedule,
        trigger_id=spec.id,
        timezone=spec.timezone,
        start_at=spec.start_at,
        end_at=spec.end_at,
    )
    zone = ZoneInfo(spec.timezone)
    found: list[tuple[datetime, datetime]] = []
    cursor = after
    while len(found) < count:
        upcoming = schedule.next_after(cursor)
        if upcoming is None:
            break
        found.append((upcoming, upcoming.astimezone(zone)))
        cursor = upcoming
    return found


def history(store: TriggerStore, query: HistoryQuery) -> list[FireRecord]:
    if query.trigger_id is not None:
        require_trigger(store, query.trigger_id)
    return store.history(query)


def require_trigger(store: TriggerStore, trigger_id: str) -> Trigger:
    trigger = store.get_trigger(trigger_id)
    if trigger is None:
        known = sorted(t.id for t in store.list_triggers() if isinstance(t, Trigger))
        raise UnknownTriggerError(
            f"no trigger {trigger_id!r}" + (f"; known: {', '.join(known[:20])}" if known else ""),
            trigger_id=trigger_id,
        )
    return trigger


def fire(
    store: TriggerStore,
    trigger_id: str,
    *,
    now: datetime,
    key: str | None,
    overlap: Overlap | None,
    owner: str,
    host: str,
) -> Claim:
    """Claim one manual occurrence now; the daemon launches it at its next poll.

    Idempotent by `key` (default: the occurrence instant). Bypasses pause and the
    catch-up window; respects the overlap policy unless `overlap` overrides it."""
    trigger = require_trigger(store, trigger_id)
    if trigger.retired:
        raise InputError(f"trigger {trigger_id!r} is retired (no longer declared)")
    occurrence = now.replace(microsecond=now.microsecond // 1000 * 1000)
    manual_key = key or occurrence.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    request = ClaimRequest(
        trigger_id=trigger_id,
        occurrence_at=occurrence,
        expected_revision=trigger.revision,
        kind="manual",
        manual_key=manual_key,
        overlap=overlap,
    )
    # A lease that has already expired: the daemon's next pending pass takes it.
    [result] = store.claim([request], owner=owner, host=host, now=now, lease=timedelta(0))
    if isinstance(result, Exception):
        raise result
    return result


def pause(store: TriggerStore, trigger_id: str, *, note: str | None, now: datetime) -> Trigger:
    require_trigger(store, trigger_id)
    return store.set_paused(trigger_id, paused=True, note=note or "paused by an operator", now=now)


def resume(store: TriggerStore, trigger_id: str, *, now: datetime) -> Trigger:
    """Resume claims. The paused period is recorded first as one `skipped` range (reason
    `paused`), so none of its occurrences launches on resume."""
    for _attempt in range(3):
        trigger = require_trigger(store, trigger_id)
        if not trigger.paused:
            return trigger
        paused_range = _paused_range(trigger, now=now)
        if paused_range is None:
            break
        [error] = store.record_ranges([paused_range], now=now)
        if error is None:
            break
    return store.set_paused(trigger_id, paused=False, note=None, now=now)


def _paused_range(trigger: Trigger, *, now: datetime) -> RangeRecord | None:
    spec = trigger.spec
    schedule = compile_schedule(
        spec.schedule,
        trigger_id=spec.id,
        timezone=spec.timezone,
        start_at=spec.start_at,
        end_at=spec.end_at,
    )
    plan = plan_due(
        schedule,
        watermark_at=trigger.watermark_at,
        now=now,
        catchup=Catchup(policy=CatchupPolicy.NONE, window=_FOREVER, grace=timedelta(0)),
    )
    if not plan.missed:
        return None
    return RangeRecord(
        trigger_id=trigger.id,
        expected_revision=trigger.revision,
        after=trigger.watermark_at,
        first_at=plan.missed[0].first_at,
        last_at=plan.missed[-1].last_at,
        count=sum(m.count for m in plan.missed),
        outcome=Outcome.SKIPPED,
        reason=Reason.PAUSED,
    )


def describe(trigger: Trigger) -> str:
    return describe_schedule(trigger.spec.schedule)


def claim_summary(claim: Claim) -> dict[str, Any]:
    action = claim.action
    return {
        "trigger_id": claim.trigger_id,
        "idempotency_key": claim.idempotency_key,
        "action": action.value,
        "reason": claim.reason.value if claim.reason else None,
        "pending_launch": action in (Action.FIRE, Action.SUPERSEDE),
    }


def find_spec(declarations: Declarations, trigger_id: str) -> TriggerSpec:
    for spec in declarations.triggers:
        if spec.id == trigger_id:
            return spec
    known = ", ".join(sorted(s.id for s in declarations.triggers)[:20])
    raise UnknownTriggerError(
        f"no trigger {trigger_id!r} in {declarations.source}"
        + (f"; known: {known}" if known else ""),
        trigger_id=trigger_id,
    )


def specs_of(views: Sequence[TriggerView]) -> list[TriggerSpec]:
    return [view.trigger.spec for view in views]
