"""Dispatch of due triggers: plan, record what did not launch, claim, hand over.

A tick owes the store one short transaction for the ranges that did not launch,
then one claim transaction per batch of about `CLAIM_BATCH` occurrences (each
trigger's in one), whatever the number of triggers due. With a runner on the
store's database the fires' runs start within their claim's transaction; the
other launches happen on the launcher's threads, and the tick never waits for them.

A claim is fenced on the revision its occurrences were computed from. When the
declaration changed in between (revision mismatch) or another daemon decided
first (watermark moved), the trigger is re-read once and decided again from the
new declaration; a second mismatch waits for the next tick.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from datetime import timedelta
from typing import assert_never

import structlog

from triggers.clock import Clock, iso
from triggers.errors import (
    RevisionMismatchError,
    ScheduleError,
    TriggersError,
    WatermarkMovedError,
)
from triggers.metrics import Metrics
from triggers.model import Action, Catchup, Outcome
from triggers.scheduler.launcher import Launcher
from triggers.scheduler.occurrences import DuePlan, plan_due
from triggers.scheduler.options import RETRY_SOON
from triggers.scheduler.timetable import Entry, Timetable
from triggers.store.protocol import (
    ClaimRequest,
    Completed,
    Decided,
    Deferred,
    Launched,
    LaunchWithin,
    RangeRecord,
    Refused,
    Reserved,
    TriggerStore,
)

log = structlog.get_logger()

# A catch-up this large is worth a human's look (Kubernetes warns past 100 missed).
_LARGE_CATCHUP = 100
CLAIM_BATCH = 128
"""Requests per claim transaction: a tick's occurrences are claimed (and their runs
started) in transactions of about this many, each trigger's wholly in one, so the
first runs of a large tick start while the rest are still being claimed (measured at
1,000 every-second triggers with a Python step: step start p50 178 -> 116 ms, p99
428 -> 239 ms, against one transaction for the whole tick; 64 and 256 did worse)."""


@dataclass(slots=True)
class TickReport:
    """What one tick did (for logs, tests and benchmarks)."""

    claimed: int = 0
    launched: int = 0
    ranges: int = 0
    errors: int = 0
    unclaimed: int = 0
    """Occurrences left unclaimed because the scheduler was stopping."""
    polled: bool = False
    outcomes: dict[str, int] = field(default_factory=dict)


class Dispatcher:
    """Decides the occurrences of due triggers through the store (see the module doc)."""

    def __init__(
        self,
        *,
        store: TriggerStore,
        clock: Clock,
        timetable: Timetable,
        launcher: Launcher,
        metrics: Metrics,
        owner: str,
        host: str,
        lease: timedelta,
        plan_limit: int,
        launch_within: LaunchWithin | None = None,
        stopping: threading.Event | None = None,
    ) -> None:
        self._launch_within = launch_within
        self._stopping = stopping or threading.Event()
        self._store = store
        self._clock = clock
        self._timetable = timetable
        self._launcher = launcher
        self._metrics = metrics
        self._owner = owner
        self._host = host
        self._lease = lease
        self._plan_limit = plan_limit

    def process(self, due: list[Entry], report: TickReport, *, refreshed: bool = False) -> None:
        """Plan, record and claim the occurrences of `due` entries, then reschedule them."""
        plans: dict[str, DuePlan] = {}
        ranges: list[RangeRecord] = []
        requests: list[ClaimRequest] = []
        for entry in due:
            trigger = entry.trigger
            trigger_id = trigger.spec.id
            try:
                plan = self._plan(entry)
            except Exception:
                log.exception("plan_failed", trigger_id=trigger_id)
                report.errors += 1
                self._timetable.reschedule(entry, at=self._clock.now() + RETRY_SOON)
                continue
            plans[trigger_id] = plan
            if len(plan.dispatch) > _LARGE_CATCHUP:
                log.warning(
                    "catchup_large",
                    trigger_id=trigger.id,
                    count=len(plan.dispatch),
                    first_at=iso(plan.dispatch[0]),
                    last_at=iso(plan.dispatch[-1]),
                    hint="each meets the overlap policy; narrow catchup.window or use latest",
                )
            after = entry.watermark_at
            for missed in plan.missed:
                ranges.append(
                    RangeRecord(
                        trigger_id=trigger_id,
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
            revision, calendars = trigger.revision, entry.calendars
            if calendars is None:
                requests += [
                    ClaimRequest(
                        trigger_id=trigger_id, occurrence_at=at, expected_revision=revision
                    )
                    for at in plan.dispatch
                ]
            else:
                requests += [
                    ClaimRequest(
                        trigger_id=trigger_id,
                        occurrence_at=at,
                        expected_revision=revision,
                        excluded_by=calendars.exclusion(at),
                    )
                    for at in plan.dispatch
                ]
        requests = self._requirements(requests)
        stale = self.record_ranges(ranges, report) if ranges else set()
        if stale:
            requests = [r for r in requests if r.trigger_id not in stale]
        unclaimed: set[str] = set()
        if requests:
            for batch in claim_batches(requests, CLAIM_BATCH):
                if self._stopping.is_set():
                    # Stopping: the rest stay unclaimed, due still in the store (their
                    # watermarks did not move), for the next daemon to claim or catch up.
                    report.unclaimed += len(batch)
                    unclaimed.update(request.trigger_id for request in batch)
                    continue
                stale |= self._claim(batch, report)
        if unclaimed:
            log.info("stopping_left_unclaimed", occurrences=report.unclaimed)
        for entry in due:
            if entry.trigger.spec.id in unclaimed:
                self._timetable.reschedule(entry)  # its watermark unmoved: due still
            else:
                self._reschedule_after_dispatch(entry, plans.get(entry.trigger.spec.id), stale)
        if stale and not self._stopping.is_set():
            self._refresh(stale, report, decide=not refreshed)

    def _requirements(self, requests: list[ClaimRequest]) -> list[ClaimRequest]:
        """Name the unmet `requires:` of each request whose trigger has one, from each
        trigger's latest settlements (one read, only when such a trigger is due)."""
        entries = self._timetable.entries
        requiring = {
            r.trigger_id
            for r in requests
            if (entry := entries.get(r.trigger_id)) is not None
            and entry.trigger.spec.requires is not None
        }
        if not requiring:
            return requests
        last = self._store.last_settled()
        found: list[ClaimRequest] = []
        for request in requests:
            entry = entries.get(request.trigger_id)
            requirement = None if entry is None else entry.trigger.spec.requires
            if requirement is not None and not requirement.met(last, request.occurrence_at):
                found.append(dataclasses.replace(request, unmet=requirement.describe()))
            else:
                found.append(request)
        return found

    def _plan(self, entry: Entry) -> DuePlan:
        if entry.schedule is None:
            raise ScheduleError("trigger has no valid schedule")
        spec = entry.trigger.spec
        now = self._clock.now()
        # A jittered occurrence is due late on purpose; that delay is not downtime.
        grace = spec.catchup.grace + spec.jitter
        # The common case, a tick on time: the one occurrence since the watermark, well
        # within grace, and the next one not yet due. It is what plan_due would say.
        next_at = entry.schedule.next_after(entry.watermark_at)
        if next_at is not None and next_at <= now and now - next_at < grace:
            following = entry.schedule.next_after(next_at)
            if following is None or following > now:
                return DuePlan(dispatch=[next_at], missed=[], watermark_at=next_at)
        catchup = Catchup(policy=spec.catchup.policy, window=spec.catchup.window, grace=grace)
        return plan_due(
            entry.schedule,
            watermark_at=entry.watermark_at,
            now=now,
            catchup=catchup,
            limit=self._plan_limit,
        )

    def record_ranges(self, ranges: list[RangeRecord], report: TickReport) -> set[str]:
        """Record ranges; returns the triggers whose plan went stale."""
        if not ranges:
            return set()
        stale: set[str] = set()
        try:
            results = self._store.record_ranges(ranges, now=self._clock.now())
        except TriggersError as exc:
            self._metrics.store_error("record_ranges")
            log.warning(
                "range_record_failed", count=len(ranges), error=str(exc), error_code=exc.code
            )
            report.errors += 1
            return {r.trigger_id for r in ranges}
        for item, error in zip(ranges, results, strict=True):
            if error is None:
                report.ranges += 1
                self._metrics.fired(item.outcome.value, item.count, reason=item.reason.value)
                _log_range(item)
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
        started = self._clock.monotonic()
        try:
            results = self._store.claim(
                requests,
                owner=self._owner,
                host=self._host,
                now=now,
                lease=self._lease,
                launch_within=self._launch_within,
            )
        except TriggersError as exc:
            self._metrics.store_error("claim")
            log.warning("claim_failed", count=len(requests), error=str(exc), error_code=exc.code)
            report.errors += 1
            return {r.trigger_id for r in requests}
        if self._launch_within is not None:
            # With launches in the claim's own commit, a launch takes the claim's time.
            self._metrics.launch_duration.observe(self._clock.monotonic() - started)
        stale: set[str] = set()
        launches: list[Reserved] = []
        entries = self._timetable.entries
        for request, result in zip(requests, results, strict=True):
            if isinstance(result, TriggersError):
                stale.add(request.trigger_id)
                _log_store_error(result, request.trigger_id)
                continue
            report.claimed += 1
            entry = entries.get(request.trigger_id)
            if entry is not None:
                entry.trigger = result.trigger
                if result.action is Action.IGNORED:
                    # Paused, disabled or done since it was listed: nothing was decided,
                    # so the watermark stays and the trigger is re-read.
                    stale.add(request.trigger_id)
                elif request.occurrence_at > entry.watermark_at:
                    entry.watermark_at = request.occurrence_at
            match result:
                case Decided():
                    self._account(result)
                case Reserved():
                    launches.append(result)
                case Launched(run_id=run_id):
                    report.launched += 1
                    self._launcher.launched(result, run_id, self._clock.now())
                case Completed(run_id=run_id):
                    report.launched += 1
                    self._launcher.launched(result, run_id, self._clock.now(), completed=True)
                case Refused(error=error):
                    self._launcher.refused(result, error)
                case Deferred(retry_at=retry_at):
                    self._launcher.deferred(result, retry_at)
                case _:
                    assert_never(result)
        if launches:
            report.launched += len(launches)
            self._launcher.submit(launches)
        return stale

    def _account(self, claim: Decided) -> None:
        """Count and log a decision that launches nothing (a duplicate was decided before:
        nothing to say of it)."""
        action = claim.action
        if action is Action.DUPLICATE:
            return
        reason = claim.reason.value if claim.reason else None
        if action is Action.IGNORED:
            log.debug(
                "claim_ignored",
                trigger_id=claim.trigger_id,
                occurrence_at=iso(claim.occurrence_at),
                reason=reason,
            )
            return
        outcome = _RECORDED[action]
        self._metrics.fired(outcome.value, reason=reason)
        fields = {
            "trigger_id": claim.trigger_id,
            "occurrence_at": iso(claim.occurrence_at),
            "reason": reason,
        }
        if outcome is Outcome.SKIPPED:
            log.info("occurrence_skipped", **fields)
        elif outcome is Outcome.BUFFERED:
            log.info("occurrence_buffered", **fields)
        else:
            log.info("occurrence_superseded", **fields)

    def _reschedule_after_dispatch(
        self, entry: Entry, plan: DuePlan | None, stale: set[str]
    ) -> None:
        """Put a dispatched entry back on the heap: due at its next occurrence, or again
        shortly when its plan failed or went stale."""
        if plan is None or entry.trigger.spec.id in stale:
            if entry.due_at is None:
                self._timetable.reschedule(entry, at=self._clock.now() + RETRY_SOON)
            return
        entry.watermark_at = max(entry.watermark_at, plan.watermark_at)
        if plan.truncated:
            self._timetable.reschedule(entry, at=self._clock.now())
        else:
            self._timetable.reschedule(entry)

    def _refresh(self, trigger_ids: set[str], report: TickReport, *, decide: bool) -> None:
        """Re-read triggers whose declaration or watermark moved, and decide again once.

        After a second mismatch the entries are only re-read: the next tick decides
        from them, so it does not fail once more on what this one already learnt."""
        again = []
        for trigger_id in sorted(trigger_ids):
            try:
                trigger = self._store.get_trigger(trigger_id)
            except TriggersError as exc:
                self._metrics.store_error("get_trigger")
                log.warning("trigger_reload_failed", trigger_id=trigger_id, error=str(exc))
                continue
            if trigger is None:
                self._timetable.remove(trigger_id)
                continue
            entry = self._timetable.sync(trigger)
            if not self._timetable.take_if_due(entry, self._clock.now()):
                continue
            if decide:
                again.append(entry)
            else:
                self._timetable.reschedule(entry, at=self._clock.now() + RETRY_SOON)
        if again:
            self.process(again, report, refreshed=True)


def claim_batches(requests: list[ClaimRequest], size: int) -> list[list[ClaimRequest]]:
    """`requests` (each trigger's contiguous) cut into batches of about `size`, never
    between two requests of one trigger: its occurrences are decided together."""
    batches: list[list[ClaimRequest]] = []
    current: list[ClaimRequest] = []
    for index, request in enumerate(requests):
        if len(current) >= size and request.trigger_id != requests[index - 1].trigger_id:
            batches.append(current)
            current = []
        current.append(request)
    if current:
        batches.append(current)
    return batches


_RECORDED = {
    Action.SKIP: Outcome.SKIPPED,
    Action.BUFFER: Outcome.BUFFERED,
    Action.SUPERSEDED: Outcome.SUPERSEDED,
}


def _log_range(item: RangeRecord) -> None:
    """One line per recorded range, named as for one occurrence (the same kinds)."""
    fields = {
        "trigger_id": item.trigger_id,
        "occurrence_at": iso(item.first_at),
        "last_occurrence_at": iso(item.last_at),
        "count": item.count,
        "reason": item.reason.value,
    }
    if item.outcome is Outcome.MISSED:
        # Occurrences that came due while no daemon ticked: downtime, recovered.
        log.warning("occurrence_missed", **fields)
    else:
        log.info("occurrence_skipped", **fields)


def _log_store_error(error: TriggersError, trigger_id: str) -> None:
    if isinstance(error, RevisionMismatchError | WatermarkMovedError):
        log.info("claim_stale", trigger_id=trigger_id, error_code=error.code, error=str(error))
    else:
        log.warning("claim_refused", trigger_id=trigger_id, error_code=error.code, error=str(error))
