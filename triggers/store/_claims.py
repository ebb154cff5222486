"""The SQL store's claim path: decide a batch of occurrences in one transaction.

Every function runs inside the caller's write transaction. Trigger rows are
always locked before ledger rows, in id order, so two daemons on PostgreSQL
cannot deadlock on each other.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from looms_runtime.db import copy_rows
from triggers.clock import to_ms
from triggers.errors import (
    LedgerChangedError,
    RevisionMismatchError,
    StoreError,
    UnknownTriggerError,
)
from triggers.model import Action, Outcome, Overlap, Reason, Trigger, idempotency_key
from triggers.store._claim_lookups import active_runs, held, newest_superseding
from triggers.store._decide import (
    Counters,
    Decision,
    decide,
    decided_before,
    overlap_of,
)
from triggers.store._inline import RETRY_AFTER_MS, launch_within
from triggers.store._ranges import apply_splits, covered_by_ranges
from triggers.store._shared import executemany, lock_triggers, new_reservation
from triggers.store.protocol import Claim, ClaimRequest, ClaimResult, LaunchWithin, RangeSplit
from triggers.store.schema import fires, triggers

_FIRE_COLUMNS = (
    "trigger_id",
    "occurrence_at",
    "count",
    "manual_key",
    "idempotency_key",
    "kind",
    "outcome",
    "reason",
    "revision",
    "host",
    "claimed_at",
    "settled_at",
    "reservation",
    "lease_owner",
    "lease_expires_at",
    "supersedes_run_id",
    "blocked_by",
    "run_id",
    "launched_at",
    "error",
)
_INSERT_FIRE = fires.insert().values({name: sa.bindparam(name) for name in _FIRE_COLUMNS})
_UPDATE_TRIGGER = (
    triggers.update()
    .where(triggers.c.id == sa.bindparam("b_id"))
    .values(
        active_count=sa.bindparam("b_active"),
        buffered_count=sa.bindparam("b_buffered"),
        runs_launched=sa.bindparam("b_runs"),
        watermark_at=sa.bindparam("b_watermark"),
        open_range_id=sa.null(),
        updated_at=sa.bindparam("b_now"),
    )
)

_OUTCOMES = {
    Action.FIRE: Outcome.LAUNCHING,
    Action.SUPERSEDE: Outcome.LAUNCHING,
    Action.SKIP: Outcome.SKIPPED,
    Action.BUFFER: Outcome.BUFFERED,
    Action.SUPERSEDED: Outcome.SUPERSEDED,
}


@dataclasses.dataclass(frozen=True, slots=True)
class _Decided:
    request: ClaimRequest
    key: str
    action: Action
    reason: Any = None
    reservation: str | None = None
    supersedes: str | None = None
    run_id: str | None = None
    refused: str | None = None
    retry_at: datetime | None = None
    completed: bool = False


class ClaimBatch:
    """One claim transaction: decide every request in order, then write it all at once."""

    def __init__(
        self,
        conn: Connection,
        requests: Sequence[ClaimRequest],
        *,
        owner: str,
        host: str,
        now: datetime,
        lease: timedelta,
        splits: Sequence[RangeSplit] = (),
        launch_within: LaunchWithin | None = None,
    ) -> None:
        self._conn = conn
        self._launch_within = launch_within
        self.after_commit: Callable[[], None] = lambda: None
        self._requests = requests
        self._splits = splits
        self._owner = owner
        self._host = host
        self._now = now
        self._now_ms = to_ms(now)
        self._lease_expires_ms = to_ms(now + lease)
        self._counters: dict[str, Counters] = {}
        self._watermarks: dict[str, datetime] = {}
        self._rows: list[dict[str, Any]] = []

    def run(self) -> list[ClaimResult]:
        ids = {request.trigger_id for request in self._requests}
        stored = lock_triggers(self._conn, sorted(ids | {s.trigger_id for s in self._splits}))
        apply_splits(self._conn, self._splits, self._now)
        existing, existing_keys = held(self._conn, self._requests)
        covered = covered_by_ranges(self._conn, [r for r in self._requests if r.kind == "backfill"])
        active = active_runs(self._conn, self._requests, stored)
        newest = newest_superseding(self._requests, stored, existing, covered)
        decided: list[_Decided] = []
        results: list[ClaimResult | None] = []
        fires: list[tuple[int, Trigger]] = []
        for index, request in enumerate(self._requests):
            trigger = stored.get(request.trigger_id)
            outcome = self._check(request, trigger)
            if outcome is not None:
                results.append(outcome)
                continue
            if not isinstance(trigger, Trigger):  # _check answered the other cases
                continue
            results.append(None)
            key = idempotency_key(request.trigger_id, request.occurrence_at, request.manual_key)
            # The ledger's rows (`existing`: its ranges have no key), then this batch's
            # requests, found by key alone: a request's key follows from its identity.
            identity = (request.trigger_id, request.occurrence_at, request.manual_key)
            seen = key in existing_keys or identity in existing
            if seen or decided_before(request, trigger):
                self._advance(request)
                decided.append(_Decided(request, key, Action.DUPLICATE))
                continue
            if (request.trigger_id, request.occurrence_at) in covered:
                decided.append(_Decided(request, key, Action.DUPLICATE))
                continue
            if request.kind == "backfill" and request.occurrence_at > trigger.watermark_at:
                decided.append(_Decided(request, key, Action.IGNORED))
                continue
            existing_keys.add(key)
            replaced = newest.get(trigger.id, index) > index and overlap_of(request, trigger) is (
                Overlap.SUPERSEDE
            )
            item = self._decide(trigger, request, key, active, replaced=replaced)
            if item.action is not Action.IGNORED:
                self._advance(request)
                self._rows.append(self._row(trigger, item))
                if item.action is Action.FIRE:
                    fires.append((len(decided), trigger))
            decided.append(item)
        self._check_carved()
        if fires and self._launch_within is not None:
            decided = self._launch(decided, fires, self._launch_within)
        self._write(stored)
        return self._finish(results, decided, stored)

    def _launch(
        self, decided: list[_Decided], fires: list[tuple[int, Trigger]], launch: LaunchWithin
    ) -> list[_Decided]:
        """Start the fires' runs in this transaction (see `_inline`)."""
        rows = {
            (row["trigger_id"], row["occurrence_at"], row["manual_key"]): row for row in self._rows
        }
        batch = []
        for index, trigger in fires:
            item = decided[index]
            request = item.request
            claim = Claim(
                trigger=trigger,
                occurrence_at=request.occurrence_at,
                action=item.action,
                idempotency_key=item.key,
                kind=request.kind,
                manual_key=request.manual_key,
            )
            row = rows[(trigger.id, to_ms(request.occurrence_at), request.manual_key)]
            batch.append((claim, row, self._counters[trigger.id]))
        launched = launch_within(self._conn, batch, launch, now_ms=self._now_ms)
        self.after_commit = launched.after_commit
        decided = list(decided)
        for (index, _), run_id, refused, completed in zip(
            fires, launched.run_ids, launched.refusals, launched.completed, strict=True
        ):
            deferred = run_id is None and refused is None
            retry_at = self._now + timedelta(milliseconds=RETRY_AFTER_MS) if deferred else None
            item = decided[index]
            decided[index] = _Decided(
                item.request,
                item.key,
                item.action,
                item.reason,
                item.reservation,
                item.supersedes,
                run_id=run_id,
                refused=refused,
                retry_at=retry_at,
                completed=completed,
            )
        return decided

    def _check_carved(self) -> None:
        """Refuse the batch when a split's carved occurrences were not all recorded.

        A split removes its occurrences from their range row; one that the batch then
        does not record (its trigger was edited or retired since the backfill read it)
        would be accounted for nowhere, so the split must not commit without it.
        """
        for split in self._splits:
            carved = sum(
                1
                for row in self._rows
                if row["trigger_id"] == split.trigger_id
                and row["manual_key"] == ""
                and to_ms(split.first_at) <= row["occurrence_at"] <= to_ms(split.last_at)
            )
            if carved + sum(piece.count for piece in split.pieces) != split.count:
                raise LedgerChangedError(
                    f"the occurrences carved out of the ledger row of trigger "
                    f"{split.trigger_id!r} at {split.first_at.isoformat()} were not all claimed",
                    trigger_id=split.trigger_id,
                )

    def _check(
        self, request: ClaimRequest, trigger: Trigger | StoreError | None
    ) -> ClaimResult | None:
        if trigger is None:
            return UnknownTriggerError(
                f"no trigger {request.trigger_id!r}", trigger_id=request.trigger_id
            )
        if isinstance(trigger, StoreError):
            return trigger
        if trigger.revision != request.expected_revision:
            return RevisionMismatchError(
                f"trigger {trigger.id!r} is at revision {trigger.revision}, "
                f"not {request.expected_revision}",
                trigger_id=trigger.id,
                revision=trigger.revision,
                expected_revision=request.expected_revision,
            )
        return None

    def _decide(
        self,
        trigger: Trigger,
        request: ClaimRequest,
        key: str,
        active: dict[str, list[str | None]],
        *,
        replaced: bool,
    ) -> _Decided:
        counters = self._counters.get(trigger.id)
        if counters is None:
            counters = self._counters[trigger.id] = Counters.of(trigger)
        runs = active.setdefault(trigger.id, [])
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

    def _row(self, trigger: Trigger, item: _Decided) -> dict[str, Any]:
        launching = item.reservation is not None
        outcome = _OUTCOMES[item.action]
        request = item.request
        # Driver values (epoch ms): the rows go to `executemany` as they are.
        return {
            "trigger_id": trigger.id,
            "occurrence_at": to_ms(request.occurrence_at),
            "count": 1,
            "manual_key": request.manual_key,
            "idempotency_key": item.key,
            "kind": request.kind,
            "outcome": outcome.value,
            "reason": item.reason.value if item.reason else None,
            "revision": trigger.revision,
            "host": self._host,
            "claimed_at": self._now_ms,
            "settled_at": self._now_ms
            if outcome in (Outcome.SKIPPED, Outcome.SUPERSEDED)
            else None,
            "reservation": item.reservation,
            "lease_owner": self._owner if launching else None,
            "lease_expires_at": self._lease_expires_ms if launching else None,
            "supersedes_run_id": item.supersedes,
            "blocked_by": trigger.blocked_by if item.reason is Reason.BLOCKED else None,
            "run_id": None,  # set when the run starts within this transaction (`_inline`)
            "launched_at": None,
            "error": None,
        }

    def _write(self, stored: Mapping[str, Trigger | StoreError]) -> None:
        if self._conn.dialect.name == "postgresql" and self._rows:
            # New rows only (a duplicate would be a race the unique index refuses):
            # COPY, a third of the pipelined executemany's time.
            copy_rows(
                self._conn,
                "fires",
                _FIRE_COLUMNS,
                ([row[name] for name in _FIRE_COLUMNS] for row in self._rows),
            )
        else:
            executemany(self._conn, _INSERT_FIRE, self._rows)
        touched = sorted(set(self._counters) | set(self._watermarks))
        params = []
        for trigger_id in touched:
            trigger = stored[trigger_id]
            if not isinstance(trigger, Trigger):
                continue
            counters = self._counters.get(trigger_id) or Counters.of(trigger)
            watermark = max(
                trigger.watermark_at, self._watermarks.get(trigger_id, trigger.watermark_at)
            )
            params.append(
                {
                    "b_id": trigger_id,
                    "b_active": counters.active_count,
                    "b_buffered": counters.buffered_count,
                    "b_runs": counters.runs_launched,
                    "b_watermark": to_ms(watermark),
                    "b_now": self._now_ms,
                }
            )
        executemany(self._conn, _UPDATE_TRIGGER, params)

    def _finish(
        self,
        results: list[ClaimResult | None],
        decided: list[_Decided],
        stored: Mapping[str, Trigger | StoreError],
    ) -> list[ClaimResult]:
        snapshots: dict[str, Trigger] = {}
        for trigger_id, trigger in stored.items():
            if not isinstance(trigger, Trigger):
                continue
            counters = self._counters.get(trigger_id) or Counters.of(trigger)
            watermark = max(
                trigger.watermark_at, self._watermarks.get(trigger_id, trigger.watermark_at)
            )
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
