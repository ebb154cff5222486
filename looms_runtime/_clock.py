"""The only module of `looms_runtime` that reads the system clocks.

Instants that become durable (event times, retry and wake times) come from the
clock injected into the `Runtime`; this module supplies the default for it. Elapsed
durations of local work (a command's timeout, a caller's wait) are measured on the
monotonic clock instead, so a wall-clock step can neither shorten nor stretch them.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def utc_now() -> datetime:
    """The current instant as an aware UTC datetime (the default runtime clock)."""
    return datetime.now(UTC)


def monotonic() -> float:
    """Seconds on a clock that never goes backwards, for measuring elapsed time."""
    return time.monotonic()


def to_ms(instant: datetime) -> int:
    """Epoch milliseconds of an aware datetime.

    Raises:
        ValueError: `instant` is naive (its zone would be a guess).
    """
    if instant.tzinfo is None:
        raise ValueError("the runtime clock must return aware datetimes")
    return (instant - _EPOCH) // _MS


def duration_ms(duration: timedelta) -> int:
    """A duration in whole milliseconds."""
    return int(duration / _MS)


def from_ms(epoch_ms: int) -> datetime:
    """The aware UTC datetime of epoch milliseconds."""
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
