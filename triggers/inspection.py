"""What `describe`, `status` and `timeline` show: one trigger whole, the health of the
service, and the fires of a window of time.

Read-only: nothing here writes. Each function gathers from the trigger store, the
audit log and (for `status`) the runtime's parked runs, and returns plain values
the CLI renders as a table, JSON or a picture.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import TYPE_CHECKING, Any, Literal

from looms_runtime.host import ProcessId
from triggers import services
from triggers.alert_rules import AlertRecord
from triggers.dependency_links import DependencyLink, dependent_links, upstream_links
from triggers.diffs import FieldChange, declaration_view, field_changes
from triggers.errors import TriggersError
from triggers.lifecycle import Lifecycle, lifecycle
from triggers.model import FireRecord, Trigger, TriggerSpec, TriggerState
from triggers.store.audit_log import ActionKind, AuditEntry, AuditLog, AuditQuery
from triggers.store.protocol import Heartbeat, HistoryQuery, TriggerReads, silence_limit

if TYPE_CHECKING:
    from triggers.scheduler.forecast import UpcomingFire
    from triggers.timeline import Downtime, LifeMark, Timeline


@dataclass(frozen=True, slots=True, kw_only=True)
class RevisionView:
    """One revision of a declaration and what changed from the one before."""

    revision: int
    applied_at: datetime
    changes: tuple[FieldChange, ...]
    first: bool
    """The oldest revision kept: there is nothing before it to compare with."""
    applied_by: AuditEntry | None = None
    """The `apply` that made it, when a command applied it (not the daemon's own start)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TriggerDescription:
    """`triggers describe ID`."""

    trigger: Trigger
    declaration: dict[str, Any]
    state: TriggerState
    paused_by: AuditEntry | None
    """The pause in force, when an operator's `pause` made it (not `pause_on_failure`)."""
    revisions: list[RevisionView]
    last_fires: list[FireRecord]
    next_fires: list[UpcomingFire]
    no_next_fire: str | None = None
    """Why no fire follows `next_fires` (`paused`, `max_runs`, ...; see `triggers next`)."""
    active_runs: list[str]
    actions: list[AuditEntry]
    lifecycle: Lifecycle
    """When it was created, retired and revived, and by which apply."""
    alerts: list[AlertRecord] = field(default_factory=list)
    """Its newest alerts, each to one channel (none without an outbox to read)."""
    pool: PoolView | None = None
    """The trigger's pool with its use, when it names one."""
    upstreams: list[DependencyLink] = field(default_factory=list)
    """What it follows (`after:`) and waits for (`requires:`)."""
    dependents: list[DependencyLink] = field(default_factory=list)
    """The live triggers whose `after:` or `requires:` name it."""


ALERTS_DESCRIBED = 5


def describe_trigger(
    store: TriggerReads,
    audit: AuditLog,
    trigger_id: str,
    *,
    now: datetime,
    fires: int = 10,
    upcoming: int = 5,
    revisions: int = 10,
    actions: int = 10,
    alerts: Callable[..., list[AlertRecord]] | None = None,
) -> TriggerDescription:
    """Everything about one trigger (`alerts`: the outbox's `list`, for its newest
    alerts). Raises UnknownTriggerError."""
    trigger = services.require_trigger(store, trigger_id)
    applies = _applies_touching(audit, trigger_id)
    entries = audit.entries(AuditQuery(trigger_id=trigger_id, limit=actions))
    entries = sorted([*entries, *applies], key=lambda e: (e.at, e.id or 0), reverse=True)
    next_fires, no_next_fire = _upcoming(trigger, now=now, count=upcoming)
    return TriggerDescription(
        trigger=trigger,
        declaration=declaration_view(trigger.spec),
        state=trigger.state,
        paused_by=_pause_in_force(trigger, audit),
        revisions=_revisions(audit, trigger_id, revisions, applies),
        last_fires=store.history(HistoryQuery(trigger_id=trigger_id, limit=fires)),
        next_fires=next_fires,
        no_next_fire=no_next_fire,
        active_runs=[run.run_id for run in store.active_runs() if run.trigger_id == trigger_id],
        actions=entries[:actions],
        lifecycle=lifecycle(audit, trigger),
        alerts=[]
        if alerts is None
        else alerts(trigger_id=trigger_id, status=None, limit=ALERTS_DESCRIBED),
        pool=_pool_of(store, trigger),
        upstreams=upstream_links(trigger.spec),
        dependents=dependent_links(trigger.id, store.maybe_dependents(trigger.id)),
    )


def _pool_of(store: TriggerReads, trigger: Trigger) -> PoolView | None:
    pool = trigger.spec.pool
    if pool is None:
        return None
    members = [
        row
        for row in store.list_triggers()
        if isinstance(row, Trigger)
        and row.spec.pool is not None
        and row.spec.pool.name == pool.name
    ]
    return next(iter(pool_views(store, members)), None)


_APPLIES_SEARCHED = 200


def _applies_touching(audit: AuditLog, trigger_id: str) -> list[AuditEntry]:
    """The recent `apply` actions that added, changed or retired the trigger (an apply is
    recorded once, for every trigger of its file)."""
    found = []
    query = AuditQuery(actions=frozenset({ActionKind.APPLY}), limit=_APPLIES_SEARCHED)
    for entry in audit.entries(query):
        changes = entry.changes
        touched = {*changes.get("added", ()), *changes.get("retired", ())} | {
            change.get("id") for change in changes.get("changed", ()) if isinstance(change, dict)
        }
        if trigger_id in touched:
            found.append(entry)
    return found


def _pause_in_force(trigger: Trigger, audit: AuditLog) -> AuditEntry | None:
    if not trigger.paused or trigger.paused_at is None:
        return None
    found = audit.entries(
        AuditQuery(
            trigger_id=trigger.id,
            actions=frozenset({ActionKind.PAUSE}),
            since=trigger.paused_at,
            limit=1,
        )
    )
    # The store stamps the pause with the same instant the action is recorded at.
    return found[0] if found and found[0].at == trigger.paused_at else None


def _revisions(
    audit: AuditLog, trigger_id: str, limit: int, applies: Sequence[AuditEntry]
) -> list[RevisionView]:
    kept = list(audit.revisions(trigger_id, limit=limit + 1))  # one more, to diff the oldest
    by_time = {entry.at: entry for entry in applies}  # the store stamps both with one instant
    views = []
    for index, revision in enumerate(kept[:limit]):
        older = kept[index + 1] if index + 1 < len(kept) else None
        changes = () if older is None else tuple(_changes(older.declaration, revision.declaration))
        views.append(
            RevisionView(
                revision=revision.revision,
                applied_at=revision.applied_at,
                changes=changes,
                first=older is None,
                applied_by=by_time.get(revision.applied_at),
            )
        )
    return views


def _changes(old: Any, new: Any) -> list[FieldChange]:
    try:
        return field_changes(
            declaration_view(TriggerSpec.from_json(old)),
            declaration_view(TriggerSpec.from_json(new)),
        )
    except (KeyError, ValueError, TypeError, AttributeError):
        # A declaration stored by an older release: compare the stored forms as they are.
        return field_changes(old, new)


def _upcoming(
    trigger: Trigger, *, now: datetime, count: int
) -> tuple[list[UpcomingFire], str | None]:
    start = max(now, trigger.watermark_at)
    try:
        found = services.upcoming(trigger.spec, trigger=trigger, after=start, count=count)
    except TriggersError:
        return [], "invalid"
    return found.fires, None if found.stop is None else found.stop.value


DaemonState = Literal["alive", "stale", "stopped"]


def process_gone(beat: Heartbeat) -> bool:
    """True only when this host can prove the daemon's process no longer runs (same
    boot, its pid dead or reused); a beat from another host is never gone."""
    if beat.boot_id is None:
        return False
    return ProcessId(boot=beat.boot_id, pid=beat.pid, started=beat.process_start).gone()


@dataclass(frozen=True, slots=True, kw_only=True)
class DaemonView:
    """A daemon's heartbeat and what it says of the daemon now."""

    beat: Heartbeat
    state: DaemonState
    """`alive`: ticked recently; `stale`: silent without a clean stop (dead or hung);
    `stopped`: stopped cleanly. Heartbeats are deleted a while after the last tick."""
    age: timedelta
    replaced_by: str | None = None
    """`HOST:PID` of the live daemon on the same host that started after this stale or
    stopped one (a restart): `status` folds such daemons into one line."""


def daemon_views(
    beats: Sequence[Heartbeat], *, now: datetime, poll_interval: timedelta
) -> list[DaemonView]:
    """Each heartbeat judged: a daemon ticks at least every poll interval, so one
    silent for three of them (and 5 s of slack) is stale; so is one on this host whose
    process is provably gone (killed a moment ago), however fresh its last tick."""
    fresh = silence_limit(poll_interval)
    views = []
    for beat in beats:
        age = now - beat.last_tick_at
        state: DaemonState
        if beat.stopped_at is not None:
            state = "stopped"
        elif age < fresh and not process_gone(beat):
            state = "alive"
        else:
            state = "stale"
        views.append(DaemonView(beat=beat, state=state, age=age))
    return [_with_successor(view, views) for view in views]


def _with_successor(view: DaemonView, views: Sequence[DaemonView]) -> DaemonView:
    if view.state == "alive":
        return view
    later = [
        other.beat
        for other in views
        if other.state == "alive"
        and other.beat.host == view.beat.host
        and other.beat.started_at >= view.beat.started_at
    ]
    if not later:
        return view
    successor = min(later, key=lambda beat: beat.started_at)
    return DaemonView(
        beat=view.beat,
        state=view.state,
        age=view.age,
        replaced_by=f"{successor.host}:{successor.pid}",
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolView:
    """A pool as `status` shows it: its size, and the runs of its members active now."""

    name: str
    slots: int
    active: int
    waiting: int
    members: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "slots": self.slots,
            "active": self.active,
            "waiting": self.waiting,
            "members": list(self.members),
        }


def pool_views(store: TriggerReads, triggers: Sequence[Trigger]) -> list[PoolView]:
    """The pools the (not retired) triggers name, by name, with their use."""
    slots: dict[str, int] = {}
    members: dict[str, list[str]] = {}
    for trigger in triggers:
        pool = trigger.spec.pool
        if pool is None or trigger.retired:
            continue
        slots[pool.name] = min(pool.slots, slots.get(pool.name, pool.slots))
        members.setdefault(pool.name, []).append(trigger.id)
    use = store.pool_use(sorted(slots)) if slots else {}
    return [
        PoolView(
            name=name,
            slots=slots[name],
            active=use[name].active,
            waiting=use[name].waiting,
            members=tuple(sorted(members[name])),
        )
        for name in sorted(slots)
    ]


@dataclass(frozen=True, slots=True, kw_only=True)
class StatusReport:
    """`triggers status`: the service's health, as facts and one verdict."""

    daemons: list[DaemonView]
    triggers: dict[str, int]
    occurrences: dict[str, int]
    """Occurrences by outcome: a `missed` row covering ten counts ten."""
    parked_runs: list[Any]
    """Runs waiting for an operator (the runtime's `parked` runs)."""
    blocked: list[str] = field(default_factory=list)
    """Triggers a parked run holds (no new launch until it is retried or cancelled)."""
    waiting_runs: list[tuple[Any, tuple[Any, ...]]] = field(default_factory=list)
    """Runs waiting in a `sleep` or `wait_signal` step, with their waits (not a problem:
    a signal may be what someone is about to send)."""
    pools: list[PoolView] = field(default_factory=list)
    """Each pool the triggers name, with its use."""

    @property
    def alive(self) -> int:
        return sum(1 for daemon in self.daemons if daemon.state == "alive")

    @property
    def problems(self) -> list[str]:
        """Why the service needs attention, in words; empty when it is healthy."""
        found = []
        if not self.alive:
            found.append("no daemon is alive")
        if self.parked_runs:
            found.append(f"{len(self.parked_runs)} run(s) wait for an operator")
        if self.blocked:
            found.append(f"{len(self.blocked)} trigger(s) blocked by a parked run")
        return found


def status_report(
    store: TriggerReads,
    *,
    now: datetime,
    poll_interval: timedelta,
    parked_runs: Sequence[Any],
    waiting_runs: Sequence[tuple[Any, tuple[Any, ...]]] = (),
) -> StatusReport:
    """Gather `status` from the store (heartbeats, triggers, occurrence counts)."""
    triggers = [row for row in store.list_triggers() if isinstance(row, Trigger)]
    states = [trigger.state for trigger in triggers]
    return StatusReport(
        daemons=daemon_views(store.heartbeats(), now=now, poll_interval=poll_interval),
        triggers={
            "total": len(triggers),
            "enabled": sum(1 for t in triggers if t.claimable),
            "paused": states.count("paused"),
            "disabled": states.count("disabled"),
            "retired": states.count("retired"),
            "blocked": sum(1 for t in triggers if t.blocked_by and not t.retired),
        },
        occurrences=store.occurrence_counts(),
        parked_runs=list(parked_runs),
        waiting_runs=list(waiting_runs),
        blocked=sorted(t.id for t in triggers if t.blocked_by and not t.retired),
        pools=pool_views(store, triggers),
    )


UPCOMING_LIMIT = 2000
"""Fires to come drawn per trigger, at most (an every-second trigger has 3600 an hour)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TimelineReport:
    """`triggers timeline`: the picture's data, and what did not fit in it."""

    timeline: Timeline
    cut: list[str]
    """Triggers with more ledger rows in the window than the limit: only their newest
    rows are drawn."""


def timeline_report(
    store: TriggerReads,
    *,
    trigger_ids: Sequence[str],
    since: datetime,
    until: datetime,
    now: datetime,
    poll_interval: timedelta,
    limit: int,
    display_zone: tzinfo = UTC,
    audit: AuditLog | None = None,
) -> TimelineReport:
    """Gather what `triggers timeline` draws: each trigger's ledger rows in the window
    (its newest `limit`), the downtime recorded in it and the one going on now (no
    daemon alive), the fires still to come up to `until`, each trigger's zone (for
    its DST changes) and, given the audit log, when each was created, retired and
    revived. No ids: every trigger, retired ones only when the window holds rows of
    theirs or their retirement.

    Raises:
        UnknownTriggerError: an id that is not stored.
    """
    if trigger_ids:
        chosen = [services.require_trigger(store, t) for t in dict.fromkeys(trigger_ids)]
    else:
        chosen = sorted(
            (row for row in store.list_triggers() if isinstance(row, Trigger)), key=lambda t: t.id
        )
    rows: list[dict[str, Any]] = []
    cut, shown = [], []
    lives = _lifecycles(audit, chosen)
    for trigger in chosen:
        found = store.history(
            HistoryQuery(trigger_id=trigger.id, since=since, until=until, limit=limit + 1)
        )
        life = lives.get(trigger.id, [])
        if (
            trigger.retired
            and not found
            and not trigger_ids
            and not any(since <= mark.at <= until for mark in life)
        ):
            continue
        shown.append(trigger)
        if len(found) > limit:
            cut.append(trigger.id)
        rows.extend(record.to_json() for record in found[:limit])
    from triggers.timeline import Timeline  # noqa: PLC0415 (status and describe draw nothing)

    upcoming_after = max(now, since)
    timeline = Timeline(
        since=since,
        until=until,
        now=now,
        rows=rows,
        downtime=_downtime(store, since=since, until=until, now=now, poll_interval=poll_interval),
        upcoming={
            t.id: services.upcoming_fires(t, now=upcoming_after, until=until, limit=UPCOMING_LIMIT)
            for t in shown
        },
        trigger_ids=[t.id for t in shown],
        trigger_zones={t.id: t.spec.timezone for t in shown},
        display_zone=display_zone,
        lifecycle={t.id: lives[t.id] for t in shown if lives.get(t.id)},
    )
    return TimelineReport(timeline=timeline, cut=cut)


def _lifecycles(audit: AuditLog | None, triggers: Sequence[Trigger]) -> dict[str, list[LifeMark]]:
    """Per trigger, its creation, retirements and revivals that have an instant."""
    from triggers.lifecycle import lifecycles  # noqa: PLC0415 (only the timeline reads all)
    from triggers.timeline import LifeMark  # noqa: PLC0415 (status and describe draw nothing)

    if audit is None or not triggers:
        return {}
    return {
        trigger_id: [
            LifeMark(event=event.milestone.value, at=event.at)
            for event in life.events
            if event.at is not None
        ]
        for trigger_id, life in lifecycles(audit, triggers).items()
    }


def _downtime(
    store: TriggerReads,
    *,
    since: datetime,
    until: datetime,
    now: datetime,
    poll_interval: timedelta,
) -> list[Downtime]:
    """Recorded downtime, and the silence going on now when no daemon is alive."""
    from triggers.timeline import Downtime  # noqa: PLC0415 (as in `timeline_report`)

    found = [
        Downtime(started_at=down.started_at, ended_at=down.ended_at)
        for down in store.downtime(since=since, until=until)
    ]
    beats = store.heartbeats()
    if beats:
        last = max(beat.last_tick_at for beat in beats)
        if now - last > silence_limit(poll_interval) and last <= until:
            found.append(Downtime(started_at=last, ended_at=now, ongoing=True))
    return found
