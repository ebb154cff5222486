"""A scheduler on a real store, a fake clock and a scriptable runner, driven step by step."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from looms_runtime.db import Database
from triggers.clock import FakeClock
from triggers.model import FireRecord, Outcome, TriggerSpec
from triggers.runner.fake import FakeRunner
from triggers.scheduler.engine import Scheduler, SchedulerOptions
from triggers.store.protocol import HistoryQuery
from triggers.store.sql import SqlTriggerStore


class Harness:
    """One scheduler whose time moves only when the test says."""

    def __init__(
        self,
        db: Database,
        *,
        start: datetime,
        runner: FakeRunner | None = None,
        owner: str = "daemon-a",
        **options: object,
    ) -> None:
        self.db = db
        self.clock = FakeClock(start)
        self.store = SqlTriggerStore(db)
        self.runner = runner or FakeRunner()
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
        )
        self.scheduler.launcher.start()

    def apply(self, specs: Sequence[TriggerSpec]) -> None:
        self.store.apply(specs, now=self.clock.now())
        self.scheduler.refresh_soon()

    def step(self) -> datetime:
        """One tick, then let the launcher and monitor finish; returns the next wake."""
        wake = self.scheduler.tick()
        assert self.scheduler.launcher.wait_idle(10), "launcher did not drain"
        self.scheduler.monitor.check_now()
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

    def close(self) -> None:
        self.scheduler.launcher.close(grace=5)
