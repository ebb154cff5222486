"""Cron's day fields: the OR of day-of-month and day-of-week with `W`, `#` and `L`.

Hand-written vectors (checked against a calendar); `test_cron_oracle.py` generates
the rest.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from triggers.errors import ScheduleError
from triggers.model import CronSchedule
from triggers.scheduler.occurrences import compile_schedule, next_occurrences

JAN_1 = datetime(2026, 1, 1, tzinfo=UTC)


def _days(expression: str, count: int, *, zone: str = "UTC") -> list[str]:
    """The next occurrences after 2026-01-01T00:00Z as weekday and local date-time."""
    schedule = compile_schedule(CronSchedule(expression=expression), trigger_id="t", timezone=zone)
    found = next_occurrences(schedule, after=JAN_1, count=count)
    return [at.strftime("%a %Y-%m-%d %H:%M") for at in found]


# (id, expression, the next occurrences from 2026-01-01)
EITHER_DAY_FIELD = [
    (
        # 15W: Jan 15 (Thu), Feb 16 (the 15th is a Sunday; also a Monday, so once)
        "nearest-weekday-or-monday",
        "0 12 15W * 1",
        [
            "Mon 2026-01-05 12:00",
            "Mon 2026-01-12 12:00",
            "Thu 2026-01-15 12:00",
            "Mon 2026-01-19 12:00",
            "Mon 2026-01-26 12:00",
            "Mon 2026-02-02 12:00",
            "Mon 2026-02-09 12:00",
            "Mon 2026-02-16 12:00",
            "Mon 2026-02-23 12:00",
        ],
    ),
    (
        "tenth-or-second-thursday",
        "0 12 10 * THU#2",
        [
            "Thu 2026-01-08 12:00",
            "Sat 2026-01-10 12:00",
            "Tue 2026-02-10 12:00",
            "Thu 2026-02-12 12:00",
            "Tue 2026-03-10 12:00",
            "Thu 2026-03-12 12:00",
        ],
    ),
    (
        # 28W: Jan 28 (Wed), Feb 27 and Mar 27 (the 28th is a Saturday both times)
        "nearest-weekday-or-fourth-monday",
        "0 12 28W * MON#4",
        [
            "Mon 2026-01-26 12:00",
            "Wed 2026-01-28 12:00",
            "Mon 2026-02-23 12:00",
            "Fri 2026-02-27 12:00",
            "Mon 2026-03-23 12:00",
            "Fri 2026-03-27 12:00",
        ],
    ),
    (
        "sixth-or-last-monday",
        "0 12 6 * L1",
        [
            "Tue 2026-01-06 12:00",
            "Mon 2026-01-26 12:00",
            "Fri 2026-02-06 12:00",
            "Mon 2026-02-23 12:00",
            "Fri 2026-03-06 12:00",
            "Mon 2026-03-30 12:00",
        ],
    ),
    (
        "last-day-or-first-friday",
        "0 6 L * 5#1",
        [
            "Fri 2026-01-02 06:00",
            "Sat 2026-01-31 06:00",
            "Fri 2026-02-06 06:00",
            "Sat 2026-02-28 06:00",
            "Fri 2026-03-06 06:00",
        ],
    ),
    ("plain-range-restricts", "0 0 1-31 * 1", ["Fri 2026-01-02 00:00", "Sat 2026-01-03 00:00"]),
]


@pytest.mark.parametrize(
    ("expression", "expected"),
    [case[1:] for case in EITHER_DAY_FIELD],
    ids=[case[0] for case in EITHER_DAY_FIELD],
)
def test_a_date_matching_either_restricted_day_field_fires(
    expression: str, expected: list[str]
) -> None:
    assert _days(expression, len(expected)) == expected


BOTH_DAY_FIELDS = [
    # A field starting with `*` is not restricted (Vixie cron): the other must match too.
    (
        "odd-days-that-are-mondays",
        "0 0 */2 * 1",
        ["Mon 2026-01-05 00:00", "Mon 2026-01-19 00:00", "Mon 2026-02-09 00:00"],
    ),
    (
        "thirteenths-on-sunday-wednesday-saturday",
        "0 0 13 * */3",
        ["Wed 2026-05-13 00:00", "Sat 2026-06-13 00:00", "Sun 2026-09-13 00:00"],
    ),
    ("question-mark-is-not-restricted", "0 0 ? * 1", ["Mon 2026-01-05 00:00"]),
    (
        "every-fifth-day-that-is-a-first-monday",
        "0 0 */5 * 1#1",
        ["Mon 2026-04-06 00:00", "Mon 2026-06-01 00:00"],
    ),
]


@pytest.mark.parametrize(
    ("expression", "expected"),
    [case[1:] for case in BOTH_DAY_FIELDS],
    ids=[case[0] for case in BOTH_DAY_FIELDS],
)
def test_an_unrestricted_day_field_must_match_as_well(expression: str, expected: list[str]) -> None:
    assert _days(expression, len(expected)) == expected


ONE_VALUE_RANGES = [
    ("hour", "0 3-3 * * *", ["Thu 2026-01-01 03:00", "Fri 2026-01-02 03:00"]),
    ("minute-with-step", "5-5/10 * * * *", ["Thu 2026-01-01 00:05", "Thu 2026-01-01 01:05"]),
    ("to-last-day", "0 0 31-L * *", ["Sat 2026-01-31 00:00", "Tue 2026-03-31 00:00"]),
    ("weekday-name", "0 0 * * sun-sun", ["Sun 2026-01-04 00:00", "Sun 2026-01-11 00:00"]),
    ("nth-weekday", "0 0 * * mon-mon#2", ["Mon 2026-01-12 00:00", "Mon 2026-02-09 00:00"]),
    ("month-name", "0 0 1 mar-MAR *", ["Sun 2026-03-01 00:00", "Mon 2027-03-01 00:00"]),
]


@pytest.mark.parametrize(
    ("expression", "expected"),
    [case[1:] for case in ONE_VALUE_RANGES],
    ids=[case[0] for case in ONE_VALUE_RANGES],
)
def test_a_range_from_a_value_to_itself_is_that_value(expression: str, expected: list[str]) -> None:
    assert _days(expression, len(expected)) == expected


def test_first_or_last_sunday_follows_the_dst_rule() -> None:
    # Berlin: the last Sundays of March and October 2026 are its DST changes.
    schedule = compile_schedule(
        CronSchedule(expression="30 2 1 * L0"), trigger_id="t", timezone="Europe/Berlin"
    )
    after = datetime(2026, 3, 2, tzinfo=UTC)
    found = next_occurrences(schedule, after=after, count=8)
    assert [at.isoformat() for at in found] == [
        "2026-03-29T01:00:00+00:00",  # 02:30 is skipped: 03:00 CEST
        "2026-04-01T00:30:00+00:00",
        "2026-04-26T00:30:00+00:00",
        "2026-05-01T00:30:00+00:00",
        "2026-05-31T00:30:00+00:00",
        "2026-06-01T00:30:00+00:00",
        "2026-06-28T00:30:00+00:00",
        "2026-07-01T00:30:00+00:00",
    ]
    october = next_occurrences(schedule, after=datetime(2026, 10, 2, tzinfo=UTC), count=2)
    assert october == [  # 02:30 happens twice: the first, CEST
        datetime(2026, 10, 25, 0, 30, tzinfo=UTC),
        datetime(2026, 11, 1, 1, 30, tzinfo=UTC),
    ]


REFUSED = [
    ("mixed-nth", "0 0 * * 1,2#3", "mixes plain days of the week with '2#3' in one field"),
    ("mixed-last", "0 0 * * L5,fri", "mixes plain days of the week with 'l5' in one field"),
    ("never-on-both", "0 0 31 2 */7", "never fires: no date matches it"),
    ("never-nearest-and-nth", "0 0 */10 2 5#5", "never fires: no date matches it"),
]


@pytest.mark.parametrize(
    ("expression", "message"), [case[1:] for case in REFUSED], ids=[case[0] for case in REFUSED]
)
def test_day_fields_that_cannot_work_are_refused(expression: str, message: str) -> None:
    with pytest.raises(ScheduleError, match=message.replace("(", r"\(")):
        compile_schedule(CronSchedule(expression=expression), trigger_id="t")


def test_sixth_or_last_monday_is_not_refused() -> None:
    schedule = compile_schedule(CronSchedule(expression="0 12 6 * L1"), trigger_id="t")
    assert schedule.next_after(JAN_1) == datetime(2026, 1, 6, 12, tzinfo=UTC)
