"""Shared machinery of the schedule kinds: range summaries and time-zone transitions.

Private to `triggers.scheduler.occurrences`. Instants inside this module are integer
epoch seconds (`*_s`), wall-clock times (`wall`) are integer seconds of the naive local
calendar counted from 1970-01-01T00:00, and offsets are integer seconds.
"""

from __future__ import annotations

import bisect
import functools
from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from triggers.errors import ScheduleError

if TYPE_CHECKING:
    from triggers.scheduler._dst import DstShift

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
TICK = timedelta(microseconds=1)
"""The smallest step between two datetimes: turns `<` into `<=` for exclusive bounds."""

# Probing offsets once a day finds every transition as long as two of them are more
# than a day apart, which holds for every zone in the tz database.
_PROBE_S = 86_400
# Years outside this range overflow datetime arithmetic near its limits.
_FIRST_YEAR, _LAST_YEAR = 2, 9998


def instant(seconds: int) -> datetime:
    """The aware UTC datetime of epoch seconds."""
    return EPOCH + timedelta(seconds=seconds)


def floor_s(at: datetime) -> int:
    """Epoch seconds of an aware datetime, rounded down."""
    elapsed = at - EPOCH  # normalised: 0 <= seconds < 86400, microseconds >= 0
    return elapsed.days * 86_400 + elapsed.seconds


@dataclass(frozen=True, slots=True)
class Span:
    """The occurrences of a range, summarised without listing them."""

    first_at: datetime
    last_at: datetime
    count: int
    before_last_at: datetime | None = None
    """The occurrence just before `last_at`; None when `count` is 1."""
    complete: bool = True
    """False when a summary that had to enumerate stopped at its budget."""


def join(earlier: Span | None, later: Span | None) -> Span | None:
    """The summary of two adjacent ranges, `earlier` wholly before `later`."""
    if earlier is None:
        return later
    if later is None:
        return earlier
    return Span(
        first_at=earlier.first_at,
        last_at=later.last_at,
        count=earlier.count + later.count,
        before_last_at=later.before_last_at if later.count > 1 else earlier.last_at,
        complete=earlier.complete and later.complete,
    )


class CountableSchedule(ABC):
    """A compiled schedule that can also summarise a range of occurrences cheaply.

    Subclasses implement `_next_after` and `_span`; this base applies the trigger's
    `start_at` / `end_at` bounds to both.
    """

    def __init__(self, *, start_at: datetime | None, end_at: datetime | None) -> None:
        self._floor = None if start_at is None else start_at - TICK
        self._end_at = end_at
        # The last two answers: the loop asks for the occurrence after the watermark,
        # then after that one, and the next tick asks the same again.
        self._memo: tuple[datetime | None, datetime | None, datetime | None, datetime | None] = (
            None,
            None,
            None,
            None,
        )

    def next_after(self, after: datetime) -> datetime | None:
        """The first occurrence strictly after `after`, or None when there is none."""
        if self._floor is not None and after < self._floor:
            after = self._floor
        memo = self._memo
        if after == memo[0]:
            return memo[1]
        if after == memo[2]:
            return memo[3]
        found = self._next_after(after)
        if found is not None and self._end_at is not None and found > self._end_at:
            found = None
        self._memo = (after, found, memo[0], memo[1])
        return found

    def span(self, after: datetime, until: datetime) -> Span | None:
        """A summary of the occurrences in (after, until]; None when there are none."""
        if self._floor is not None and after < self._floor:
            after = self._floor
        if self._end_at is not None and until > self._end_at:
            until = self._end_at
        if until <= after:
            return None
        return self._span(after, until)

    def dst_shift(self, at: datetime) -> DstShift | None:
        """What a daylight-saving change did to the occurrence `at` (see `_dst`)."""
        return None

    @abstractmethod
    def _next_after(self, after: datetime) -> datetime | None: ...

    @abstractmethod
    def _span(self, after: datetime, until: datetime) -> Span | None: ...


def load_zone(name: str) -> ZoneInfo:
    """The IANA zone called `name`.

    Raises:
        ScheduleError: no such zone, or a name that depends on the host.
    """
    if name == "localtime":
        raise ScheduleError(
            "time zone 'localtime' depends on the host; name an IANA zone such as Europe/Berlin",
            timezone=name,
        )
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise ScheduleError(f"unknown time zone {name!r}", timezone=name) from exc


@dataclass(frozen=True, slots=True)
class Transition:
    """A change of a zone's UTC offset."""

    at: int
    """Epoch seconds of the first instant with the new offset."""
    before: int
    after: int

    @property
    def forward(self) -> bool:
        """Whether wall clocks jump forward (a gap) rather than back (a repeat)."""
        return self.after > self.before


class ZoneOffsets:
    """Offsets and transitions of one zone, with the wall-time rule for fixed times."""

    def __init__(self, zone: ZoneInfo) -> None:
        self.zone = zone

    def offset_and_fold(self, at_s: int) -> tuple[int, bool]:
        """The offset in force at an instant, and whether its wall time is a repeat."""
        local = instant(at_s).astimezone(self.zone)
        return _seconds(local.utcoffset()), bool(local.fold)

    def offset(self, at_s: int) -> int:
        """The UTC offset in force at an instant."""
        return _offset(self.zone, at_s)

    def next_transition(self, after_s: int, until_s: int) -> Transition | None:
        """The first transition in (after_s, until_s], or None."""
        year = instant(max(after_s, _year_start(_FIRST_YEAR))).year
        while year <= _LAST_YEAR:
            starts, transitions, year_end = _transitions_in(self.zone, year)
            index = bisect.bisect_right(starts, after_s)
            if index < len(starts):
                found = transitions[index]
                return found if found.at <= until_s else None
            if year_end > until_s:
                return None
            year += 1
        return None

    def previous_transition(self, at_s: int) -> Transition | None:
        """The last transition at or before `at_s`, looking back up to a year."""
        year = instant(at_s).year
        for probe_year in (year, year - 1):
            if not _FIRST_YEAR <= probe_year <= _LAST_YEAR:
                continue
            starts, transitions, _ = _transitions_in(self.zone, probe_year)
            index = bisect.bisect_right(starts, at_s)
            if index:
                return transitions[index - 1]
        return None

    def as_instant(self, value: datetime) -> datetime:
        """An aware instant; a naive value is a wall time here, by the fixed-time rule."""
        if value.tzinfo is not None:
            return value
        return instant(self.resolve_fixed(floor_s(value.replace(tzinfo=UTC))))

    def resolve_fixed(self, wall: int) -> int:
        """The instant a fixed wall time fires at, by Debian cron's rule.

        A wall time that exists once is that instant; one that repeats (clocks went
        back) is the first of its two instants; one skipped by a gap (clocks went
        forward) is the first instant after the gap.
        """
        naive = instant(wall).replace(tzinfo=None)
        # fold=0 is the earlier reading of a repeated time, and past the gap for a skipped one.
        offset = _seconds(naive.replace(tzinfo=self.zone).utcoffset())
        at_s = wall - offset
        if self.offset(at_s) == offset:
            return at_s
        later = _seconds(naive.replace(tzinfo=self.zone, fold=1).utcoffset())
        gap = self.next_transition(wall - later, at_s)
        return at_s if gap is None else gap.at


def _seconds(offset: timedelta | None) -> int:
    return 0 if offset is None else offset // timedelta(seconds=1)


def _offset(zone: ZoneInfo, at_s: int) -> int:
    return _seconds(instant(at_s).astimezone(zone).utcoffset())


def _year_start(year: int) -> int:
    return floor_s(datetime(year, 1, 1, tzinfo=UTC))


@functools.lru_cache(maxsize=4096)
def _transitions_in(
    zone: ZoneInfo, year: int
) -> tuple[tuple[int, ...], tuple[Transition, ...], int]:
    """The transitions whose instant falls in a UTC year, and the end of that year.

    zoneinfo does not expose its transition table, so offsets are probed daily and
    each change is narrowed down to the second by bisection.
    """
    start, end = _year_start(year), _year_start(year + 1)
    found: list[Transition] = []
    probe = start - 1
    probe_offset = _offset(zone, probe)
    while probe < end - 1:
        following = min(probe + _PROBE_S, end - 1)
        following_offset = _offset(zone, following)
        low, low_offset = probe, probe_offset
        while low_offset != following_offset:
            high = following
            while high - low > 1:
                middle = (low + high) // 2
                if _offset(zone, middle) == low_offset:
                    low = middle
                else:
                    high = middle
            high_offset = _offset(zone, high)
            found.append(Transition(at=high, before=low_offset, after=high_offset))
            low, low_offset = high, high_offset
        probe, probe_offset = following, following_offset
    return tuple(item.at for item in found), tuple(found), end
