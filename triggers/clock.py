"""The only place that reads the wall clock; everything else receives a `Clock`."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """Source of time and of interruptible waits."""

    def now(self) -> datetime:
        """The current instant, an aware UTC datetime."""
        ...

    def wait(self, seconds: float, stop: threading.Event) -> bool:
        """Wait up to `seconds` or until `stop` is set; True when `stop` is set."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards, for intervals and durations."""
        ...


class SystemClock:
    """The real clock: `now` reads the system time, `wait` blocks on the event."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def wait(self, seconds: float, stop: threading.Event) -> bool:
        return stop.wait(max(0.0, seconds))

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards, for durations."""
        return time.monotonic()


def monotonic_usec() -> int:
    """CLOCK_MONOTONIC in microseconds, the clock systemd's `MONOTONIC_USEC=` is read on."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    """An aware UTC datetime; a convenience for tests and examples."""
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def to_ms(instant: datetime) -> int:
    """Epoch milliseconds of an aware datetime (the store's occurrence unit)."""
    if instant.tzinfo is None:
        raise ValueError("naive datetime")
    # Integer arithmetic: float timestamps round 1 ms off for some instants.
    delta = instant - _EPOCH
    return delta.days * 86_400_000 + delta.seconds * 1000 + delta.microseconds // 1000


def from_ms(ms: int) -> datetime:
    """The aware UTC datetime of epoch milliseconds."""
    return _EPOCH + timedelta(milliseconds=ms)


def iso(instant: datetime) -> str:
    """RFC 3339 UTC with `Z` and millisecond precision: `2026-01-01T00:00:00.000Z`."""
    # What `isoformat(timespec="milliseconds")` writes, in half its time: every
    # occurrence is written out a few times (its key, its run's environment, logs).
    at = instant.astimezone(UTC)
    return _ISO_MS % (
        at.year,
        at.month,
        at.day,
        at.hour,
        at.minute,
        at.second,
        at.microsecond // 1000,
    )


def iso_key(instant: datetime) -> str:
    """The occurrence form used in idempotency keys: seconds, or milliseconds when present.

    Every occurrence claimed writes one, and `%` formatting six fields is most of
    its cost: the date and the time of day are written once each and kept (the
    days an occurrence falls on, the few times of day a schedule uses; times of
    day; each up to `_KEPT`)."""
    at = instant.astimezone(UTC)
    if at.microsecond:
        return iso(at)
    ordinal = at.toordinal()
    day = _DAYS.get(ordinal)
    if day is None:
        day = _ISO_DAY % (at.year, at.month, at.day)
        if len(_DAYS) < _KEPT:
            _DAYS[ordinal] = day
    second = at.hour * 3600 + at.minute * 60 + at.second
    time = _TIMES.get(second)
    if time is None:
        time = _ISO_TIME % (at.hour, at.minute, at.second)
        if len(_TIMES) < _KEPT:
            _TIMES[second] = time
    return day + time


_ISO_MS = "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ"
_ISO_DAY = "%04d-%02d-%02dT"
_ISO_TIME = "%02d:%02d:%02dZ"
_DAYS: dict[int, str] = {}
_TIMES: dict[int, str] = {}
_KEPT = 4096


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
