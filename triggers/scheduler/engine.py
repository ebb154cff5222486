"""The scheduler: a clock loop over every trigger's next occurrence.

Each trigger's next due time lives in memory, in a heap; the loop sleeps until
the earliest one (or the poll interval, to see other daemons' and operators'
changes), so a due occurrence is claimed within milliseconds and an idle daemon
does no work. Due triggers go to the dispatcher (`dispatch.py`); launches and
run monitoring happen on other threads and the tick never waits for them.

The watermark of a trigger (the newest occurrence decided) is durable in the
store and moves only with what the store recorded; the in-memory copy only
tells the loop where to look next.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

import structlog

from triggers.clock import Clock
from triggers.errors import TriggersError
from triggers.metrics import Metrics
from triggers.model import Overlap, Trigger
from triggers.runner.protocol import Runner
from triggers.scheduler.deadlines import DeadlineRunner
from triggers.scheduler.dispatch import Dispatcher, TickReport
from triggers.scheduler.division import Division
from triggers.scheduler.health import LoopProgress
from triggers.scheduler.launcher import Launcher, launcher_within
from triggers.scheduler.listing import Listing, Page
from triggers.scheduler.liveness import Host, UnknownHost
from triggers.scheduler.monitor import Monitor
from triggers.scheduler.options import RETRY_SOON, SchedulerOptions
from triggers.scheduler.pending import PendingPass
from triggers.scheduler.quiet import quiet_ranges
from triggers.scheduler.timetable import Entry, Timetable
from triggers.store.protocol import Heartbeat, TriggerStore, silence_limit

__all__ = ["Scheduler", "SchedulerOptions"]

log = structlog.get_logger()

_PRUNE_EVERY = timedelta(hours=1)
# Four beats within the owner lease (after which other daemons take this one's
# reservations), at most one a second: each is a committed write.
_BEATS_PER_LEASE = 4
_HEARTBEAT_MIN_EVERY = timedelta(seconds=1)
_MAX_HOUSEKEEPING_DEFER = timedelta(seconds=10)
_FULL_LISTING_EVERY = timedelta(minutes=10)
_SYNC_BATCH = 2_000
_LISTING_PAGE = 500
_CLOCK_MARGIN = timedelta(seconds=15)
_HANDOFF = timedelta(seconds=2)
_BUFFERING = frozenset({Overlap.BUFFER, Overlap.BUFFER_ALL, Overlap.SUPERSEDE})


class Scheduler:
    """Claims due occurrences and hands them to the launcher; see the module doc."""

    def __init__(
        self,
        *,
        store: TriggerStore,
        runner: Runner,
        clock: Clock,
        options: SchedulerOptions,
        metrics: Metrics | None = None,
        host: Host | None = None,
    ) -> None:
        self._store = store
        self._settle_listeners: list[Callable[[], None]] = []
        self._host = host or UnknownHost()
        self._clock = clock
        self._options = options
        self.metrics = metrics or Metrics()
        self._runner = DeadlineRunner(
            runner,
            concurrency=options.concurrency,
            start_timeout=options.start_timeout,
            inspect_timeout=options.inspect_timeout,
            cancel_timeout=options.cancel_timeout,
            inline=options.inline,
        )
        self.monitor = Monitor(
            store=store,
            runner=self._runner,
            clock=clock,
            poll_interval=options.run_poll_interval,
            on_settled=self._on_settled,
            metrics=self.metrics,
        )
        self._wake = threading.Event()
        self.launcher = Launcher(
            store=store,
            runner=self._runner,
            clock=clock,
            on_launched=self._on_launched,
            on_deferred=self._retry_pending_at,
            metrics=self.metrics,
            workers=0 if options.inline else 2,
        )
        self.pending = PendingPass(
            store=store,
            launcher=self.launcher,
            owner=options.owner,
            host=options.host,
            lease=options.lease,
            wake=self._wake,
            owner_lease=options.owner_lease,
            liveness=self._host,
        )
        runner.subscribe(self.monitor.report)
        self._timetable = Timetable()
        self._division = Division(
            me=options.owner, owner_lease=options.owner_lease, host=self._host
        )
        self._stopping = threading.Event()
        self._dispatcher = Dispatcher(
            store=store,
            clock=clock,
            timetable=self._timetable,
            launcher=self.launcher,
            metrics=self.metrics,
            owner=options.owner,
            host=options.host,
            lease=options.lease,
            plan_limit=options.plan_limit,
            launch_within=launcher_within(runner) if runner.starts_within else None,
            stopping=self._stopping,
        )
        self._next_poll_at: datetime | None = None
        self._last_heartbeat_at: datetime | None = None
        self._heartbeat_every = options.heartbeat_interval or max(
            _HEARTBEAT_MIN_EVERY, min(options.owner_lease / _BEATS_PER_LEASE, options.poll_interval)
        )
        self._housekeeping_at: datetime | None = None
        self._housekept_at = clock.now()
        self._last_prune_at: datetime | None = None
        self._started_at = clock.now()
        self._polled = False
        self._listing = Listing(
            store, page=_LISTING_PAGE, full_every=_FULL_LISTING_EVERY, margin=_CLOCK_MARGIN
        )
        self._unsynced: dict[str, Trigger] = {}
        self._listed_all = False
        self._corrupt: set[str] = set()
        self.progress = LoopProgress(clock.monotonic)
        # Asked once: through structlog's proxy the question costs a tenth of a tick.
        self._log_ticks = log.is_enabled_for(logging.DEBUG)

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        """Start the launcher and monitor threads (none when inline)."""
        if not self._options.inline:
            self.launcher.start()
            self.monitor.start()

    def run(self) -> None:
        """Tick until `stop()`; then close (finish launches, detach monitors)."""
        self.start()
        clock, progress, wake, stopping = self._clock, self.progress, self._wake, self._stopping
        monitor = self.monitor if self._options.inline else None
        try:
            while not stopping.is_set():
                # Cleared before the tick, not after the wait: a wake-up asked for
                # while the tick runs (a run settled) must not be lost. (`clear` takes
                # the event's lock; most ticks find it unset.)
                if wake.is_set():
                    wake.clear()
                if monitor is not None:
                    monitor.record_reported()  # the monitor thread's part
                progress.tick_started()
                wake_at = self.tick()
                delay = (wake_at - clock.now()).total_seconds()
                progress.tick_finished(wake_in_s=delay)
                if delay > 0:
                    clock.wait(delay, wake)
        finally:
            self.close()

    def stop(self) -> None:
        """Ask `run` to return (any thread, signal handlers included)."""
        self._stopping.set()
        self._wake.set()

    @property
    def entries(self) -> Mapping[str, Entry]:
        """The loop's view of every trigger; other threads read it through `health`."""
        return self._timetable.entries

    def soonest(self, count: int) -> list[tuple[datetime, str]]:
        """The next `count` fires the loop will claim (due time, trigger id), soonest
        first; any thread may ask (the dashboard's overview does)."""
        return self._timetable.soonest(count)

    def refresh_soon(self) -> None:
        """Re-read every trigger at the next tick (after an apply, on SIGHUP)."""
        self._next_poll_at = None
        self._wake.set()

    def close(self) -> None:
        grace = self._options.shutdown_grace.total_seconds()
        self.launcher.close(grace=grace)
        self.monitor.close()
        self._runner.close()
        self._beat(self._clock.now(), stopped=True)

    # -- one tick ---------------------------------------------------------------------

    def tick(self) -> datetime:
        """Do what is due now; return when the next tick is due."""
        clock = self._clock
        started = clock.monotonic()
        report = TickReport()
        try:
            now = clock.now()
            self._notice_clock_step_back(now)
            if self._next_poll_at is None and not self._timetable.entries:
                self._poll(now, report)  # the first tick: nothing is known yet
            elif self._listing.in_progress:
                self._take_rows(self._listing.read(now))  # the next page
            elif self._unsynced:
                self._sync_some()
            # Due occurrences first: housekeeping (heartbeat, listing, pending) waits
            # a few milliseconds rather than delaying a launch by as much.
            due = self._timetable.pop_due(now)
            if due and not self._division.alone:
                due = self._division.claim_now(
                    due,
                    timetable=self._timetable,
                    later=now + _HANDOFF,
                    watermarks=self._store.watermarks,
                )
            if due:
                self._dispatcher.process(due, report)
            now = clock.now()
            if not (due and self._defer_housekeeping(now)):
                self._housekeep(now, report)
        except Exception as exc:
            self.metrics.tick_failed(exc)
            retry_at = clock.now() + RETRY_SOON
            put_back = self._timetable.put_back(retry_at)
            log.exception("tick_failed", put_back=put_back)
            return retry_at
        finally:
            elapsed = clock.monotonic() - started
            self.metrics.tick_duration.observe(elapsed)
            self.metrics.ticked(clock.now())
        if self._log_ticks and (report.claimed or report.ranges or report.errors):
            log.debug(
                "tick_completed",
                duration_ms=round(elapsed * 1000, 2),
                claimed=report.claimed,
                launched=report.launched,
                ranges=report.ranges,
                errors=report.errors,
            )
        return self._next_wake()

    def _notice_clock_step_back(self, now: datetime) -> None:
        """A wall clock stepped backwards leaves the next poll, heartbeat and prune as far
        in the future as the step: the daemon would neither poll (operators' claims,
        other daemons' changes) nor beat until the clock caught up. They are due now,
        and the next listing is a full one."""
        if (
            self._next_poll_at is not None
            and self._next_poll_at - now > self._options.poll_interval
        ):
            self._next_poll_at = now
        if self._last_heartbeat_at is not None and self._last_heartbeat_at > now:
            self._last_heartbeat_at = None
        if self._last_prune_at is not None and self._last_prune_at > now:
            self._last_prune_at = None
        self._listing.clock_stepped_back(now)
        self._housekept_at = min(self._housekept_at, now)
        delay = self._options.housekeeping_delay
        if self._housekeeping_at is not None and self._housekeeping_at - now > delay:
            self._housekeeping_at = now

    def _defer_housekeeping(self, now: datetime) -> bool:
        """After a tick that launched, leave the database to those launches for a moment:
        the heartbeat, the listing and the pending pass come a little later (but never
        later than `_MAX_HOUSEKEEPING_DEFER`, however busy the loop is)."""
        delay = self._options.housekeeping_delay
        if not delay or now - self._housekept_at >= _MAX_HOUSEKEEPING_DEFER:
            return False
        if self._housekeeping_at is None:
            self._housekeeping_at = now + delay
        return True

    def _housekeep(self, now: datetime, report: TickReport) -> None:
        self._housekeeping_at = None
        self._housekept_at = now
        self._beat(now)
        if self._next_poll_at is None or now >= self._next_poll_at:
            self._poll(now, report)
        elif self.pending.due(now):
            self.pending.take(now)

    def _next_wake(self) -> datetime:
        if self.pending.wanted or self._unsynced or self._listing.in_progress:
            return self._clock.now()
        wake_at = self._next_poll_at or self._clock.now()
        if self._housekeeping_at is not None:
            wake_at = min(wake_at, self._housekeeping_at)
        retry_at = self.pending.next_at()
        if retry_at is not None:
            wake_at = min(wake_at, retry_at)
        due_at = self._timetable.next_due()
        return wake_at if due_at is None else min(due_at, wake_at)

    def _beat(self, now: datetime, *, stopped: bool = False) -> None:
        last = self._last_heartbeat_at
        if not stopped and last is not None and now - last < self._heartbeat_every:
            return
        self._last_heartbeat_at = now
        try:
            # A beat that ends a silence of every daemon records it as downtime.
            self._store.heartbeat(
                self._heartbeat(now, stopped=stopped),
                down_after=silence_limit(self._options.poll_interval),
            )
        except TriggersError as exc:
            # Observability, not dispatch: a failed heartbeat never stops a tick.
            self.metrics.store_error("heartbeat")
            log.warning("heartbeat_failed", error=str(exc), error_code=exc.code)

    def _heartbeat(self, now: datetime, *, stopped: bool = False) -> Heartbeat:
        return Heartbeat(
            owner=self._options.owner,
            host=self._options.host,
            pid=os.getpid(),
            version=self._options.version,
            started_at=self._started_at,
            last_tick_at=now,
            stopped_at=now if stopped else None,
            boot_id=self._host.boot_id,
            process_start=self._host.process_start,
        )

    # -- polling: listing, recovery, pending, pruning ----------------------------------

    def _sync_some(self) -> None:
        """Compile a bounded number of new or edited triggers.

        Compiling a schedule costs up to a tenth of a millisecond; a start (or an
        apply) with ten thousand triggers would keep the loop from ticking for seconds.
        The rest wait for the next tick, which comes at once; their occurrences are a
        moment late at worst, well within grace.
        """
        for _ in range(min(len(self._unsynced), _SYNC_BATCH)):
            trigger_id = next(iter(self._unsynced))
            self._timetable.sync(self._unsynced.pop(trigger_id))

    def _poll(self, now: datetime, report: TickReport) -> None:
        report.polled = True
        self._next_poll_at = now + self._options.poll_interval
        self._prune(now)
        beats = self._divide(now)
        if not self._listing.in_progress:  # else the pages to come are fresh reads
            self._take_rows(self._listing.read(now))
        adopted = self.monitor.adopt(
            (run.trigger_id, run.run_id) for run in self._store.active_runs()
        )
        if adopted and not self._polled:
            # Runs that stopped while no daemon watched must not meet the overlap
            # policy of the occurrences this first tick is about to claim.
            self.monitor.check_now()
        self._polled = True
        self.pending.take(now, beats=beats)
        self._record_quiet(report)

    def _take_rows(self, page: Page) -> None:
        """Take a page of listed rows in; after a full listing, forget the triggers it
        did not find."""
        for row in page.rows:
            if isinstance(row, TriggersError):
                trigger_id = str(row.details.get("trigger_id"))
                if trigger_id not in self._corrupt:
                    self._corrupt.add(trigger_id)
                    log.error("trigger_unreadable", trigger_id=trigger_id, error=str(row))
                self._timetable.remove(trigger_id)
                continue
            self._corrupt.discard(row.id)
            if self._timetable.compiled(row):
                self._timetable.sync(row)
            else:
                self._unsynced[row.id] = row
        self._sync_some()
        if page.complete is not None:
            for gone in set(self._timetable.entries) - page.complete:
                self._timetable.remove(gone)
                self._unsynced.pop(gone, None)
            if self._listed_all:
                log.debug("triggers_listed", count=len(page.complete))
            else:  # the first full listing: from now on the loop knows every trigger
                log.info("triggers_listed", count=len(page.complete))
                self._listed_all = True

    def _divide(self, now: datetime) -> list[Heartbeat] | None:
        """The heartbeats, read once a poll for the division (and handed on to the
        pending pass); None when they could not be read."""
        try:
            beats = self._store.heartbeats()
        except TriggersError as exc:
            # The division only orders who claims first: the last one known stands.
            self.metrics.store_error("heartbeats")
            log.warning("heartbeats_unreadable", error=str(exc), error_code=exc.code)
            return None
        if self._division.update(beats, now=now):
            log.info("daemons_sharing", daemons=len(self._division.members))
        return beats

    def _prune(self, now: datetime) -> None:
        if self._last_prune_at is not None and now - self._last_prune_at < _PRUNE_EVERY:
            return
        self._last_prune_at = now
        try:
            pruned = self._store.prune(older_than=now - self._options.fire_retention)
            # Daemons silent for this long are gone: `status` stops listing them.
            self._store.prune_heartbeats(older_than=now - self._options.heartbeat_retention)
            # Downtime is kept as long as the ledger it explains.
            self._store.prune_downtime(older_than=now - self._options.fire_retention)
        except TriggersError as exc:
            self.metrics.store_error("prune")
            log.warning("prune_failed", error=str(exc), error_code=exc.code)
            return
        if pruned:
            log.info("ledger_pruned", rows=pruned)

    def on_settlements(self, listener: Callable[[], None]) -> None:
        """Call `listener` (on the monitor's thread, so quickly) each time runs of
        triggers with an alert rule settle (`_alerting`): the alert sender looks at the
        outbox their settlement may have filled."""
        self._settle_listeners.append(listener)

    def _on_settled(self, trigger_ids: set[str]) -> None:
        """Monitor thread: runs stopped; buffered occurrences may launch now (of the
        trigger, or of any member of its pool, whose slot came free), and the dependents
        of these triggers have occurrences to launch."""
        if self._settle_listeners and self._alerting(trigger_ids):
            for listener in self._settle_listeners:
                listener()
        if self._timetable.followed(trigger_ids):
            self.pending.want()
            return
        for trigger_id in trigger_ids:
            entry = self._timetable.entries.get(trigger_id)
            if (
                entry is None
                or entry.trigger.spec.overlap in _BUFFERING
                or entry.trigger.buffered_count
                or entry.trigger.spec.pool is not None
            ):
                self.pending.want()
                return

    def _alerting(self, trigger_ids: set[str]) -> bool:
        """Whether a settlement of these triggers' runs may have raised an alert: one of
        them has an alert rule, or is not in this daemon's timetable (declared since by
        another daemon's apply). The sender otherwise finds the outbox as it left it;
        an alert this misses (a rule added by an apply this daemon has not read yet,
        one a claim raised) goes at the sender's next interval, a second later."""
        entries = self._timetable.entries
        for trigger_id in trigger_ids:
            entry = entries.get(trigger_id)
            if entry is None or entry.trigger.spec.alert is not None:
                return True
        return False

    def _on_launched(self, trigger_id: str, run_id: str, completed: bool) -> None:
        """Launcher thread: a run started (or, with nothing to run, completed at once).
        Under `supersede`, occurrences buffered behind its reservation can now
        supersede it; behind a run that completed at once, any buffered ones may
        launch (its claim left the entry's counts current), and so may its dependents'."""
        entry = self._timetable.entries.get(trigger_id)
        if completed:
            self.monitor.completed_at_start(trigger_id, run_id)
            # Settled in its claim's commit, which raised its alerts and gave its
            # dependents their occurrences: as a settlement does, say so now.
            for listener in self._settle_listeners:
                listener()
            if (
                entry is None
                or entry.trigger.buffered_count
                or self._timetable.followed({trigger_id})
            ):
                self.pending.want()
            return
        self.monitor.watch(trigger_id, run_id)
        if (
            entry is not None
            and entry.trigger.spec.overlap is Overlap.SUPERSEDE
            and entry.trigger.buffered_count
        ):
            self.pending.want()

    def _retry_pending_at(self, retry_at: datetime) -> None:
        self.pending.retry_at(retry_at)

    def _record_quiet(self, report: TickReport) -> None:
        """Account for the occurrences of paused and disabled triggers, as skipped ranges."""
        entries = self._timetable.quiet_entries()
        ranges = quiet_ranges(entries, now=self._clock.now(), limit=self._options.plan_limit)
        if ranges:
            self._dispatcher.record_ranges(ranges, report)
