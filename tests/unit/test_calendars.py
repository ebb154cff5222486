"""Calendars against a brute-force oracle: several years, several zones, DST days.

The oracle walks every local day of the range and says, from the rules written out
by hand (and the `holidays` package's own tables for public holidays), which days a
calendar holds; the scheduler's occurrences must then be left out exactly on those
days, whatever daylight-saving time did to their instants.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import holidays
import pytest

from tests.factories import spec
from triggers import services
from triggers.model import CalendarSpec, HolidayRule, Trigger
from triggers.scheduler.calendars import compile_calendars
from triggers.scheduler.occurrences import compile_schedule, next_occurrences

FIRST, LAST = date(2025, 1, 1), date(2028, 12, 31)
# Every DST change of 2026 in the zones below, and a few ordinary days.
DST_DAYS = (date(2026, 3, 8), date(2026, 3, 29), date(2026, 10, 25), date(2026, 11, 1))
SHUTDOWN = CalendarSpec(
    name="shutdown",
    dates=((date(2026, 12, 24), date(2026, 12, 31)), *((day, day) for day in DST_DAYS)),
    yearly=((12, 31, 1, 2), (7, 4, 7, 4)),  # one wraps the new year
    weekdays=(6,),
)
DE_BY = CalendarSpec(name="de-by", holidays=HolidayRule(country="DE", subdiv="BY"))
US_NY = CalendarSpec(name="us-ny", holidays=HolidayRule(country="US", subdiv="NY"))


def _oracle_days(calendar: CalendarSpec) -> dict[date, str]:
    held: dict[date, str] = {}
    if calendar.holidays is not None:
        rule = calendar.holidays
        language = {"DE": "de", "US": "en_US"}[rule.country]
        table = holidays.country_holidays(
            rule.country,
            subdiv=rule.subdiv,
            years=range(FIRST.year, LAST.year + 1),
            language=language,
        )
        held.update((day, str(name)) for day, name in table.items())
    day = FIRST
    while day <= LAST:
        in_dates = any(first <= day <= last for first, last in calendar.dates)
        in_yearly = any(
            (m1, d1) <= (day.month, day.day) <= (m2, d2)
            if (m1, d1) <= (m2, d2)
            else (day.month, day.day) >= (m1, d1) or (day.month, day.day) <= (m2, d2)
            for m1, d1, m2, d2 in calendar.yearly
        )
        # The weekday from the day count: 1970-01-05 was a Monday.
        weekday = (day - date(1970, 1, 5)).days % 7
        if day not in held and (in_dates or in_yearly or weekday in calendar.weekdays):
            held[day] = "rule"
        day += timedelta(days=1)
    return held


CASES = [
    ("Europe/Berlin", "30 2 * * *", DE_BY),  # 02:30 falls in the spring gap on 2026-03-29
    ("Europe/Berlin", "30 2 * * *", SHUTDOWN),
    ("America/New_York", "30 23 * * *", US_NY),  # the next UTC day, the same local one
    ("America/New_York", "30 1 * * *", SHUTDOWN),  # 01:30 repeats on 2026-11-01
    ("Australia/Lord_Howe", "15 2 * * *", SHUTDOWN),  # a half-hour DST change
    ("Asia/Kolkata", "0 0 * * *", DE_BY),
]


@pytest.mark.parametrize(
    ("zone", "cron", "calendar"), CASES, ids=[f"{z}-{c.name}" for z, _, c in CASES]
)
def test_occurrences_are_left_out_exactly_on_the_days_the_oracle_holds(
    zone: str, cron: str, calendar: CalendarSpec
) -> None:
    trigger = spec("t", cron=cron, timezone=zone, exclude=(calendar,))
    schedule = compile_schedule(trigger.schedule, trigger_id="t", timezone=zone)
    calendars = compile_calendars(trigger)
    assert calendars is not None
    tz = ZoneInfo(zone)
    start = datetime.combine(FIRST, datetime.min.time(), tzinfo=tz).astimezone(UTC)
    start -= timedelta(seconds=1)  # `after` is exclusive: a midnight occurrence counts
    end = datetime.combine(LAST, datetime.max.time(), tzinfo=tz).astimezone(UTC)
    found = [at for at in next_occurrences(schedule, after=start, count=2000) if at <= end]
    expected = _oracle_days(calendar)

    days = [at.astimezone(tz).date() for at in found]
    assert len(set(days)) == len(days) == (LAST - FIRST).days + 1  # one a local day
    for at, day in zip(found, days, strict=True):
        excluded = calendars.exclusion(at)
        if day in expected:
            assert excluded is not None, (at, day)
            assert excluded.startswith(f"{calendar.name} (")
            if expected[day] != "rule":
                assert excluded == f"{calendar.name} ({expected[day]})"
        else:
            assert excluded is None, (at, day, excluded)


def test_holiday_names_are_in_the_countrys_language_not_the_hosts() -> None:
    calendars = compile_calendars(spec("t", timezone="Europe/Berlin", exclude=(DE_BY,)))
    assert calendars is not None
    assert calendars.exclusion(datetime(2026, 11, 1, 5, tzinfo=UTC)) == "de-by (Allerheiligen)"


def test_cron_rule_holds_wall_times_in_both_hours_of_a_fall_back_night() -> None:
    nights = CalendarSpec(name="nights", cron=("* 0-5 * * *",))
    trigger = spec("t", every=timedelta(minutes=30), timezone="Europe/Berlin", exclude=(nights,))
    calendars = compile_calendars(trigger)
    assert calendars is not None
    tz = ZoneInfo("Europe/Berlin")
    at = datetime(2026, 10, 24, 20, tzinfo=UTC)
    while at < datetime(2026, 10, 25, 12, tzinfo=UTC):
        excluded = calendars.exclusion(at) is not None
        assert excluded == (at.astimezone(tz).hour < 6), at
        at += timedelta(minutes=30)


def test_only_leaves_out_days_of_none_of_its_calendars() -> None:
    workdays = CalendarSpec(name="workdays", weekdays=(0, 1, 2, 3, 4))
    calendars = compile_calendars(spec("t", only=(workdays,)))
    assert calendars is not None
    assert calendars.exclusion(datetime(2026, 11, 2, 8, tzinfo=UTC)) is None
    assert (
        calendars.exclusion(datetime(2026, 11, 1, 8, tzinfo=UTC))
        == "only workdays (not Sunday 2026-11-01)"
    )


def test_a_trigger_without_calendars_has_nothing_to_ask() -> None:
    assert compile_calendars(spec("t")) is None


def test_list_shows_the_next_fire_a_calendar_leaves_in() -> None:
    weekend = CalendarSpec(name="weekend", weekdays=(5, 6))
    now = datetime(2026, 10, 30, 12, tzinfo=UTC)  # a Friday
    trigger = Trigger(
        spec=spec("t", cron="0 6 * * *", exclude=(weekend,)),
        revision=1,
        watermark_at=now,
        created_at=now,
        updated_at=now,
    )
    view = services.trigger_view(trigger, now=now, last=None, active_run_id=None)
    assert view.next_fire is not None
    assert view.next_fire.occurrence_at == datetime(2026, 11, 2, 6, tzinfo=UTC)  # Monday
    fires = services.upcoming_fires(trigger, now=now, until=None, limit=2)
    assert fires == [datetime(2026, 11, 2, 6, tzinfo=UTC), datetime(2026, 11, 3, 6, tzinfo=UTC)]
