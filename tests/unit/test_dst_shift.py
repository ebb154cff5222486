"""What DST did to each occurrence (moved, merged, repeated), checked against an oracle.

The oracle walks every UTC minute of a transition day, as `test_dst_cron`'s does, and
collects for each instant that fires the wall minutes the expression names that fire
there: a fixed-time expression's wall minutes skipped by a gap fire at the first
instant after it, with that instant's own wall minute if it matches; a repeated wall
minute fires at its first instant only (fixed time) or at both (wildcard).
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from tests.unit.test_dst_cron import (
    FIXED_TIME,
    MINUTE,
    WILDCARD,
    ZONES,
    _field,
    _window,
    transition_days,
)
from triggers.model import AtSchedule, CalendarSchedule, CronSchedule, EverySchedule, Schedule
from triggers.scheduler.occurrences import (
    compile_schedule,
    describe_shift,
    dst_shift,
    next_occurrences,
)


def _repeats(wall: datetime, zone: ZoneInfo) -> bool:
    """Whether a wall time that exists happens twice (a fall-back change)."""
    first, second = wall.replace(tzinfo=zone, fold=0), wall.replace(tzinfo=zone, fold=1)
    return first.utcoffset() != second.utcoffset()


def oracle_shifts(
    expression: str, zone: ZoneInfo, after: datetime, until: datetime
) -> dict[datetime, tuple[str, bool] | None]:
    """Each firing in (after, until] with the shift Debian's rule gives it: (kind,
    second) or None."""
    minute_field, hour_field, *_ = expression.split()
    minutes, hours = _field(minute_field, 0, 59), _field(hour_field, 0, 23)
    fixed_time = not (minute_field.startswith("*") or hour_field.startswith("*"))

    def matches(wall: datetime) -> bool:
        return wall.minute in minutes and wall.hour in hours

    found: dict[datetime, tuple[str, bool] | None] = {}
    previous_wall = after.astimezone(zone).replace(tzinfo=None)
    at = after + MINUTE
    while at <= until:
        local = at.astimezone(zone)
        wall = local.replace(tzinfo=None, fold=0)
        skipped, step = [], previous_wall + MINUTE
        while step < wall:
            skipped.append(step)
            step += MINUTE
        named = [w for w in skipped if matches(w)] if fixed_time else []
        own = matches(wall) and not (fixed_time and local.fold)
        if named or own:
            if named:
                kind = "moved" if len(named) == 1 and not own else "merged"
                found[at] = (kind, False)
            elif _repeats(wall, zone):
                found[at] = ("merged", False) if fixed_time else ("repeated", bool(local.fold))
            else:
                found[at] = None
        previous_wall = wall
        at += MINUTE
    return found


VECTORS = [
    (zone_name, day, expression)
    for zone_name in ZONES
    for day in transition_days(ZoneInfo(zone_name))[:4]
    for expression in FIXED_TIME + WILDCARD
]


@pytest.mark.parametrize(
    ("zone_name", "day", "expression"),
    VECTORS,
    ids=[f"{zone}-{day}-{expression.replace(' ', '_')}" for zone, day, expression in VECTORS],
)
def test_each_occurrence_is_marked_as_the_oracle_says(
    zone_name: str, day: date, expression: str
) -> None:
    zone = ZoneInfo(zone_name)
    after, until = _window(zone, day)
    expected = oracle_shifts(expression, zone, after, until)
    schedule = compile_schedule(
        CronSchedule(expression=expression), trigger_id="t", timezone=zone_name
    )
    found = {}
    for at in next_occurrences(schedule, after=after, count=len(expected) + 1):
        if at <= until:
            shift = dst_shift(schedule, at)
            found[at] = None if shift is None else (shift.kind, shift.second)
    assert found == expected


def _note(schedule: Schedule, zone: str, after: str) -> tuple[str | None, str | None]:
    compiled = compile_schedule(schedule, trigger_id="t", timezone=zone)
    [at] = next_occurrences(compiled, after=datetime.fromisoformat(after), count=1)
    shift = dst_shift(compiled, at)
    return (None, None) if shift is None else (shift.kind, describe_shift(shift))


NAMED = [
    (
        "gap-moves-a-fixed-time",
        CronSchedule(expression="30 2 * * *"),
        "Europe/Berlin",
        "2027-03-27T12:00:00+00:00",
        "moved",
        "02:30 does not exist on 2027-03-28 (clocks go forward from 02:00 to 03:00): "
        "fires at 03:00",
    ),
    (
        "gap-merges-its-wall-times",
        CronSchedule(expression="0,30 2 * * *"),
        "Europe/Berlin",
        "2027-03-27T12:00:00+00:00",
        "merged",
        "02:00 and 02:30 do not exist on 2027-03-28 (clocks go forward from 02:00 to 03:00): "
        "fires once, at 03:00",
    ),
    (
        "gap-merges-with-the-wall-time-ending-it",
        CronSchedule(expression="0 1-3 * * *"),
        "Europe/Berlin",
        "2027-03-28T00:30:00+00:00",
        "merged",
        "02:00 does not exist on 2027-03-28 (clocks go forward from 02:00 to 03:00): "
        "fires at 03:00, once with the 03:00 occurrence",
    ),
    (
        "a-long-list-of-wall-times-is-cut",
        CronSchedule(expression="0-59/10 2 * * *"),
        "Europe/Berlin",
        "2027-03-27T12:00:00+00:00",
        "merged",
        "02:00, 02:10, 02:20, 02:30 and 2 more do not exist on 2027-03-28 "
        "(clocks go forward from 02:00 to 03:00): fires once, at 03:00",
    ),
    (
        "repeat-fires-a-fixed-time-once",
        CronSchedule(expression="30 1 * * *"),
        "America/New_York",
        "2027-11-06T12:00:00+00:00",
        "merged",
        "01:30 happens twice on 2027-11-07 (clocks go back from 02:00 to 01:00): "
        "fires once, at the first (-04:00)",
    ),
    (
        "repeat-fires-a-wildcard-twice",
        CronSchedule(expression="30 * * * *"),
        "America/New_York",
        "2027-11-07T05:45:00+00:00",
        "repeated",
        "01:30 happens twice on 2027-11-07 (clocks go back from 02:00 to 01:00): "
        "fires at both; this is the second (-05:00)",
    ),
    (
        "thirty-minute-gap",
        CronSchedule(expression="15 2 * * *"),
        "Australia/Lord_Howe",
        "2026-10-03T00:00:00+00:00",
        "moved",
        "02:15 does not exist on 2026-10-04 (clocks go forward from 02:00 to 02:30): "
        "fires at 02:30",
    ),
    (
        "calendar-wall-time-in-a-gap",
        CalendarSchedule(days=1, hour=2, minute=30),
        "Europe/Berlin",
        "2027-03-27T12:00:00+00:00",
        "moved",
        "02:30 does not exist on 2027-03-28 (clocks go forward from 02:00 to 03:00): "
        "fires at 03:00",
    ),
    (
        "calendar-wall-time-repeated",
        CalendarSchedule(days=1, hour=2, minute=30),
        "Europe/Berlin",
        "2027-10-30T12:00:00+00:00",
        "merged",
        "02:30 happens twice on 2027-10-31 (clocks go back from 03:00 to 02:00): "
        "fires once, at the first (+02:00)",
    ),
    (
        "at-given-as-a-wall-time-in-a-gap",
        AtSchedule(at=datetime(2027, 3, 28, 2, 30)),  # noqa: DTZ001 (a wall time in the zone)
        "Europe/Berlin",
        "2027-01-01T00:00:00+00:00",
        "moved",
        "02:30 does not exist on 2027-03-28 (clocks go forward from 02:00 to 03:00): "
        "fires at 03:00",
    ),
    (
        "at-given-as-an-instant-is-never-moved",
        AtSchedule(at=datetime(2027, 3, 28, 1, 0, tzinfo=UTC)),
        "Europe/Berlin",
        "2027-01-01T00:00:00+00:00",
        None,
        None,
    ),
    (
        "every-measures-elapsed-time",
        EverySchedule(interval=timedelta(minutes=30)),
        "Europe/Berlin",
        "2027-10-31T00:40:00+00:00",
        None,
        None,
    ),
    (
        "an-ordinary-day",
        CronSchedule(expression="30 2 * * *"),
        "Europe/Berlin",
        "2027-03-29T12:00:00+00:00",
        None,
        None,
    ),
]


@pytest.mark.parametrize(
    ("schedule", "zone", "after", "kind", "note"),
    [case[1:] for case in NAMED],
    ids=[case[0] for case in NAMED],
)
def test_shift_is_named_and_said_in_words(
    schedule: Schedule, zone: str, after: str, kind: str | None, note: str | None
) -> None:
    assert _note(schedule, zone, after) == (kind, note)
