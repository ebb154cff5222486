"""The domain: declared triggers and flows, stored triggers, occurrences and ledger rows.

Everything here is a frozen value; instants are aware UTC datetimes (`*_at`). The
schedules live in `triggers.schedules` and are exported from here too.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any, Literal

from triggers.alert_rules import AlertRule
from triggers.clock import from_ms, iso, iso_key, to_ms
from triggers.durations import format_duration
from triggers.schedules import (
    DEPENDENCY_OUTCOMES,
    AfterSchedule,
    AtSchedule,
    CalendarSchedule,
    CronSchedule,
    EverySchedule,
    Join,
    JsonValue,
    Schedule,
    Upstream,
    describe_schedule,
    schedule_from_json,
    schedule_to_json,
)


class Overlap(enum.StrEnum):
    """What an occurrence does when the trigger's previous run is still active."""

    SKIP = "skip"
    BUFFER = "buffer"
    BUFFER_ALL = "buffer_all"
    SUPERSEDE = "supersede"
    ALLOW = "allow"


class CatchupPolicy(enum.StrEnum):
    """Which of the occurrences missed while no daemon ticked are dispatched."""

    ALL = "all"
    LATEST = "latest"
    NONE = "none"


class Outcome(enum.StrEnum):
    """A fire ledger row's outcome. `launching` is the claimed, not-yet-started state."""

    LAUNCHING = "launching"
    LAUNCHED = "launched"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    SUPERSEDED = "superseded"
    SKIPPED = "skipped"
    BUFFERED = "buffered"
    MISSED = "missed"


class Reason(enum.StrEnum):
    """Why an occurrence did not launch."""

    OVERLAP = "overlap"
    BUFFER_FULL = "buffer_full"
    CATCHUP_WINDOW = "catchup_window"
    CATCHUP_POLICY = "catchup_policy"
    PAUSED = "paused"
    DISABLED = "disabled"
    MAX_RUNS = "max_runs"
    BLOCKED = "blocked"
    """The active run that kept this occurrence from launching needs an operator (it is
    parked); the ledger row names it in `blocked_by`."""
    CALENDAR = "calendar"
    """A calendar of the trigger excludes the occurrence's day (or time); the ledger row
    names the calendar and the day in `reason_detail`: `de-by (Allerheiligen)`."""
    REQUIREMENT = "requirement"
    """The trigger's `requires:` was not met: its required trigger had not settled with
    the required outcome within `since` before the occurrence. The ledger row names the
    requirement in `reason_detail`: `import completed within 6h`."""
    POOL_FULL = "pool_full"
    """The trigger's pool had no free slot: its members' active runs fill it. The ledger
    row names the pool in `reason_detail`; the trigger's overlap policy decides whether
    the occurrence is skipped or waits, buffered, for a slot."""


class Action(enum.StrEnum):
    """A claim's decision for one occurrence."""

    FIRE = "fire"
    SKIP = "skip"
    BUFFER = "buffer"
    SUPERSEDE = "supersede"
    SUPERSEDED = "superseded"  # a newer occurrence of the same batch replaces it before it starts
    DUPLICATE = "duplicate"  # already in the ledger: decided before, by us or another daemon
    IGNORED = "ignored"  # the trigger cannot take claims now (disabled, paused, retired, done)


@dataclass(frozen=True, slots=True, kw_only=True)
class Catchup:
    """Catch-up rules for occurrences that came due while no daemon ticked."""

    policy: CatchupPolicy = CatchupPolicy.LATEST
    window: timedelta = timedelta(days=1)
    grace: timedelta = timedelta(minutes=1)


WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
"""Weekday names as declarations write them, Monday first (`date.weekday()` order)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HolidayRule:
    """Public holidays of a country (and subdivision), from the `holidays` package."""

    country: str
    subdiv: str | None = None
    language: str | None = None
    """The language of the days' names; None: the country's own."""
    categories: tuple[str, ...] = ()
    """The package's holiday categories (`public`, `bank`, ...); empty: its default."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CalendarSpec:
    """A named calendar: the days (or times) it holds, each rule adding to them.

    Days are local dates in `timezone` (None: the zone of the trigger that uses it);
    `cron` expressions hold the wall times they match (at their own resolution)."""

    name: str
    holidays: HolidayRule | None = None
    dates: tuple[tuple[date, date], ...] = ()
    """Inclusive ranges of dates (a single date is a range of one)."""
    yearly: tuple[tuple[int, int, int, int], ...] = ()
    """Inclusive ranges of (month, day) to (month, day) every year; may wrap the new year."""
    weekdays: tuple[int, ...] = ()
    """0 is Monday."""
    cron: tuple[str, ...] = ()
    timezone: str | None = None

    def to_json(self) -> dict[str, JsonValue]:
        holidays = self.holidays
        return {
            "name": self.name,
            "holidays": None
            if holidays is None
            else {
                "country": holidays.country,
                "subdiv": holidays.subdiv,
                "language": holidays.language,
                "categories": list(holidays.categories),
            },
            "dates": [[first.isoformat(), last.isoformat()] for first, last in self.dates],
            "yearly": [list(span) for span in self.yearly],
            "weekdays": [WEEKDAYS[day] for day in self.weekdays],
            "cron": list(self.cron),
            "timezone": self.timezone,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, JsonValue]) -> CalendarSpec:
        holidays = data["holidays"]
        return cls(
            name=data["name"],
            holidays=None
            if holidays is None
            else HolidayRule(
                country=holidays["country"],
                subdiv=holidays["subdiv"],
                language=holidays["language"],
                categories=tuple(holidays["categories"]),
            ),
            dates=tuple(
                (date.fromisoformat(first), date.fromisoformat(last))
                for first, last in data["dates"]
            ),
            yearly=tuple((int(a), int(b), int(c), int(d)) for a, b, c, d in data["yearly"]),
            weekdays=tuple(WEEKDAYS.index(day) for day in data["weekdays"]),
            cron=tuple(data["cron"]),
            timezone=data["timezone"],
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolSpec:
    """A named pool: at most `slots` runs of all its member triggers are active at once."""

    name: str
    slots: int

    def to_json(self) -> dict[str, JsonValue]:
        return {"name": self.name, "slots": self.slots}

    @classmethod
    def from_json(cls, data: Mapping[str, JsonValue]) -> PoolSpec:
        return cls(name=data["name"], slots=int(data["slots"]))


@dataclass(frozen=True, slots=True, kw_only=True)
class Requirement:
    """`requires:`: a scheduled occurrence runs only when `trigger` settled with
    `outcome` (`completed`, `failed`, or `settled`: either) within `since` before it."""

    trigger: str
    outcome: str
    since: timedelta

    def describe(self) -> str:
        """What the ledger row of an occurrence it skips names: `import completed within 6h`."""
        return f"{self.trigger} {self.outcome} within {format_duration(self.since)}"

    def met(self, last: Mapping[str, Mapping[str, datetime]], occurrence_at: datetime) -> bool:
        """Whether `last` (each outcome's latest settlement by trigger, as the store's
        `last_settled` answers) meets it for `occurrence_at`."""
        outcomes = ("completed", "failed") if self.outcome == "settled" else (self.outcome,)
        for outcome in outcomes:
            settled_at = last.get(outcome, {}).get(self.trigger)
            if settled_at is not None and occurrence_at - self.since <= settled_at:
                return True
        return False

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "trigger": self.trigger,
            "outcome": self.outcome,
            "since_s": self.since.total_seconds(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, JsonValue]) -> Requirement:
        return cls(
            trigger=data["trigger"],
            outcome=data["outcome"],
            since=timedelta(seconds=data["since_s"]),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowSpec:
    """A declared flow: its name, its JSON definition and the digest that versions it."""

    name: str
    definition: Mapping[str, JsonValue]
    version: str

    @staticmethod
    def digest(definition: Mapping[str, JsonValue]) -> str:
        """The version of a definition: a digest of its canonical JSON."""
        canonical = json.dumps(definition, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True, kw_only=True)
class TriggerSpec:
    """A trigger as declared (YAML), without any stored state."""

    id: str
    flow: str
    flow_version: str
    schedule: Schedule
    timezone: str = "UTC"
    overlap: Overlap = Overlap.SKIP
    max_active: int = 1
    max_buffer: int = 100
    catchup: Catchup = field(default_factory=Catchup)
    jitter: timedelta = timedelta(0)
    input: JsonValue = None
    enabled: bool = True
    description: str | None = None
    start_at: datetime | None = None
    end_at: datetime | None = None
    max_runs: int | None = None
    pause_on_failure: bool = False
    alert: AlertRule | None = None
    exclude: tuple[CalendarSpec, ...] = ()
    """Calendars whose days (or times) the trigger does not fire on."""
    only: tuple[CalendarSpec, ...] = ()
    """When given, the trigger fires only on the days (or times) of one of these."""
    pool: PoolSpec | None = None
    """The pool whose slots the trigger's runs take (and its size, so that resizing a
    pool is a revision of its members)."""
    requires: Requirement | None = None
    """A trigger its scheduled occurrences wait for (`requires:`), or None."""
    # The digest, once computed: an apply compares ten thousand of them, twice.
    _digest: str = field(default="", init=False, repr=False, compare=False)

    def to_json(self) -> dict[str, JsonValue]:
        """The canonical stored form (the digest of which decides a revision bump)."""
        stored = {
            "id": self.id,
            "flow": self.flow,
            "flow_version": self.flow_version,
            "schedule": schedule_to_json(self.schedule),
            "timezone": self.timezone,
            "overlap": self.overlap.value,
            "max_active": self.max_active,
            "max_buffer": self.max_buffer,
            "catchup": {
                "policy": self.catchup.policy.value,
                "window_s": self.catchup.window.total_seconds(),
                "grace_s": self.catchup.grace.total_seconds(),
            },
            "jitter_s": self.jitter.total_seconds(),
            "input": self.input,
            "enabled": self.enabled,
            "description": self.description,
            "start_at": _opt_ms(self.start_at),
            "end_at": _opt_ms(self.end_at),
            "max_runs": self.max_runs,
            "pause_on_failure": self.pause_on_failure,
            # Only when given, so that the digest (the revision) of a trigger without
            # calendars is what it was before calendars existed.
            **({"exclude": [c.to_json() for c in self.exclude]} if self.exclude else {}),
            **({"only": [c.to_json() for c in self.only]} if self.only else {}),
            **({"pool": self.pool.to_json()} if self.pool else {}),
            **({"requires": self.requires.to_json()} if self.requires else {}),
        }
        # Only when declared, so that the digest (the revision) of other triggers is unchanged.
        if self.alert is not None:
            stored["alert"] = self.alert.to_json()
        return stored

    @property
    def calendars(self) -> tuple[CalendarSpec, ...]:
        """Every calendar the trigger names, `exclude` then `only`."""
        return self.exclude + self.only

    @classmethod
    def from_json(cls, data: Mapping[str, JsonValue]) -> TriggerSpec:
        """Decode the stored form; raises KeyError/ValueError/TypeError on a bad row."""
        catchup = data["catchup"]
        return cls(
            id=data["id"],
            flow=data["flow"],
            flow_version=data["flow_version"],
            schedule=schedule_from_json(data["schedule"]),
            timezone=data["timezone"],
            overlap=Overlap(data["overlap"]),
            max_active=int(data["max_active"]),
            max_buffer=int(data["max_buffer"]),
            catchup=Catchup(
                policy=CatchupPolicy(catchup["policy"]),
                window=timedelta(seconds=catchup["window_s"]),
                grace=timedelta(seconds=catchup["grace_s"]),
            ),
            jitter=timedelta(seconds=data["jitter_s"]),
            input=data["input"],
            enabled=bool(data["enabled"]),
            description=data["description"],
            start_at=_opt_dt(data["start_at"]),
            end_at=_opt_dt(data["end_at"]),
            max_runs=data["max_runs"],
            pause_on_failure=bool(data["pause_on_failure"]),
            alert=AlertRule.from_json(data["alert"]) if data.get("alert") else None,
            exclude=tuple(CalendarSpec.from_json(c) for c in data.get("exclude", ())),
            only=tuple(CalendarSpec.from_json(c) for c in data.get("only", ())),
            pool=PoolSpec.from_json(data["pool"]) if data.get("pool") else None,
            requires=Requirement.from_json(data["requires"]) if data.get("requires") else None,
        )

    def digest(self) -> str:
        """A digest of the declaration; equal digests mean an unchanged declaration."""
        if not self._digest:
            object.__setattr__(self, "_digest", FlowSpec.digest(self.to_json()))
        return self._digest


TriggerState = Literal["enabled", "paused", "disabled", "retired", "blocked"]
"""What `Trigger.state` says (retired, then disabled, then paused, then blocked)."""


def trigger_state(*, retired: bool, enabled: bool, paused: bool, blocked: bool) -> TriggerState:
    """The one word for a trigger's state, in this order of precedence."""
    if retired:
        return "retired"
    if not enabled:
        return "disabled"
    if paused:
        return "paused"
    return "blocked" if blocked else "enabled"


@dataclass(frozen=True, slots=True, kw_only=True)
class Trigger:
    """A stored trigger: its declaration plus the state the store keeps for it."""

    spec: TriggerSpec
    revision: int
    paused: bool = False
    pause_note: str | None = None
    paused_at: datetime | None = None
    retired: bool = False
    watermark_at: datetime
    active_count: int = 0
    buffered_count: int = 0
    runs_launched: int = 0
    blocked_by: str | None = None
    """An active run of the trigger that waits for an operator (parked), if any."""
    created_at: datetime
    updated_at: datetime

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def claimable(self) -> bool:
        """Whether new scheduled occurrences may be claimed (not whether runs recover)."""
        return self.spec.enabled and not self.retired and not self.paused

    @property
    def state(self) -> TriggerState:
        """One word for the trigger's state; `blocked` when a parked run holds it."""
        return trigger_state(
            retired=self.retired,
            enabled=self.spec.enabled,
            paused=self.paused,
            blocked=bool(self.blocked_by),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class FireRecord:
    """One fire ledger row: an occurrence (or a range of them) and what became of it."""

    trigger_id: str
    occurrence_at: datetime
    outcome: Outcome
    reason: Reason | None = None
    run_id: str | None = None
    revision: int | None = None
    host: str | None = None
    claimed_at: datetime | None = None
    launched_at: datetime | None = None
    settled_at: datetime | None = None
    error: str | None = None
    last_occurrence_at: datetime | None = None
    count: int = 1
    manual_key: str = ""
    idempotency_key: str | None = None
    blocked_by: str | None = None
    """With reason `blocked`: the run that blocked this occurrence."""
    reason_detail: str | None = None
    """What the reason names: with `calendar`, the calendar and the day's name."""
    upstream_runs: tuple[str, ...] = ()
    """An `after: {all: ...}` occurrence: every upstream run it used, in the order of
    its upstreams (empty for the other forms, which use one run)."""

    @property
    def upstream_run_id(self) -> str | None:
        """A dependent trigger's occurrence: the upstream run that caused it (for
        `all:`, the run whose settlement completed the set)."""
        if self.manual_key.startswith(AFTER_KEY_PREFIX):
            return self.manual_key.removeprefix(AFTER_KEY_PREFIX)
        return None

    @property
    def upstream_run_ids(self) -> list[str]:
        """Every upstream run the occurrence used: `upstream_runs`, or the one run."""
        if self.upstream_runs:
            return list(self.upstream_runs)
        return [] if self.upstream_run_id is None else [self.upstream_run_id]

    def to_json(self) -> dict[str, Any]:
        """The row as `history --json` prints it (and `triggers.timeline` draws it)."""
        instant = _iso_or_none
        return {
            "trigger_id": self.trigger_id,
            "occurrence": iso(self.occurrence_at),
            "outcome": self.outcome.value,
            "reason": self.reason.value if self.reason else None,
            "run_id": self.run_id,
            "claimed_at": instant(self.claimed_at),
            "launched_at": instant(self.launched_at),
            "settled_at": instant(self.settled_at),
            "error": self.error,
            "last_occurrence": instant(self.last_occurrence_at),
            "count": self.count,
            "revision": self.revision,
            "host": self.host,
            "manual_key": self.manual_key or None,
            "idempotency_key": self.idempotency_key,
            "blocked_by": self.blocked_by,
            "reason_detail": self.reason_detail,
            "upstream_run_id": self.upstream_run_id,
            "upstream_run_ids": self.upstream_run_ids,
        }


def _iso_or_none(value: datetime | None) -> str | None:
    return None if value is None else iso(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunStatus:
    """What the runner says of a run."""

    state: Literal["active", "completed", "failed", "cancelled", "missing"]
    error: str | None = None

    @property
    def settled(self) -> bool:
        return self.state != "active"


AFTER_KEY_PREFIX = "after:"
"""The `manual_key` of a dependent trigger's occurrence: `after:{upstream run id}`."""


def upstreams_of(spec: TriggerSpec) -> tuple[str, ...]:
    """The triggers whose settled runs `spec` follows (`after:`), none for a scheduled one."""
    return spec.schedule.triggers if isinstance(spec.schedule, AfterSchedule) else ()


def upstream_key(run_id: str) -> str:
    """The `manual_key` of the occurrence an upstream run gives a dependent trigger."""
    return f"{AFTER_KEY_PREFIX}{run_id}"


def idempotency_key(trigger_id: str, occurrence_at: datetime, manual_key: str = "") -> str:
    """The runtime key of an occurrence: `{trigger}:{ISO UTC}`, `{trigger}:manual:{key}`,
    or, for a dependent trigger's occurrence, `{trigger}:after:{upstream run id}`."""
    if manual_key.startswith(AFTER_KEY_PREFIX):
        return f"{trigger_id}:{manual_key}"
    if manual_key:
        return f"{trigger_id}:manual:{manual_key}"
    return f"{trigger_id}:{iso_key(occurrence_at)}"


def _opt_ms(instant: datetime | None) -> int | None:
    return None if instant is None else to_ms(instant)


def _opt_dt(ms: int | None) -> datetime | None:
    return None if ms is None else from_ms(ms)


__all__ = [
    "AFTER_KEY_PREFIX",
    "DEPENDENCY_OUTCOMES",
    "WEEKDAYS",
    "Action",
    "AfterSchedule",
    "AtSchedule",
    "CalendarSchedule",
    "CalendarSpec",
    "Catchup",
    "CatchupPolicy",
    "CronSchedule",
    "EverySchedule",
    "FireRecord",
    "FlowSpec",
    "HolidayRule",
    "Join",
    "JsonValue",
    "Outcome",
    "Overlap",
    "PoolSpec",
    "Reason",
    "Requirement",
    "RunStatus",
    "Schedule",
    "Trigger",
    "TriggerSpec",
    "Upstream",
    "describe_schedule",
    "idempotency_key",
    "upstream_key",
    "upstreams_of",
]
