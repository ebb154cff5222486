"""The scheduler: a clock loop over every trigger's next occurrence.

Each trigger's next due time lives in memory, in a heap; the loop sleeps until
the earliest one (or the poll interval, to see other daemons' and operators'
changes), so a due occurrence is claimed within milliseconds and an idle daemon
does no work. A tick owes the store two short transactions at most (the ranges
that did not launch, then every claim of the tick), whatever the number of
triggers due; launches and run monitoring happen on other threads and the tick
never waits for them.

The watermark of a trigger (the newest occurrence decided) is durable in the
store and moves only with what the store recorded; the in-memory copy only
tells the loop where to look next.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import structlog

from triggers.clock import Clock, iso
from triggers.errors import (
    RevisionMismatchError,
    ScheduleError,
    TriggersError,
    WatermarkMovedError,
)
from triggers.metrics import Metrics
from triggers.model import (
    Action,
    Catchup,
    CatchupPolicy,
    Outcome,
    Overlap,
    Reason,
    Trigger,
)
from triggers.runner.protocol import Runner
from triggers.scheduler.deadlines import DeadlineRunner
from triggers.scheduler.launcher import Launcher
from triggers.scheduler.monitor import Monitor
from triggers.scheduler.occurrences import DuePlan, plan_due
from triggers.scheduler.timetable import Entry, Timetable
from triggers.store.protocol import (
    Claim,
    ClaimRequest,
    Heartbeat,
    RangeRecord,
    TriggerStore,
)

log = structlog.get_logger()

_PRUNE_EVERY = timedelta(hours=1)
_HEARTBEAT_EVERY = timedelta(seconds=1)
_RETRY_AFTER = timedelta(seconds=1)
_FOREVER = timedelta(days=365 * 200)
_BUFFERING = frozenset({Overlap.BUFFER, Overlap.BUFFER_ALL, Overlap.SUPERSEDE})


@dataclass(slots=True)
class TickReport:
    """What one tick did (for logs, tests and benchmarks)."""

    claimed: int = 0
    launched: int = 0
    ranges: int = 0
    errors: int = 0
    polled: bool = False
    outcomes: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerOptions:
    """Tunables of the scheduler (built from Settings by the daemon)."""

    owner: str
    host: str
    version: str = "0"
    poll_interval: timedelta = timedelta(seconds=5)
    lease: timedelta = timedelta(minutes=5)
    run_poll_interval: timedelta = timedelta(seconds=15)
    start_timeout: timedelta = timedelta(minutes=4)
    inspect_timeout: timedelta = timedelta(seconds=30)
    cancel_timeout: timedelta = timedelta(seconds=30)
    concurrency: int = 8
    fire_retention: timedelta = timedelta(days=30)
    shutdown_grace: timedelta = timedelta(seconds=10)
    plan_limit: int = 10_000


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
    ) -> None:
        self._store = store
        self._clock = clock
        self._options = options
        self.metrics = metrics or Metrics()
        self._runner = DeadlineRunner(
            runner,
            concurrency=options.concurrency,
            start_timeout=options.start_timeout,
            inspect_timeout=options.inspect_timeout,
            cancel_timeout=options.cancel_timeout,
        )
        self.monitor = Monitor(
            store=store,
            runner=self._runner,
            clock=clock,
            poll_interval=options.run_poll_interval,
            on_settled=self._on_settled,
            metrics=self.metrics,
        )
        self.launcher = Launcher(
            store=store,
            runner=self._runner,
            clock=clock,
            on_launched=self.monitor.watch,
            on_deferred=self._pending_retry_at,
            metrics=self.metrics,
        )
        runner.subscribe(self.monitor.report)
        self._timetable = Timetable()
        self._next_poll_at: datetime | None = None
        self._last_heartbeat_at: datetime | None = None
        self._last_prune_at: datetime | None = None
        self._started_at = clock.now()
        self._pending_wanted = threading.Event()
        self._pending_due_at: datetime | None = None
        self._pending_lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._corrupt: set[str] = set()

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        """Start the launcher and monitor threads."""
        self.launcher.start()
        self.monitor.start()

    def run(self) -> None:
        """Tick until `stop()`; then close (finish launches, detach monitors)."""
        self.start()
        try:
            while not self._stopping.is_set():
                wake_at = self.tick()
                delay = (wake_at - self._clock.now()).total_seconds()
                if delay > 0:
                    self._clock.wait(delay, self._wake)
                self._wake.clear()
        finally:
            self.close()

    def stop(self) -> None:
        """Ask `run` to return (any thread, signal handlers included)."""
        self._stopping.set()
        self._wake.set()

    def refresh_soon(self) -> None:
        """Re-read every trigger at the next tick (after an apply, on SIGHUP)."""
        self._next_poll_at = None
        self._wake.set()

    def close(self) -> None:
        grace = self._options.shutdown_grace.total_seconds()
        self.launcher.close(grace=grace)
        self.monitor.close()
        self._runner.close()
        now = self._clock.now()
        try:
            self._store.heartbeat(self._heartbeat(now, stopped=True))
        except TriggersError as exc:
            log.warning("heartbeat_failed", error=str(exc))

    # -- one tick ---------------------------------------------------------------------

    def tick(self) -> datetime:
        """Do what is due now; return when the next tick is due."""
        started = self._clock.monotonic()
        report = TickReport()
        try:
            now = self._clock.now()
            self._beat(now)
            if self._next_poll_at is None or now >= self._next_poll_at:
                self._poll(now, report)
            elif self._pending_due(now):
                self._take_pending(self._clock.now())
            due = self._timetable.pop_due(self._clock.now())
            if due:
                self._process(due, report)
        except Exception:
            self.metrics.ticks_failed.inc()
            log.exception("tick_failed")
            return self._clock.now() + _RETRY_AFTER
        finally:
            elapsed = self._clock.monotonic() - started
            self.metrics.tick_duration.observe(elapsed)
        if report.claimed or report.ranges or report.errors:
            log.debug(
                "tick_completed",
                duration_ms=round(elapsed * 1000, 2),
                claimed=report.claimed,
                launched=report.launched,
                ranges=report.ranges,
                errors=report.errors,
            )
        return self._next_wake()

    def _next_wake(self) -> datetime:
        wake_at = self._next_poll_at or self._clock.now()
        with self._pending_lock:
            if self._pending_due_at is not None:
                wake_at = min(wake_at, self._pending_due_at)
        due_at = self._timetable.next_due()
        return wake_at if due_at is None else min(due_at, wake_at)

    def _beat(self, now: datetime) -> None:
        if self._last_heartbeat_at is not None and now - self._last_heartbeat_at < _HEARTBEAT_EVERY:
            return
        self._last_heartbeat_at = now
        try:
            self._store.heartbeat(self._heartbeat(now))
        except TriggersError as exc:
            # Observability, not dispatch: a failed heartbeat never stops a tick.
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
        )

    # -- polling: listing, recovery, pending, pruning ----------------------------------

    def _poll(self, now: datetime, report: TickReport) -> None:
        report.polled = True
        self._next_poll_at = now + self._options.poll_interval
        self._prune(now)
        rows = self._store.list_triggers()
        seen = set()
        for row in rows:
            if isinstance(row, TriggersError):
                trigger_id = str(row.details.get("trigger_id"))
                seen.add(trigger_id)
                if trigger_id not in self._corrupt:
                    self._corrupt.add(trigger_id)
                    log.error("trigger_unreadable", trigger_id=trigger_id, error=str(row))
                self._timetable.entries.pop(trigger_id, None)
                continue
            self._corrupt.discard(row.id)
            seen.add(row.id)
            self._timetable.sync(row)
        for gone in set(self._timetable.entries) - seen:
            del self._timetable.entries[gone]
        self.monitor.adopt((run.trigger_id, run.run_id) for run in self._store.active_runs())
        self._take_pending(now)
        self._record_quiet(report)

    def _prune(self, now: datetime) -> None:
        if self._last_prune_at is not None and now - self._last_prune_at < _PRUNE_EVERY:
            return
        self._last_prune_at = now
        try:
            pruned = self._store.prune(older_than=now - self._options.fire_retention)
        except TriggersError as exc:
            log.warning("prune_failed", error=str(exc))
            return
        if pruned:
            log.info("ledger_pruned", rows=pruned)

    def _pending_retry_at(self, retry_at: datetime) -> None:
        """Launcher thread: a launch was given back, to be retried from `retry_at`."""
        with self._pending_lock:
            if self._pending_due_at is None or retry_at < self._pending_due_at:
                self._pending_due_at = retry_at
        self._wake.set()

    def _pending_due(self, now: datetime) -> bool:
        if self._pending_wanted.is_set():
            return True
        with self._pending_lock:
            return self._pending_due_at is not None and now >= self._pending_due_at

    def _take_pending(self, now: datetime) -> None:
        self._pending_wanted.clear()
        with self._pending_lock:
            if self._pending_due_at is not None and self._pending_due_at <= now:
                self._pending_due_at = None
        claims = self._store.take_pending(
            owner=self._options.owner, host=self._options.host, now=now, lease=self._options.lease
        )
        if claims:
            log.info("pending_taken", count=len(claims))
            self.launcher.submit(claims)

    def _on_settled(self, trigger_ids: set[str]) -> None:
        """Monitor thread: runs stopped; buffered occurrences may launch now."""
        for trigger_id in trigger_ids:
            entry = self._timetable.entries.get(trigger_id)
            if entry is None or entry.trigger.spec.overlap in _BUFFERING:
                self._pending_wanted.set()
                self._wake.set()
                return

    def _record_quiet(self, report: TickReport) -> None:
        """Account for the occurrences of paused and disabled triggers, as skipped ranges."""
        ranges = []
        for entry in self._timetable.entries.values():
            trigger = entry.trigger
            if trigger.retired or trigger.claimable or entry.schedule is None:
                continue
            reason = Reason.PAUSED if trigger.paused else Reason.DISABLED
            plan = plan_due(
                entry.schedule,
                watermark_at=entry.watermark_at,
                now=self._clock.now(),
                catchup=Catchup(policy=CatchupPolicy.NONE, window=_FOREVER, grace=timedelta(0)),
                limit=self._options.plan_limit,
            )
            if plan.missed:
                ranges.append(_quiet_range(trigger, entry.watermark_at, plan, reason))
        if ranges:
            self._record_ranges(ranges, report)

    # -- due triggers ------------------------------------------------------------------

    def _process(self, due: list[Entry], report: TickReport, *, refreshed: bool = False) -> None:
        plans: dict[str, DuePlan] = {}
        ranges: list[RangeRecord] = []
        requests: list[ClaimRequest] = []
        for entry in due:
            trigger = entry.trigger
            with structlog.contextvars.bound_contextvars(trigger_id=trigger.id):
                try:
                    plan = self._plan(entry)
                except Exception:
                    log.exception("plan_failed")
                    report.errors += 1
                    self._timetable.reschedule(entry, at=self._clock.now() + _RETRY_AFTER)
                    continue
            plans[trigger.id] = plan
            after = entry.watermark_at
            for missed in plan.missed:
                ranges.append(
                    RangeRecord(
                        trigger_id=trigger.id,
                        expected_revision=trigger.revision,
                        after=after,
                        first_at=missed.first_at,
                        last_at=missed.last_at,
                        count=missed.count,
                        outcome=Outcome.MISSED,
                        reason=missed.reason,
                    )
                )
                after = missed.last_at
            requests.extend(
                ClaimRequest(
                    trigger_id=trigger.id,
                    occurrence_at=occurrence,
                    expected_revision=trigger.revision,
                )
                for occurrence in plan.dispatch
            )
        stale = self._record_ranges(ranges, report)
        requests = [r for r in requests if r.trigger_id not in stale]
        if requests:
            stale |= self._claim(requests, report)
        for entry in due:
            self._settle_entry(entry, plans.get(entry.trigger.id), stale)
        if stale and not refreshed:
            self._refresh(stale, report)

    def _plan(self, entry: Entry) -> DuePlan:
        if entry.schedule is None:
            raise ScheduleError("trigger has no valid schedule")
        spec = entry.trigger.spec
        # A jittered occurrence is due late on purpose; that delay is not downtime.
        catchup = Catchup(
            policy=spec.catchup.policy,
            window=spec.catchup.window,
            grace=spec.catchup.grace + spec.jitter,
        )
        return plan_due(
            entry.schedule,
            watermark_at=entry.watermark_at,
            now=self._clock.now(),
            catchup=catchup,
            limit=self._options.plan_limit,
        )

    def _record_ranges(self, ranges: list[RangeRecord], report: TickReport) -> set[str]:
        """Record ranges; returns the triggers whose plan went stale."""
        if not ranges:
            return set()
        stale: set[str] = set()
        try:
            results = self._store.record_ranges(ranges, now=self._clock.now())
        except TriggersError as exc:
            log.warning("ranges_failed", count=len(ranges), error=str(exc), error_code=exc.code)
            report.errors += 1
            return {r.trigger_id for r in ranges}
        for item, error in zip(ranges, results, strict=True):
            if error is None:
                report.ranges += 1
                self.metrics.fired(item.outcome.value, item.count)
                log.info(
                    "occurrences_missed"
                    if item.outcome is Outcome.MISSED
                    else "occurrences_skipped",
                    trigger_id=item.trigger_id,
                    first_at=iso(item.first_at),
                    last_at=iso(item.last_at),
                    count=item.count,
                    reason=item.reason.value,
                )
                entry = self._timetable.entries.get(item.trigger_id)
                if entry is not None:
                    entry.watermark_at = max(entry.watermark_at, item.last_at)
            else:
                stale.add(item.trigger_id)
                _log_store_error(error, item.trigger_id)
        return stale

    def _claim(self, requests: list[ClaimRequest], report: TickReport) -> set[str]:
        """Claim every request in one batch; returns the triggers whose plan went stale."""
        now = self._clock.now()
        try:
            results = self._store.claim(
                requests,
                owner=self._options.owner,
                host=self._options.host,
                now=now,
                lease=self._options.lease,
            )
        except TriggersError as exc:
            log.warning("claim_failed", count=len(requests), error=str(exc), error_code=exc.code)
            report.errors += 1
            return {r.trigger_id for r in requests}
        stale: set[str] = set()
        launches: list[Claim] = []
        for request, result in zip(requests, results, strict=True):
            if isinstance(result, TriggersError):
                stale.add(request.trigger_id)
                _log_store_error(result, request.trigger_id)
                continue
            report.claimed += 1
            entry = self._timetable.entries.get(request.trigger_id)
            if entry is not None:
                entry.trigger = result.trigger
                if result.action is Action.IGNORED:
                    # Paused, disabled or done since it was listed: nothing was decided,
                    # so the watermark stays and the trigger is re-read.
                    stale.add(request.trigger_id)
                else:
                    entry.watermark_at = max(entry.watermark_at, request.occurrence_at)
            self._account(result)
            if result.launches:
                launches.append(result)
        if launches:
            report.launched += len(launches)
            self.launcher.submit(launches)
        return stale

    def _account(self, claim: Claim) -> None:
        action = claim.action
        if action in (Action.FIRE, Action.SUPERSEDE, Action.DUPLICATE):
            return
        if action is Action.IGNORED:
            log.info(
                "claim_ignored",
                trigger_id=claim.trigger_id,
                occurrence_at=iso(claim.occurrence_at),
                reason=claim.reason.value if claim.reason else None,
            )
            return
        outcome = Outcome.SKIPPED if action is Action.SKIP else Outcome.BUFFERED
        self.metrics.fired(outcome.value)
        log.info(
            "occurrence_skipped" if action is Action.SKIP else "occurrence_buffered",
            trigger_id=claim.trigger_id,
            occurrence_at=iso(claim.occurrence_at),
            reason=claim.reason.value if claim.reason else None,
        )

    def _settle_entry(self, entry: Entry, plan: DuePlan | None, stale: set[str]) -> None:
        if entry.trigger.id in stale or plan is None:
            if entry.due_at is None:
                self._timetable.reschedule(entry, at=self._clock.now() + _RETRY_AFTER)
            return
        entry.watermark_at = max(entry.watermark_at, plan.watermark_at)
        if plan.truncated:
            self._timetable.reschedule(entry, at=self._clock.now())
        else:
            self._timetable.reschedule(entry)

    def _refresh(self, trigger_ids: set[str], report: TickReport) -> None:
        """Re-read triggers whose declaration or watermark moved, and decide again once."""
        again = []
        for trigger_id in sorted(trigger_ids):
            try:
                trigger = self._store.get_trigger(trigger_id)
            except TriggersError as exc:
                log.warning("trigger_reload_failed", trigger_id=trigger_id, error=str(exc))
                continue
            if trigger is None:
                self._timetable.entries.pop(trigger_id, None)
                continue
            entry = self._timetable.sync(trigger)
            if self._timetable.take_if_due(entry, self._clock.now()):
                again.append(entry)
        if again:
            self._process(again, report, refreshed=True)


def _quiet_range(trigger: Trigger, after: datetime, plan: DuePlan, reason: Reason) -> RangeRecord:
    return RangeRecord(
        trigger_id=trigger.id,
        expected_revision=trigger.revision,
        after=after,
        first_at=plan.missed[0].first_at,
        last_at=plan.missed[-1].last_at,
        count=sum(m.count for m in plan.missed),
        outcome=Outcome.SKIPPED,
        reason=reason,
    )


def _log_store_error(error: TriggersError, trigger_id: str) -> None:
    if isinstance(error, RevisionMismatchError | WatermarkMovedError):
        log.info("claim_stale", trigger_id=trigger_id, error_code=error.code, error=str(error))
    else:
        log.warning("claim_refused", trigger_id=trigger_id, error_code=error.code, error=str(error))
