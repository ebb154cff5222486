"""Watches active runs and records them in the ledger when they stop.

One thread for every run, not one per run: it records settlements the runner
reports as they happen, and inspects every watched run in batches on an interval
(a run another daemon executes is only seen that way). Only a run the runtime
reports `completed` is completed; a failed, cancelled or vanished run is
recorded as such, with a message. An inspection error is not evidence that a run
stopped: the run stays watched and is inspected again later, with backoff.
Closing detaches; it never cancels a run.

A runner that `settles_ledger` (the embedded runtime) has recorded a settlement it
reports in the run's own final transaction: the monitor then only logs and counts
it, and records only what an inspection finds still `launched` (a reconciliation).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from typing import Literal

import structlog

from triggers.clock import Clock
from triggers.errors import TriggersError
from triggers.metrics import Metrics
from triggers.model import RunStatus
from triggers.scheduler.deadlines import DeadlineRunner
from triggers.store.protocol import Settlement, TriggerStore

log = structlog.get_logger()

_INSPECT_BATCH = 500
_MAX_BACKOFF_S = 60.0
_GATHER_S = 0.05
_MAX_UNCLAIMED_REPORTS = 10_000
# A failed run needs someone to look at it; `journalctl -p err` shows it.
_FINISHED_LEVELS = {"failed": logging.ERROR}


class Monitor:
    """Tracks `run_id -> trigger_id` and settles the runs that stop."""

    def __init__(
        self,
        *,
        store: TriggerStore,
        runner: DeadlineRunner,
        clock: Clock,
        poll_interval: timedelta,
        on_settled: Callable[[set[str]], None],
        metrics: Metrics,
    ) -> None:
        self._store = store
        self._runner = runner
        self._clock = clock
        self._poll_s = poll_interval.total_seconds()
        self._on_settled = on_settled
        self._metrics = metrics
        self._watched: dict[str, str] = {}
        self._reported: dict[str, RunStatus] = {}
        # `with self._lock` is `with self._wake` without the Condition's Python-level
        # enter and exit (a settlement takes the lock four times).
        self._lock = threading.RLock()
        self._wake = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="monitor", daemon=True)
        # Only the monitor's thread waits on `_wake`: a loop that runs inline has none
        # to notify (a report before the thread starts is seen by its first look).
        self._threaded = False
        self._backoff_s = 0.0
        # Asked once: through structlog's proxy the question costs more than recording
        # the settlement it is asked for.
        self._logs = {level: log.is_enabled_for(level) for level in (logging.INFO, logging.ERROR)}

    def start(self) -> None:
        self._threaded = True
        self._thread.start()

    def close(self) -> None:
        """Detach: stop watching; the runs go on and are re-attached by the next start."""
        self._stop.set()
        with self._lock:
            self._wake.notify_all()
        if self._thread.ident is not None:  # never started when the loop runs inline
            self._thread.join(timeout=5)

    def watch(self, trigger_id: str, run_id: str) -> None:
        with self._lock:
            self._watched[run_id] = trigger_id
            self._metrics.active_runs.set(len(self._watched))
            if run_id in self._reported:
                self._wake.notify_all()

    def completed_at_start(self, trigger_id: str, run_id: str) -> None:
        """A run completed in its claim's own commit (its flow had nothing to run): the
        ledger holds it settled already, so nothing is watched; it is counted and logged
        as a run the monitor saw settle."""
        now = self._clock.now()
        self._metrics.run_settled(trigger_id, "completed", now)
        self._metrics.fired("completed")
        if self._logs[logging.INFO]:
            log.info(
                "run_finished",
                trigger_id=trigger_id,
                run_id=run_id,
                outcome="completed",
                error=None,
            )

    def adopt(self, runs: Iterable[tuple[str, str]]) -> int:
        """Watch `(trigger_id, run_id)` pairs the ledger holds as launched; returns how
        many were new to this monitor."""
        added = 0
        with self._lock:
            for trigger_id, run_id in runs:
                if run_id not in self._watched:
                    self._watched[run_id] = trigger_id
                    added += 1
            self._metrics.active_runs.set(len(self._watched))
            if added:
                self._wake.notify_all()
        return added

    def report(self, run_id: str, status: RunStatus) -> None:
        """The runner's settlement hook (any thread): record without waiting to inspect."""
        if status.state == "active":  # not settled
            return
        with self._lock:
            self._reported[run_id] = status
            if self._threaded:
                self._wake.notify_all()

    def record_reported(self) -> None:
        """Record what the runner reported (the monitor thread's work, for a loop that
        runs inline, without that thread)."""
        if self._reported:  # read without the lock: inline, nothing else writes it
            self._record(self._collect_reported(), reported=True)

    def check_now(self) -> None:
        """Record what was reported and inspect every watched run (tests and recovery)."""
        reported = self._collect_reported()
        self._record(reported, reported=True)
        self._record(self._inspect(), reported=False)

    def _loop(self) -> None:
        next_poll = self._clock.monotonic() + self._poll_s
        while not self._stop.is_set():
            with self._lock:
                timeout = max(0.0, next_poll - self._clock.monotonic())
                if not self._has_reported():
                    self._wake.wait(timeout=timeout)
            # Runs of one tick settle within moments of each other: gather them into
            # one ledger transaction rather than one each (which also kept the write
            # lock busy when the next tick wanted to claim).
            if self._stop.wait(_GATHER_S):
                return
            try:
                self._record(self._collect_reported(), reported=True)
                if self._clock.monotonic() >= next_poll:
                    self._record(self._inspect(), reported=False)
                    next_poll = self._clock.monotonic() + self._poll_s + self._backoff_s
            except Exception:
                log.exception("monitor_failed")

    def _has_reported(self) -> bool:
        return any(run_id in self._watched for run_id in self._reported)

    def _collect_reported(self) -> dict[str, RunStatus]:
        with self._lock:
            ready = {r: s for r, s in self._reported.items() if r in self._watched}
            for run_id in ready:
                del self._reported[run_id]
            # Reports about runs nobody watches are kept only briefly (a launch
            # recorded a moment later claims them).
            if len(self._reported) > _MAX_UNCLAIMED_REPORTS:
                self._reported.clear()
            return ready

    def _inspect(self) -> dict[str, RunStatus]:
        with self._lock:
            run_ids = list(self._watched)
        settled: dict[str, RunStatus] = {}
        for start in range(0, len(run_ids), _INSPECT_BATCH):
            part = run_ids[start : start + _INSPECT_BATCH]
            try:
                statuses = self._runner.inspect(part)
            except TriggersError as exc:
                self._backoff_s = min(
                    max(self._poll_s, 1.0) * 2 if not self._backoff_s else self._backoff_s * 2,
                    _MAX_BACKOFF_S,
                )
                log.warning(
                    "inspection_failed",
                    error=str(exc),
                    error_code=exc.code,
                    retry_in_s=self._backoff_s,
                )
                return settled
            settled.update({r: s for r, s in statuses.items() if s.settled})
        self._backoff_s = 0.0
        return settled

    def _record(self, settled: dict[str, RunStatus], *, reported: bool) -> None:
        if not settled:
            return
        with self._lock:
            watched = self._watched
            settlements = [
                Settlement(
                    trigger_id=trigger_id,
                    run_id=run_id,
                    state=_SETTLED_AS[status.state],
                    error=None if status.state == "completed" else _message(run_id, status),
                )
                for run_id, status in settled.items()
                if (trigger_id := watched.get(run_id)) is not None
            ]
        recorded = reported and self._runner.runner.settles_ledger
        now = self._clock.now()
        try:
            records: Sequence[object] = (
                settlements if recorded else self._store.record_settled(settlements, now=now)
            )
        except TriggersError as exc:
            self._metrics.store_error("record_settled")
            log.warning("settle_record_failed", count=len(settlements), error=str(exc))
            with self._lock:
                for run_id, status in settled.items():
                    self._reported.setdefault(run_id, status)
            return
        triggers = set()
        metrics = self._metrics
        with self._lock:
            for settlement, record in zip(settlements, records, strict=True):
                watched.pop(settlement.run_id, None)
                triggers.add(settlement.trigger_id)
                metrics.run_settled(settlement.trigger_id, settlement.state, now)
                if record is None:
                    continue
                metrics.fired(settlement.state)
                level = _FINISHED_LEVELS.get(settlement.state, logging.INFO)
                if self._logs.get(level, True):
                    log.log(
                        level,
                        "run_finished",
                        trigger_id=settlement.trigger_id,
                        run_id=settlement.run_id,
                        outcome=settlement.state,
                        error=settlement.error,
                    )
            metrics.active_runs.set(len(watched))
        self._on_settled(triggers)


def _message(run_id: str, status: RunStatus) -> str | None:
    if status.state == "completed":
        return None
    if status.state == "missing":
        return f"run {run_id} is unknown to the runtime"
    return status.error or f"run {run_id} {status.state}"


_SETTLED_AS: dict[str, Literal["completed", "failed", "cancelled"]] = {
    "completed": "completed",
    "failed": "failed",
    "cancelled": "cancelled",
    "missing": "failed",  # a run the runtime no longer knows did not complete
}
"""A settled run's state (`RunStatus.state`, never `active` here) as its settlement names it."""
