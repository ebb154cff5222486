"""Cron against the brute-force evaluator of `cron_oracle`, over every form of the dialect.

Generated expressions mix every form (lists, ranges, steps, names, `?`, `L`, `a-L`,
`W`, `#`, `L<weekday>`, `H` with ranges and steps, 6 fields with seconds, macros)
in six zones (UTC, two northern DST zones, Lord Howe's 30-minute change, and two
southern zones, one of which changes at midnight), starting anywhere in 2026-2030,
often within a day and a half of a DST change. Each example checks the next
occurrences, their count, and the "never fires" refusal.

`CRON_ORACLE_EXAMPLES=5000 pytest tests/unit/test_cron_oracle.py` runs a longer search
(the default keeps the module to a few seconds).
"""

from __future__ import annotations

import functools
import os
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.unit import cron_oracle
from triggers.errors import ScheduleError
from triggers.model import CronSchedule
from triggers.scheduler.occurrences import compile_schedule, count_occurrences, next_occurrences

ZONES = (
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "Pacific/Auckland",
    "America/Santiago",
)
FIRST, END = datetime(2026, 1, 1, tzinfo=UTC), datetime(2031, 1, 1, tzinfo=UTC)
LIMIT = 12
WINDOW = timedelta(hours=36)
EXAMPLES = int(os.environ.get("CRON_ORACLE_EXAMPLES", "150"))
TRIGGER_IDS = ("job-a", "job-b", "nightly-report")
MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")


def check(expression: str, zone: str, after: datetime, *, trigger_id: str = "job-a") -> None:
    """The implementation agrees with the evaluator after `after`.

    The next `LIMIT` occurrences (up to `END`), and how many fall in the 36 hours
    after `after` or up to the last of those, whichever is later.
    """
    oracle = cron_oracle.parse(expression, key=trigger_id)
    if not cron_oracle.fires_ever(oracle):
        with pytest.raises(ScheduleError, match="never fires"):
            compile_schedule(CronSchedule(expression=expression), trigger_id=trigger_id)
        return
    schedule = compile_schedule(
        CronSchedule(expression=expression), trigger_id=trigger_id, timezone=zone
    )
    tz = ZoneInfo(zone)
    first = cron_oracle.firing_minutes(oracle, tz, after=after, until=END, enough=LIMIT)
    expected = cron_oracle.listing(first, LIMIT)
    found = next_occurrences(schedule, after=after, count=LIMIT)
    assert [at for at in found if at <= END] == expected
    until = min(END, max([after + WINDOW, *expected]))
    window = cron_oracle.firing_minutes(oracle, tz, after=after, until=until)
    assert count_occurrences(schedule, after=after, until=until) == cron_oracle.count(window)


# -- one expression per form, checked in every zone -------------------------------------

FORMS = [
    ("every-minute", "* * * * *"),
    ("values-list-range-step", "5,35 1-3,22 * * *"),
    ("step-on-value", "59/15 2/5 * * *"),
    ("range-step", "10-50/20 0-4/2 * * *"),
    ("names", "0 2 * mar,oct sun"),
    ("month-range-through-year-end", "30 1 * nov-feb *"),
    ("weekday-range-through-week-end", "0 3 * * fri-mon"),
    ("sunday-as-seven", "15 2 * * 7"),
    ("question-marks", "0 2 ? * ?"),
    ("day-of-month-and-week-or", "0 2 13 * 5"),
    ("day-of-month-step-is-not-restricted", "0 2 */2 * 1"),
    ("day-of-week-step-is-not-restricted", "0 2 13 * */3"),
    ("last-day", "0 2 L * *"),
    ("last-day-in-a-list", "30 2 1,L * *"),
    ("range-to-last-day", "0 1 26-L * *"),
    ("last-day-or-weekday", "0 2 L * sat"),
    ("nearest-weekday", "0 12 15W * *"),
    ("nearest-weekday-past-month-end", "0 12 31W * *"),
    ("nearest-weekday-written-first", "0 12 W1 * *"),
    ("nearest-weekday-or-weekday", "0 12 15W * 1"),
    ("nth-weekday", "0 2 * * 0#1"),
    ("nth-weekday-name-or-day", "0 12 10 * THU#2"),
    ("nth-weekday-range", "0 12 * * mon-wed#2"),
    ("fifth-weekday", "0 12 * * 5#5"),
    ("nearest-weekday-or-nth", "0 12 28W * MON#4"),
    ("last-weekday", "0 2 * * L0"),
    ("last-weekday-or-day", "0 12 6 * L1"),
    ("last-weekdays-list", "0 2 * * L1,L5,2#3"),
    ("day-step-and-nth", "0 2 */5 * 5#1"),
    ("hash", "H H * * *"),
    ("hash-range-and-step", "H(0-29) H/6 H(1-28) * H"),
    ("hash-step-days", "0 2 H/10 * *"),
    ("seconds", "*/20 30 2 * * *"),
    ("seconds-fixed", "15 0 3 * * *"),
    ("seconds-every", "* * 2 * * *"),
    ("seconds-hash", "H */30 1 L * *"),
    ("wildcard-hour", "30 * 1,15 * *"),
    ("wildcard-minute-step", "*/15 1-2 * * 0"),
    ("macro-yearly", "@yearly"),
    ("macro-annually", "@annually"),
    ("macro-monthly", "@monthly"),
    ("macro-weekly", "@weekly"),
    ("macro-daily", "@daily"),
    ("macro-midnight", "@midnight"),
    ("macro-hourly", "@hourly"),
    ("leap-day-only", "0 12 29 2 *"),
    ("never-fires", "0 0 30 2 *"),
    ("never-fires-in-short-months", "0 0 31 4,6,9,11 *"),
]


@functools.cache
def transition_days(zone_name: str) -> tuple[date, ...]:
    """Local dates whose noon offset differs from the day before's, 2026-2030."""
    zone = ZoneInfo(zone_name)
    found = []
    day = date(2026, 1, 1)
    while day.year <= 2030:
        following = day + timedelta(days=1)
        if (
            datetime.combine(day, time(12), zone).utcoffset()
            != datetime.combine(following, time(12), zone).utcoffset()
        ):
            found.append(following)
        day = following
    return tuple(found)


def _near_change(zone: str, index: int) -> datetime:
    """Noon, local time, the day before the zone's `index`-th change (or a fixed date)."""
    days = transition_days(zone)
    if not days:
        return datetime(2026, 3 + 3 * index, 1, tzinfo=UTC)
    local = datetime.combine(days[index] - timedelta(days=1), time(12), ZoneInfo(zone))
    return local.astimezone(UTC)


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize("expression", [form[1] for form in FORMS], ids=[form[0] for form in FORMS])
def test_every_form_matches_the_evaluator_across_dst_changes(expression: str, zone: str) -> None:
    check(expression, zone, _near_change(zone, ZONES.index(zone) % 2))


def test_every_zone_but_utc_has_two_changes_a_year() -> None:
    for zone in ZONES[1:]:
        assert len(transition_days(zone)) == 10, zone


# -- generated expressions ---------------------------------------------------------------


def _numbers(low: int, high: int) -> st.SearchStrategy[int]:
    return st.integers(min_value=low, max_value=high)


@st.composite
def _plain_item(
    draw: st.DrawFn, low: int, high: int, names: tuple[str, ...] = (), hot: tuple[int, ...] = ()
) -> str:
    """One list item: a value, a range, or a step; names and `hot` values are favoured."""
    values = (
        _numbers(low, high) if not hot else st.one_of(st.sampled_from(hot), _numbers(low, high))
    )

    def spelled(value: int) -> str:
        named = draw(st.booleans())
        return names[value - low] if names and named else str(value)

    kind = draw(
        st.sampled_from(["value", "value", "range", "range-step", "start-step", "star-step"])
    )
    first = draw(values)
    if kind == "value":
        return spelled(first)
    step = draw(st.sampled_from([1, 2, 3, 5, 7, 10, 15]))
    if kind == "star-step":
        return f"*/{step}"
    if kind == "start-step":
        return f"{first}/{step}"
    last = draw(_numbers(first, high))
    if kind == "range":
        return f"{spelled(first)}-{spelled(last)}"
    return f"{first}-{last}/{step}"


def _hash_field(low: int, high: int) -> st.SearchStrategy[str]:
    span = st.tuples(_numbers(low, high - 1), _numbers(1, high - low)).map(
        lambda pair: (pair[0], min(high, pair[0] + pair[1]))
    )
    return st.one_of(
        st.just("H"),
        span.map(lambda bounds: f"H({bounds[0]}-{bounds[1]})"),
        st.sampled_from([2, 3, 5, 10, 15]).map(lambda step: f"H/{step}"),
        st.tuples(span, st.sampled_from([2, 3, 5])).map(
            lambda pair: f"H({pair[0][0]}-{pair[0][1]})/{pair[1]}"
        ),
    )


def _plain_field(
    low: int, high: int, names: tuple[str, ...] = (), hot: tuple[int, ...] = ()
) -> st.SearchStrategy[str]:
    items = st.lists(_plain_item(low, high, names, hot), min_size=1, max_size=3)
    listed = items.map(",".join)
    return st.one_of(st.just("*"), listed, listed, _hash_field(low, high))  # H one time in 4


def _time_field(high: int, hot: tuple[int, ...]) -> st.SearchStrategy[str]:
    """Mostly one or a few values, so that occurrences spread over days."""
    few = st.lists(st.sampled_from(hot), min_size=1, max_size=3, unique=True)
    return st.one_of(
        few.map(lambda values: ",".join(map(str, values))), _plain_field(0, high, hot=hot)
    )


@st.composite
def _day_of_month(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["plain", "plain", "?", "L", "list-L", "to-L", "W", "W-first"]))
    day = draw(st.one_of(_numbers(1, 31), st.sampled_from([1, 15, 28, 29, 30, 31])))
    if kind == "plain":
        return draw(_plain_field(1, 31, hot=(1, 13, 15, 28, 29, 30, 31)))
    if kind in {"?", "L"}:
        return kind
    if kind == "list-L":
        return f"{day},L"
    if kind == "to-L":
        return f"{day}-L"
    return f"{day}W" if kind == "W" else f"W{day}"


@st.composite
def _day_of_week(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["plain", "plain", "?", "7", "range-wrap", "nth", "last"]))
    if kind == "plain":
        return draw(_plain_field(0, 6, DAYS))
    if kind in {"?", "7"}:
        return kind
    if kind == "range-wrap":
        first, last = draw(st.sampled_from(DAYS)), draw(st.sampled_from(DAYS))
        return f"{first}-{last}"
    last_items = _numbers(0, 7).map(lambda day: f"L{day}")
    nth_items = st.one_of(
        st.tuples(_numbers(0, 7).map(str) | st.sampled_from(DAYS), _numbers(1, 5)).map(
            lambda pair: f"{pair[0]}#{pair[1]}"
        ),
        st.tuples(_numbers(1, 5), _numbers(0, 2), _numbers(1, 5)).map(
            lambda triple: f"{DAYS[triple[0]]}-{DAYS[min(6, triple[0] + triple[1])]}#{triple[2]}"
        ),
    )
    items = st.one_of(nth_items, last_items) if kind == "nth" else last_items
    return ",".join(draw(st.lists(items, min_size=1, max_size=2)))


def _month() -> st.SearchStrategy[str]:
    wrapping = st.tuples(st.sampled_from(MONTHS[6:]), st.sampled_from(MONTHS[:6]))
    return st.one_of(
        st.just("*"),
        _plain_field(1, 12, MONTHS, hot=(2, 3, 4, 9, 10, 11)),
        wrapping.map("-".join),
    )


@st.composite
def expressions(draw: st.DrawFn) -> str:
    """Any expression of the dialect."""
    if draw(st.integers(0, 19)) == 0:
        return draw(st.sampled_from(sorted(cron_oracle.MACROS)))
    fields = [
        draw(_time_field(59, (0, 15, 30, 45, 59))),
        draw(_time_field(23, (0, 1, 2, 3, 12, 23))),
        draw(_day_of_month()),
        draw(_month()),
        draw(_day_of_week()),
    ]
    if draw(st.integers(0, 3)) == 0:
        fields.insert(0, draw(_plain_field(0, 59, hot=(0, 30, 59))))
    return " ".join(fields)


@st.composite
def starts(draw: st.DrawFn, zone: str) -> datetime:
    """An instant in 2026-2030, half of the time within 36 hours of a DST change."""
    days = transition_days(zone)
    near = draw(st.booleans())
    if days and near:
        change = datetime.combine(draw(st.sampled_from(days)), time(0), ZoneInfo(zone))
        offset = draw(_numbers(-36 * 3600, 36 * 3600))
        return change.astimezone(UTC) + timedelta(seconds=offset)
    seconds = draw(_numbers(0, int((END - FIRST).total_seconds()) - 1))
    micro = draw(st.sampled_from([0, 0, 1, 999_999]))
    return FIRST + timedelta(seconds=seconds, microseconds=micro)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data(), expression=expressions(), zone=st.sampled_from(ZONES))
def test_generated_expression_matches_the_evaluator(
    data: st.DataObject, expression: str, zone: str
) -> None:
    after = data.draw(starts(zone), label="after")
    trigger_id = data.draw(st.sampled_from(TRIGGER_IDS), label="trigger_id")
    for form in _forms(expression):
        event(form)  # `--hypothesis-show-statistics` shows how often each form came up
    check(expression, zone, after, trigger_id=trigger_id)


def _forms(expression: str) -> list[str]:
    fields = expression.lower().split()
    if len(fields) == 1:
        return ["macro"]
    *_, day_of_month, _, day_of_week = fields
    tags = {
        "6 fields": len(fields) == 6,
        "H": any(field.startswith("h") for field in fields),
        "?": "?" in expression,
        "dom L": "l" in day_of_month,
        "dom W": "w" in day_of_month,
        "dow #": "#" in day_of_week,
        "dow L": "l" in day_of_week,
        "dom and dow both restricted (OR)": oracle_restricted(day_of_month)
        and oracle_restricted(day_of_week),
    }
    return [tag for tag, present in tags.items() if present]


def oracle_restricted(field: str) -> bool:
    return not (field.startswith("*") or field == "?")
