"""A simulation's scenario played on the real engine: threads, SQL store, fake clock.

The daemon's configuration (launcher and monitor threads, runner calls with
deadlines, the SQL store, polls every few minutes) is driven the way
`tests/integration/harness.py` drives it: it ticks at each wake-up it asks for and
at each run's end (the scripted runner's), and its clock moves only when the
player moves it. Events happen as in `triggers simulate`: at their instant on the
scenario's own timeline (elapsed time), before the tick of that instant, which
they bring forward (a daemon's poll, seconds later, notices an operator's act or a
clock that jumped); a downtime closes the scheduler and a new one starts from
the store when it ends, with the same runtime (its runs go on meanwhile).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from looms_runtime.db import Database
from tests.clocks import FakeClock
from tests.integration.harness import Harness, ScriptedRunner
from triggers import services
from triggers.model import FireRecord, TriggerSpec
from triggers.simulation import Scenario
from triggers.store.protocol import HistoryQuery
from triggers.store.sql import SqlTriggerStore

Event = tuple[datetime, int, Callable[[], None]]


class EnginePlayer:
    """Plays one scenario (see the module doc) and returns the ledger it left."""

    def __init__(self, db: Database, scenario: Scenario, **options: Any) -> None:
        self.db = db
        self.scenario = scenario
        self.options = options
        self.store = SqlTriggerStore(db)
        self.elapsed = scenario.start_at
        self.offset = timedelta(0)
        self.runner = ScriptedRunner(
            FakeClock(scenario.start_at),
            lambda request: (scenario.duration_of(request.trigger_id), "completed"),
        )
        self.harness: Harness | None = None
        self.wake: datetime | None = None
        self.daemons = 0

    def play(self) -> list[FireRecord]:
        scenario = self.scenario
        self.store.apply(scenario.specs, now=scenario.start_at)
        events = sorted(self._events(), key=lambda event: (event[0], event[1]))
        if not any(down.start_at <= scenario.start_at < down.end_at for down in scenario.downtimes):
            self._start_daemon()
        while True:
            at = min(self._candidates(events))
            self.elapsed = at
            if self.harness is not None:
                self.harness.clock.set(at + self.offset)
            while events and events[0][0] <= at:
                events.pop(0)[2]()
            if at >= scenario.end_at:
                break
            harness = self.harness
            if harness is None:
                continue
            ended = self._run_end()
            if (self.wake is not None and at >= self.wake) or (ended is not None and ended <= at):
                self.wake = harness.step() - self.offset
        if self.harness is not None:
            # The last poll, as the simulation's, records paused ranges up to the end.
            self.harness.scheduler.refresh_soon()
            self.harness.step()
            self._stop_daemon()
        rows = self.store.history(HistoryQuery(limit=1_000_000))
        return list(reversed(rows))

    def _candidates(self, events: list[Event]) -> list[datetime]:
        found = [self.scenario.end_at]
        if events:
            found.append(events[0][0])
        if self.harness is not None:
            if self.wake is not None:
                found.append(max(self.wake, self.elapsed))
            ended = self._run_end()
            if ended is not None:
                found.append(max(ended, self.elapsed))
        return found

    def _run_end(self) -> datetime | None:
        end = self.runner.next_end()
        return None if end is None else end - self.offset

    # -- events ----------------------------------------------------------------------

    def _events(self) -> list[Event]:
        scenario = self.scenario
        events: list[Event] = [(edit.at, 0, self._applies(edit.specs)) for edit in scenario.edits]
        for pause in scenario.pauses:
            events.append((pause.start_at, 1, self._pauses(pause.trigger_id)))
            if pause.end_at is not None:
                events.append((pause.end_at, 1, self._resumes(pause.trigger_id)))
        events += [(jump.at, 2, self._jumps(jump.by)) for jump in scenario.jumps]
        for down in scenario.downtimes:
            events.append((down.start_at, 3, self._stop_daemon))
            if down.end_at < scenario.end_at:
                events.append((down.end_at, 4, self._start_daemon))
        return [event for event in events if event[0] <= scenario.end_at]

    def _now(self) -> datetime:
        return self.elapsed + self.offset

    def _woken(self) -> None:
        if self.harness is not None:
            self.harness.scheduler.refresh_soon()
            self.wake = self.elapsed

    def _applies(self, specs: Sequence[TriggerSpec]) -> Callable[[], None]:
        def act() -> None:
            self.store.apply(specs, now=self._now())
            self._woken()

        return act

    def _pauses(self, trigger_id: str) -> Callable[[], None]:
        def act() -> None:
            services.pause_trigger(self.store, trigger_id, note="paused", now=self._now())
            self._woken()

        return act

    def _resumes(self, trigger_id: str) -> Callable[[], None]:
        def act() -> None:
            services.resume_trigger(self.store, trigger_id, now=self._now())
            self._woken()

        return act

    def _jumps(self, by: timedelta) -> Callable[[], None]:
        def act() -> None:
            self.offset += by
            if self.harness is not None:
                self.harness.clock.set(self._now())
            self._woken()  # its next poll, seconds later, notices the clock

        return act

    def _start_daemon(self) -> None:
        if self.harness is not None:
            return
        self.daemons += 1
        self.harness = Harness(
            self.db,
            start=self._now(),
            runner=self.runner,
            store=self.store,
            owner=f"daemon-{self.daemons}",
            **self.options,
        )
        self.wake = self.elapsed

    def _stop_daemon(self) -> None:
        if self.harness is None:
            return
        self.harness.scheduler.close()
        self.harness = None
        self.wake = None
