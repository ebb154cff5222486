"""Cron expressions: parsing with croniter, and their occurrences in a time zone.

croniter parses, validates and expands the fields (names, ranges, steps, `H`); it never
searches for a date. Which dates match is `_cron_days`'s (croniter intersects the two
day fields whenever one of them uses `W`, `#` or `L`, where Vixie cron's OR applies),
and on a matching day every combination of the expanded hour, minute and second
values fires, so a time of day is arithmetic on those values.

Those are wall-clock times; they become instants here, by Debian cron's rule:

- a *fixed-time* expression (neither the minute nor the hour field starts with
  `*`) fires once for a wall time that repeats, at the first of its two instants,
  and once for all of its wall times skipped by a gap, at the first instant after
  the gap;
- any other expression follows elapsed time: nothing for wall times in a gap, and
  both instants of a repeated wall time.
"""

from __future__ import annotations

import bisect
import calendar
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import cast

from croniter import (  # noqa: TID251 - this package is where cron math is allowed
    CroniterError,
    croniter,
)
from croniter.croniter import (  # noqa: TID251 - H forms drawn by croniter's own expander
    HashExpander,
)

from triggers.errors import ScheduleError
from triggers.scheduler._cron_days import LAST, CronCalendar, DayFields
from triggers.scheduler._dst import DstShift, cron_shift
from triggers.scheduler._zone_offsets import (
    CountableSchedule,
    Span,
    ZoneOffsets,
    floor_s,
    instant,
    join,
)

_DAY_S = 86_400
_SEGMENT_S = 35 * _DAY_S  # how far a search looks for the segment's end (see `_segment`)
_WITH_SECONDS = 6  # fields in an expression with a leading seconds field
_SECONDS_FIELD = 5  # where croniter's expansion keeps the seconds, whatever their position
_DAY_OF_MONTH, _MONTH, _DAY_OF_WEEK = 2, 3, 4  # croniter's field indexes
_NAIVE_EPOCH = instant(0).replace(tzinfo=None)
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
_WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_NAMES = {name.lower(): number for number, name in enumerate(calendar.month_abbr) if name}
_NAMES.update({name: number for number, name in enumerate(_WEEKDAYS)})
_RANGE = re.compile(r"^(?P<low>[0-9a-z]+)-(?P<high>[0-9a-z]+)(?:/\d+)?(?P<nth>#\d+)?$")
_REBOOT = (
    "@reboot is not supported: triggers fire on a clock, not at daemon start; "
    "use a systemd unit for boot-time work"
)


@dataclass(frozen=True, slots=True)
class _Shape:
    """What an expression without `H` expands to: shared by every trigger that has it.

    Ten thousand triggers usually have a few hundred shapes (`H` draws one of 60
    minutes), so croniter parses each shape once and its dates are searched once."""

    hours: tuple[int, ...]
    minutes: tuple[int, ...]
    seconds: tuple[int, ...]
    days: DayFields
    calendar: CronCalendar
    fires: bool


class CronRule:
    """A parsed expression, matched against wall-clock seconds (see `_zone_offsets`)."""

    __slots__ = (
        "_days",
        "_hours",
        "_minutes",
        "_per_day",
        "_per_hour",
        "_seconds",
        "expression",
        "fixed_time",
    )

    def __init__(self, shape: _Shape, *, expression: str, fixed_time: bool) -> None:
        self.expression = expression
        self.fixed_time = fixed_time
        self._hours = shape.hours
        self._minutes = shape.minutes
        self._seconds = shape.seconds
        self._per_hour = len(self._minutes) * len(self._seconds)
        self._per_day = len(self._hours) * self._per_hour
        self._days = shape.calendar

    def next(self, wall: int) -> int | None:
        """The first matching wall time at or after `wall`, or None (none before 10000)."""
        day, time_of_day = divmod(wall, _DAY_S)
        found = self._days.next_day(day)
        if found == day:
            index = self._count_before(time_of_day)
            if index < self._per_day:
                return day * _DAY_S + self._time_of_day(index)
            found = self._days.next_day(day + 1)
        return None if found is None else found * _DAY_S + self._time_of_day(0)

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
    fields = [
        _one_value_ranges(field, days=index == len(fields) - 3)
        for index, field in enumerate(fields)
    ]
    _refuse_mixed_weekdays(fields[-1], expression)
    seconds_first = len(fields) == _WITH_SECONDS
    try:
        shape = _shape(" ".join(_unhashed(fields, trigger_id)), seconds_first=seconds_first)
    except CroniterError as exc:
        raise ScheduleError(
            f"invalid cron expression {expression!r}: {exc}", expression=expression
        ) from exc
    minute, hour = fields[-5], fields[-4]  # an optional seconds field comes first
    rule = CronRule(
        shape,
        expression=expression,
        fixed_time=not (minute.startswith("*") or hour.startswith("*")),
    )
    if check_fires and not shape.fires:
        raise ScheduleError(
            f"cron expression {expression!r} never fires: {_why_never(shape.days)}",
            expression=expression,
        )
    return rule


def _unhashed(fields: list[str], trigger_id: str) -> list[str]:
    """The fields with each `H` form replaced by the value croniter draws for this trigger.

    croniter's own expander, field by field, as its parser calls it (a leading
    seconds field is its sixth, and the draw depends on the field's index): what
    remains is an expression of values, which `_shape` parses once for all triggers."""
    if not any("h" in field for field in fields):
        return fields
    seconds_first = len(fields) == _WITH_SECONDS
    ordered = [*fields[1:], fields[0]] if seconds_first else fields
    # croniter's parser hands its expanders the class itself, as here; its stubs say an instance.
    expander = HashExpander(croniter)  # type: ignore[arg-type]
    hash_id = trigger_id.encode()
    drawn = [
        expander.expand("", index, field, hash_id=hash_id) for index, field in enumerate(ordered)
    ]
    return [drawn[-1], *drawn[:-1]] if seconds_first else drawn


@functools.lru_cache(maxsize=4096)
def _shape(text: str, *, seconds_first: bool) -> _Shape:
    """Raises: CroniterError (not cached: a bad expression is parsed again each time)."""
    iterator = croniter(text, _NAIVE_EPOCH, second_at_beginning=seconds_first)
    fields = text.split()
    days = _day_fields(iterator, day_of_month=fields[-3], day_of_week=fields[-1])
    expanded = _expanded(iterator)
    has_seconds = len(expanded) > _SECONDS_FIELD
    calendar = CronCalendar(days)
    return _Shape(
        hours=_values(expanded[1], 24),
        minutes=_values(expanded[0], 60),
        seconds=_values(expanded[_SECONDS_FIELD], 60) if has_seconds else (0,),
        days=days,
        calendar=calendar,
        fires=calendar.fires(),
    )


def _one_value_ranges(field: str, *, days: bool) -> str:
    """`field` with each range from a value to itself (`5-5`, `mon-mon#2`) as that value.

    croniter 7 reads such a range as the whole field (`0 3-3 * * *` every hour, and
    `31-L` every day), where every cron reads the one value; a step after it has
    nothing left to step over. `days`: this is the day-of-month field, where `L` ends
    a range as 31.
    """
    if "-" not in field:
        return field.lower()  # no range at all: nothing to rewrite
    names = {**_NAMES, "l": 31} if days else _NAMES
    items = field.lower().split(",")
    for index, item in enumerate(items):
        found = _RANGE.match(item)
        if found is None:
            continue
        low, high = (
            int(text) if text.isdigit() else names.get(text)
            for text in (found["low"], found["high"])
        )
        if low is not None and low == high:
            items[index] = found["low"] + (found["nth"] or "")
    return ",".join(items)


def _restricted(field: str) -> bool:
    """Vixie cron's test: a day field starting with `*` (or `?`) leaves the other in charge."""
    return not (field.startswith("*") or field == "?")


def _refuse_mixed_weekdays(day_of_week: str, expression: str) -> None:
    """Refuse plain weekdays listed with `#` or `L` forms.

    croniter refuses most such lists, but reads some (`1,1#2`, `0-6,1#2`) as their
    `#` items alone.
    """
    items = day_of_week.split(",")
    special = [item for item in items if "#" in item or item.startswith("l")]
    if special and len(special) < len(items):
        raise ScheduleError(
            f"cron expression {expression!r} mixes plain days of the week with {special[0]!r} "
            "in one field; use one kind per field (or two triggers)",
            expression=expression,
        )


def _day_fields(iterator: croniter, *, day_of_month: str, day_of_week: str) -> DayFields:
    """The month and day fields as `_cron_days` reads them."""
    expanded = _expanded(iterator)
    nearest = frozenset(iterator.nearest_weekday)
    nth = frozenset(
        (weekday, LAST if number == "l" else int(number))
        for weekday, numbers in iterator.nth_weekday_of_month.items()
        for number in numbers
    )
    listed = [value for value in expanded[_DAY_OF_MONTH] if value != "l"]
    return DayFields(
        months=_set(expanded[_MONTH], 1, 12),
        days=_set(listed, 1, 31) - nearest if listed else frozenset(),
        last_day="l" in expanded[_DAY_OF_MONTH],
        nearest_weekday=nearest,
        weekdays=frozenset() if nth else _set(expanded[_DAY_OF_WEEK], 0, 6),
        nth_weekdays=nth,
        day_or=_restricted(day_of_month) and _restricted(day_of_week),
    )


def _expanded(iterator: croniter) -> list[list[int | str]]:
    """croniter's expanded fields: numbers, with `*` and `l` as strings (its stubs
    say strings only)."""
    return cast("list[list[int | str]]", iterator.expanded)


def _set(field: Sequence[int | str], low: int, high: int) -> frozenset[int]:
    if "*" in field:
        return frozenset(range(low, high + 1))
    return frozenset(int(value) for value in field)


def _why_never(days: DayFields) -> str:
    plain_days = not (days.last_day or days.nearest_weekday)
    if days.day_or or not plain_days or days.weekdays != frozenset(range(7)):
        return "no date matches it"
    names = [calendar.month_name[month] for month in sorted(days.months)]
    first_day = min(days.days)
    if len(names) == 1:
        return f"{names[0]} has no day {first_day}"
    return f"none of {', '.join(names)} has a day {first_day}"


class CronOccurrences(CountableSchedule):
    """The instants of a cron rule in a zone."""

    def __init__(
        self,
        rule: CronRule,
        offsets: ZoneOffsets,
        *,
        start_at: datetime | None,
        end_at: datetime | None,
    ) -> None:
        super().__init__(start_at=start_at, end_at=end_at)
        self._rule = rule
        self._offsets = offsets
        # The segment last searched from: [first, until) holds no transition and no
        # repeated wall time, at this offset. Most searches start there, and need
        # neither the zone's offset nor its transitions again.
        self._segment = (0, 0, 0)

    # At a transition the wall clock jumps from `transition.at + before` (the old wall)
    # to `transition.at + after` (the new wall): forward over a gap of wall times that
    # never happen, or back over wall times that happen twice.

    def _next_after(self, after: datetime) -> datetime | None:
        after_s = floor_s(after)
        first, until, offset = self._segment
        if first <= after_s < until:
            candidate = self._rule.next(after_s + offset + 1)
            if candidate is not None and candidate - offset < until:
                return instant(candidate - offset)
        segment, offset, wall = self._search_from(after)
        candidate = self._rule.next(wall)
        # Walk the constant-offset segments after `after`; almost always the first
        # candidate lies before the next transition and this is one croniter step.
        while candidate is not None:
            transition = self._offsets.next_transition(segment, candidate - offset)
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

    def dst_shift(self, at: datetime) -> DstShift | None:
        """What a daylight-saving change did to the occurrence at `at`."""
        return cron_shift(self._rule, self._offsets, floor_s(at))

    def _span(self, after: datetime, until: datetime) -> Span | None:
        segment, offset, wall = self._search_from(after)
        last = floor_s(until)
        result: Span | None = None
        while True:
            transition = self._offsets.next_transition(segment, last)
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
        offset, repeated = self._offsets.offset_and_fold(after_s)
        wall = after_s + offset + 1
        if repeated:
            if self._rule.fixed_time:
                repeat = self._offsets.previous_transition(after_s)
                if repeat is not None:
                    wall = max(wall, repeat.at + repeat.before)
        else:
            # Past the repeated wall times (if any) of the transition that began this
            # segment, every instant up to the next transition reads this offset.
            last = after_s + _SEGMENT_S
            transition = self._offsets.next_transition(after_s, last)
            self._segment = (after_s, last + 1 if transition is None else transition.at, offset)
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
