"""A brute-force cron evaluator, written from the documented rules alone.

It shares nothing with `triggers.scheduler` or croniter: its own parser of the dialect
(docs/semantics.md, "Cron dialect"), its own date test (`W` as "the Monday-to-Friday
day nearest the target within the month", `#n` as "the n-th seven-day block", `L` as
"within a week of the month's end"), and zoneinfo's `fold` to read the wall clock.

It steps through the wall-clock minutes of every matching local date, matches the
time fields, and turns each matching wall time into instants by Debian cron's rule:

| wall time | fixed-time expression | other expressions |
|---|---|---|
| exists once | that instant | that instant |
| repeated (clocks went back) | the first instant only | both instants |
| skipped (clocks went forward) | once, at the first instant after the gap | none |

An expression is fixed-time when neither its minute nor its hour field starts with
`*`. Seconds are offsets within a wall minute: the evaluator checks that the zone's
offset is the same at both ends of every minute it uses.
"""

from __future__ import annotations

import calendar
import functools
import re
import zlib
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

MINUTE = timedelta(minutes=1)
DAY = timedelta(days=1)
MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
MONTH_NAMES = {name.lower(): number for number, name in enumerate(calendar.month_abbr) if name}
DAY_NAMES = {"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}


@dataclass(frozen=True)
class Field:
    """A field's bounds, the names it allows, and the number that salts its `H` hash."""

    low: int
    high: int
    names: dict[str, int]
    salt: int  # croniter's field order, which the documented `H` hash depends on


SECOND = Field(0, 59, {}, 5)
MINUTE_F = Field(0, 59, {}, 0)
HOUR = Field(0, 23, {}, 1)
DOM = Field(1, 31, {}, 2)
MONTH = Field(1, 12, MONTH_NAMES, 3)
DOW = Field(0, 6, DAY_NAMES, 4)
_HASH = re.compile(r"^h(?:\((\d+)-(\d+)\))?(?:/(\d+))?$")


def _number(text: str, names: dict[str, int]) -> int:
    return names[text] if text in names else int(text)


def _hashed(text: str, field: Field, key: str) -> set[int]:
    """`H` forms: a value drawn from the trigger id (CRC-32, shifted by the field index)."""
    low, high, salt = field.low, field.high, field.salt
    match = _HASH.match(text)
    assert match is not None, text
    begin, end, step = match.groups()
    low, high = (int(begin), int(end)) if begin else (low, high)
    crc = zlib.crc32(key.encode()) & 0xFFFFFFFF

    def draw(first: int, last: int) -> int:
        return (crc >> salt) % (last - first + 1) + first

    if step is None:
        return {draw(low, high)}
    start = draw(low, min(low + int(step) - 1, high))
    return set(range(start, high + 1, int(step)))


def parse_field(text: str, field: Field, key: str) -> set[int]:
    """The values of a field of plain items: `*`, `n`, `a-b`, steps, names, `H` forms."""
    low, high, names = field.low, field.high, field.names
    if text.startswith("h"):
        return _hashed(text, field, key)
    values: set[int] = set()
    for item in text.split(","):
        base, _, step_text = item.partition("/")
        step = int(step_text or 1)
        if base in {"*", "?"}:
            first, last = low, high
        elif "-" in base:
            first_text, last_text = base.split("-")
            first = _number(first_text, names)
            last = high if last_text == "l" else _number(last_text, names)
        else:
            first = _number(base, names)
            last = high if step_text else first  # `a/n` runs to the field's end
        if first <= last:
            values.update(range(first, last + 1, step))
        else:  # a range through the field's end, such as fri-mon
            values.update(
                value for value in range(low, high + 1) if value >= first or value <= last
            )
    if field is DOW and 7 in values:
        values = (values - {7}) | {0}
    return values


@dataclass(frozen=True, kw_only=True)
class Expression:
    """A parsed expression: value sets, and the day fields' special forms."""

    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    months: frozenset[int]
    days: frozenset[int]
    last_day: bool
    nearest: frozenset[int]
    weekdays: frozenset[int]
    nth: frozenset[tuple[int, int]]
    last_weekdays: frozenset[int]
    day_or: bool
    fixed_time: bool

    def matches_date(self, day: date) -> bool:
        """Whether the month and day fields match a local date."""
        return day.month in self.months and _matches_date(self, day)

    def wall_times(self) -> list[tuple[int, int]]:
        """(hour, minute) pairs that match, ascending."""
        return [(hour, minute) for hour in sorted(self.hours) for minute in sorted(self.minutes)]


@functools.lru_cache(maxsize=200_000)
def _matches_date(expression: Expression, day: date) -> bool:
    length = _length(day.year, day.month)
    by_month = (
        day.day in expression.days
        or (expression.last_day and day.day == length)
        or any(day.day == nearest_weekday(day.year, day.month, n) for n in expression.nearest)
    )
    weekday = day.isoweekday() % 7
    by_week = (
        weekday in expression.weekdays
        or (weekday, (day.day - 1) // 7 + 1) in expression.nth
        or (weekday in expression.last_weekdays and day.day + 7 > length)
    )
    return by_month or by_week if expression.day_or else by_month and by_week


@functools.cache
def _length(year: int, month: int) -> int:
    return calendar.monthrange(year, month)[1]


@functools.cache
def nearest_weekday(year: int, month: int, target: int) -> int:
    """The Monday-to-Friday day of the month nearest `target` (clamped to the month)."""
    length = _length(year, month)
    target = min(target, length)
    weekdays = [day for day in range(1, length + 1) if date(year, month, day).weekday() < 5]
    return min(weekdays, key=lambda day: abs(day - target))


def parse(expression: str, *, key: str) -> Expression:
    """Parse an expression of the documented dialect (lower-cased here)."""
    text = MACROS.get(expression.strip().lower(), expression.lower())
    fields = text.split()
    seconds = parse_field(fields.pop(0), SECOND, key) if len(fields) == 6 else {0}
    minute, hour, dom, month, dow = fields
    days: set[int] = set()
    last_day = False
    nearest: set[int] = set()
    if match := re.fullmatch(r"(\d+)w|w(\d+)", dom):
        nearest.add(int(match.group(1) or match.group(2)))
    else:
        plain = []
        for item in dom.split(","):
            if item == "l":
                last_day = True
            else:
                plain.append(item)
        if plain:
            days = parse_field(",".join(plain), DOM, key)
    weekdays: set[int] = set()
    nth: set[tuple[int, int]] = set()
    last_weekdays: set[int] = set()
    plain = []
    for item in dow.split(","):
        if "#" in item:
            which, number = item.split("#")
            nth.update((day, int(number)) for day in parse_field(which, DOW, key))
        elif item.startswith("l"):
            last_weekdays.update(parse_field(item[1:], DOW, key))
        else:
            plain.append(item)
    if plain:
        weekdays = parse_field(",".join(plain), DOW, key)

    def restricted(field: str) -> bool:
        return not (field.startswith("*") or field == "?")

    return Expression(
        seconds=frozenset(seconds),
        minutes=frozenset(parse_field(minute, MINUTE_F, key)),
        hours=frozenset(parse_field(hour, HOUR, key)),
        months=frozenset(parse_field(month, MONTH, key)),
        days=frozenset(days),
        last_day=last_day,
        nearest=frozenset(nearest),
        weekdays=frozenset(weekdays),
        nth=frozenset(nth),
        last_weekdays=frozenset(last_weekdays),
        day_or=restricted(dom) and restricted(dow),
        fixed_time=not (minute.startswith("*") or hour.startswith("*")),
    )


def _gap_end(wall: datetime, zone: ZoneInfo) -> datetime:
    """The first instant after the gap that skips `wall`, found minute by minute."""
    # For a skipped wall time, fold=1 reads it with the offset after the change (an
    # instant before the gap) and fold=0 with the one before (an instant after it).
    before = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    after = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    at = before
    while at.astimezone(zone).utcoffset() == before.astimezone(zone).utcoffset():
        at += MINUTE
        assert at <= after, wall
    return at


def _passes(wall: datetime, zone: ZoneInfo, *, fixed_time: bool) -> list[tuple[datetime, bool]]:
    """Debian cron's instants for one matching wall minute, each with "gap end" or not."""
    first = wall.replace(tzinfo=zone).astimezone(UTC)
    second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    if first == second:  # one offset fits: the wall time exists once
        return [(first, False)]
    if first.astimezone(zone).replace(tzinfo=None) != wall:  # neither offset fits: a gap
        return [(_gap_end(wall, zone), True)] if fixed_time else []
    passes = sorted((first, second))  # both fit: a repeated wall time
    return [(at, False) for at in (passes[:1] if fixed_time else passes)]


@functools.cache
def _offsets(zone: ZoneInfo) -> tuple[timedelta, timedelta]:
    """The zone's smallest and largest UTC offsets in 2025-2031.

    Sampled every six hours (changes are months apart); each change is narrowed to
    the second, and must fall on a whole minute, since seconds are offsets within a
    wall minute here.
    """
    at, end = datetime(2025, 1, 1, tzinfo=UTC), datetime(2032, 1, 1, tzinfo=UTC)
    previous = at.astimezone(zone).utcoffset()
    seen = {previous}
    while at < end:
        following = at + timedelta(hours=6)
        offset = following.astimezone(zone).utcoffset()
        if offset != previous:
            low, high = 0, 6 * 3600  # seconds after `at`: the change lies in (low, high]
            while high - low > 1:
                middle = (low + high) // 2
                reading = (at + timedelta(seconds=middle)).astimezone(zone).utcoffset()
                low, high = (middle, high) if reading == previous else (low, middle)
            assert high % 60 == 0, (zone, at + timedelta(seconds=high))
            seen.add(offset)
        at, previous = following, offset
    offsets = sorted(offset for offset in seen if offset is not None)
    return offsets[0], offsets[-1]


def firing_minutes(
    expression: Expression,
    zone: ZoneInfo,
    *,
    after: datetime,
    until: datetime,
    enough: int | None = None,
) -> dict[datetime, set[int]]:
    """UTC minute -> the seconds of it that fire, for every firing in (after, until].

    With `enough`, it stops once that many firings are known and no later wall time
    can produce an earlier instant (a later wall time's instants are at least that
    wall time minus the zone's largest offset).
    """
    minutes: dict[datetime, set[int]] = {}
    smallest, largest = _offsets(zone)
    seconds = [(second, timedelta(seconds=second)) for second in sorted(expression.seconds)]
    day = after.astimezone(zone).date() - DAY
    last_day = until.astimezone(zone).date() + DAY
    while day <= last_day:
        if expression.matches_date(day):
            for hour, minute in expression.wall_times():
                wall = datetime.combine(day, time(hour, minute))
                naive_utc = wall.replace(tzinfo=UTC)
                if naive_utc - smallest + timedelta(seconds=59) <= after:
                    continue  # every instant this wall time can have is past
                if naive_utc - largest > until:
                    return minutes  # so is every instant of a later wall time
                if enough is not None and _known(minutes, naive_utc - largest) >= enough:
                    return minutes
                for at, gap_end in _passes(wall, zone, fixed_time=expression.fixed_time):
                    candidates = [(0, timedelta(0))] if gap_end else seconds
                    fired = {s for s, delta in candidates if after < at + delta <= until}
                    if fired:
                        minutes.setdefault(at, set()).update(fired)
        day += DAY
    return minutes


def _known(minutes: dict[datetime, set[int]], earliest: datetime) -> int:
    """How many firings lie before `earliest`."""
    return sum(len(seconds) for at, seconds in minutes.items() if at < earliest)


def listing(minutes: dict[datetime, set[int]], limit: int) -> list[datetime]:
    """The first `limit` firings, ascending."""
    found: list[datetime] = []
    for at in sorted(minutes):
        found.extend(at + timedelta(seconds=s) for s in sorted(minutes[at]))
        if len(found) >= limit:
            break
    return found[:limit]


def count(minutes: dict[datetime, set[int]]) -> int:
    """How many firings."""
    return sum(len(seconds) for seconds in minutes.values())


@functools.cache
def fires_ever(expression: Expression) -> bool:
    """Whether any date of a whole 400-year Gregorian cycle matches."""
    day, end = date(2001, 1, 1), date(2401, 1, 1)
    while day < end:
        if expression.matches_date(day):
            return True
        day += DAY
    return False
