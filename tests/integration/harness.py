"""A scheduler on a real store, a fake clock and a scriptable runner, driven step by step."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from looms_runtime.db import Database
from tests.clocks import FakeClock
from triggers.errors import RunnerError
from triggers.metrics import Metrics
from triggers.model import FireRecord, Outcome, TriggerSpec
from triggers.runner.fake import FakeRunner
from triggers.runner.protocol import LaunchRequest, RunHandle
from triggers.scheduler.engine import Scheduler, SchedulerOptions
from triggers.store.protocol import Heartbeat, HistoryQuery
from triggers.store.sql import SqlTriggerStore

Script = Callable[[LaunchRequest], tuple[timedelta | None, str]]
"""How long a run lasts (None: until cancelled) and how it ends (`completed`, `failed`)."""


class ScriptedRunner(FakeRunner):
    """A FakeRunner whose runs last a scripted time on the harness clock.

    `script` maps a launch request to its duration and final state; the harness
    settles each run when the clock reaches its end. `fail_cancels` makes that
    many cancel calls fail before they work again.
    """

    def __init__(self, clock: FakeClock, script: Script | None = None) -> None:
        super().__init__()
        self.clock = clock
        self.script: Script = script or (lambda _request: (None, "completed"))
        self.fail_cancels = 0
        self.started: dict[str, datetime] = {}
        self._ends: dict[str, tuple[datetime, str]] = {}
        self._script_lock = threading.Lock()

    def start(self, requests: Sequence[LaunchRequest]) -> list[RunHandle | RunnerError]:
        results = super().start(requests)
        now = self.clock.now()
        for request, result in zip(requests, results, strict=True):
            if isinstance(result, RunHandle) and result.created:
                duration, state = self.script(request)
                with self._script_lock:
                    self.started[request.idempotency_key] = now
                    if duration is not None:
                        self._ends[result.run_id] = (now + duration, state)
        return results

    def cancel(self, run_id: str) -> None:
        with self._script_lock:
            if self.fail_cancels:
                self.fail_cancels -= 1
                raise RunnerError(f"cancel of {run_id} failed")
        super().cancel(run_id)

    def settle_due(self, now: datetime) -> None:
        """Settle every run whose scripted end is at or before `now`."""
        with self._script_lock:
            due = [(r, state) for r, (end, state) in self._ends.items() if end <= now]
            for run_id, _state in due:
                del self._ends[run_id]
        active = set(self.active())
        for run_id, state in due:
            if run_id in active:
                self.settle(run_id, state, "exit status 1" if state == "failed" else None)

    def next_end(self) -> datetime | None:
        with self._script_lock:
            return min((end for end, _ in self._ends.values()), default=None)


class Harness:
    """One scheduler whose time moves only when the test says."""

    def __init__(
        self,
        db: Database,
        *,
        start: datetime,
        runner: FakeRunner | None = None,
        owner: str = "daemon-a",
        store: SqlTriggerStore | None = None,
        metrics: Metrics | None = None,
        **options: object,
    ) -> None:
        self.db = db
        self.owner = owner
        self.start = start
        self.clock = FakeClock(start)
        self.store = store or SqlTriggerStore(db)
        self.runner = runner or FakeRunner()
        if isinstance(self.runner, ScriptedRunner):
            self.runner.clock = self.clock  # a restart: the runs go on, on the new clock
        opts = {
            "owner": owner,
            "host": "test-host",
            "run_poll_interval": timedelta(hours=1),
            "poll_interval": timedelta(minutes=10),
            "start_timeout": timedelta(seconds=5),
            **options,
        }
        self.scheduler = Scheduler(
            store=self.store,
            runner=self.runner,
            clock=self.clock,
            options=SchedulerOptions(**opts),  # type: ignore[arg-type]
            metrics=metrics,
        )
        self.scheduler.launcher.start()

    def apply(self, specs: Sequence[TriggerSpec]) -> None:
        self.store.apply(specs, now=self.clock.now())
        self.scheduler.refresh_soon()

    def step(self) -> datetime:
        """One tick, then let the launcher and monitor finish; returns the next wake.

        Runs that ended by now are recorded before the tick, and a pending pass that
        a settlement or a launch asked for runs at once, as the daemon's wake-up does.
        """
        if isinstance(self.runner, ScriptedRunner):
            self.runner.settle_due(self.clock.now())
        self.scheduler.monitor.check_now()
        for _ in range(10):
            wake = self.scheduler.tick()
            assert self.scheduler.launcher.wait_idle(10), "launcher did not drain"
            self.scheduler.monitor.check_now()
            if not self.scheduler.pending.wanted:
                break
        if isinstance(self.runner, ScriptedRunner):
            end = self.runner.next_end()
            if end is not None:
                wake = min(wake, max(end, self.clock.now()))
        return wake

    def run_until(self, end: datetime, *, max_ticks: int = 100_000) -> int:
        """Tick at every wake-up until `end` (inclusive); returns the number of ticks."""
        ticks = 0
        while ticks < max_ticks:
            wake = self.step()
            ticks += 1
            if wake > end:
                self.clock.set(end)
                self.step()
                return ticks + 1
            self.clock.set(max(wake, self.clock.now()))
        raise AssertionError(f"still ticking after {max_ticks} ticks")

    def advance(self, delta: timedelta) -> int:
        return self.run_until(self.clock.now() + delta)

    def at(self, minutes: float) -> datetime:
        """The instant `minutes` after the harness's start."""
        return self.start + timedelta(minutes=minutes)

    def history(self, trigger_id: str | None = None) -> list[FireRecord]:
        rows = self.store.history(HistoryQuery(trigger_id=trigger_id, limit=100_000))
        return sorted(rows, key=lambda r: (r.occurrence_at, r.manual_key))

    def outcomes(self, trigger_id: str | None = None) -> list[tuple[str, Outcome, str | None, int]]:
        """(HH:MM:SS, outcome, reason, count) per ledger row, oldest first."""
        return [
            (
                r.occurrence_at.strftime("%H:%M:%S"),
                r.outcome,
                r.reason.value if r.reason else None,
                r.count,
            )
            for r in self.history(trigger_id)
        ]

    def ledger(self, trigger_id: str | None = None) -> list[str]:
        """`HH:MM outcome[/reason][ xN]` per ledger row, oldest first."""
        return [describe(record) for record in self.history(trigger_id)]

    def launched_at(self, trigger_id: str) -> dict[str, str]:
        """`HH:MM` of each launched occurrence -> `HH:MM` it launched at."""
        return {
            _clock_time(r.occurrence_at): _clock_time(r.launched_at)
            for r in self.history(trigger_id)
            if r.launched_at is not None
        }

    def close(self) -> None:
        """Stop as a daemon stops cleanly: launches finished, a stopped heartbeat (other
        schedulers on the store then no longer leave this one its share)."""
        self.scheduler.launcher.close(grace=5)
        now = self.clock.now()
        self.store.heartbeat(
            Heartbeat(
                owner=self.owner,
                host="test-host",
                pid=os.getpid(),
                version="0",
                started_at=self.start,
                last_tick_at=now,
                stopped_at=now,
            )
        )


def describe(record: FireRecord) -> str:
    text = f"{_clock_time(record.occurrence_at)} {record.outcome.value}"
    if record.reason is not None:
        text += f"/{record.reason.value}"
    if record.count > 1:
        text += f" x{record.count}"
    return text


def _clock_time(at: datetime) -> str:
    return at.strftime("%H:%M" if not at.second and not at.microsecond else "%H:%M:%S")
