"""Times the CLI reads (`--since 2h ago`) and shows (`--local`)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from triggers.errors import InvalidTimeError
from triggers.times import parse_time, show_time

NOW = datetime(2026, 3, 29, 10, 30, 15, tzinfo=UTC)  # the day Europe/Berlin springs forward


@pytest.fixture
def berlin() -> Iterator[None]:
    """This process's local zone is Europe/Berlin for the test."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "Europe/Berlin"
    time.tzset()
    yield
    if before is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = before
    time.tzset()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("now", NOW),
        ("today", datetime(2026, 3, 29, tzinfo=UTC)),
        ("yesterday", datetime(2026, 3, 28, tzinfo=UTC)),
        ("tomorrow", datetime(2026, 3, 30, tzinfo=UTC)),
        ("+1h", NOW + timedelta(hours=1)),
        ("in 90m", NOW + timedelta(minutes=90)),
        ("-2h", NOW - timedelta(hours=2)),
        ("2h ago", NOW - timedelta(hours=2)),
        ("1h 30m ago", NOW - timedelta(minutes=90)),
        ("2026-01-01", datetime(2026, 1, 1, tzinfo=UTC)),
        ("2026-01-01T02:30", datetime(2026, 1, 1, 2, 30, tzinfo=UTC)),
        ("2026-01-01T02:30:00Z", datetime(2026, 1, 1, 2, 30, tzinfo=UTC)),
        ("2026-01-01T02:30:00+01:00", datetime(2026, 1, 1, 1, 30, tzinfo=UTC)),
    ],
)
def test_every_documented_form_reads_in_utc_by_default(text: str, expected: datetime) -> None:
    assert parse_time(text, now=NOW) == expected


@pytest.mark.usefixtures("berlin")
def test_local_reads_midnight_and_naive_times_in_the_local_zone() -> None:
    # Midnight of the 29th is still winter time (+01:00); noon is summer time (+02:00).
    assert parse_time("today", now=NOW, local=True) == datetime(2026, 3, 28, 23, tzinfo=UTC)
    assert parse_time("2026-03-29T12:00", now=NOW, local=True) == datetime(
        2026, 3, 29, 10, tzinfo=UTC
    )
    assert parse_time("2026-03-29T12:00Z", now=NOW, local=True) == datetime(
        2026, 3, 29, 12, tzinfo=UTC
    )


@pytest.mark.usefixtures("berlin")
def test_tables_show_utc_or_local_time_with_its_offset() -> None:
    assert show_time(NOW) == "2026-03-29T10:30:15.000Z"
    assert show_time(NOW, local=True) == "2026-03-29T12:30:15.000+02:00"
    assert show_time(None) is None


@pytest.mark.parametrize("text", ["yesterday-ish", "5M ago", "+", "in", "-1x", "2026-13-01", ""])
def test_anything_else_is_refused_naming_the_forms(text: str) -> None:
    with pytest.raises(InvalidTimeError) as caught:
        parse_time(text, now=NOW)
    assert caught.value.exit_code == 2


@pytest.mark.parametrize(
    "text", ["9999-12-31T23:59:59Z", "9000-01-01T00:00:01Z", "1899-12-31", "in 99999w"]
)
def test_a_time_outside_the_range_is_refused_naming_the_range(text: str) -> None:
    with pytest.raises(InvalidTimeError) as caught:
        parse_time(text, now=NOW)
    assert caught.value.exit_code == 2
    assert str(caught.value) in {
        f"time {text!r} is out of range: use one from 1900-01-01T00:00:00.000Z to "
        "9000-01-01T00:00:00.000Z",
        f"cannot parse time {text!r}: duration {text.removeprefix('+').removeprefix('in ')!r} "
        "is longer than a century",
    }
