"""The `every`, `calendar` and `at` schedule kinds."""

from __future__ import annotations

import dataclasses
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from apscheduler.triggers.calendarinterval import CalendarIntervalTrigger
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger
from hypothesis import given, settings
from hypothesis import strategies as st

from triggers.errors import ScheduleError
from triggers.model import AtSchedule, CalendarSchedule, EverySchedule, Schedule
from triggers.scheduler.occurrences import (
    CALENDAR_ANCHOR,
    CompiledSchedule,
    compile_schedule,
    count_occurrences,
    next_occurrences,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _compile(
    schedule: Schedule,
    zone: str = "UTC",
    start_at: datetime | None = None,
    end_at: datetime | None = None,
) -> CompiledSchedule:
    return compile_schedule(
        schedule, trigger_id="t", timezone=zone, start_at=start_at, end_at=end_at
    )


def _local(found: list[datetime], zone: str) -> list[str]:
    return [at.astimezone(ZoneInfo(zone)).isoformat() for at in found]


# -- every ----------------------------------------------------------------------------


def test_every_second_fires_on_whole_seconds() -> None:
    schedule = _compile(EverySchedule(interval=timedelta(seconds=1)))
    assert schedule.next_after(T0 + timedelta(milliseconds=500)) == T0 + timedelta(seconds=1)
    assert schedule.next_after(T0) == T0 + timedelta(seconds=1)
    assert schedule.next_after(T0 - timedelta(microseconds=1)) == T0


def test_every_hour_follows_utc_hours_in_any_zone_across_dst() -> None:
    schedule = _compile(EverySchedule(interval=timedelta(hours=1)), zone="Europe/Berlin")
    after = datetime(2026, 3, 29, 0, 30, tzinfo=UTC)  # Berlin springs forward at 01:00Z
    assert next_occurrences(schedule, after=after, count=3) == [
        datetime(2026, 3, 29, 1, tzinfo=UTC),
        datetime(2026, 3, 29, 2, tzinfo=UTC),
        datetime(2026, 3, 29, 3, tzinfo=UTC),
    ]


def test_every_is_anchored_at_its_start() -> None:
    start = T0 + timedelta(seconds=10)
    schedule = _compile(EverySchedule(interval=timedelta(seconds=90), start=start))
    assert schedule.next_after(T0 - timedelta(days=3)) == start
    assert schedule.next_after(start) == start + timedelta(seconds=90)
    assert schedule.next_after(start + timedelta(seconds=91)) == start + timedelta(seconds=180)


def test_every_with_milliseconds_is_exact() -> None:
    schedule = _compile(EverySchedule(interval=timedelta(milliseconds=250)))
    found = next_occurrences(schedule, after=T0 + timedelta(microseconds=1), count=3)
    assert [at - T0 for at in found] == [timedelta(milliseconds=ms) for ms in (250, 500, 750)]


def test_every_naive_start_is_a_wall_time_in_the_zone() -> None:
    naive = datetime.fromisoformat("2026-01-01T09:00:00")
    schedule = _compile(EverySchedule(interval=timedelta(days=1), start=naive), zone="Asia/Tokyo")
    assert schedule.next_after(T0 - timedelta(days=1)) == datetime(2026, 1, 1, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "interval",
    [timedelta(0), timedelta(seconds=-5), timedelta(microseconds=1500)],
    ids=["zero", "negative", "sub-millisecond"],
)
def test_every_refuses_an_interval_that_is_not_positive_whole_milliseconds(
    interval: timedelta,
) -> None:
    with pytest.raises(ScheduleError, match="every interval must be a positive whole number"):
        _compile(EverySchedule(interval=interval))


def test_every_counts_a_week_of_seconds_without_listing() -> None:
    schedule = _compile(EverySchedule(interval=timedelta(seconds=1)))
    assert count_occurrences(schedule, after=T0, until=T0 + timedelta(days=7)) == 604_800


@settings(max_examples=100)
@given(
    interval_s=st.integers(min_value=1, max_value=3 * 86_400),
    anchor_s=st.integers(min_value=0, max_value=2_000_000_000),
    now_s=st.integers(min_value=0, max_value=2_000_000_000),
)
def test_every_agrees_with_apscheduler_interval_trigger(
    interval_s: int, anchor_s: int, now_s: int
) -> None:
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    anchor, now = epoch + timedelta(seconds=anchor_s), epoch + timedelta(seconds=now_s)
    theirs = IntervalTrigger(seconds=interval_s, start_date=anchor, timezone=UTC)
    ours = _compile(EverySchedule(interval=timedelta(seconds=interval_s), start=anchor))
    # APScheduler answers "the first fire time at or after now".
    assert ours.next_after(now - timedelta(microseconds=1)) == theirs.get_next_fire_time(None, now)


# -- calendar -------------------------------------------------------------------------


CALENDAR_CASES = [
    (
        "monthly-day-31-clamps-to-month-end",
        CalendarSchedule(months=1, day=31, hour=6),
        "Europe/Berlin",
        [
            "2026-01-31T06:00:00+01:00",
            "2026-02-28T06:00:00+01:00",
            "2026-03-31T06:00:00+02:00",
            "2026-04-30T06:00:00+02:00",
            "2026-05-31T06:00:00+02:00",
        ],
    ),
    (
        "monthly-default-first-of-month",
        CalendarSchedule(months=1),
        "UTC",
        ["2026-02-01T00:00:00+00:00", "2026-03-01T00:00:00+00:00"],
    ),
    (
        "weekly-default-monday",
        CalendarSchedule(weeks=1, hour=9),
        "America/New_York",
        ["2026-01-05T09:00:00-05:00", "2026-01-12T09:00:00-05:00"],
    ),
    (
        "every-other-day-counted-from-anchor",
        CalendarSchedule(days=2, hour=12),
        "UTC",
        ["2026-01-02T12:00:00+00:00", "2026-01-04T12:00:00+00:00"],  # 2001-01-01 + 2k days
    ),
    (
        "quarterly-day-15",
        CalendarSchedule(months=3, day=15, hour=8, minute=30),
        "UTC",
        ["2026-01-15T08:30:00+00:00", "2026-04-15T08:30:00+00:00", "2026-07-15T08:30:00+00:00"],
    ),
    (
        "yearly-leap-day-start-clamps",
        CalendarSchedule(years=1, start=datetime(2024, 2, 29, tzinfo=UTC)),
        "UTC",
        [
            "2024-02-29T00:00:00+00:00",
            "2025-02-28T00:00:00+00:00",
            "2026-02-28T00:00:00+00:00",
            "2027-02-28T00:00:00+00:00",
            "2028-02-29T00:00:00+00:00",
        ],
    ),
    (
        "daily-wall-time-in-spring-gap-fires-after-gap",
        CalendarSchedule(days=1, hour=2, minute=30, start=datetime(2026, 3, 28, tzinfo=UTC)),
        "Europe/Berlin",
        ["2026-03-28T02:30:00+01:00", "2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"],
    ),
    (
        "daily-wall-time-in-repeat-fires-first",
        CalendarSchedule(days=1, hour=2, minute=30, start=datetime(2026, 10, 24, tzinfo=UTC)),
        "Europe/Berlin",
        ["2026-10-24T02:30:00+02:00", "2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"],
    ),
    (
        "lord-howe-half-hour-gap",
        CalendarSchedule(
            days=1,
            hour=2,
            minute=10,
            start=datetime(2026, 10, 3, tzinfo=ZoneInfo("Australia/Lord_Howe")),
        ),
        "Australia/Lord_Howe",
        ["2026-10-03T02:10:00+10:30", "2026-10-04T02:30:00+11:00", "2026-10-05T02:10:00+11:00"],
    ),
]


@pytest.mark.parametrize(
    ("schedule", "zone", "expected"),
    [case[1:] for case in CALENDAR_CASES],
    ids=[case[0] for case in CALENDAR_CASES],
)
def test_calendar_occurrences_match_table(
    schedule: CalendarSchedule, zone: str, expected: list[str]
) -> None:
    compiled = _compile(schedule, zone=zone)
    after = T0 if schedule.start is None else schedule.start - timedelta(seconds=1)
    found = next_occurrences(compiled, after=after, count=len(expected))
    assert _local(found, zone) == expected


def test_calendar_default_anchor_is_a_monday_on_the_first() -> None:
    assert CALENDAR_ANCHOR.isoformat() == "2001-01-01"
    assert CALENDAR_ANCHOR.isoweekday() == 1


def test_calendar_has_no_occurrence_before_its_start() -> None:
    start = datetime(2026, 3, 10, 10, tzinfo=ZoneInfo("Europe/Berlin"))
    schedule = _compile(CalendarSchedule(days=1, hour=6, start=start), zone="Europe/Berlin")
    assert _local(next_occurrences(schedule, after=T0, count=1), "Europe/Berlin") == [
        "2026-03-11T06:00:00+01:00"
    ]


def test_calendar_counts_match_listing() -> None:
    schedule = _compile(CalendarSchedule(months=1, day=31, hour=2, minute=30), zone="Europe/Berlin")
    until = datetime(2036, 1, 1, tzinfo=UTC)
    listed = next_occurrences(schedule, after=T0, count=125)
    assert count_occurrences(schedule, after=T0, until=until) == len(
        [at for at in listed if at <= until]
    )


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        (CalendarSchedule(), "calendar needs a positive years, months, weeks or days interval"),
        (CalendarSchedule(days=1, weeks=-1), "calendar needs a positive"),
        (CalendarSchedule(days=1, hour=24), "calendar hour must be between 0 and 23, got 24"),
        (CalendarSchedule(days=1, minute=60), "calendar minute must be between 0 and 59"),
        (CalendarSchedule(days=1, second=-1), "calendar second must be between 0 and 59"),
        (CalendarSchedule(months=1, day=32), "calendar day must be between 1 and 31, got 32"),
        (CalendarSchedule(months=1, day=0), "calendar day must be between 1 and 31, got 0"),
    ],
    ids=["no-interval", "negative", "hour", "minute", "second", "day-high", "day-zero"],
)
def test_calendar_refuses_out_of_range_fields(schedule: CalendarSchedule, message: str) -> None:
    with pytest.raises(ScheduleError, match=message):
        _compile(schedule)


@pytest.mark.parametrize(
    ("fields", "start"),
    [
        (CalendarSchedule(months=1, hour=9), date(2026, 1, 15)),
        (CalendarSchedule(weeks=2, hour=7, minute=45), date(2026, 2, 3)),
        (CalendarSchedule(years=1, months=2, hour=12), date(2026, 5, 20)),
        (CalendarSchedule(days=10, hour=23, minute=59, second=59), date(2026, 1, 1)),
    ],
    ids=["monthly", "fortnightly", "fourteen-months", "ten-days"],
)
def test_calendar_agrees_with_apscheduler_away_from_dst_and_month_ends(
    fields: CalendarSchedule, start: date
) -> None:
    zone = "Asia/Tokyo"  # no DST, so both libraries see the same wall clock
    theirs = CalendarIntervalTrigger(
        years=fields.years,
        months=fields.months,
        weeks=fields.weeks,
        days=fields.days,
        hour=fields.hour,
        minute=fields.minute,
        second=fields.second,
        start_date=start,
        timezone=zone,
    )
    expected = []
    previous = None
    for _ in range(24):
        previous = theirs.get_next_fire_time(previous, T0)
        expected.append(previous.astimezone(UTC))
    start_at = datetime(start.year, start.month, start.day, tzinfo=ZoneInfo(zone))
    ours = _compile(dataclasses.replace(fields, start=start_at), zone=zone)
    assert next_occurrences(ours, after=start_at - timedelta(seconds=1), count=24) == expected


# -- at -------------------------------------------------------------------------------


def test_at_fires_once() -> None:
    at = datetime.fromisoformat("2027-01-01T00:00:00+01:00")
    schedule = _compile(AtSchedule(at=at))
    assert schedule.next_after(T0) == datetime(2026, 12, 31, 23, tzinfo=UTC)
    assert schedule.next_after(at) is None
    assert count_occurrences(schedule, after=T0, until=at) == 1


@settings(max_examples=200, deadline=None)
@given(
    at_ms=st.integers(min_value=0, max_value=4_000_000_000_000),
    zone=st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"]),
)
def test_at_agrees_with_apscheduler_date_trigger(at_ms: int, zone: str) -> None:
    at = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=at_ms)
    theirs = DateTrigger(run_date=at, timezone=zone)
    ours = _compile(AtSchedule(at=at), zone)
    # DateTrigger fires once, at its instant, and never after it has fired.
    assert ours.next_after(at - timedelta(days=1)) == theirs.get_next_fire_time(None, at)
    assert ours.next_after(at) is theirs.get_next_fire_time(at, at)


def test_at_is_whole_milliseconds() -> None:
    schedule = _compile(AtSchedule(at=T0 + timedelta(microseconds=1999)))
    assert schedule.next_after(T0) == T0 + timedelta(milliseconds=1)


def test_at_outside_start_and_end_never_fires() -> None:
    schedule = _compile(AtSchedule(at=T0), start_at=T0 + timedelta(seconds=1))
    assert schedule.next_after(T0 - timedelta(days=1)) is None
    schedule = _compile(AtSchedule(at=T0), end_at=T0 - timedelta(seconds=1))
    assert schedule.next_after(T0 - timedelta(days=1)) is None


def test_at_naive_wall_time_in_a_gap_fires_after_the_gap() -> None:
    naive = datetime.fromisoformat("2026-03-29T02:30:00")
    schedule = _compile(AtSchedule(at=naive), zone="Europe/Berlin")
    assert schedule.next_after(T0) == datetime(2026, 3, 29, 1, tzinfo=UTC)


def test_at_refuses_an_unknown_zone() -> None:
    with pytest.raises(ScheduleError, match="unknown time zone 'Mars/Olympus'"):
        _compile(AtSchedule(at=T0), zone="Mars/Olympus")


# -- any schedule ---------------------------------------------------------------------


class _Hourly:
    """A schedule known only through the CompiledSchedule protocol."""

    def next_after(self, after: datetime) -> datetime | None:
        hour = after.replace(minute=0, second=0, microsecond=0)
        return hour + timedelta(hours=1)


def test_count_works_for_any_compiled_schedule() -> None:
    assert count_occurrences(_Hourly(), after=T0, until=T0 + timedelta(days=1)) == 24
