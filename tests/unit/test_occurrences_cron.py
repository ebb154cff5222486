"""Cron expressions: the dialect, hashing, refusals and the trigger's start/end bounds."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from triggers.errors import ExitCode, ScheduleError
from triggers.model import CronSchedule
from triggers.scheduler.occurrences import compile_schedule, next_occurrences


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def _next(expression: str, after: str, count: int, *, trigger_id: str = "t") -> list[str]:
    schedule = compile_schedule(CronSchedule(expression=expression), trigger_id=trigger_id)
    found = next_occurrences(schedule, after=_utc(after), count=count)
    return [at.strftime("%Y-%m-%dT%H:%M:%SZ") for at in found]


# (id, expression, after (exclusive), the next occurrences in UTC)
CASES = [
    (
        "five-fields-ranges-steps",
        "*/20 9-10 * * 1-5",
        "2026-01-02T10:30:00Z",  # a Friday
        ["2026-01-02T10:40:00Z", "2026-01-05T09:00:00Z", "2026-01-05T09:20:00Z"],
    ),
    (
        "six-fields-leading-seconds",
        "*/20 * * * * *",
        "2026-01-01T00:00:00Z",
        ["2026-01-01T00:00:20Z", "2026-01-01T00:00:40Z", "2026-01-01T00:01:00Z"],
    ),
    (
        "six-fields-fixed-second",
        "15 30 2 * * *",
        "2026-01-01T00:00:00Z",
        ["2026-01-01T02:30:15Z", "2026-01-02T02:30:15Z"],
    ),
    (
        "every-second",
        "* * * * * *",
        "2026-01-01T23:59:58Z",
        ["2026-01-01T23:59:59Z", "2026-01-02T00:00:00Z", "2026-01-02T00:00:01Z"],
    ),
    ("macro-yearly", "@yearly", "2026-01-01T00:00:00Z", ["2027-01-01T00:00:00Z"]),
    ("macro-annually", "@annually", "2026-01-01T00:00:00Z", ["2027-01-01T00:00:00Z"]),
    ("macro-monthly", "@monthly", "2026-01-01T00:00:00Z", ["2026-02-01T00:00:00Z"]),
    ("macro-weekly-sunday", "@weekly", "2026-01-01T00:00:00Z", ["2026-01-04T00:00:00Z"]),
    ("macro-daily", "@daily", "2026-01-01T00:00:00Z", ["2026-01-02T00:00:00Z"]),
    ("macro-midnight", "@midnight", "2026-01-01T00:00:00Z", ["2026-01-02T00:00:00Z"]),
    (
        "macro-hourly",
        "@hourly",
        "2026-01-01T00:00:00Z",
        ["2026-01-01T01:00:00Z", "2026-01-01T02:00:00Z"],
    ),
    ("macro-case-insensitive", "@DAILY", "2026-01-01T00:00:00Z", ["2026-01-02T00:00:00Z"]),
    (
        "last-day-of-month",
        "0 0 L * *",
        "2026-01-01T00:00:00Z",
        ["2026-01-31T00:00:00Z", "2026-02-28T00:00:00Z", "2026-03-31T00:00:00Z"],
    ),
    ("last-day-leap-february", "0 0 L 2 *", "2027-03-01T00:00:00Z", ["2028-02-29T00:00:00Z"]),
    (
        "nearest-weekday",
        "0 0 15W * *",
        "2026-01-01T00:00:00Z",  # Jan 15 is a Thursday, Feb 15 a Sunday
        ["2026-01-15T00:00:00Z", "2026-02-16T00:00:00Z"],
    ),
    ("nearest-weekday-saturday", "0 0 15W 8 *", "2026-01-01T00:00:00Z", ["2026-08-14T00:00:00Z"]),
    (
        "nth-weekday",
        "0 0 * * 5#3",
        "2026-01-01T00:00:00Z",
        ["2026-01-16T00:00:00Z", "2026-02-20T00:00:00Z"],
    ),
    ("last-weekday-of-month", "0 0 * * L5", "2026-01-01T00:00:00Z", ["2026-01-30T00:00:00Z"]),
    (
        "day-of-month-or-day-of-week",
        "0 0 13 * 5",
        "2026-01-01T00:00:00Z",  # Fridays and the 13th (a Tuesday)
        [
            "2026-01-02T00:00:00Z",
            "2026-01-09T00:00:00Z",
            "2026-01-13T00:00:00Z",
            "2026-01-16T00:00:00Z",
        ],
    ),
    (
        "names",
        "0 9 * feb mon,fri",
        "2026-01-01T00:00:00Z",
        ["2026-02-02T09:00:00Z", "2026-02-06T09:00:00Z"],
    ),
    ("sunday-as-seven", "0 0 * * 7", "2026-01-01T00:00:00Z", ["2026-01-04T00:00:00Z"]),
    ("extra-whitespace", "  0   0  * *  * ", "2026-01-01T00:00:00Z", ["2026-01-02T00:00:00Z"]),
    (
        "leap-day-only",
        "0 0 29 2 *",
        "2026-01-01T00:00:00Z",
        ["2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"],
    ),
]


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_cron_next_occurrences_match_table(
    expression: str, after: str, expected: list[str]
) -> None:
    assert _next(expression, after, len(expected)) == expected


def test_hash_is_stable_for_one_trigger_id() -> None:
    first = _next("H H * * *", "2026-01-01T00:00:00Z", 3, trigger_id="job-a")
    again = _next("H H * * *", "2026-01-01T00:00:00Z", 3, trigger_id="job-a")
    assert first == again
    assert first[0] == "2026-01-01T13:15:00Z"  # pinned: a change would move every H trigger


def test_hash_differs_between_trigger_ids() -> None:
    job_a = _next("H H * * *", "2026-01-01T00:00:00Z", 1, trigger_id="job-a")
    job_b = _next("H H * * *", "2026-01-01T00:00:00Z", 1, trigger_id="job-b")
    assert job_a != job_b


def test_hash_range_and_step_stay_inside_their_bounds() -> None:
    found = _next("H(0-5) H/6 * * *", "2026-01-01T00:00:00Z", 8, trigger_id="job-c")
    minutes = {datetime.fromisoformat(at).minute for at in found}
    hours = sorted({datetime.fromisoformat(at).hour for at in found})
    assert len(minutes) == 1
    assert minutes <= set(range(6))
    assert len(hours) == 4
    assert all(later - earlier == 6 for earlier, later in itertools.pairwise(hours))


def test_macros_are_not_hashed() -> None:
    assert _next("@daily", "2026-01-01T00:00:00Z", 1, trigger_id="job-a") == [
        "2026-01-02T00:00:00Z"
    ]


REFUSED = [
    (
        "reboot",
        "@reboot",
        "@reboot is not supported: triggers fire on a clock, not at daemon start; "
        "use a systemd unit for boot-time work",
    ),
    (
        "february-30",
        "0 0 30 2 *",
        "cron expression '0 0 30 2 *' never fires: February has no day 30",
    ),
    (
        "february-31-last-minute",
        "59 23 31 2 *",
        "cron expression '59 23 31 2 *' never fires: February has no day 31",
    ),
    (
        "short-months-31",
        "0 0 31 4,6 *",
        "cron expression '0 0 31 4,6 *' never fires: none of April, June has a day 31",
    ),
    ("out-of-range", "61 * * * *", "invalid cron expression '61 * * * *': "),
    ("bad-name", "0 0 * * funday", "invalid cron expression '0 0 * * funday': "),
    ("three-fields", "* * *", "cron expression '* * *' has 3 fields; expected 5"),
    ("seven-fields", "* * * * * * 2030", "cron expression '* * * * * * 2030' has 7 fields"),
    ("unknown-macro", "@fortnightly", "unknown cron macro '@fortnightly'; use one of @yearly"),
    ("random", "R * * * *", "cron expression 'R * * * *' uses R (random)"),
    ("empty", "", "cron expression '' has 0 fields"),
]


@pytest.mark.parametrize(
    ("expression", "message"), [case[1:] for case in REFUSED], ids=[case[0] for case in REFUSED]
)
def test_invalid_cron_expression_is_refused_with_its_reason(expression: str, message: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        compile_schedule(CronSchedule(expression=expression), trigger_id="t")
    assert caught.value.message.startswith(message)
    assert caught.value.code == "TRG-200"
    assert caught.value.exit_code is ExitCode.BAD_INPUT


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("61 * * * *", "minute 61 is out of range 0-59"),
        ("0 24 * * *", "hour 24 is out of range 0-23"),
        ("0 0 0 * *", "day-of-month 0 is out of range 1-31"),
        ("0 0 1-32 * *", "day-of-month 32 is out of range 1-31"),
        ("0 0 * 13 *", "month 13 is out of range 1-12"),
        ("0 0 * * 1,8", "day-of-week 8 is out of range 0-7"),
        ("60 0 0 * * *", "second 60 is out of range 0-59"),
        ("*/0 * * * *", "minute step 0 is not a step"),
    ],
)
def test_a_number_out_of_its_field_is_named_with_the_field(expression: str, reason: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        compile_schedule(CronSchedule(expression=expression), trigger_id="t")
    assert caught.value.message == f"invalid cron expression {expression!r}: {reason}"


@pytest.mark.parametrize(
    ("zone", "message"),
    [
        ("Europe/Berln", "unknown time zone 'Europe/Berln'"),
        ("", "unknown time zone ''"),
        ("../etc/passwd", "unknown time zone '../etc/passwd'"),
        ("localtime", "time zone 'localtime' depends on the host"),
    ],
    ids=["typo", "empty", "path", "host-local"],
)
def test_bad_time_zone_is_refused(zone: str, message: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        compile_schedule(CronSchedule(expression="* * * * *"), trigger_id="t", timezone=zone)
    assert caught.value.message.startswith(message)


def test_no_occurrence_before_start_at_or_after_end_at() -> None:
    schedule = compile_schedule(
        CronSchedule(expression="0 * * * *"),
        trigger_id="t",
        start_at=_utc("2026-01-01T03:00:00Z"),
        end_at=_utc("2026-01-01T05:00:00Z"),
    )
    found = next_occurrences(schedule, after=_utc("2026-01-01T00:00:00Z"), count=10)
    assert found == [
        _utc("2026-01-01T03:00:00Z"),
        _utc("2026-01-01T04:00:00Z"),
        _utc("2026-01-01T05:00:00Z"),
    ]


def test_end_before_start_is_refused() -> None:
    with pytest.raises(ScheduleError, match="is before start"):
        compile_schedule(
            CronSchedule(expression="* * * * *"),
            trigger_id="t",
            start_at=_utc("2026-01-02T00:00:00Z"),
            end_at=_utc("2026-01-01T00:00:00Z"),
        )


def test_next_after_is_strict_and_ignores_sub_second_parts() -> None:
    schedule = compile_schedule(CronSchedule(expression="* * * * * *"), trigger_id="t")
    on_second = _utc("2026-01-01T00:00:00Z")
    assert schedule.next_after(on_second) == on_second + timedelta(seconds=1)
    assert schedule.next_after(on_second - timedelta(microseconds=1)) == on_second
    assert schedule.next_after(on_second + timedelta(milliseconds=999)) == on_second + timedelta(
        seconds=1
    )


def test_cron_is_evaluated_in_the_trigger_zone() -> None:
    schedule = compile_schedule(
        CronSchedule(expression="0 9 * * *"), trigger_id="t", timezone="Asia/Tokyo"
    )
    assert schedule.next_after(_utc("2026-01-01T00:00:00Z")) == _utc("2026-01-02T00:00:00Z")


@pytest.mark.parametrize(
    "after",
    [
        datetime(1, 1, 2, tzinfo=UTC),
        datetime(1969, 12, 31, tzinfo=UTC),
        datetime(9999, 12, 30, tzinfo=UTC),
    ],
    ids=["year-1", "before-epoch", "year-9999"],
)
def test_every_second_cron_is_exact_far_from_now(after: datetime) -> None:
    schedule = compile_schedule(
        CronSchedule(expression="* * * * * *"), trigger_id="t", timezone="America/New_York"
    )
    assert schedule.next_after(after) == after + timedelta(seconds=1)


def test_cron_past_year_9999_has_no_next_occurrence() -> None:
    schedule = compile_schedule(CronSchedule(expression="0 0 1 1 *"), trigger_id="t")
    assert schedule.next_after(datetime(9999, 6, 1, tzinfo=UTC)) is None
