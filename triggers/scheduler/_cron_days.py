"""Which dates a cron expression matches: its month, day-of-month and day-of-week fields.

Private to `triggers.scheduler._cron`, and free of croniter: croniter parses and expands
the fields, and the dates are decided here, because croniter's own date search
intersects the two day fields whenever one of them uses `W`, `#` or `L`.

Day-of-month and day-of-week combine as in Vixie cron: with OR when both are
*restricted* (neither starts with `*`, nor is `?`), otherwise with AND. Each side
matches a date on its own terms:

- day of month: the listed days (a day the month lacks matches nothing), `L` its
  last day, `15W` the weekday (Monday to Friday) nearest the 15th without leaving the
  month (a day past the month's end counts as its last day);
- day of week: the listed weekdays (0 is Sunday), `5#3` the third Friday (none when
  the month has fewer), `L5` the month's last Friday.

Days are numbered from 1970-01-01 (day 0), like the wall-clock seconds of `_zone_offsets`.
The matching days of a month depend only on its length and the weekday of its 1st,
so at most 28 such patterns are computed, once each, and a search steps a month at a
time: the Gregorian calendar repeats every 400 years (146,097 days, a whole number of
weeks), so a search that finds nothing in 4,800 months finds nothing ever.
"""

from __future__ import annotations

import bisect
import calendar
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date

_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_MAX_ORDINAL = date.max.toordinal()
_CYCLE_MONTHS = 400 * 12
_WEEK = 7
LAST = 0
"""The occurrence number of `L5` (the last Friday) among those of `5#n` (1 to 5)."""
_SATURDAY = 6
_DECEMBER = 12


@dataclass(frozen=True, slots=True, kw_only=True)
class DayFields:
    """The month and day fields, expanded; weekdays count from 0 (Sunday)."""

    months: frozenset[int]
    days: frozenset[int]
    """Days of the month listed as numbers (1 to 31)."""
    last_day: bool
    """`L` in the day-of-month field."""
    nearest_weekday: frozenset[int]
    """The `n` of `nW` in the day-of-month field."""
    weekdays: frozenset[int]
    """Weekdays listed plainly in the day-of-week field."""
    nth_weekdays: frozenset[tuple[int, int]]
    """(weekday, n) for `weekday#n`, and (weekday, 0) for `Lweekday`."""
    day_or: bool
    """Both day fields are restricted: a date matching either one matches."""


class CronCalendar:
    """The dates matched by the day fields of one expression."""

    def __init__(self, fields: DayFields) -> None:
        self._fields = fields
        # (length, weekday of the 1st) -> the days of such a month that match.
        self._patterns: dict[tuple[int, int], tuple[int, ...]] = {}
        # The last answer: every day from `asked` to `found` has that same answer (an
        # hourly rule asks about one day 24 times). One tuple, so threads that share
        # the calendar (a shape's) read it whole.
        self._last: tuple[int, int | None] = (1, 0)

    def fires(self) -> bool:
        """Whether any date ever matches (every month length and weekday of the 1st occur)."""
        for month in self._fields.months:
            lengths = {calendar.monthrange(year, month)[1] for year in (2000, 2001)}  # leap or not
            if any(self._pattern(length, first) for length in lengths for first in range(_WEEK)):
                return True
        return False

    def next_day(self, day: int) -> int | None:
        """The first matching day at or after `day`, or None (none before year 10000)."""
        asked, found = self._last
        if found is not None and asked <= day <= found:
            return found
        found = self._next_day(day)
        self._last = (day, found)
        return found

    def _next_day(self, day: int) -> int | None:
        ordinal = day + _EPOCH_ORDINAL
        if ordinal > _MAX_ORDINAL:
            return None
        start = date.fromordinal(max(ordinal, 1))
        year, month, day_of_month = start.year, start.month, start.day
        for _ in range(_CYCLE_MONTHS + 1):
            if month in self._fields.months:
                days = self._month(year, month)
                index = bisect.bisect_left(days, day_of_month)
                if index < len(days):
                    return date(year, month, days[index]).toordinal() - _EPOCH_ORDINAL
            year, month, day_of_month = (
                (year, month + 1, 1) if month < _DECEMBER else (year + 1, 1, 1)
            )
            if year > date.max.year:
                return None
        return None

    def _month(self, year: int, month: int) -> tuple[int, ...]:
        monday_first, length = calendar.monthrange(year, month)
        return self._pattern(length, (monday_first + 1) % _WEEK)

    def _pattern(self, length: int, first: int) -> tuple[int, ...]:
        key = (length, first)
        found = self._patterns.get(key)
        if found is None:
            found = self._patterns[key] = _matching_days(self._fields, length, first)
        return found


def _matching_days(fields: DayFields, length: int, first: int) -> tuple[int, ...]:
    """The matching days of a month of `length` days whose 1st falls on weekday `first`."""
    month_days = set(_by_day_of_month(fields, length, first))
    week_days = set(_by_day_of_week(fields, length, first))
    matched = month_days | week_days if fields.day_or else month_days & week_days
    return tuple(sorted(matched))


def _by_day_of_month(fields: DayFields, length: int, first: int) -> Iterable[int]:
    yield from (day for day in fields.days if day <= length)
    if fields.last_day:
        yield length
    for day in fields.nearest_weekday:
        yield _nearest_weekday(min(day, length), length, first)


def _by_day_of_week(fields: DayFields, length: int, first: int) -> Iterable[int]:
    yield from (day for day in range(1, length + 1) if (first + day - 1) % _WEEK in fields.weekdays)
    for weekday, n in fields.nth_weekdays:
        first_such = 1 + (weekday - first) % _WEEK
        if n == LAST:
            yield first_such + (length - first_such) // _WEEK * _WEEK
        elif (day := first_such + (n - 1) * _WEEK) <= length:
            yield day


def _nearest_weekday(day: int, length: int, first: int) -> int:
    """The weekday nearest `day`, staying within the month (Quartz's `W`)."""
    weekday = (first + day - 1) % _WEEK
    if weekday == _SATURDAY:
        return day - 1 if day > 1 else day + 2
    if weekday == 0:  # Sunday
        return day + 1 if day < length else day - 2
    return day
