"""Cron expressions: parsing with croniter, and their occurrences in a time zone.

croniter only ever sees naive wall-clock times, so its own DST handling never runs;
wall times become instants here, by Debian cron's rule:

- a *fixed-time* expression (neither the minute nor the hour field starts with
  `*`) fires once for a wall time that repeats, at the first of its two instants,
  and once for all of its wall times skipped by a gap, at the first instant after
  the gap;
- any other expression follows elapsed time: nothing for wall times in a gap, and
  both instants of a repeated wall time.

A day either matches the expression or not (month, day-of-month, day-of-week, `L`,
`W`, `#`), and on a matching day every combination of the expanded hour, minute and
second values fires. croniter finds matching days; the time of day is arithmetic on
those expanded values, so counting a range costs one croniter call per matching day.
"""

from __future__ import annotations

import bisect
import calendar
import threading
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from croniter import (  # noqa: TID251 - this package is where cron math is allowed
    CroniterBadDateError,
    CroniterError,
    croniter,
)

from triggers.errors import ScheduleError
from triggers.scheduler._timeline import (
    CountableSchedule,
    Span,
    ZoneTimeline,
    floor_s,
    instant,
    join,
)

_DAY_S = 86_400
_WITH_SECONDS = 6  # fields in an expression with a leading seconds field
_SECONDS_FIELD = 5  # where croniter's expansion keeps the seconds, whatever their position
_NAIVE_EPOCH = instant(0).replace(tzinfo=None)
_WALL_2001 = floor_s(datetime(2001, 1, 1, tzinfo=UTC))
# Vixie cron's meanings; croniter would turn them into H (hashed) forms when given a
# hash id, which would move `@daily` away from midnight.
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_REBOOT = (
    "@reboot is not supported: triggers fire on a clock, not at daemon start; "
    "use a systemd unit for boot-time work"
)


class CronRule:
    """A parsed expression, matched against wall-clock seconds (see `_timeline`)."""

    def __init__(self, iterator: croniter, *, expression: str, fixed_time: bool) -> None:
        self.expression = expression
        self.fixed_time = fixed_time
        expanded = iterator.expanded
        self._hours = _values(expanded[1], 24)
        self._minutes = _values(expanded[0], 60)
        has_seconds = len(expanded) > _SECONDS_FIELD
        self._seconds = _values(expanded[_SECONDS_FIELD], 60) if has_seconds else (0,)
        self._per_hour = len(self._minutes) * len(self._seconds)
        self._per_day = len(self._hours) * self._per_hour
        self._iterator = iterator
        self._lock = threading.Lock()  # croniter keeps its position in the instance
        self._matching_day: int | None = None

    def next(self, wall: int) -> int | None:
        """The first matching wall time at or after `wall`, or None (none in 50 years)."""
        day, time_of_day = divmod(wall, _DAY_S)
        if day == self._matching_day:
            index = self._count_before(time_of_day)
            if index < self._per_day:
                return day * _DAY_S + self._time_of_day(index)
        return self._croniter_next(wall)

    def summary(self, low: int, high: int) -> tuple[int, int, int | None, int] | None:
        """First, last, the one before the last, and count of matches in [low, high]."""
        first = self.next(low)
        if first is None or first > high:
            return None
        before_last: int | None = None
        last, count = first, 0
        at: int | None = first
        while at is not None and at <= high:
            day, time_of_day = divmod(at, _DAY_S)
            start = self._count_before(time_of_day)
            stop = self._count_before(min(high - day * _DAY_S, _DAY_S - 1) + 1)
            day_start = day * _DAY_S
            before_last = day_start + self._time_of_day(stop - 2) if stop - start > 1 else last
            last = day_start + self._time_of_day(stop - 1)
            count += stop - start
            at = self.next(day_start + _DAY_S)
        return first, last, before_last if count > 1 else None, count

    def _croniter_next(self, wall: int) -> int | None:
        # croniter returns the first match strictly after its start, rounded down to its
        # resolution (second or minute), so starting one second early makes `wall` itself
        # eligible. A smaller nudge would vanish in croniter's float timestamps.
        start = _NAIVE_EPOCH + timedelta(seconds=wall - 1)
        with self._lock:
            try:
                found = self._iterator.get_next(datetime, start_time=start)
            except (CroniterBadDateError, ValueError, OverflowError):
                # No match within croniter's 50-year horizon, or none before year 10000.
                return None
        at = (found - _NAIVE_EPOCH) // timedelta(seconds=1)
        self._matching_day = at // _DAY_S
        return at

    def _count_before(self, time_of_day: int) -> int:
        """How many times of day of a matching day fall before `time_of_day`."""
        hour, rest = divmod(time_of_day, 3600)
        minute, second = divmod(rest, 60)
        index = bisect.bisect_left(self._hours, hour)
        count = index * self._per_hour
        if index < len(self._hours) and self._hours[index] == hour:
            index = bisect.bisect_left(self._minutes, minute)
            count += index * len(self._seconds)
            if index < len(self._minutes) and self._minutes[index] == minute:
                count += bisect.bisect_left(self._seconds, second)
        return count

    def _time_of_day(self, index: int) -> int:
        hour = self._hours[index // self._per_hour]
        minute = self._minutes[index // len(self._seconds) % len(self._minutes)]
        return hour * 3600 + minute * 60 + self._seconds[index % len(self._seconds)]


def _values(field: Sequence[int | str], size: int) -> tuple[int, ...]:
    if "*" in field:
        return tuple(range(size))
    return tuple(sorted({int(value) for value in field}))


def parse_cron(expression: str, *, trigger_id: str, check_fires: bool = True) -> CronRule:
    """Parse a 5-field or 6-field (leading seconds) expression or a macro.

    `check_fires=False` skips the search for a first match (the costliest part): for
    expressions already validated, as stored ones are.

    Raises:
        ScheduleError: invalid syntax, `@reboot`, `R`, or an expression that never fires.
    """
    text = " ".join(expression.split())
    if text.startswith("@"):
        macro = text.lower()
        if macro == "@reboot":
            raise ScheduleError(_REBOOT, expression=expression)
        if macro not in _MACROS:
            known = ", ".join(_MACROS)
            raise ScheduleError(
                f"unknown cron macro {expression!r}; use one of {known}", expression=expression
            )
        text = _MACROS[macro]
    fields = text.split()
    if len(fields) not in (_WITH_SECONDS - 1, _WITH_SECONDS):
        noun = "field" if len(fields) == 1 else "fields"
        raise ScheduleError(
            f"cron expression {expression!r} has {len(fields)} {noun}; expected 5 (minute hour "
            "day-of-month month day-of-week) or 6 (a leading seconds field, then those 5)",
            expression=expression,
        )
    if any(item.lower().startswith("r") for field in fields for item in field.split(",")):
        raise ScheduleError(
            f"cron expression {expression!r} uses R (random), which would differ between "
            "daemons and restarts; use H for a stable spread",
            expression=expression,
        )
    try:
        iterator = croniter(
            text,
            _NAIVE_EPOCH,
            hash_id=trigger_id,
            second_at_beginning=len(fields) == _WITH_SECONDS,
        )
    except CroniterError as exc:
        raise ScheduleError(
            f"invalid cron expression {expression!r}: {exc}", expression=expression
        ) from exc
    minute, hour = fields[-5], fields[-4]  # an optional seconds field comes first
    rule = CronRule(
        iterator,
        expression=expression,
        fixed_time=not (minute.startswith("*") or hour.startswith("*")),
    )
    # Any expression without a year field that fires at all fires within a 400-year
    # Gregorian cycle, and croniter looks 50 years ahead, which covers leap days.
    if check_fires and rule.next(_WALL_2001) is None:
        raise ScheduleError(
            f"cron expression {expression!r} never fires: {_why_never(iterator)}",
            expression=expression,
        )
    return rule


def _why_never(iterator: croniter) -> str:
    days, months, weekdays = iterator.expanded[2], iterator.expanded[3], iterator.expanded[4]
    if "*" in days or "l" in days or weekdays != ["*"] or iterator.nearest_weekday:
        return "no date matches it"
    month_numbers = range(1, 13) if "*" in months else [int(month) for month in months]
    names = [calendar.month_name[month] for month in month_numbers]
    first_day = min(int(day) for day in days)
    if len(names) == 1:
        return f"{names[0]} has no day {first_day}"
    return f"none of {', '.join(names)} has a day {first_day}"


class CronOccurrences(CountableSchedule):
    """The instants of a cron rule in a zone."""

    def __init__(
        self,
        rule: CronRule,
        timeline: ZoneTimeline,
        *,
        start_at: datetime | None,
        end_at: datetime | None,
    ) -> None:
        super().__init__(start_at=start_at, end_at=end_at)
        self._rule = rule
        self._timeline = timeline

    # At a transition the wall clock jumps from `transition.at + before` (the old wall)
    # to `transition.at + after` (the new wall): forward over a gap of wall times that
    # never happen, or back over wall times that happen twice.

    def _next_after(self, after: datetime) -> datetime | None:
        segment, offset, wall = self._search_from(after)
        candidate = self._rule.next(wall)
        # Walk the constant-offset segments after `after`; almost always the first
        # candidate lies before the next transition and this is one croniter step.
        while candidate is not None:
            transition = self._timeline.next_transition(segment, candidate - offset)
            if transition is None:
                return instant(candidate - offset)
            new_wall = transition.at + transition.after
            if transition.forward:
                if candidate < new_wall:  # the candidate is inside the gap
                    if self._rule.fixed_time:
                        return instant(transition.at)
                    candidate = self._rule.next(new_wall)
            elif not self._rule.fixed_time:
                candidate = self._rule.next(new_wall)  # the repeated wall times fire again
            # A fixed-time candidate is at or after the old wall: past the repeated walls.
            segment, offset = transition.at, transition.after
        return None

    def _span(self, after: datetime, until: datetime) -> Span | None:
        segment, offset, wall = self._search_from(after)
        last = floor_s(until)
        result: Span | None = None
        while True:
            transition = self._timeline.next_transition(segment, last)
            segment_last = last if transition is None else transition.at - 1
            walls = self._rule.summary(wall, segment_last + offset)
            result = join(result, self._instants(walls, offset))
            if transition is None:
                return result
            old_wall = transition.at + transition.before
            wall = transition.at + transition.after
            if transition.forward:
                in_gap = self._rule.next(old_wall) if self._rule.fixed_time else None
                if in_gap is not None and in_gap < wall:
                    at = instant(transition.at)
                    result = join(result, Span(first_at=at, last_at=at, count=1))
                    wall += 1  # the wall time ending the gap is that same instant
            elif self._rule.fixed_time:
                wall = old_wall  # the repeated wall times fired in their first pass
            segment, offset = transition.at, transition.after

    def _search_from(self, after: datetime) -> tuple[int, int, int]:
        """The segment start, its offset, and the first wall time to consider."""
        after_s = floor_s(after)
        offset, repeated = self._timeline.offset_and_fold(after_s)
        wall = after_s + offset + 1
        if repeated and self._rule.fixed_time:
            repeat = self._timeline.previous_transition(after_s)
            if repeat is not None:
                wall = max(wall, repeat.at + repeat.before)
        return after_s, offset, wall

    @staticmethod
    def _instants(walls: tuple[int, int, int | None, int] | None, offset: int) -> Span | None:
        if walls is None:
            return None
        first, last, before_last, count = walls
        return Span(
            first_at=instant(first - offset),
            last_at=instant(last - offset),
            count=count,
            before_last_at=None if before_last is None else instant(before_last - offset),
        )
