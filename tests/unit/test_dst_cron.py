"""Cron across daylight-saving changes, checked against a brute-force oracle.

The oracle never asks croniter or the implementation: it walks every UTC minute of a
transition day, reads the wall clock through zoneinfo, matches a small hand-written
field matcher, and applies Debian cron's rule:

- fixed-time expressions (minute and hour fields not starting with `*`) fire at the
  first instant of a wall time only (fold=0), plus once at the first instant after a
  gap when any wall minute skipped by the gap matches;
- other expressions fire at every real instant whose wall time matches.
"""

from __future__ import annotations

import functools
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triggers.model import CronSchedule
from triggers.scheduler.occurrences import (
    compile_schedule,
    count_occurrences,
    next_occurrences,
)

ZONES = ("Europe/Berlin", "America/New_York", "Australia/Lord_Howe")
YEARS = range(2026, 2031)
MINUTE = timedelta(minutes=1)

FIXED_TIME = (
    "30 2 * * *",
    "0 2 * * *",
    "30 1 * * *",
    "59 1 * * *",
    "0 3 * * *",
    "0 1-3 * * *",
    "15,45 1-2 * * *",
    "0,30 2 * * *",
)
WILDCARD = (
    "30 * * * *",
    "*/15 * * * *",
    "*/30 1 * * *",
    "*/10 2 * * *",
    "* 2 * * *",
    "0-59/20 * * * *",
)


def _field(text: str, low: int, high: int) -> set[int]:
    values: set[int] = set()
    for part in text.split(","):
        base, _, step = part.partition("/")
        if base == "*":
            first, last = low, high
        elif "-" in base:
            first, last = (int(bound) for bound in base.split("-"))
        else:
            first = last = int(base)
        values.update(range(first, last + 1, int(step or 1)))
    return values


def oracle(expression: str, zone: ZoneInfo, after: datetime, until: datetime) -> list[datetime]:
    """Debian cron's firings in (after, until], minute by minute."""
    minute_field, hour_field, *days = expression.split()
    assert days == ["*", "*", "*"]
    minutes, hours = _field(minute_field, 0, 59), _field(hour_field, 0, 23)
    fixed_time = not (minute_field.startswith("*") or hour_field.startswith("*"))

    def matches(wall: datetime) -> bool:
        return wall.minute in minutes and wall.hour in hours

    fired: list[datetime] = []
    previous_wall = after.astimezone(zone).replace(tzinfo=None)
    at = after + MINUTE
    while at <= until:
        local = at.astimezone(zone)
        wall = local.replace(tzinfo=None, fold=0)
        skipped = []
        step = previous_wall + MINUTE
        while step < wall:  # the clock jumped forward: these wall minutes never happen
            skipped.append(step)
            step += MINUTE
        if (fixed_time and any(matches(w) for w in skipped)) or (
            matches(wall) and not (fixed_time and local.fold)
        ):
            fired.append(at)
        previous_wall = wall
        at += MINUTE
    return fired


def transition_days(zone: ZoneInfo) -> list[date]:
    """Local dates whose UTC offset at noon differs from the day before's."""
    days = []
    for year in YEARS:
        day = date(year, 1, 1)
        while day.year == year:
            following = day + timedelta(days=1)
            today = datetime.combine(day, time(12), zone).utcoffset()
            tomorrow = datetime.combine(following, time(12), zone).utcoffset()
            if today != tomorrow:
                days.append(following)
            day = following
    return days


VECTORS = [
    (zone_name, day, expression)
    for zone_name in ZONES
    for day in transition_days(ZoneInfo(zone_name))
    for expression in FIXED_TIME + WILDCARD
]


def _window(zone: ZoneInfo, day: date) -> tuple[datetime, datetime]:
    """From noon the day before to noon the day after, in UTC."""
    start = datetime.combine(day - timedelta(days=1), time(12), zone).astimezone(UTC)
    end = datetime.combine(day + timedelta(days=1), time(12), zone).astimezone(UTC)
    return start, end


def test_vectors_cover_two_transitions_a_year_in_every_zone() -> None:
    for zone_name in ZONES:
        assert len(transition_days(ZoneInfo(zone_name))) == 2 * len(YEARS)


@pytest.mark.parametrize(
    ("zone_name", "day", "expression"),
    VECTORS,
    ids=[f"{zone}-{day}-{expression.replace(' ', '_')}" for zone, day, expression in VECTORS],
)
def test_cron_matches_debian_oracle_on_transition_days(
    zone_name: str, day: date, expression: str
) -> None:
    zone = ZoneInfo(zone_name)
    after, until = _window(zone, day)
    expected = oracle(expression, zone, after, until)
    schedule = compile_schedule(
        CronSchedule(expression=expression), trigger_id="t", timezone=zone_name
    )
    found = next_occurrences(schedule, after=after, count=len(expected) + 1)
    assert [at for at in found if at <= until] == expected
    assert count_occurrences(schedule, after=after, until=until) == len(expected)


def _local(text: str, zone: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(ZoneInfo(zone))


def _listed(expression: str, zone: str, after: str, count: int) -> list[str]:
    schedule = compile_schedule(CronSchedule(expression=expression), trigger_id="t", timezone=zone)
    found = next_occurrences(schedule, after=datetime.fromisoformat(after), count=count)
    return [at.astimezone(ZoneInfo(zone)).isoformat() for at in found]


# (id, expression, zone, after, the next occurrences with their local offsets)
NAMED = [
    (
        "berlin-spring-gap-fires-at-0300",
        "30 2 * * *",
        "Europe/Berlin",
        "2026-03-28T12:00:00+00:00",
        ["2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"],
    ),
    (
        "berlin-spring-gap-times-collapse",
        "0,30 2-3 * * *",
        "Europe/Berlin",
        "2026-03-29T00:00:00+00:00",
        ["2026-03-29T03:00:00+02:00", "2026-03-29T03:30:00+02:00"],
    ),
    (
        "berlin-autumn-repeat-fixed-fires-first",
        "30 2 * * *",
        "Europe/Berlin",
        "2026-10-24T12:00:00+00:00",
        ["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"],
    ),
    (
        "berlin-autumn-hourly-fires-twice",
        "30 * * * *",
        "Europe/Berlin",
        "2026-10-24T23:00:00+00:00",
        [
            "2026-10-25T01:30:00+02:00",
            "2026-10-25T02:30:00+02:00",
            "2026-10-25T02:30:00+01:00",
            "2026-10-25T03:30:00+01:00",
        ],
    ),
    (
        "new-york-spring-hourly-skips-gap",
        "30 * * * *",
        "America/New_York",
        "2026-03-08T05:00:00+00:00",
        ["2026-03-08T00:30:00-05:00", "2026-03-08T01:30:00-05:00", "2026-03-08T03:30:00-04:00"],
    ),
    (
        "new-york-autumn-wildcard-both-passes",
        "*/30 1 * * *",
        "America/New_York",
        "2026-11-01T04:00:00+00:00",
        [
            "2026-11-01T01:00:00-04:00",
            "2026-11-01T01:30:00-04:00",
            "2026-11-01T01:00:00-05:00",
            "2026-11-01T01:30:00-05:00",
            "2026-11-02T01:00:00-05:00",
        ],
    ),
    (
        "new-york-autumn-fixed-once",
        "30 1 * * *",
        "America/New_York",
        "2026-10-31T12:00:00+00:00",
        ["2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"],
    ),
    (
        "lord-howe-spring-half-hour-gap",
        "0,15,30,45 2 * * *",
        "Australia/Lord_Howe",
        "2026-10-03T12:00:00+00:00",
        ["2026-10-04T02:30:00+11:00", "2026-10-04T02:45:00+11:00", "2026-10-05T02:00:00+11:00"],
    ),
    (
        "lord-howe-autumn-half-hour-repeat-fixed",
        "45 1 * * *",
        "Australia/Lord_Howe",
        "2026-04-04T12:00:00+00:00",
        ["2026-04-05T01:45:00+11:00", "2026-04-06T01:45:00+10:30"],
    ),
    (
        "lord-howe-autumn-half-hour-repeat-wildcard",
        "*/15 1 * * *",
        "Australia/Lord_Howe",
        "2026-04-04T14:20:00+00:00",
        [
            "2026-04-05T01:30:00+11:00",
            "2026-04-05T01:45:00+11:00",
            "2026-04-05T01:30:00+10:30",
            "2026-04-05T01:45:00+10:30",
            "2026-04-06T01:00:00+10:30",
        ],
    ),
]


@pytest.mark.parametrize(
    ("expression", "zone", "after", "expected"),
    [case[1:] for case in NAMED],
    ids=[case[0] for case in NAMED],
)
def test_named_dst_vectors(expression: str, zone: str, after: str, expected: list[str]) -> None:
    assert _listed(expression, zone, after, len(expected)) == expected


# New York, 2026-11-01: 01:00-01:59 happens at -04:00 (first pass), then at -05:00.
START_IN_REPEAT = [
    ("first-pass-wildcard", "*/30 1 * * *", "01:10:00-04:00", "2026-11-01T01:30:00-04:00"),
    ("second-pass-wildcard", "*/30 1 * * *", "01:10:00-05:00", "2026-11-01T01:30:00-05:00"),
    ("first-pass-fixed", "30 1 * * *", "01:10:00-04:00", "2026-11-01T01:30:00-04:00"),
    ("second-pass-fixed-skips-repeat", "30 1 * * *", "01:10:00-05:00", "2026-11-02T01:30:00-05:00"),
    ("second-pass-fixed-after-repeat", "0 2 * * *", "01:10:00-05:00", "2026-11-01T02:00:00-05:00"),
    ("first-pass-end-wildcard", "*/30 1 * * *", "01:30:00-04:00", "2026-11-01T01:00:00-05:00"),
    ("first-pass-end-fixed", "0,30 1 * * *", "01:30:00-04:00", "2026-11-02T01:00:00-05:00"),
]


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [case[1:] for case in START_IN_REPEAT],
    ids=[case[0] for case in START_IN_REPEAT],
)
def test_start_inside_a_repeated_hour(expression: str, after: str, expected: str) -> None:
    assert _listed(expression, "America/New_York", f"2026-11-01T{after}", 1) == [expected]


def _change_instant(zone: ZoneInfo, day: date) -> datetime:
    """The UTC minute at which the offset changes on a transition day."""
    at, until = _window(zone, day)
    while at.astimezone(zone).utcoffset() == (at + MINUTE).astimezone(zone).utcoffset():
        at += MINUTE
        assert at < until
    return at + MINUTE


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize("day", [0, 1], ids=["first-change", "second-change"])
def test_every_second_follows_elapsed_time_across_a_change(zone: str, day: int) -> None:
    change = _change_instant(ZoneInfo(zone), transition_days(ZoneInfo(zone))[day])
    after, until = change - timedelta(minutes=10), change + timedelta(minutes=10)
    schedule = compile_schedule(
        CronSchedule(expression="* * * * * *"), trigger_id="t", timezone=zone
    )
    assert count_occurrences(schedule, after=after - timedelta(hours=2), until=until) == 8400
    at = after
    for _ in range(1200):
        following = schedule.next_after(at)
        assert following == at + timedelta(seconds=1)
        at = following


@functools.cache
def _oracle_window(zone_name: str, day: date, expression: str) -> tuple[datetime, list[datetime]]:
    zone = ZoneInfo(zone_name)
    after, until = _window(zone, day)
    return until, oracle(expression, zone, after, until)


@settings(max_examples=80, deadline=None)
@given(
    vector=st.sampled_from([vector for vector in VECTORS if vector[1].year == 2026]),
    offset_s=st.integers(min_value=0, max_value=24 * 3600 - 1),
    microsecond=st.sampled_from([0, 1, 500_000, 999_999]),
)
def test_cron_matches_debian_oracle_from_any_start(
    vector: tuple[str, date, str], offset_s: int, microsecond: int
) -> None:
    zone_name, day, expression = vector
    until, expected = _oracle_window(zone_name, day, expression)
    # Start within the 24 hours around the change, at any second of it.
    after = until - timedelta(hours=12 + 24) + timedelta(seconds=offset_s, microseconds=microsecond)
    schedule = compile_schedule(
        CronSchedule(expression=expression), trigger_id="t", timezone=zone_name
    )
    later = [at for at in expected if at > after]
    found = schedule.next_after(after)
    assert (found if found is not None and found <= until else None) == (
        later[0] if later else None
    )
    assert count_occurrences(schedule, after=after, until=until) == len(later)


def test_fixed_time_with_second_wildcard_collapses_a_gap_into_one_instant() -> None:
    schedule = compile_schedule(
        CronSchedule(expression="* 30 2 * * *"), trigger_id="t", timezone="Europe/Berlin"
    )
    after = datetime(2026, 3, 28, 12, tzinfo=UTC)
    assert next_occurrences(schedule, after=after, count=2) == [
        datetime(2026, 3, 29, 1, tzinfo=UTC),
        datetime(2026, 3, 30, 0, 30, tzinfo=UTC),
    ]


def test_fixed_time_with_second_wildcard_fires_only_the_first_repeat() -> None:
    schedule = compile_schedule(
        CronSchedule(expression="* 30 2 * * *"), trigger_id="t", timezone="Europe/Berlin"
    )
    after = datetime(2026, 10, 24, 12, tzinfo=UTC)
    until = datetime(2026, 10, 25, 12, tzinfo=UTC)
    found = next_occurrences(schedule, after=after, count=61)
    assert found[0] == datetime(2026, 10, 25, 0, 30, tzinfo=UTC)
    assert found[59] == datetime(2026, 10, 25, 0, 30, 59, tzinfo=UTC)
    assert found[60] == datetime(2026, 10, 26, 1, 30, tzinfo=UTC)
    assert count_occurrences(schedule, after=after, until=until) == 60
