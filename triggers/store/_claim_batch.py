"""The claim batch, written once for every store: decide occurrences in one transaction.

A store runs a batch inside its own write transaction and hands it its rows
through `ClaimRows` (`_claim_seam.py`: lock the triggers, look up ledger rows,
insert rows, update triggers). Everything else is here, once: the order of the
checks, the decisions (`_decide.py`), the new ledger rows, and the runs started
within the claim (`_claim_starts.py`). Nothing is written until every request is
decided and those starts have answered, so a batch lands whole or not at all.
A rule added to the claim is added here (docs/architecture.md, "The claim").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from triggers.errors import (
    LedgerChangedError,
    StoreError,
)
from triggers.model import Action, Outcome, Overlap, Reason, Trigger, idempotency_key
from triggers.store._alert_events import skip_alerts
from triggers.store._claim_seam import ClaimRows, TriggerUpdate
from triggers.store._claim_starts import record_start
from triggers.store._decide import (
    Counters,
    StoredTrigger,
    decide,
    decided_before,
    newest_superseding,
    overlap_of,
    refusal,
    superseding_triggers,
)
from triggers.store._dependents import SettledRun
from triggers.store._fire_row import FireRow, cut, new_reservation
from triggers.store.protocol import (
    Claim,
    Claimed,
    ClaimRequest,
    ClaimResult,
    Completed,
    Decided,
    LaunchWithin,
    RangeSplit,
    Refused,
    Reserved,
    Settlement,
)


@dataclass(slots=True)
class _Item:
    """One request as the batch decides it."""

    request: ClaimRequest
    key: str
    action: Action
    reason: Reason | None = None
    row: FireRow | None = None
    """The new ledger row (None: nothing recorded)."""
    supersedes: str | None = None
    started: Claim | None = None
    """What its start within the claim made of it."""


class ClaimBatch:
    """One claim transaction: decide every request in order, then write it all at once."""

    def __init__(
        self,
        rows: ClaimRows,
        requests: Sequence[ClaimRequest],
        *,
        owner: str,
        host: str,
        now: datetime,
        lease: timedelta,
        splits: Sequence[RangeSplit] = (),
        launch_within: LaunchWithin | None = None,
    ) -> None:
        self._rows = rows
        self._requests = requests
        self._splits = splits
        self._owner = owner
        self._host = host
        self._now = cut(now)
        self._lease_expires = cut(now + lease)
        self._launch_within = launch_within
        self.after_commit: Callable[[], None] = _nothing
        """Call once the store committed: the runs started within it may go on."""
        self._counters: dict[str, Counters] = {}
        self._watermarks: dict[str, datetime] = {}
        self._pool_room: dict[str, int] = {}
        """By pool of the batch's triggers: slots left, less the occurrences waiting."""

    def run(self) -> list[ClaimResult]:
        """Decide and record every request; per request, its claim or its error.

        Decisions read the locked trigger rows themselves: nothing writes them before
        `_write`, so they read as a snapshot would, without copying them."""
        requests, splits, rows = self._requests, self._splits, self._rows
        ids = {request.trigger_id for request in requests}
        stored = rows.lock_triggers(sorted(ids | {split.trigger_id for split in splits}))
        if splits:
            rows.apply_splits(splits, self._now)
        self._lock_pools(stored)
        operators, superseding = self._kinds(stored)
        existing, existing_keys = rows.held(requests) if operators else (set(), set())
        backfills = [r for r in requests if r.kind == "backfill"]
        covered = rows.covered(backfills) if backfills else set()
        active: dict[str, list[str | None]] = {}
        newest: dict[str, int] = {}
        if superseding:
            active = rows.active_runs(superseding_triggers(requests, stored))
            newest = newest_superseding(requests, stored, existing=existing, covered=covered)
        items: list[_Item] = []
        results: list[ClaimResult | None] = []
        for index, request in enumerate(requests):
            trigger_id = request.trigger_id
            trigger = stored.get(trigger_id)
            if isinstance(trigger, StoreError | None) or (
                trigger.revision != request.expected_revision
            ):
                results.append(refusal(request, trigger))
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
                items.append(_Item(request, key, Action.DUPLICATE))
                continue
            if covered and (trigger_id, request.occurrence_at) in covered:
                items.append(_Item(request, key, Action.DUPLICATE))
                continue
            if request.kind == "backfill" and request.occurrence_at > trigger.watermark_at:
                items.append(_Item(request, key, Action.IGNORED))
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
            items.append(item)
        if splits:
            self._check_carved(items)
        # The triggers as the claim leaves them, read before `_write` changes their rows.
        snapshots = self._snapshots(items, stored)
        if self._launch_within is not None and self._start_within(items, snapshots):
            snapshots = self._snapshots(items, stored)  # a run slot came free
        final = self._finish(results, items, snapshots)
        self._write(items, stored)
        return final

    def _lock_pools(self, stored: Mapping[str, StoredTrigger | StoreError]) -> None:
        """Lock the pools of the batch's triggers and count what each has left.

        The pool's size is its members' declaration's (the smallest, should two
        members of this batch disagree)."""
        slots: dict[str, int] = {}
        for trigger in stored.values():
            pool = None if isinstance(trigger, StoreError) else trigger.spec.pool
            if pool is not None:
                slots[pool.name] = min(pool.slots, slots.get(pool.name, pool.slots))
        if not slots:
            return
        use = self._rows.lock_pools(sorted(slots))
        self._pool_room = {
            name: size - use[name].active - use[name].waiting for name, size in slots.items()
        }

    def _kinds(self, stored: Mapping[str, StoredTrigger | StoreError]) -> tuple[bool, bool]:
        """Whether any request is an operator's, and whether any is under `supersede`.

        A tick's batch usually holds neither: no operator's request to look up in the
        ledger, no backfill a range row may cover, no active run a decision needs."""
        operators = superseding = False
        for request in self._requests:
            operators = operators or request.kind != "scheduled"
            trigger = stored.get(request.trigger_id)
            if not isinstance(trigger, StoreError | None) and (
                overlap_of(request, trigger) is Overlap.SUPERSEDE
            ):
                superseding = True
        return operators, superseding

    def _decide(
        self,
        trigger: StoredTrigger,
        request: ClaimRequest,
        key: str,
        active: dict[str, list[str | None]],
        *,
        replaced: bool,
    ) -> _Item:
        trigger_id = request.trigger_id
        counters = self._counters.get(trigger_id)
        if counters is None:
            counters = self._counters[trigger_id] = Counters.of(trigger)
        runs = active.get(trigger_id)
        if runs is None:
            runs = active[trigger_id] = []
        has_run = bool(runs) and all(run_id is not None for run_id in runs)
        pool = trigger.spec.pool
        room = None if pool is None else self._pool_room.get(pool.name)
        decision = decide(
            trigger,
            counters,
            request,
            active_has_run=has_run,
            replaced=replaced,
            pool_room=room,
        )
        action = decision.action
        if (
            pool is not None
            and room is not None
            and (
                action is Action.FIRE
                or action is Action.SUPERSEDE
                or (action is Action.BUFFER and decision.reason is Reason.POOL_FULL)
            )
        ):
            # A slot taken, or one more occurrence waiting ahead of the next.
            self._pool_room[pool.name] = room - 1
        item = _Item(request, key, action, decision.reason)
        if action is Action.FIRE or action is Action.SUPERSEDE:
            if action is Action.SUPERSEDE:
                item.supersedes = runs[-1]
            runs.append(None)  # a reservation: no run yet that a later supersede could cancel
        return item

    def _advance(self, request: ClaimRequest) -> None:
        if request.kind != "scheduled":
            return
        current = self._watermarks.get(request.trigger_id)
        if current is None or request.occurrence_at > current:
            self._watermarks[request.trigger_id] = request.occurrence_at

    def _row(self, trigger: StoredTrigger, item: _Item) -> FireRow:
        action, request = item.action, item.request
        launching = action is Action.FIRE or action is Action.SUPERSEDE
        outcome = _OUTCOMES[action]
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
            settled_at=self._now if outcome in _SETTLED_AT_CLAIM else None,
            lease_owner=self._owner if launching else None,
            lease_expires_at=self._lease_expires if launching else None,
            supersedes_run_id=item.supersedes,
            blocked_by=trigger.blocked_by if item.reason is Reason.BLOCKED else None,
            reason_detail=_detail(trigger, request, item.reason),
        )

    def _check_carved(self, items: list[_Item]) -> None:
        """Refuse the batch when a split's carved occurrences were not all recorded.

        A split removes its occurrences from their range row; one that the batch then
        does not record (its trigger was edited or retired since the backfill read it)
        would be accounted for nowhere, so the split must not commit without it.
        """
        for split in self._splits:
            carved = sum(
                1
                for item in items
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

    def _start_within(self, items: list[_Item], snapshots: dict[str, Trigger]) -> bool:
        """Start the fires' runs within this transaction (supersedes wait for the
        launcher, which cancels the run they replace first); True when a run slot is
        free again (a start refused, or a run completed in its start)."""
        fires = [item for item in items if item.action is Action.FIRE and item.row is not None]
        if not fires or self._launch_within is None:
            return False
        claims = [
            Claimed(
                trigger=snapshots[item.request.trigger_id],
                occurrence_at=item.request.occurrence_at,
                action=item.action,
                idempotency_key=item.key,
                kind=item.request.kind,
                manual_key=item.request.manual_key,
            )
            for item in fires
        ]
        answers, self.after_commit = self._launch_within(self._rows.transaction, claims)
        freed = False
        for item, claimed, answer in zip(fires, claims, answers, strict=True):
            row = item.row
            assert row is not None  # noqa: S101 (fires are the decided rows)
            started = item.started = record_start(row, claimed, answer, now=self._now)
            if isinstance(started, Completed | Refused):
                self._counters[row.trigger_id].active_count -= 1
                pool = claimed.trigger.spec.pool
                if pool is not None and pool.name in self._pool_room:
                    self._pool_room[pool.name] += 1
                freed = True
        return freed

    def _write(self, items: list[_Item], stored: Mapping[str, StoredTrigger | StoreError]) -> None:
        self._rows.insert([item.row for item in items if item.row is not None])
        raised = skip_alerts([item.row for item in items], stored, self._now)
        if raised:
            self._rows.raise_alerts(raised, self._now)
        settled = [
            (item.row, settlement)
            for item in items
            if item.row is not None and (settlement := _settled_in_start(item.started))
        ]
        if settled:
            self._rows.settle_alerts(settled, stored, self._now)
            completed = [
                SettledRun(trigger_id=s.trigger_id, run_id=s.run_id, outcome=s.state)
                for _, s in settled
                if s.run_id
            ]
            if completed:
                self._rows.follow(completed, self._now)
        counters_of, watermarks = self._counters, self._watermarks
        updates = []
        for trigger_id in sorted(counters_of.keys() | watermarks.keys()):
            trigger = stored[trigger_id]
            if isinstance(trigger, StoreError):
                continue
            counters = counters_of.get(trigger_id) or Counters.of(trigger)
            watermark = watermarks.get(trigger_id)
            if watermark is None or watermark < trigger.watermark_at:
                watermark = trigger.watermark_at
            updates.append(
                TriggerUpdate(
                    trigger_id,
                    counters.active_count,
                    counters.buffered_count,
                    counters.runs_launched,
                    cut(watermark),
                )
            )
        self._rows.update_triggers(updates, self._now)

    def _snapshots(
        self, items: list[_Item], stored: Mapping[str, StoredTrigger | StoreError]
    ) -> dict[str, Trigger]:
        """The decided requests' triggers as the claim leaves them (their rows before
        `_write`, with the batch's counters and watermarks)."""
        snapshots: dict[str, Trigger] = {}
        counters_of, watermarks = self._counters, self._watermarks
        for item in items:
            trigger_id = item.request.trigger_id
            if trigger_id in snapshots:
                continue
            trigger = stored[trigger_id]
            assert not isinstance(trigger, StoreError)  # noqa: S101 (refused, not decided)
            counters = counters_of.get(trigger_id)
            watermark = watermarks.get(trigger_id)
            if watermark is None or watermark <= trigger.watermark_at:
                if counters is None and isinstance(trigger, Trigger):
                    snapshots[trigger_id] = trigger  # unchanged, and a snapshot already
                    continue
                watermark = trigger.watermark_at
            counters = counters or Counters.of(trigger)
            snapshots[trigger_id] = counters.applied(trigger, watermark_at=watermark)
        return snapshots

    def _finish(
        self, results: list[ClaimResult | None], items: list[_Item], snapshots: dict[str, Trigger]
    ) -> list[ClaimResult]:
        """Each request's result: its refusal, or its claim as the batch leaves it."""
        decided = iter(items)
        final: list[ClaimResult] = []
        for result in results:
            if result is not None:
                final.append(result)
                continue
            item = next(decided)
            trigger = snapshots[item.request.trigger_id]
            started = item.started
            if started is not None:
                if started.trigger is not trigger:  # counted before a slot came free
                    started = replace(started, trigger=trigger)
                final.append(started)
            else:
                final.append(self._claim(item, trigger))
        return final

    def _claim(self, item: _Item, trigger: Trigger) -> Claim:
        """A decided request's claim: `Reserved` for a launch the launcher makes (its
        row gets the reservation it is fenced on), else `Decided`."""
        request, action = item.request, item.action
        if item.row is not None and item.row.outcome is Outcome.LAUNCHING:
            reservation = item.row.reservation = new_reservation()
            return Reserved(
                trigger=trigger,
                occurrence_at=request.occurrence_at,
                action=action,
                idempotency_key=item.key,
                kind=request.kind,
                manual_key=request.manual_key,
                reason=item.reason,
                reservation=reservation,
                supersedes_run_id=item.supersedes,
            )
        return Decided(
            trigger=trigger,
            occurrence_at=request.occurrence_at,
            action=action,
            idempotency_key=item.key,
            kind=request.kind,
            manual_key=request.manual_key,
            reason=item.reason,
        )


_OUTCOMES = {
    Action.FIRE: Outcome.LAUNCHING,
    Action.SUPERSEDE: Outcome.LAUNCHING,
    Action.SKIP: Outcome.SKIPPED,
    Action.BUFFER: Outcome.BUFFERED,
    Action.SUPERSEDED: Outcome.SUPERSEDED,
}
_SETTLED_AT_CLAIM = frozenset({Outcome.SKIPPED, Outcome.SUPERSEDED})


def _detail(trigger: StoredTrigger, request: ClaimRequest, reason: Reason | None) -> str | None:
    """What a new row's reason names: the calendar and the day, or the pool."""
    if reason is Reason.CALENDAR:
        return request.excluded_by
    if reason is Reason.REQUIREMENT:
        return request.unmet
    if reason is Reason.POOL_FULL and trigger.spec.pool is not None:
        return trigger.spec.pool.name
    return None


def _nothing() -> None:
    """After the commit: no run started within the claim."""


def _settled_in_start(started: object) -> Settlement | None:
    """A start that settled its run (refused for good: `failed`; completed within the
    start), as the settlement whose alerts it raises; None for any other."""
    match started:
        case Refused(trigger=trigger, error=error):
            return Settlement(trigger_id=trigger.id, run_id="", state="failed", error=error)
        case Completed(trigger=trigger, run_id=run_id):
            return Settlement(trigger_id=trigger.id, run_id=run_id, state="completed")
    return None
