"""What the scheduler loop tells the service manager and the metrics about itself.

`LoopProgress` answers whether the loop keeps its own schedule: a tick that does
not return, or a wait that overruns the wake-up the loop planned, is a stall, and
the service watchdog must then stop being fed. The summaries read the loop's view
of its triggers from another thread; they copy the entries first (a dict copy is
atomic under the GIL), so they never see the dict change size under them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

from triggers.metrics import TriggerGauge
from triggers.scheduler.timetable import Entry


class LoopProgress:
    """Progress marks of the loop, set by its thread and read by the supervisor's."""

    def __init__(self, monotonic: Callable[[], float]) -> None:
        self._monotonic = monotonic
        self._tick_started: float | None = None
        self._wake_by: float | None = None
        self._ticks = 0
        self._lock = threading.Lock()
        self._ticked = threading.Condition(self._lock)
        self._waiting = 0  # threads in `wait_for_tick`: a tick notifies only when there are

    @property
    def ticks(self) -> int:
        """Ticks finished so far."""
        return self._ticks

    def tick_started(self) -> None:
        self._tick_started = self._monotonic()

    def tick_finished(self, *, wake_in_s: float) -> None:
        """The tick returned; the loop means to tick again within `wake_in_s`."""
        self._wake_by = self._monotonic() + max(0.0, wake_in_s)
        self._tick_started = None
        with self._lock:
            self._ticks += 1
            if self._waiting:
                self._ticked.notify_all()

    def wait_for_tick(self, *, after: int, timeout: float) -> bool:
        """Wait until more than `after` ticks finished; False after `timeout` seconds."""
        with self._lock:
            self._waiting += 1
            try:
                return self._ticked.wait_for(lambda: self._ticks > after, timeout=timeout)
            finally:
                self._waiting -= 1

    def stalled_for(self) -> float:
        """Seconds the loop is behind its own schedule (0.0 while it keeps it)."""
        now = self._monotonic()
        started = self._tick_started
        if started is not None:
            return now - started
        wake_by = self._wake_by
        return 0.0 if wake_by is None else max(0.0, now - wake_by)


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopSummary:
    """The facts a `STATUS=` line shows."""

    triggers: int
    paused: int
    blocked: int
    next_trigger_id: str | None
    next_fire_at: datetime | None


def trigger_gauges(entries: Mapping[str, Entry]) -> list[TriggerGauge]:
    """Every known trigger's state and next fire, for the metrics."""
    return [_gauge(entry) for entry in dict(entries).values()]


def summarize(entries: Mapping[str, Entry]) -> LoopSummary:
    """Counts and the next fire across the live (not retired) triggers.

    One pass over the entries without building gauges: the daemon refreshes its
    `STATUS=` with it, and ten thousand triggers must cost next to nothing.
    """
    triggers = paused = blocked = 0
    first: tuple[datetime, str] | None = None
    for entry in dict(entries).values():
        trigger = entry.trigger
        if trigger.retired:
            continue
        triggers += 1
        paused += trigger.paused
        blocked += getattr(trigger, "blocked_by", None) is not None
        due_at = entry.due_at
        if due_at is not None and trigger.claimable and (first is None or due_at < first[0]):
            first = (due_at, trigger.id)
    return LoopSummary(
        triggers=triggers,
        paused=paused,
        blocked=blocked,
        next_trigger_id=None if first is None else first[1],
        next_fire_at=None if first is None else first[0],
    )


def _gauge(entry: Entry) -> TriggerGauge:
    trigger = entry.trigger
    if trigger.retired:
        state = "retired"
    elif not trigger.spec.enabled:
        state = "disabled"
    elif trigger.paused:
        state = "paused"
    else:
        state = "enabled"
    return TriggerGauge(
        trigger_id=trigger.id,
        state=state,
        # A store that records which run blocks a trigger says so in `blocked_by`;
        # a trigger model without it reports no trigger blocked.
        blocked=getattr(trigger, "blocked_by", None) is not None,
        next_fire_at=entry.due_at if state == "enabled" else None,
    )
