"""What the CLI commands do, below the parsing and above the store.

Each function is one operation a command performs; the CLI parses, calls one of
these, and renders the result. Nothing here reads the environment or settings.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from triggers.clock import iso
from triggers.errors import (
    BackfillTooLargeError,
    ConfigError,
    InputError,
    InvalidTimeError,
    LedgerChangedError,
    ScheduleError,
    UnknownTriggerError,
)
from triggers.model import (
    AFTER_KEY_PREFIX,
    FireRecord,
    Overlap,
    Trigger,
    TriggerSpec,
    describe_schedule,
)
from triggers.store.protocol import (
    ApplyResult,
    Claim,
    ClaimRequest,
    Heartbeat,
    HistoryQuery,
    Reserved,
    TriggerReads,
    TriggerStore,
)

if TYPE_CHECKING:
    from triggers.declarations import Declarations
    from triggers.lifecycle import Lifecycle
    from triggers.scheduler.backfill import BackfillResult
    from triggers.scheduler.forecast import Forecast, UpcomingFire
    from triggers.scheduler.occurrences import CompiledSchedule
    from triggers.store.audit_log import AuditLog

# The scheduler's modules are imported by the functions that use them: `triggers list`
# on a store without triggers, and `--help`, never need the cron machinery.

RegisterFlow = Callable[[str, Mapping[str, Any]], str]
"""Stores a flow definition in the runtime; returns its version."""

_ATTEMPTS = 3  # re-reads when another writer moved the rows a decision was planned from
_TICK = timedelta(microseconds=1)


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
    return store.apply(declarations.triggers, now=now, source_digest=declarations.digest or None)


@dataclass(frozen=True, slots=True, kw_only=True)
class TriggerView:
    """One row of `triggers list`."""

    trigger: Trigger
    next_fire: UpcomingFire | None
    no_next_fire: str | None
    """Why there is no next fire (`paused`, `disabled`, `retired`, `ended`, `max_runs`,
    or `invalid` for a stored schedule that no longer compiles); None when there is one."""
    last: FireRecord | None
    active_run_id: str | None

    @property
    def next_fire_at(self) -> datetime | None:
        return None if self.next_fire is None else self.next_fire.occurrence_at


def list_triggers(store: TriggerReads, *, now: datetime) -> list[TriggerView]:
    """Every trigger with its next fire (or why none), last outcome and active run."""
    last = store.last_records()
    active: dict[str, str] = {}
    for run in store.active_runs():
        active.setdefault(run.trigger_id, run.run_id)
    return [
        trigger_view(row, now=now, last=last.get(row.id), active_run_id=active.get(row.id))
        for row in store.list_triggers()
        if isinstance(row, Trigger)
    ]


def trigger_view(
    trigger: Trigger, *, now: datetime, last: FireRecord | None, active_run_id: str | None
) -> TriggerView:
    """One row of `list`: the trigger with its next fire (or why none)."""
    why: str | None
    try:
        found = upcoming(
            trigger.spec,
            trigger=trigger,
            after=max(now, trigger.watermark_at),
            count=_looked_ahead(trigger.spec, 1),
        )
    except ScheduleError:
        next_fire, why = None, "invalid"
    else:
        launching = [fire for fire in found.fires if fire.excluded is None]
        next_fire = launching[0] if launching else None
        why = None if next_fire is not None or found.stop is None else found.stop.value
    return TriggerView(
        trigger=trigger,
        next_fire=next_fire,
        no_next_fire=why,
        last=last,
        active_run_id=active_run_id,
    )


def next_fire(trigger: Trigger, *, now: datetime) -> datetime | None:
    """The next occurrence the daemon will fire (None when paused, disabled, retired,
    done after `end` or `max_runs`, or when its stored schedule no longer compiles)."""
    found = upcoming_fires(trigger, now=now, until=None, limit=1)
    return found[0] if found else None


def upcoming_fires(
    trigger: Trigger, *, now: datetime, until: datetime | None, limit: int
) -> list[datetime]:
    """The occurrences the daemon will fire after `now` (and the watermark), up to
    `until` and at most `limit`, by the rules `next` follows (pause, retirement,
    `end`, what `max_runs` leaves); none when the stored schedule no longer compiles."""
    try:
        found = upcoming(
            trigger.spec,
            trigger=trigger,
            after=max(now, trigger.watermark_at),
            count=_looked_ahead(trigger.spec, limit),
        )
    except ScheduleError:
        return []
    return [
        fire.occurrence_at
        for fire in found.fires
        if fire.excluded is None and (until is None or fire.occurrence_at <= until)
    ][:limit]


def _looked_ahead(spec: TriggerSpec, count: int) -> int:
    """How many occurrences to look at for `count` fires: more when calendars leave
    some out (a fortnight's shutdown of a daily trigger, a weekend of an hourly one)."""
    return count if not spec.exclude and not spec.only else max(count * 8, 64)


def _compile(spec: TriggerSpec) -> CompiledSchedule:
    from triggers.scheduler.occurrences import compile_schedule  # noqa: PLC0415

    return compile_schedule(
        spec.schedule,
        trigger_id=spec.id,
        timezone=spec.timezone,
        start_at=spec.start_at,
        end_at=spec.end_at,
    )


def upcoming(
    spec: TriggerSpec, *, after: datetime, count: int, trigger: Trigger | None = None
) -> Forecast:
    """The next `count` occurrences after `after` the daemon will fire, by the rules of
    its timetable, each with what daylight-saving time did to it; and why none follow.

    With the stored `trigger`, its state counts (paused, retired, launches toward
    `max_runs`); without (a declarations file), the declaration alone: not paused,
    nothing launched yet.

    Raises:
        ScheduleError: the schedule does not compile.
    """
    from triggers.scheduler.forecast import forecast  # noqa: PLC0415

    return forecast(
        spec,
        _compile(spec),
        after=after,
        count=count,
        paused=trigger is not None and trigger.paused,
        retired=trigger is not None and trigger.retired,
        runs_launched=0 if trigger is None else trigger.runs_launched,
    )


def history(store: TriggerReads, query: HistoryQuery) -> list[FireRecord]:
    if query.trigger_id is not None:
        require_trigger(store, query.trigger_id)
    return store.history(query)


def history_lifecycles(
    store: TriggerReads,
    audit: AuditLog,
    records: Sequence[FireRecord],
    *,
    trigger_id: str | None = None,
) -> dict[str, Lifecycle]:
    """The lifecycle (created, retired, revived) of each trigger of `records`, and of
    `trigger_id`'s even when it has none."""
    ids = {record.trigger_id for record in records} | ({trigger_id} if trigger_id else set())
    if not ids:
        return {}
    from triggers.lifecycle import lifecycles  # noqa: PLC0415 (loaded by history alone)

    stored = [row for row in store.list_triggers(ids=sorted(ids)) if isinstance(row, Trigger)]
    return lifecycles(audit, stored)


def require_trigger(store: TriggerReads, trigger_id: str) -> Trigger:
    trigger = store.get_trigger(trigger_id)
    if trigger is None:
        known = sorted(t.id for t in store.list_triggers() if isinstance(t, Trigger))
        raise UnknownTriggerError(
            f"no trigger {trigger_id!r}" + (f"; known: {', '.join(known[:20])}" if known else ""),
            trigger_id=trigger_id,
        )
    return trigger


def claim_manual_fire(
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
    if key is not None and key.startswith(AFTER_KEY_PREFIX):
        raise InputError(
            f"a fire key may not start with {AFTER_KEY_PREFIX!r}: "
            "it names the upstream runs of dependent triggers"
        )
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


def pause_trigger(
    store: TriggerStore, trigger_id: str, *, note: str | None, now: datetime
) -> Trigger:
    require_trigger(store, trigger_id)
    return store.set_paused(trigger_id, paused=True, note=note or "paused by an operator", now=now)


def resume_trigger(store: TriggerStore, trigger_id: str, *, now: datetime) -> Trigger:
    """Resume claims. The paused period is recorded first as one `skipped` range (reason
    `paused`), so none of its occurrences launches on resume."""
    trigger = require_trigger(store, trigger_id)
    if not trigger.paused:
        return trigger
    _record_quiet(store, trigger, now=now)
    return store.set_paused(trigger_id, paused=False, note=None, now=now)


def _record_quiet(store: TriggerStore, trigger: Trigger, *, now: datetime) -> Trigger:
    """Record the occurrences a paused or disabled trigger let pass as a `skipped` range,
    as the daemon does at every poll; returns the trigger as it is then."""
    from triggers.scheduler.quiet import quiet_range, quiet_reason  # noqa: PLC0415

    for _attempt in range(_ATTEMPTS):
        reason = quiet_reason(trigger)
        if reason is None:
            return trigger
        found = quiet_range(
            trigger, _compile(trigger.spec), after=trigger.watermark_at, now=now, reason=reason
        )
        if found is None:
            return trigger
        [error] = store.record_ranges([found], now=now)
        trigger = require_trigger(store, trigger.id)
        if error is None:
            return trigger
    return trigger


def claim_backfill(
    store: TriggerStore,
    trigger_id: str,
    *,
    start_at: datetime,
    end_at: datetime,
    now: datetime,
    overlap: Overlap | None = None,
    max_count: int | None = None,
    owner: str,
    host: str,
) -> BackfillResult:
    """Dispatch the occurrences of a past range, `start_at` to `end_at`, both inclusive.

    Each is claimed under its scheduled key (`{trigger_id}:{ISO UTC}`), in order,
    with an already expired lease: the daemon launches them at its next pending
    pass. Running the same backfill twice launches nothing new. An occurrence whose
    ledger row launched (or is pending) is left alone (`already_decided`); one that
    was `missed` or `skipped` is carved out of its row (a range row is split, so
    every occurrence stays accounted for once) and claimed. Occurrences after the
    trigger's watermark are the scheduler's (`undecided`). Bypasses pause and the
    catch-up window; overlap is the trigger's policy as overridden by `overlap`
    (default `buffer_all`: one after another, in order, never dropped).

    Raises:
        InvalidTimeError: `end_at` is before `start_at`, or in the future.
        BackfillTooLargeError: more occurrences than `max_count` (default 1000).
        UnknownTriggerError, InputError: no such trigger, or a retired one.
    """
    from triggers.scheduler.backfill import (  # noqa: PLC0415
        BACKFILL_CAP,
        BACKFILL_MAX,
        BackfillResult,
        backfill_items,
        plan_backfill,
    )
    from triggers.scheduler.occurrences import count_occurrences  # noqa: PLC0415
    from triggers.scheduler.occurrences import next_occurrences as list_occurrences  # noqa: PLC0415

    if end_at < start_at:
        raise InvalidTimeError(
            f"backfill range ends ({iso(end_at)}) before it starts ({iso(start_at)})"
        )
    if end_at > now:
        raise InvalidTimeError(
            f"backfill covers the past: --to {iso(end_at)} is after now ({iso(now)})"
        )
    cap = BACKFILL_CAP if max_count is None else max_count
    policy = overlap or Overlap.BUFFER_ALL
    for attempt in range(_ATTEMPTS):
        trigger = require_trigger(store, trigger_id)
        if trigger.retired:
            raise InputError(f"trigger {trigger_id!r} is retired (no longer declared)")
        trigger = _record_quiet(store, trigger, now=now)
        schedule = _compile(trigger.spec)
        count = count_occurrences(schedule, after=start_at - _TICK, until=end_at)
        if count > cap:
            advice = (
                f"pass --max {count} to allow it"
                if count <= BACKFILL_MAX
                else f"backfill it in parts of at most {BACKFILL_MAX} (the most --max allows)"
            )
            raise BackfillTooLargeError(
                f"backfill of {trigger_id!r} from {iso(start_at)} to {iso(end_at)} covers "
                f"{count} occurrences, more than the cap of {cap}; {advice}",
                trigger_id=trigger_id,
                count=count,
                cap=cap,
            )
        occurrences = list_occurrences(schedule, after=start_at - _TICK, count=count)
        rows = store.history(
            HistoryQuery(
                trigger_id=trigger_id,
                since=start_at,
                until=end_at,
                limit=2 * count + 2,
                include_manual=False,
            )
        )
        plan = plan_backfill(trigger, schedule, occurrences, rows, overlap=policy)
        try:
            results = store.claim(
                plan.requests,
                splits=plan.splits,
                owner=owner,
                host=host,
                now=now,
                # Already expired: the daemon's next pending pass takes it.
                lease=timedelta(0),
            )
        except LedgerChangedError:
            if attempt == _ATTEMPTS - 1:
                raise
            continue
        return BackfillResult(
            trigger_id=trigger_id,
            start_at=start_at,
            end_at=end_at,
            overlap=policy,
            items=backfill_items(trigger, plan, results),
        )
    raise AssertionError("unreachable")  # pragma: no cover


def describe(trigger: Trigger) -> str:
    return describe_schedule(trigger.spec.schedule)


def claim_summary(claim: Claim) -> dict[str, Any]:
    action = claim.action
    return {
        "trigger_id": claim.trigger_id,
        "idempotency_key": claim.idempotency_key,
        "action": action.value,
        "reason": claim.reason.value if claim.reason else None,
        "pending_launch": isinstance(claim, Reserved),
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


def nudge_local_daemons(store: TriggerReads, *, host: str, now: datetime) -> int:
    """Wake the daemons of this host (SIGUSR1) so they launch operator claims at once.

    A daemon is signalled only when its heartbeat names a process that still runs on
    this boot (the pid and the process's start time, so a reused pid is never hit) and
    is a `triggers` process; one whose heartbeat predates that record is signalled
    only if it ticked in the last ten seconds. Daemons on other hosts launch at their
    next poll. Returns how many were woken."""
    woken = 0
    for beat in store.heartbeats():
        if beat.host != host or beat.stopped_at is not None:
            continue
        if not _is_triggers_process(beat.pid) or not _alive(beat, now):
            continue
        try:
            os.kill(beat.pid, signal.SIGUSR1)
        except OSError:
            continue
        woken += 1
    return woken


_NUDGE_FRESHNESS = timedelta(seconds=10)


def _alive(beat: Heartbeat, now: datetime) -> bool:
    # Here: the host's process table (ctypes) is for waking daemons, not for reading.
    from looms_runtime.host import ProcessId, boot_id  # noqa: PLC0415

    if beat.boot_id and beat.process_start is not None:
        process = ProcessId(boot=beat.boot_id, pid=beat.pid, started=beat.process_start)
        return beat.boot_id == boot_id() and not process.gone()
    return now - beat.last_tick_at <= _NUDGE_FRESHNESS


def _is_triggers_process(pid: int) -> bool:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"triggers" in command and b"run" in command
