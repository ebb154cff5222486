"""Waiting for runs to settle: woken in-process, polling for runs other processes own."""

from __future__ import annotations

import threading
from collections.abc import Callable

from looms_runtime._clock import monotonic
from looms_runtime.records import RunStatusInfo

POLL_S = 0.5


class SettleWaiters:
    """Wakes `wait` calls when a run this process drives settles."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._waiting: dict[str, int] = {}

    def notify(self, run_id: str) -> None:
        with self._cond:
            if run_id in self._waiting:
                self._cond.notify_all()

    def pause(self, seconds: float) -> None:
        """Sleep up to `seconds`, or until some run settles."""
        with self._cond:
            self._cond.wait(seconds)

    def wait(
        self, run_id: str, timeout_s: float, status: Callable[[str], RunStatusInfo]
    ) -> RunStatusInfo:
        """Wait for `run_id` to leave `active`; its status at the end either way."""
        deadline = monotonic() + timeout_s
        with self._cond:
            self._waiting[run_id] = self._waiting.get(run_id, 0) + 1
        try:
            while True:
                current = status(run_id)
                remaining = deadline - monotonic()
                if current.status != "active" or remaining <= 0:
                    return current
                with self._cond:
                    self._cond.wait(min(remaining, POLL_S))
        finally:
            with self._cond:
                self._waiting[run_id] -= 1
                if not self._waiting[run_id]:
                    del self._waiting[run_id]
