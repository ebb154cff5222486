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
from triggers.store._decide import Counters, Decision, blocks_new_claims, decide
from triggers.store._inline import RETRY_AFTER_MS
from triggers.store._memory_rows import FireRow, Tables, cut
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
        """Decide and record every request; `apply_splits` carves the splits first."""
        requests = self._requests
        stored = self._snapshots()
        if self._splits:
            apply_splits()
        operators, superseding = self._kinds(stored)
        existing, existing_keys = self._existing() if operators else (set(), set())
        covered = self._covered() if operators else set()
        active = self._active_runs(stored) if superseding else {}
        newest = self._newest_superseding(stored, existing, covered) if superseding else {}
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
            identity = (trigger_id, request.occurrence_at, request.manual_key)
            seen = key in existing_keys or identity in existing
            if seen or self._decided_before(request, trigger):
                self._advance(request)
                decided.append(_Decided(request, key, Action.DUPLICATE))
                continue
            if covered and (request.trigger_id, request.occurrence_at) in covered:
                decided.append(_Decided(request, key, Action.DUPLICATE))
                continue
            if request.kind == "backfill" and request.occurrence_at > trigger.watermark_at:
                decided.append(_Decided(request, key, Action.IGNORED))
                continue
            existing.add(identity)
            existing_keys.add(key)
            replaced = (
                superseding
                and newest.get(trigger_id, index) > index
                and _overlap(request, trigger) is Overlap.SUPERSEDE
            )
            item = self._decide(trigger, request, key, active, replaced=replaced)
            if item.action is not Action.IGNORED:
                self._advance(request)
                item.row = self._row(trigger, item)
            decided.append(item)
        if self._splits:
            self._check_carved(decided)
        self._launch(decided, stored)
        self._write(decided, stored)
        return self._finish(results, decided, stored)

    def _snapshots(self) -> dict[str, Trigger]:
        """The requests' triggers as this transaction reads them, in id order."""
        requests, rows = self._requests, self._tables.triggers
        ids = (
            [requests[0].trigger_id]
            if len(requests) == 1
            else sorted({r.trigger_id for r in requests})
        )
        return {i: rows[i].snapshot() for i in ids if i in rows}

    def _kinds(self, stored: dict[str, Trigger]) -> tuple[bool, bool]:
        """Whether any request is an operator's, and whether any is under `supersede`.

        A tick's batch usually holds neither: no operator's request to look up in the
        ledger, no backfill a range row may cover, no active run a decision needs."""
        operators = superseding = False
        for request in self._requests:
            operators = operators or request.kind != "scheduled"
            trigger = stored.get(request.trigger_id)
            if trigger is not None and _overlap(request, trigger) is Overlap.SUPERSEDE:
                superseding = True
        return operators, superseding

    def _check(self, request: ClaimRequest, trigger: Trigger | None) -> TriggersError | None:
        if trigger is None:
            return UnknownTriggerError(
                f"no trigger {request.trigger_id!r}", trigger_id=request.trigger_id
            )
        if trigger.revision != request.expected_revision:
            return RevisionMismatchError(
                f"trigger {trigger.id!r} is at revision {trigger.revision}, "
                f"not {request.expected_revision}",
                trigger_id=trigger.id,
                revision=trigger.revision,
                expected_revision=request.expected_revision,
            )
        return None

    @staticmethod
    def _decided_before(request: ClaimRequest, trigger: Trigger) -> bool:
        return request.kind == "scheduled" and request.occurrence_at <= trigger.watermark_at

    def _existing(self) -> tuple[set[tuple[str, datetime, str]], set[str]]:
        """The operator requests' occurrences the ledger holds, and their manual keys
        it holds. Scheduled occurrences are fenced by the watermark, as in SQL."""
        found: set[tuple[str, datetime, str]] = set()
        keys: set[str] = set()
        if all(request.kind == "scheduled" for request in self._requests):
            return found, keys
        tables = self._tables
        for request in self._requests:
            if request.kind == "scheduled":
                continue
            identity = (request.trigger_id, request.occurrence_at, request.manual_key)
            if identity in tables.by_identity:
                found.add(identity)
            if request.manual_key:
                key = idempotency_key(request.trigger_id, request.occurrence_at, request.manual_key)
                if key in tables.by_key:
                    keys.add(key)
        return found, keys

    def _covered(self) -> set[tuple[str, datetime]]:
        """Backfill occurrences that lie inside a range row, past its first one."""
        wanted = [r for r in self._requests if r.kind == "backfill"]
        if not wanted:
            return set()
        ranges: dict[str, list[tuple[datetime, datetime]]] = {}
        ids = {r.trigger_id for r in wanted}
        for row in self._tables.fires.values():
            if row.trigger_id in ids and row.last_occurrence_at is not None:
                ranges.setdefault(row.trigger_id, []).append(
                    (row.occurrence_at, row.last_occurrence_at)
                )
        return {
            (r.trigger_id, r.occurrence_at)
            for r in wanted
            if any(first < r.occurrence_at <= last for first, last in ranges.get(r.trigger_id, ()))
        }

    def _active_runs(self, stored: dict[str, Trigger]) -> dict[str, list[str | None]]:
        """Active run ids (None for a reservation) of triggers that may supersede."""
        overridden = {r.trigger_id for r in self._requests if r.overlap is Overlap.SUPERSEDE}
        wanted = {
            trigger_id
            for trigger_id, trigger in stored.items()
            if trigger.active_count > 0
            and (trigger.spec.overlap is Overlap.SUPERSEDE or trigger_id in overridden)
        }
        if not wanted:
            return {}
        rows = [
            row
            for row in self._tables.with_outcome(Outcome.LAUNCHING, Outcome.LAUNCHED)
            if row.trigger_id in wanted
        ]
        active: dict[str, list[str | None]] = {}
        for row in sorted(rows, key=lambda r: r.occurrence_at):
            active.setdefault(row.trigger_id, []).append(row.run_id)
        return active

    def _newest_superseding(
        self,
        stored: dict[str, Trigger],
        existing: set[tuple[str, datetime, str]],
        covered: set[tuple[str, datetime]],
    ) -> dict[str, int]:
        newest: dict[str, int] = {}
        for index, request in enumerate(self._requests):
            trigger = stored.get(request.trigger_id)
            if (
                trigger is None
                or trigger.retired
                or trigger.revision != request.expected_revision
                or _overlap(request, trigger) is not Overlap.SUPERSEDE
                or self._decided_before(request, trigger)
                or (request.trigger_id, request.occurrence_at, request.manual_key) in existing
                or (request.trigger_id, request.occurrence_at) in covered
                or (request.kind == "backfill" and request.occurrence_at > trigger.watermark_at)
                or (
                    request.kind == "scheduled"
                    and blocks_new_claims(trigger, Counters.of(trigger)) is not None
                )
            ):
                continue
            newest[trigger.id] = index
        return newest

    def _decide(
        self,
        trigger: Trigger,
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
        reservation = supersedes = None
        if decision.action in (Action.FIRE, Action.SUPERSEDE):
            reservation = new_reservation()
            if decision.action is Action.SUPERSEDE:
                supersedes = runs[-1]
            runs.append(None)
        return _Decided(request, key, decision.action, decision.reason, reservation, supersedes)

    def _advance(self, request: ClaimRequest) -> None:
        if request.kind != "scheduled":
            return
        current = self._watermarks.get(request.trigger_id)
        if current is None or request.occurrence_at > current:
            self._watermarks[request.trigger_id] = request.occurrence_at

    def _row(self, trigger: Trigger, item: _Decided) -> FireRow:
        launching = item.reservation is not None
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
            reservation=item.reservation,
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

    def _launch(self, decided: list[_Decided], stored: dict[str, Trigger]) -> None:
        """Start the fires' runs within this transaction, as `_inline` does for SQL."""
        fires = [item for item in decided if item.action is Action.FIRE and item.row is not None]
        if not fires or self._launch_within is None:
            return
        claims = [
            Claim(
                trigger=stored[item.request.trigger_id],
                occurrence_at=item.request.occurrence_at,
                action=item.action,
                idempotency_key=item.key,
                kind=item.request.kind,
                manual_key=item.request.manual_key,
            )
            for item in fires
        ]
        results, self.after_commit = self._launch_within(self._tables, claims)
        for item, result in zip(fires, results, strict=True):
            row = item.row
            assert row is not None  # noqa: S101 (fires are the decided rows)
            if isinstance(result, CompletedRun):
                row.outcome, row.run_id = Outcome.COMPLETED, result.run_id
                row.launched_at = row.settled_at = self._now
                row.reservation = row.lease_owner = row.lease_expires_at = None
                self._counters[row.trigger_id].active_count -= 1
                item.run_id, item.completed = result.run_id, True
            elif isinstance(result, str):
                row.outcome, row.run_id, row.launched_at = Outcome.LAUNCHED, result, self._now
                row.reservation = row.lease_owner = row.lease_expires_at = None
                item.run_id = result
            elif isinstance(result, RunnerRefusedError):
                row.outcome, row.error, row.settled_at = Outcome.FAILED, str(result), self._now
                row.reservation = row.lease_owner = row.lease_expires_at = None
                self._counters[row.trigger_id].active_count -= 1
                item.refused = str(result)
            else:  # not answered for good: the row stays `launching`, to be retried
                row.error, row.lease_owner = str(result), None
                row.lease_expires_at = cut(self._now + _RETRY_AFTER)
                item.retry_at = self._now + _RETRY_AFTER

    def _write(self, decided: list[_Decided], stored: dict[str, Trigger]) -> None:
        tables = self._tables
        rows = [item.row for item in decided if item.row is not None]
        tables.check_insertable(rows)
        for row in rows:
            tables.insert(row, checked=True)
        all_counters, watermarks = self._counters, self._watermarks
        for trigger_id in sorted(all_counters.keys() | watermarks.keys()):
            trigger = stored[trigger_id]
            counters = all_counters.get(trigger_id) or Counters.of(trigger)
            target = tables.triggers[trigger_id]
            target.active_count = counters.active_count
            target.buffered_count = counters.buffered_count
            target.runs_launched = counters.runs_launched
            watermark = watermarks.get(trigger_id)
            if watermark is None or watermark < trigger.watermark_at:
                watermark = trigger.watermark_at
            target.watermark_at = cut(watermark)
            target.open_range_id = None
            target.updated_at = self._now

    def _finish(
        self, results: list[ClaimResult | None], decided: list[_Decided], stored: dict[str, Trigger]
    ) -> list[ClaimResult]:
        snapshots: dict[str, Trigger] = {}
        all_counters, watermarks = self._counters, self._watermarks
        for trigger_id, trigger in stored.items():
            counters = all_counters.get(trigger_id)
            watermark = watermarks.get(trigger_id)
            if watermark is None or watermark <= trigger.watermark_at:
                if counters is None:
                    snapshots[trigger_id] = trigger
                    continue
                watermark = trigger.watermark_at
            counters = counters or Counters.of(trigger)
            snapshots[trigger_id] = counters.applied(trigger, watermark_at=watermark)
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
                    reservation=None if item.run_id or item.refused else item.reservation,
                    supersedes_run_id=item.supersedes,
                    run_id=item.run_id,
                    refused=item.refused,
                    retry_at=item.retry_at,
                    completed=item.completed,
                )
            )
        return final


def _overlap(request: ClaimRequest, trigger: Trigger) -> Overlap:
    return request.overlap or trigger.spec.overlap
