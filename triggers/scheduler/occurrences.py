"""Schedule math: when a trigger's occurrences fall, and which of them are due.

Pure functions of their arguments: no clock, no store, no I/O. Results are aware
UTC datetimes. Third-party schedule libraries (croniter, APScheduler's trigger
classes) are used here and nowhere else.

Time zones follow Debian cron (docs/semantics.md, "Time"): a fixed-time cron
expression or a calendar wall time skipped by a spring-forward gap fires once at
the first instant after the gap, and a repeated one fires once, at its first
instant; cron expressions whose minute or hour field starts with `*` follow elapsed
time. `every` measures elapsed time and ignores wall clocks.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol
from zoneinfo import ZoneInfo

from triggers.clock import from_ms, iso, to_ms
from triggers.errors import ScheduleError
from triggers.model import (
    AfterSchedule,
    AtSchedule,
    CalendarSchedule,
    Catchup,
    CatchupPolicy,
    CronSchedule,
    EverySchedule,
    Reason,
    Schedule,
)
from triggers.scheduler._dst import DstShift, describe_shift
from triggers.scheduler._intervals import (
    CALENDAR_ANCHOR,
    AtOccurrences,
    EveryOccurrences,
    compile_calendar,
)
from triggers.scheduler._zone_offsets import (
    TICK,
    CountableSchedule,
    Span,
    ZoneOffsets,
    floor_s,
    load_zone,
)

__all__ = [
    "CALENDAR_ANCHOR",
    "CompiledSchedule",
    "DstShift",
    "DuePlan",
    "MissedRange",
    "OccurrenceSpan",
    "compile_schedule",
    "count_occurrences",
    "describe_shift",
    "dst_shift",
    "jitter_delay",
    "load_timezone",
    "next_occurrences",
    "occurrence_span",
    "plan_due",
]

_MS = timedelta(milliseconds=1)


class CompiledSchedule(Protocol):
    """A schedule ready to answer "when next?"."""

    def next_after(self, after: datetime) -> datetime | None:
        """The first occurrence strictly after `after`, or None when there is none."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class MissedRange:
    """Consecutive occurrences that are not dispatched, for one ledger row."""

    first_at: datetime
    last_at: datetime
    count: int
    reason: Reason


@dataclass(frozen=True, slots=True, kw_only=True)
class OccurrenceSpan:
    """The occurrences of a range, summarised."""

    first_at: datetime
    last_at: datetime
    count: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DuePlan:
    """What a trigger owes between its watermark and now."""

    dispatch: list[datetime]
    missed: list[MissedRange]
    watermark_at: datetime
    truncated: bool = False


def load_timezone(name: str) -> ZoneInfo:
    """The IANA zone called `name`.

    Raises:
        ScheduleError: no such zone (`unknown time zone 'Europe/Berln'`), or
            `localtime`, which would differ between hosts.
    """
    return load_zone(name)


def compile_schedule(
    schedule: Schedule,
    *,
    trigger_id: str,
    timezone: str = "UTC",
    start_at: datetime | None = None,
    end_at: datetime | None = None,
    validated: bool = False,
) -> CompiledSchedule:
    """Compile a schedule for a trigger, bounded to [start_at, end_at].

    `validated=True` (for schedules that passed validation when they were stored)
    skips checks that cost a search, such as whether a cron expression ever fires.

    `cron`: 5 fields, or 6 with a leading seconds field; macros as in Vixie cron
    (`@daily` is `0 0 * * *`); `H` is hashed from `trigger_id`, so it is stable
    across restarts and differs between triggers. `every`: `start + k * interval`
    (k >= 0), anchored at the Unix epoch by default. `calendar`: a wall time on
    dates counted from `start` (default `CALENDAR_ANCHOR`), with `day` replacing the
    anchor's day of month; `months: 1, day: 31` fires on the last day of shorter
    months. `at`: one instant. `after`: no instants (a dependent trigger's
    occurrences come from its upstream's settled runs). Naive `start`/`at` values are wall times in
    `timezone`. Occurrences are whole milliseconds.

    Raises:
        ScheduleError: an invalid expression (naming it and what is wrong), one that
            never fires, `@reboot`, an unknown zone, a non-positive or
            sub-millisecond interval, or a calendar field out of range.
    """
    offsets = ZoneOffsets(load_zone(timezone))
    if start_at is not None and end_at is not None and end_at < start_at:
        raise ScheduleError(
            f"end {iso(end_at)} is before start {iso(start_at)}", trigger_id=trigger_id
        )
    match schedule:
        case CronSchedule(expression=expression):
            # Here, not at the top: croniter's import costs every command a tenth of
            # its start-up, and only a cron schedule needs it.
            from triggers.scheduler._cron import CronOccurrences, parse_cron  # noqa: PLC0415

            rule = parse_cron(expression, trigger_id=trigger_id, check_fires=not validated)
            return CronOccurrences(rule, offsets, start_at=start_at, end_at=end_at)
        case EverySchedule(interval=interval, start=start):
            if interval <= timedelta(0) or interval % _MS:
                raise ScheduleError(
                    f"every interval must be a positive whole number of milliseconds, "
                    f"got {interval}",
                    trigger_id=trigger_id,
                )
            anchor = 0 if start is None else to_ms(offsets.as_instant(start))
            return EveryOccurrences(
                interval_ms=interval // _MS, anchor_ms=anchor, start_at=start_at, end_at=end_at
            )
        case CalendarSchedule():
            return compile_calendar(schedule, offsets, start_at=start_at, end_at=end_at)
        case AtSchedule(at=at):
            exact = from_ms(to_ms(offsets.as_instant(at)))
            wall = None if at.tzinfo is not None else floor_s(at.replace(tzinfo=UTC))
            return AtOccurrences(
                exact, start_at=start_at, end_at=end_at, wall=wall, offsets=offsets
            )
        case AfterSchedule():
            return _NoInstants()


class _NoInstants:
    """A dependent trigger's schedule: its occurrences are its upstream's runs, never
    instants of a clock, so it owes nothing at any time."""

    def next_after(self, after: datetime) -> datetime | None:
        return None


def dst_shift(schedule: CompiledSchedule, at: datetime) -> DstShift | None:
    """What a daylight-saving change did to the occurrence `at` of `schedule`: moved it
    out of a gap, merged several wall times into it, or fired a repeated wall time
    twice. None when it fell at the wall time its schedule names, as usual, and for
    `every` schedules, which measure elapsed time."""
    if isinstance(schedule, CountableSchedule):
        return schedule.dst_shift(at)
    return None


def next_occurrences(schedule: CompiledSchedule, *, after: datetime, count: int) -> list[datetime]:
    """Up to `count` occurrences strictly after `after`, ascending."""
    found: list[datetime] = []
    at = schedule.next_after(after)
    while at is not None and len(found) < count:
        found.append(at)
        at = schedule.next_after(at)
    return found


def count_occurrences(schedule: CompiledSchedule, *, after: datetime, until: datetime) -> int:
    """How many occurrences fall in (after, until], without listing them when possible."""
    span = _countable(schedule, _Budget(left=None)).span(after, until)
    return 0 if span is None else span.count


def occurrence_span(
    schedule: CompiledSchedule, *, after: datetime, until: datetime
) -> OccurrenceSpan | None:
    """The first, last and count of the occurrences in (after, until], or None.

    Counted without listing them where the schedule allows (as `count_occurrences`).
    """
    span = _countable(schedule, _Budget(left=None)).span(after, until)
    if span is None:
        return None
    return OccurrenceSpan(first_at=span.first_at, last_at=span.last_at, count=span.count)


def plan_due(
    schedule: CompiledSchedule,
    *,
    watermark_at: datetime,
    now: datetime,
    catchup: Catchup,
    limit: int = 10_000,
) -> DuePlan:
    """Split the occurrences in (watermark_at, now] into dispatched and missed.

    An occurrence less than `catchup.grace` old is dispatched under every policy.
    Older ones beyond `catchup.window` are missed (`catchup_window`); within it,
    `all` dispatches each, `latest` only the newest, `none` none (the others are
    missed, `catchup_policy`). Missed occurrences are counted without being listed
    where the schedule allows. At most `limit` occurrences are listed: when more
    remain, the plan covers the oldest part, is `truncated`, and its watermark is the
    last occurrence handled, so the caller plans again from there. A clock that went
    backwards (`now` before the watermark) gives an empty plan.

    Raises:
        ValueError: `limit` is below 1.
    """
    if limit < 1:
        raise ValueError("limit must be at least 1")
    budget = _Budget(left=limit)
    plan = _Planner(_countable(schedule, budget), watermark_at, budget)
    if now > watermark_at:
        grace_floor = _earlier(now, catchup.grace)  # younger: dispatched under every policy
        plan.miss(min(_earlier(now, catchup.window, TICK), grace_floor), Reason.CATCHUP_WINDOW)
        if catchup.policy is CatchupPolicy.ALL:
            plan.dispatch_each(grace_floor)
        elif catchup.policy is CatchupPolicy.NONE:
            plan.miss(grace_floor, Reason.CATCHUP_POLICY)
        else:
            plan.dispatch_latest(grace_floor)
        plan.dispatch_each(now)
    return plan.result(now)


def _earlier(at: datetime, *deltas: timedelta) -> datetime:
    """`at` minus `deltas`, or the earliest datetime when a "forever" delta overflows."""
    try:
        return at - sum(deltas, timedelta(0))
    except OverflowError:
        return datetime.min.replace(tzinfo=UTC)


@dataclass(slots=True, kw_only=True)
class _Budget:
    """How many more occurrences one call may list (None: no bound)."""

    left: int | None

    def take(self) -> bool:
        """Spend one listing; False when none is left."""
        if self.left is None:
            return True
        if self.left == 0:
            return False
        self.left -= 1
        return True


class _Planner:
    """The running state of one `plan_due` call; each step starts at the watermark.

    Once the budget runs out (`stopped`), every later step does nothing, so the plan
    ends at the last occurrence handled.
    """

    def __init__(self, source: CountableSchedule, watermark_at: datetime, budget: _Budget) -> None:
        self._source = source
        self._budget = budget
        self.watermark_at = watermark_at
        self.dispatch: list[datetime] = []
        self.missed: list[MissedRange] = []
        self.stopped = False

    def miss(self, until: datetime, reason: Reason) -> None:
        """Record the occurrences in (watermark, until] as missed."""
        span = None if self.stopped else self._source.span(self.watermark_at, until)
        if span is not None:
            self._miss(span.first_at, span.last_at, span.count, reason)
            self.stopped = not span.complete

    def dispatch_each(self, until: datetime) -> None:
        """Dispatch every occurrence in (watermark, until]."""
        at = None if self.stopped else self._source.next_after(self.watermark_at)
        while at is not None and at <= until:
            if not self._budget.take():
                self.stopped = True
                return
            self.dispatch.append(at)
            self.watermark_at = at
            at = self._source.next_after(at)

    def dispatch_latest(self, until: datetime) -> None:
        """Dispatch the newest occurrence in (watermark, until]; miss the others."""
        span = None if self.stopped else self._source.span(self.watermark_at, until)
        if span is None:
            return
        if not span.complete:  # the newest is still unknown: what was seen is missed
            self._miss(span.first_at, span.last_at, span.count, Reason.CATCHUP_POLICY)
            self.stopped = True
            return
        if span.before_last_at is not None:
            self._miss(span.first_at, span.before_last_at, span.count - 1, Reason.CATCHUP_POLICY)
        # No budget check: a listing span already paid for the newest, and a counting
        # one listed nothing, so this is the call's first listing.
        self._budget.take()
        self.dispatch.append(span.last_at)
        self.watermark_at = span.last_at

    def result(self, now: datetime) -> DuePlan:
        truncated = False
        if self.stopped:
            following = self._source.next_after(self.watermark_at)
            truncated = following is not None and following <= now
        return DuePlan(
            dispatch=self.dispatch,
            missed=self.missed,
            watermark_at=self.watermark_at,
            truncated=truncated,
        )

    def _miss(self, first_at: datetime, last_at: datetime, count: int, reason: Reason) -> None:
        self.missed.append(
            MissedRange(first_at=first_at, last_at=last_at, count=count, reason=reason)
        )
        self.watermark_at = last_at


class _SteppingSchedule(CountableSchedule):
    """Any `CompiledSchedule`, summarised by listing its occurrences within a budget."""

    def __init__(self, schedule: CompiledSchedule, budget: _Budget) -> None:
        super().__init__(start_at=None, end_at=None)
        self._schedule = schedule
        self._budget = budget

    def _next_after(self, after: datetime) -> datetime | None:
        return self._schedule.next_after(after)

    def _span(self, after: datetime, until: datetime) -> Span | None:
        first = at = self._schedule.next_after(after)
        if first is None or first > until or not self._budget.take():
            return None
        last, before_last, count = first, None, 1
        at = self._schedule.next_after(first)
        while at is not None and at <= until and self._budget.take():
            before_last, last, count = last, at, count + 1
            at = self._schedule.next_after(at)
        return Span(
            first_at=first,
            last_at=last,
            count=count,
            before_last_at=before_last,
            complete=at is None or at > until,
        )


def _countable(schedule: CompiledSchedule, budget: _Budget) -> CountableSchedule:
    if isinstance(schedule, CountableSchedule):
        return schedule
    return _SteppingSchedule(schedule, budget)


def jitter_delay(
    trigger_id: str, occurrence_at: datetime, jitter: timedelta, next_at: datetime | None
) -> timedelta:
    """A deterministic delay in [0, jitter) for one occurrence, below the next occurrence.

    The delay is a hash of the trigger id and the occurrence (ISO-8601 UTC), so every
    daemon and every restart picks the same one. It is strictly less than
    `next_at - occurrence_at`, so a jittered occurrence never reaches the next one.
    """
    bound = jitter if next_at is None else min(jitter, next_at - occurrence_at)
    bound_us = bound // TICK
    if bound_us <= 0:
        return timedelta(0)
    key = f"{trigger_id}\n{iso(occurrence_at)}".encode()
    fraction = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")
    return timedelta(microseconds=(fraction * bound_us) >> 64)
