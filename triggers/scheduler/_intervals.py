"""The `every`, `calendar` and `at` schedule kinds: occurrences by arithmetic.

Each occurrence is a closed-form function of its index, so "the next after t" and
"how many between t1 and t2" cost the same small, constant amount of work however
far apart the instants are. APScheduler's IntervalTrigger and
CalendarIntervalTrigger define the meanings; they are not called because they step
from the previous fire time in float seconds (not millisecond-exact, and linear in
the distance), and CalendarIntervalTrigger drops a wall time skipped by a DST gap
where this scheduler follows Debian cron.
"""

from __future__ import annotations

import calendar
from datetime import date, datetime, timedelta

from triggers.clock import from_ms, to_ms
from triggers.errors import ScheduleError
from triggers.model import CalendarSchedule
from triggers.scheduler._dst import DstShift, fixed_shift
from triggers.scheduler._zone_offsets import (
    CountableSchedule,
    Span,
    ZoneOffsets,
    floor_s,
    instant,
)

CALENDAR_ANCHOR = date(2001, 1, 1)
"""Where a calendar schedule without `start` counts from: a Monday, and the first day
of a month and of a year, so `weeks: 1` fires on Mondays and `months: 1` on the 1st."""

_DAY_S = 86_400
_ORDINAL_1970 = date(1970, 1, 1).toordinal()
_DAYS_PER_MONTH = 365.2425 / 12
_NEVER = 1 << 62
"""An instant later than any datetime: stands for an index past year 9999."""


class EveryOccurrences(CountableSchedule):
    """`anchor + k * interval` for k >= 0, in epoch milliseconds."""

    def __init__(
        self,
        *,
        interval_ms: int,
        anchor_ms: int,
        start_at: datetime | None,
        end_at: datetime | None,
    ) -> None:
        super().__init__(start_at=start_at, end_at=end_at)
        self._interval = interval_ms
        self._anchor = anchor_ms

    def _index_after(self, after_ms: int) -> int:
        # Occurrences are whole milliseconds, so "after a fraction of one" equals
        # "after the whole millisecond below it", which is what to_ms rounds to.
        if after_ms < self._anchor:
            return 0
        return (after_ms - self._anchor) // self._interval + 1

    def _next_after(self, after: datetime) -> datetime | None:
        return from_ms(self._anchor + self._index_after(to_ms(after)) * self._interval)

    def _span(self, after: datetime, until: datetime) -> Span | None:
        first = self._index_after(to_ms(after))
        last = self._index_after(to_ms(until)) - 1
        if last < first:
            return None
        last_ms = self._anchor + last * self._interval
        return Span(
            first_at=from_ms(self._anchor + first * self._interval),
            last_at=from_ms(last_ms),
            count=last - first + 1,
            before_last_at=from_ms(last_ms - self._interval) if last > first else None,
        )


class AtOccurrences(CountableSchedule):
    """A single instant; `wall` and `offsets` when it was given as a wall time."""

    def __init__(
        self,
        at: datetime,
        *,
        start_at: datetime | None,
        end_at: datetime | None,
        wall: int | None = None,
        offsets: ZoneOffsets | None = None,
    ) -> None:
        super().__init__(start_at=start_at, end_at=end_at)
        self._at = at
        self._wall = wall
        self._offsets = offsets

    def dst_shift(self, at: datetime) -> DstShift | None:
        """What a daylight-saving change did to the instant, given as a wall time."""
        if self._wall is None or self._offsets is None or at != self._at:
            return None
        return fixed_shift(self._offsets, self._wall, floor_s(at))

    def _next_after(self, after: datetime) -> datetime | None:
        return self._at if self._at > after else None

    def _span(self, after: datetime, until: datetime) -> Span | None:
        if after < self._at <= until:
            return Span(first_at=self._at, last_at=self._at, count=1)
        return None


class CalendarOccurrences(CountableSchedule):
    """A wall time on the dates `anchor + k * (months, days)`, k >= 0.

    The k-th date adds `k * months` to the anchor's month, on `day_of_month` or the
    last day of a shorter month, then `k * days` days. Each date is computed from the
    anchor, never from the previous one, so a clamped February 28 does not pull the
    following months back from the 31st.
    """

    def __init__(
        self,
        *,
        months: int,
        days: int,
        anchor: date,
        day_of_month: int,
        time_of_day_s: int,
        offsets: ZoneOffsets,
        start_at: datetime | None,
        end_at: datetime | None,
    ) -> None:
        super().__init__(start_at=start_at, end_at=end_at)
        self._months = months
        self._days = days
        self._anchor = anchor
        self._anchor_month = anchor.year * 12 + anchor.month - 1
        self._day_of_month = day_of_month
        self._time_of_day_s = time_of_day_s
        self._offsets = offsets
        self._period_days = months * _DAYS_PER_MONTH + days

    def _next_after(self, after: datetime) -> datetime | None:
        _, at_s = self._first_after(floor_s(after))
        return None if at_s >= _NEVER else instant(at_s)

    def _span(self, after: datetime, until: datetime) -> Span | None:
        first, first_s = self._first_after(floor_s(after))
        last = self._first_after(floor_s(until))[0] - 1
        if last < first:
            return None
        return Span(
            first_at=instant(first_s),
            last_at=instant(self._occurrence(last)),
            count=last - first + 1,
            before_last_at=instant(self._occurrence(last - 1)) if last > first else None,
        )

    def _first_after(self, after_s: int) -> tuple[int, int]:
        """The index and instant of the first occurrence after `after_s`."""
        offset, _ = self._offsets.offset_and_fold(after_s)
        local_day = (after_s + offset) // _DAY_S + _ORDINAL_1970
        elapsed = local_day - self._anchor.toordinal()
        # The estimate is exact for day intervals and off by at most one with months;
        # occurrences grow with the index, so a short walk corrects it.
        index = max(0, int(elapsed // self._period_days))
        at_s = self._occurrence(index)
        while at_s <= after_s:
            index += 1
            at_s = self._occurrence(index)
        while index > 0:
            earlier_s = self._occurrence(index - 1)
            if earlier_s <= after_s:
                break
            index, at_s = index - 1, earlier_s
        return index, at_s

    def dst_shift(self, at: datetime) -> DstShift | None:
        """What a daylight-saving change did to the occurrence at `at`."""
        at_s = floor_s(at)
        index, found_s = self._first_after(at_s - 1)
        wall = self._wall(index)
        if found_s != at_s or wall is None:
            return None
        return fixed_shift(self._offsets, wall, at_s)

    def _occurrence(self, index: int) -> int:
        """The instant (epoch seconds) of the index-th occurrence, or `_NEVER`."""
        wall = self._wall(index)
        return _NEVER if wall is None else self._offsets.resolve_fixed(wall)

    def _wall(self, index: int) -> int | None:
        """The wall time of the index-th occurrence, or None past year 9999."""
        year, month = divmod(self._anchor_month + index * self._months, 12)
        if year > date.max.year - 1:
            return None
        last_day = calendar.monthrange(year, month + 1)[1]
        try:
            day = date(year, month + 1, min(self._day_of_month, last_day))
            day += timedelta(days=index * self._days)
        except OverflowError:
            return None
        return (day.toordinal() - _ORDINAL_1970) * _DAY_S + self._time_of_day_s


def compile_calendar(
    schedule: CalendarSchedule,
    offsets: ZoneOffsets,
    *,
    start_at: datetime | None,
    end_at: datetime | None,
) -> CalendarOccurrences:
    """Validate a calendar schedule and compile it in the trigger's zone.

    Raises:
        ScheduleError: no positive interval, a negative one, or a field out of range.
    """
    intervals = (schedule.years, schedule.months, schedule.weeks, schedule.days)
    if min(intervals) < 0 or max(intervals) == 0:
        raise ScheduleError(
            "calendar needs a positive years, months, weeks or days interval and no negative one"
        )
    fields = (
        ("hour", schedule.hour, 0, 23),
        ("minute", schedule.minute, 0, 59),
        ("second", schedule.second, 0, 59),
        ("day", 1 if schedule.day is None else schedule.day, 1, 31),
    )
    for name, value, bottom, top in fields:
        if not bottom <= value <= top:
            raise ScheduleError(f"calendar {name} must be between {bottom} and {top}, got {value}")
    anchor = CALENDAR_ANCHOR
    if schedule.start is not None:
        start = offsets.as_instant(schedule.start)
        anchor = start.astimezone(offsets.zone).date()
        # The schedule's own start is a bound too: no occurrence before it.
        start_at = start if start_at is None else max(start_at, start)
    day_of_month = anchor.day if schedule.day is None else schedule.day
    last_day = calendar.monthrange(anchor.year, anchor.month)[1]
    anchor = anchor.replace(day=min(day_of_month, last_day))
    return CalendarOccurrences(
        months=schedule.years * 12 + schedule.months,
        days=schedule.weeks * 7 + schedule.days,
        anchor=anchor,
        day_of_month=day_of_month,
        time_of_day_s=schedule.hour * 3600 + schedule.minute * 60 + schedule.second,
        offsets=offsets,
        start_at=start_at,
        end_at=end_at,
    )
