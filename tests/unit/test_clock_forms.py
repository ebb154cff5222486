"""The instant forms the ledger and the runtime keys are written in: `iso` (RFC 3339,
milliseconds) and `iso_key` (seconds, or milliseconds when there are any), the same
for any instant and any zone it is given in, first time or again (`iso_key` keeps
the dates and times of day it wrote)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from triggers.clock import iso, iso_key
from triggers.model import idempotency_key

instants = st.datetimes(
    # Naive bounds, as hypothesis takes them; the zones come with `timezones`.
    min_value=datetime(1, 1, 2),  # noqa: DTZ001
    max_value=datetime(9999, 12, 30),  # noqa: DTZ001
    timezones=st.sampled_from(
        [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(-timedelta(hours=8))]
    ),
)


def _written(instant: datetime, timespec: str) -> str:
    """The standard library's RFC 3339 form of the instant in UTC, with `Z`."""
    return instant.astimezone(UTC).replace(tzinfo=None).isoformat(timespec=timespec) + "Z"


def _expected_key(instant: datetime) -> str:
    return _written(instant, "milliseconds" if instant.microsecond else "seconds")


@given(instants)
def test_iso_key_writes_utc_seconds_or_milliseconds(instant: datetime) -> None:
    expected = _expected_key(instant)
    assert iso_key(instant) == expected
    assert iso_key(instant) == expected  # again, from what it kept
    assert iso_key(instant.astimezone(UTC)) == expected


@given(instants)
def test_iso_writes_utc_milliseconds(instant: datetime) -> None:
    assert iso(instant) == _written(instant, "milliseconds")


def test_an_occurrence_key_names_its_trigger_and_utc_second() -> None:
    at = datetime(2027, 3, 28, 3, 30, tzinfo=timezone(timedelta(hours=2)))
    assert idempotency_key("backup", at) == "backup:2027-03-28T01:30:00Z"
    assert idempotency_key("backup", at, "deploy-1") == "backup:manual:deploy-1"
    assert iso_key(datetime(27, 1, 5, 0, 0, 7, tzinfo=UTC)) == "0027-01-05T00:00:07Z"
