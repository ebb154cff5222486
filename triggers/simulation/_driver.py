"""The real scheduler's loop on a simulated clock, against the memory store.

`Scheduler.run` is the daemon's own loop: it ticks, then waits on its clock until
its next wake-up. Here the clock's `wait` is where simulated time passes, straight
to the next instant anything can happen: the wake-up the loop asked for, the end
of a run, an event of the scenario, the end of the range. It never steps through
idle time. What happens at those instants is what the daemon's other threads
would do then: a run that ends is reported and recorded (the monitor's part), an
operator's pause or apply is written to the store and the loop woken, as a poll
would have found it. A downtime stops the loop; a new scheduler (a new daemon,
with its own timetable) starts from the store when it ends, adopts the runs that
went on meanwhile and catches up.

The scheduler runs inline (`SchedulerOptions.inline`): no worker threads, runner
calls on the loop's own thread. It polls once a simulated week (and at every
event), records every occurrence (nothing is pruned) and starts in the range's
first instant, with the declarations applied then.
"""

from __future__ import annotations

import dataclasses
import gc
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

from triggers.errors import InputError, UnknownTriggerError
from triggers.metrics import UnrecordedMetrics
from triggers.model import TriggerSpec
from triggers.runner.simulated import SimulatedRunner
from triggers.scheduler.engine import Scheduler, SchedulerOptions
from triggers.services import pause_trigger, resume_trigger
from triggers.simulation._scenario import (
    FAILED_ERROR,
    Downtime,
    Interval,
    Scenario,
    SimulationResult,
)
from triggers.store.memory import MemoryTriggerStore
from triggers.store.protocol import HistoryQuery

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_HOST = "simulation"
_POLL = timedelta(days=7)
_PAUSE_NOTE = "paused by the simulation"
_ALL = 1 << 62


class _Strict(UnrecordedMetrics):
    """A tick that fails is a bug the simulation must not hide: the daemon would try
    again a second later, and the ledger would differ without a word. It ends the
    simulation with the error instead."""

    def tick_failed(self, error: BaseException) -> None:
        raise error


def simulate(scenario: Scenario) -> SimulationResult:
    """Run `scenario` through the real scheduler and return the ledger it leaves.

    Raises:
        InputError: the scenario cannot be simulated (see `Scenario.check`), or an
            event names a trigger that does not exist when it happens.
    """
    scenario.check()
    with _collector_paused():
        return _Simulator(scenario).run()


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the simulation's length.

    The ledger grows by a row or two for every occurrence and nothing the loop makes
    forms a cycle (reference counting frees all of it), so each of the collector's
    passes over an ever larger heap finds nothing: a tenth of a long simulation.

    At the end, what the run made and kept (the ledger it returns) would all be
    young to the collector, whose first pass would then walk every row for nothing
    (a tenth again, for ten years of an hourly job): it is moved to the oldest
    generation instead, as if it had survived the passes (`gc.freeze` then
    `gc.unfreeze`, unless the process froze objects of its own)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()


@dataclasses.dataclass(order=True, frozen=True, slots=True)
class _Event:
    at: datetime
    order: int
    act: Callable[[], None] = dataclasses.field(compare=False)


class _Clock:
    """The clock the scheduler reads: elapsed time plus the jumps so far.

    The loop reads it a dozen times a tick, and it changes only when simulated time
    passes or the clock jumps: the readings are kept, and `set` renews them."""

    def __init__(self, simulator: _Simulator, *, elapsed: datetime) -> None:
        # `wait` is the simulator's own (see `Clock.wait`), without a layer between.
        self.wait: Callable[[float, threading.Event], bool] = simulator.wait
        self.set(elapsed=elapsed, offset=timedelta(0))

    def set(self, *, elapsed: datetime, offset: timedelta) -> None:
        self._now = elapsed + offset
        self._monotonic = (elapsed - _EPOCH).total_seconds()

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._monotonic


class _Simulator:
    def __init__(self, scenario: Scenario) -> None:
        self._scenario = scenario
        self.elapsed = scenario.start_at
        self.offset = timedelta(0)
        self.clock = _Clock(self, elapsed=self.elapsed)
        self.store = MemoryTriggerStore()
        self.runner = SimulatedRunner(
            elapsed=lambda: self.elapsed,
            duration=scenario.duration_of,
            fails=scenario.fails,
            error=FAILED_ERROR,
        )
        self._metrics = _Strict()
        self._events = sorted(self._scenario_events())
        self._next_event = 0
        self._downs = _merged(scenario.downtimes, scenario.start_at, scenario.end_at)
        self._scheduler: Scheduler | None = None
        self._daemons = 0
        self._ticks = 0
        self._final_poll = False
        self._done = False
        self._next_horizon: tuple[datetime, datetime | None] | None = None

    def run(self) -> SimulationResult:
        scenario = self._scenario
        self.store.apply(scenario.specs, now=self.clock.now())
        while not self._done:
            down = next((d for d in self._downs if d.start_at <= self.elapsed < d.end_at), None)
            if down is None:
                self._run_daemon()  # until the next downtime, or the end (`_done`)
                continue
            self._pass(until=down.end_at)
            # A downtime that lasts to the end of the range: no daemon reads the ledger.
            self._done = self.elapsed >= scenario.end_at
        history = self.store.history(HistoryQuery(limit=_ALL))
        return SimulationResult(
            records=list(reversed(history)),
            downtime=[
                Interval(start_at=self._wall(d.start_at), end_at=self._wall(d.end_at))
                for d in self._downs
            ],
            start_at=scenario.start_at,
            end_at=scenario.end_at,
            ticks=self._ticks,
            runs=self.runner.started,
            failed_starts=list(self.runner.failed_starts),
        )

    # -- the daemon's life -----------------------------------------------------------

    def _run_daemon(self) -> None:
        """One daemon, from now until the next downtime or the end of the range."""
        self.runner.restart()
        self._next_horizon = None
        self._daemons += 1
        # Nothing is pruned: the ledger keeps every occurrence of the range. A retention
        # that reaches back from the earliest the clock reads to year 2 keeps all and
        # never takes `now - retention` below year 1.
        forever = self._earliest_wall() - datetime(2, 1, 1, tzinfo=UTC)
        scheduler = Scheduler(
            store=self.store,
            runner=self.runner,
            clock=self.clock,
            metrics=self._metrics,
            options=SchedulerOptions(
                owner=f"simulated-{self._daemons}",
                host=_HOST,
                poll_interval=_POLL,
                run_poll_interval=_POLL,
                fire_retention=forever,
                heartbeat_retention=forever,
                heartbeat_interval=_POLL,
                housekeeping_delay=timedelta(0),
                inline=True,
            ),
        )
        self._scheduler = scheduler
        try:
            scheduler.run()
        finally:
            self._ticks += scheduler.progress.ticks
            self._scheduler = None

    def wait(self, seconds: float, stop: threading.Event) -> bool:
        """The loop's sleep: simulated time passes until its wake-up or until
        something happens that would wake it (see the module doc)."""
        scheduler = self._scheduler
        if stop.is_set() or scheduler is None:
            return True
        target = self.elapsed + timedelta(seconds=seconds) if seconds > 0 else self.elapsed
        runner = self.runner
        # The horizon moves only when time reaches it (below), or a new daemon starts.
        horizon, down_at = self._next_horizon or self._horizon()
        while True:
            at = min(target, horizon)
            ends_at = runner.next_end()
            if ends_at is not None and ends_at < at:
                at = ends_at
            if at > self.elapsed:
                self._pass_to(at)
            if ends_at is not None and ends_at <= self.elapsed and runner.settle_due(self.elapsed):
                scheduler.monitor.record_reported()  # the monitor thread's part
            if self.elapsed >= horizon:
                self._fire_events(refresh=scheduler.refresh_soon)
                if self.elapsed == down_at:
                    scheduler.stop()
                    return True
                if self.elapsed >= self._scenario.end_at:
                    return self._end(scheduler)
                horizon, down_at = self._horizon()
            self._next_horizon = (horizon, down_at)
            if stop.is_set():
                return True
            if self.elapsed >= target:
                return False

    def _horizon(self) -> tuple[datetime, datetime | None]:
        """The next instant something other than a run's end happens (an event, a
        downtime, the end of the range), and the next downtime's start."""
        down_at = next((d.start_at for d in self._downs if d.start_at >= self.elapsed), None)
        event_at = self._event_at()
        horizon = self._scenario.end_at
        for instant in (event_at, down_at):
            if instant is not None and instant < horizon:
                horizon = instant
        return horizon, down_at

    def _end(self, scheduler: Scheduler) -> bool:
        if not self._final_poll:
            # A last poll records what the loop only records when it polls (the
            # skipped ranges of paused triggers) up to the end of the range.
            self._final_poll = True
            scheduler.refresh_soon()
            return True
        self._done = True
        scheduler.stop()
        return True

    def _pass(self, *, until: datetime) -> None:
        """No daemon runs: operators' events still happen; runs end unseen."""
        while True:
            event_at = self._event_at()
            self._pass_to(until if event_at is None or event_at > until else event_at)
            self._fire_events(refresh=None)
            if self.elapsed >= until:
                return

    def _pass_to(self, at: datetime) -> None:
        """Simulated time passes until `at`."""
        self.elapsed = at
        self.clock.set(elapsed=at, offset=self.offset)

    # -- events --------------------------------------------------------------------

    def _event_at(self) -> datetime | None:
        if self._next_event < len(self._events):
            return self._events[self._next_event].at
        return None

    def _fire_events(self, *, refresh: Callable[[], None] | None) -> None:
        """Everything due by now. The loop is woken, as its next poll (seconds away in a
        daemon) would find an operator's act or a clock that jumped."""
        fired = False
        while self._next_event < len(self._events):
            event = self._events[self._next_event]
            if event.at > self.elapsed:
                break
            self._next_event += 1
            event.act()
            fired = True
        if fired and refresh is not None:
            refresh()

    def _scenario_events(self) -> list[_Event]:
        scenario = self._scenario
        events = [_Event(edit.at, 0, self._applies(edit.specs)) for edit in scenario.edits]
        for item in scenario.pauses:
            events.append(_Event(item.start_at, 1, self._pauses(item.trigger_id)))
            if item.end_at is not None:
                events.append(_Event(item.end_at, 1, self._resumes(item.trigger_id)))
        events += [_Event(jump.at, 2, self._jumps(jump.by)) for jump in scenario.jumps]
        return [event for event in events if event.at <= scenario.end_at]

    def _applies(self, specs: Sequence[TriggerSpec]) -> Callable[[], None]:
        def act() -> None:
            self.store.apply(specs, now=self.clock.now())

        return act

    def _pauses(self, trigger_id: str) -> Callable[[], None]:
        def act() -> None:
            with _naming(f"--pause {trigger_id}@..."):
                pause_trigger(self.store, trigger_id, note=_PAUSE_NOTE, now=self.clock.now())

        return act

    def _resumes(self, trigger_id: str) -> Callable[[], None]:
        def act() -> None:
            with _naming(f"--pause {trigger_id}@...: its resume"):
                resume_trigger(self.store, trigger_id, now=self.clock.now())

        return act

    def _jumps(self, by: timedelta) -> Callable[[], None]:
        def act() -> None:
            self.offset += by
            self.clock.set(elapsed=self.elapsed, offset=self.offset)

        return act

    def _earliest_wall(self) -> datetime:
        """The earliest instant the daemon's clock reads in the range (jumps included)."""
        offset = lowest = timedelta(0)
        for jump in sorted(self._scenario.jumps, key=lambda jump: jump.at):
            offset += jump.by
            lowest = min(lowest, offset)
        return self._scenario.start_at + lowest

    def _wall(self, at: datetime) -> datetime:
        """An elapsed instant as the daemon's clock reads it (the jumps made by then)."""
        return at + sum((jump.by for jump in self._scenario.jumps if jump.at <= at), timedelta(0))


@contextmanager
def _naming(option: str) -> Iterator[None]:
    """Turn an unknown trigger into an error that names the option."""
    try:
        yield
    except UnknownTriggerError as error:
        raise InputError(f"{option}: {error}") from error


def _merged(downs: Sequence[Downtime], start_at: datetime, end_at: datetime) -> list[Downtime]:
    """The downtimes within the range, overlapping or touching ones joined, in order."""
    spans = sorted((max(d.start_at, start_at), min(d.end_at, end_at)) for d in downs)
    merged: list[Downtime] = []
    for first, last in spans:
        if last <= first:
            continue
        if merged and first <= merged[-1].end_at:
            merged[-1] = Downtime(start_at=merged[-1].start_at, end_at=max(merged[-1].end_at, last))
        else:
            merged.append(Downtime(start_at=first, end_at=last))
    return merged
