"""The memory store's claim path: decide a batch of occurrences as one transaction.

Private to `triggers.store.memory`, and the twin of the SQL store's `_claims.py`:
the same decisions (`_decide.py`, shared), the same order of checks, the same rows
written. Nothing is written until every request is decided and the runs started
within the claim have answered, so a batch lands whole or not at all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from triggers.errors import (
    LedgerChangedError,
    RevisionMismatchError,
    RunnerRefusedError,
    TriggersError,
    UnknownTriggerError,
)
from triggers.model import Action, Outcome, Overlap, Reason, Trigger, idempotency_key
from triggers.store._decide import Counters, Decision, decide, decided_before, overlap_of
from triggers.store._inline import RETRY_AFTER_MS
from triggers.store._memory_lookups import active_runs, covered_backfills, held, newest_superseding
from triggers.store._memory_rows import FireRow, Tables, TriggerRow, cut
from triggers.store._shared import new_reservation
from triggers.store.protocol import (
    Claim,
    ClaimRequest,
    ClaimResult,
    CompletedRun,
    LaunchWithin,
    RangeSplit,
)

_OUTCOMES = {
    Action.FIRE: Outcome.LAUNCHING,
    Action.SUPERSEDE: Outcome.LAUNCHING,
    Action.SKIP: Outcome.SKIPPED,
    Action.BUFFER: Outcome.BUFFERED,
    Action.SUPERSEDED: Outcome.SUPERSEDED,
}
_RETRY_AFTER = timedelta(milliseconds=RETRY_AFTER_MS)


@dataclasses.dataclass(slots=True)
class _Decided:
    request: ClaimRequest
    key: str
    action: Action
    reason: Reason | None = None
    launching: bool = False
    reservation: str | None = None
    supersedes: str | None = None
    run_id: str | None = None
    refused: str | None = None
    retry_at: datetime | None = None
    row: FireRow | None = None
    completed: bool = False


class MemoryClaimBatch:
    """One claim transaction on the memory store's tables (see the module doc)."""

    def __init__(
        self,
        tables: Tables,
        requests: Sequence[ClaimRequest],
        *,
        owner: str,
        host: str,
        now: datetime,
        lease: timedelta,
        splits: Sequence[RangeSplit] = (),
        launch_within: LaunchWithin | None = None,
    ) -> None:
        self._tables = tables
        self._requests = requests
        self._splits = splits
        self._owner = owner
        self._host = host
        self._now = cut(now)
        self._lease_expires = cut(now + lease)
        self._launch_within = launch_within
        self.after_commit: Callable[[], None] = lambda: None
        self._counters: dict[str, Counters] = {}
        self._watermarks: dict[str, datetime] = {}

    def run(self, apply_splits: Callable[[], None]) -> list[ClaimResult]:
        """Decide and record every request; `apply_splits` carves the splits first.

        Decisions read the trigger rows themselves: nothing writes them before
        `_write`, so they read as a snapshot would, without copying them."""
        requests = self._requests
        stored = self._trigger_rows()
        if self._splits:
            apply_splits()
        operators, superseding = self._kinds(stored)
        existing, existing_keys = held(self._tables, requests) if operators else (set(), set())
        covered = covered_backfills(self._tables, requests) if operators else set()
        active = active_runs(self._tables, requests, stored) if superseding else {}
        newest = newest_superseding(requests, stored, existing, covered) if superseding else {}
        decided: list[_Decided] = []
        results: list[ClaimResult | None] = []
        for index, request in enumerate(requests):
            trigger_id = request.trigger_id
            trigger = stored.get(trigger_id)
            if trigger is None or trigger.revision != request.expected_revision:
                results.append(self._check(request, trigger))
                continue
            results.append(None)
            key = idempotency_key(trigger_id, request.occurrence_at, request.manual_key)
            # The ledger's rows (`existing`: its ranges have no key), then this batch's
            # requests, found by key alone: a request's key follows from its identity.
            seen = key in existing_keys or (
                bool(existing)
                and (trigger_id, request.occurrence_at, request.manual_key) in existing
            )
            if seen or decided_before(request, trigger):
                self._advance(request)
                decided.append(_Decided(request, key, Action.DUPLICATE))
                continue
            if covered and (request.trigger_id, request.occurrence_at) in covered:
                decided.append(_Decided(request, key, Action.DUPLICATE))
                continue
            if request.kind == "backfill" and request.occurrence_at > trigger.watermark_at:
                decided.append(_Decided(request, key, Action.IGNORED))
                continue
            existing_keys.add(key)
            replaced = (
                superseding
                and newest.get(trigger_id, index) > index
                and overlap_of(request, trigger) is Overlap.SUPERSEDE
            )
            item = self._decide(trigger, request, key, active, replaced=replaced)
            if item.action is not Action.IGNORED:
                self._advance(request)
                item.row = self._row(trigger, item)
            decided.append(item)
        if self._splits:
            self._check_carved(decided)
        # The triggers as the claim leaves them, read before `_write` changes their rows.
        snapshots = self._snapshots(decided, stored)
        if self._launch(decided, snapshots):
            snapshots = self._snapshots(decided, stored)  # its counters changed
        self._reserve(decided)
        final = self._finish(results, decided, snapshots)
        self._write(decided, stored)
        return final

    def _trigger_rows(self) -> dict[str, TriggerRow]:
        """The requests' trigger rows, in id order."""
        requests, rows = self._requests, self._tables.triggers
        if len(requests) == 1:
            trigger_id = requests[0].trigger_id
            row = rows.get(trigger_id)
            return {} if row is None else {trigger_id: row}
        ids = sorted({r.trigger_id for r in requests})
        return {i: rows[i] for i in ids if i in rows}

    def _kinds(self, stored: dict[str, TriggerRow]) -> tuple[bool, bool]:
        """Whether any request is an operator's, and whether any is under `supersede`.

        A tick's batch usually holds neither: no operator's request to look up in the
        ledger, no backfill a range row may cover, no active run a decision needs."""
        operators = superseding = False
        for request in self._requests:
            operators = operators or request.kind != "scheduled"
            trigger = stored.get(request.trigger_id)
            if trigger is not None and overlap_of(request, trigger) is Overlap.SUPERSEDE:
                superseding = True
        return operators, superseding

    def _check(self, request: ClaimRequest, trigger: TriggerRow | None) -> TriggersError | None:
        if trigger is None:
            return UnknownTriggerError(
                f"no trigger {request.trigger_id!r}", trigger_id=request.trigger_id
            )
        if trigger.revision != request.expected_revision:
            return RevisionMismatchError(
                f"trigger {request.trigger_id!r} is at revision {trigger.revision}, "
                f"not {request.expected_revision}",
                trigger_id=request.trigger_id,
                revision=trigger.revision,
                expected_revision=request.expected_revision,
            )
        return None

    def _decide(
        self,
        trigger: TriggerRow,
        request: ClaimRequest,
        key: str,
        active: dict[str, list[str | None]],
        *,
        replaced: bool,
    ) -> _Decided:
        trigger_id = request.trigger_id
        counters = self._counters.get(trigger_id)
        if counters is None:
            counters = self._counters[trigger_id] = Counters.of(trigger)
        runs = active.get(trigger_id)
        if runs is None:
            runs = active[trigger_id] = []
        has_run = bool(runs) and all(run_id is not None for run_id in runs)
        decision: Decision = decide(
            trigger, counters, request, active_has_run=has_run, replaced=replaced
        )
        action = decision.action
        if action is Action.FIRE:
            runs.append(None)
            return _Decided(request, key, action, decision.reason, True)
        if action is Action.SUPERSEDE:
            supersedes = runs[-1]
            runs.append(None)
            return _Decided(request, key, action, decision.reason, True, None, supersedes)
        return _Decided(request, key, action, decision.reason)

    def _advance(self, request: ClaimRequest) -> None:
        if request.kind != "scheduled":
            return
        current = self._watermarks.get(request.trigger_id)
        if current is None or request.occurrence_at > current:
            self._watermarks[request.trigger_id] = request.occurrence_at

    def _row(self, trigger: TriggerRow, item: _Decided) -> FireRow:
        launching = item.launching
        outcome = _OUTCOMES[item.action]
        request = item.request
        return FireRow(
            trigger_id=request.trigger_id,
            occurrence_at=cut(request.occurrence_at),
            manual_key=request.manual_key,
            idempotency_key=item.key,
            kind=request.kind,
            outcome=outcome,
            reason=item.reason,
            revision=trigger.revision,
            host=self._host,
            claimed_at=self._now,
            settled_at=self._now if outcome in (Outcome.SKIPPED, Outcome.SUPERSEDED) else None,
            lease_owner=self._owner if launching else None,
            lease_expires_at=self._lease_expires if launching else None,
            supersedes_run_id=item.supersedes,
            blocked_by=trigger.blocked_by if item.reason is Reason.BLOCKED else None,
        )

    def _check_carved(self, decided: list[_Decided]) -> None:
        """Refuse the batch when a split's carved occurrences were not all recorded."""
        for split in self._splits:
            carved = sum(
                1
                for item in decided
                if item.row is not None
                and item.row.trigger_id == split.trigger_id
                and item.row.manual_key == ""
                and split.first_at <= item.row.occurrence_at <= split.last_at
            )
            if carved + sum(piece.count for piece in split.pieces) != split.count:
                raise LedgerChangedError(
                    f"the occurrences carved out of the ledger row of trigger "
                    f"{split.trigger_id!r} at {split.first_at.isoformat()} were not all claimed",
                    trigger_id=split.trigger_id,
                )

    def _launch(self, decided: list[_Decided], snapshots: dict[str, Trigger]) -> bool:
        """Start the fires' runs within this transaction, as `_inline` does for SQL;
        True when a run slot is free again (a run refused, or completed at once)."""
        fires = [item for item in decided if item.action is Action.FIRE and item.row is not None]
        if not fires or self._launch_within is None:
            return False
        claims = [
            Claim(
                trigger=snapshots[item.request.trigger_id],
                occurrence_at=item.request.occurrence_at,
                action=item.action,
                idempotency_key=item.key,
                kind=item.request.kind,
                manual_key=item.request.manual_key,
            )
            for item in fires
        ]
        results, self.after_commit = self._launch_within(self._tables, claims)
        freed = False
        for item, result in zip(fires, results, strict=True):
            row = item.row
            assert row is not None  # noqa: S101 (fires are the decided rows)
            if isinstance(result, CompletedRun):
                row.outcome, row.run_id = Outcome.COMPLETED, result.run_id
                row.launched_at = row.settled_at = self._now
                row.lease_owner = row.lease_expires_at = None
                self._counters[row.trigger_id].active_count -= 1
                item.run_id, item.completed = result.run_id, True
                freed = True
            elif isinstance(result, str):
                row.outcome, row.run_id, row.launched_at = Outcome.LAUNCHED, result, self._now
                row.lease_owner = row.lease_expires_at = None
                item.run_id = result
            elif isinstance(result, RunnerRefusedError):
                row.outcome, row.error, row.settled_at = Outcome.FAILED, str(result), self._now
                row.lease_owner = row.lease_expires_at = None
                self._counters[row.trigger_id].active_count -= 1
                item.refused = str(result)
                freed = True
            else:  # not answered for good: the row stays `launching`, to be retried
                row.error, row.lease_owner = str(result), None
                row.lease_expires_at = cut(self._now + _RETRY_AFTER)
                item.retry_at = self._now + _RETRY_AFTER
        return freed

    @staticmethod
    def _reserve(decided: list[_Decided]) -> None:
        """A reservation for each fire or supersede whose run did not start within the
        claim (one that did, or was refused, holds none)."""
        for item in decided:
            if item.launching and item.run_id is None and item.refused is None:
                item.reservation = new_reservation()
                if item.row is not None:
                    item.row.reservation = item.reservation

    def _write(self, decided: list[_Decided], stored: dict[str, TriggerRow]) -> None:
        tables = self._tables
        rows = [item.row for item in decided if item.row is not None]
        tables.check_insertable(rows)
        for row in rows:
            tables.insert(row, checked=True)
        all_counters, watermarks = self._counters, self._watermarks
        keys = all_counters.keys() | watermarks.keys()
        for trigger_id in sorted(keys) if len(keys) > 1 else keys:
            target = stored[trigger_id]
            counters = all_counters.get(trigger_id)
            if counters is not None:
                target.active_count = counters.active_count
                target.buffered_count = counters.buffered_count
                target.runs_launched = counters.runs_launched
            watermark = watermarks.get(trigger_id)
            if watermark is None or watermark < target.watermark_at:
                watermark = target.watermark_at
            target.watermark_at = cut(watermark)
            target.open_range_id = None
            target.updated_at = self._now

    def _snapshots(
        self, decided: list[_Decided], stored: dict[str, TriggerRow]
    ) -> dict[str, Trigger]:
        """The decided requests' triggers as the claim leaves them (their rows before
        `_write`, with the batch's counters and watermarks)."""
        snapshots: dict[str, Trigger] = {}
        all_counters, watermarks = self._counters, self._watermarks
        for item in decided:
            trigger_id = item.request.trigger_id
            if trigger_id in snapshots:
                continue
            row = stored[trigger_id]
            counters = all_counters.get(trigger_id)
            watermark = watermarks.get(trigger_id)
            if watermark is None or watermark <= row.watermark_at:
                if counters is None:
                    snapshots[trigger_id] = row.snapshot()
                    continue
                watermark = row.watermark_at
            counters = counters or Counters.of(row)
            snapshots[trigger_id] = counters.applied(row, watermark_at=watermark)
        return snapshots

    @staticmethod
    def _finish(
        results: list[ClaimResult | None], decided: list[_Decided], snapshots: dict[str, Trigger]
    ) -> list[ClaimResult]:
        items = iter(decided)
        final: list[ClaimResult] = []
        for result in results:
            if result is not None:
                final.append(result)
                continue
            item = next(items)
            request = item.request
            final.append(
                Claim(
                    trigger=snapshots[request.trigger_id],
                    occurrence_at=request.occurrence_at,
                    action=item.action,
                    idempotency_key=item.key,
                    kind=request.kind,
                    manual_key=request.manual_key,
                    reason=item.reason,
                    reservation=item.reservation,
                    supersedes_run_id=item.supersedes,
                    run_id=item.run_id,
                    refused=item.refused,
                    retry_at=item.retry_at,
                    completed=item.completed,
                )
            )
        return final
