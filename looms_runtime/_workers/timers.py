"""One thread and a heap of wake times: a sleeping or retrying run holds no thread.

Times are read from the runtime's clock. The thread waits in real time for the gap
to the earliest wake, capped, so a clock that jumps (or a test clock that is
advanced) is noticed within the cap, or at once through `poke`.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable

import structlog

log = structlog.get_logger()

MAX_WAIT_S = 30.0


class TimerQueue:
    """Calls `fire(run_id)` once the clock reaches the time last scheduled for the run."""

    def __init__(self, clock_ms: Callable[[], int], fire: Callable[[str], object]) -> None:
        self._clock_ms = clock_ms
        self._fire = fire
        self._cond = threading.Condition()
        self._heap: list[tuple[int, int, str]] = []
        self._due: dict[str, int] = {}
        self._order = itertools.count()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="looms-timers", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def schedule(self, run_id: str, at_ms: int) -> None:
        """Wake `run_id` at `at_ms`, replacing any earlier schedule of it."""
        with self._cond:
            if self._due.get(run_id) == at_ms:
                return
            self._due[run_id] = at_ms
            heapq.heappush(self._heap, (at_ms, next(self._order), run_id))
            if self._heap[0][2] == run_id:
                self._cond.notify()

    def poke(self) -> None:
        """Look at the clock again now (it may have moved)."""
        with self._cond:
            self._cond.notify()

    def pending(self) -> dict[str, int]:
        with self._cond:
            return dict(self._due)

    def _loop(self) -> None:
        while True:
            with self._cond:
                if self._stopping:
                    return
                now = self._clock_ms()
                due: list[str] = []
                while self._heap and self._heap[0][0] <= now:
                    at_ms, _, run_id = heapq.heappop(self._heap)
                    if self._due.get(run_id) == at_ms:
                        del self._due[run_id]
                        due.append(run_id)
                if not due:
                    wait = (self._heap[0][0] - now) / 1000 if self._heap else MAX_WAIT_S
                    self._cond.wait(min(max(wait, 0.001), MAX_WAIT_S))
                    continue
            for run_id in due:
                try:
                    self._fire(run_id)
                except Exception:
                    log.exception("timer_fire_failed", run_id=run_id)
