"""The test double of `triggers.clock.Clock`: time that moves only when a test says."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta


class FakeClock:
    """A clock for tests: time moves only by `advance`, `set` or `wait`.

    `wait` advances the clock by the requested time at once (unless `stop` is set),
    so a loop driven by it runs without sleeping.
    """

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("FakeClock needs an aware datetime")
        self._now = start.astimezone(UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, delta: timedelta) -> datetime:
        with self._lock:
            self._now += delta
            return self._now

    def set(self, instant: datetime) -> None:
        """Jump to `instant`, forwards or backwards (a clock step)."""
        with self._lock:
            self._now = instant.astimezone(UTC)

    def wait(self, seconds: float, stop: threading.Event) -> bool:
        if stop.is_set():
            return True
        self.advance(timedelta(seconds=max(0.0, seconds)))
        return stop.is_set()

    def monotonic(self) -> float:
        return self.now().timestamp()
