"""The memory store's side of the claim seam (`_claim_batch.ClaimRows`): the rows of one
claim transaction, on the store's tables under its lock.

The batch decides on the trigger rows themselves (nothing writes them before
`update_triggers`), and its new ledger rows are inserted as they are.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime

from triggers.alert_rules import AlertFacts, AlertRule
from triggers.errors import StoreError
from triggers.model import Outcome, idempotency_key
from triggers.store import _memory_ledger as ledger
from triggers.store._claim_seam import Identity, TriggerUpdate
from triggers.store._decide import StoredTrigger
from triggers.store._dependents import SettledRun
from triggers.store._fire_row import FireRow
from triggers.store._memory_pools import pool_use
from triggers.store._memory_rows import Tables, TriggerRow
from triggers.store.protocol import (
    ClaimRequest,
    PoolUse,
    RangeSplit,
    Settlement,
    StoreTransaction,
)


class MemoryTransaction(StoreTransaction):
    """The memory store's transaction: its tables, under its lock. A runner keeps
    nothing in them (the simulated runner's runs live in the runner)."""

    __slots__ = ()


_TRANSACTION = MemoryTransaction()


class MemoryClaimRows:
    """`ClaimRows` on the memory store's tables (the caller holds the store's lock)."""

    def __init__(self, tables: Tables) -> None:
        self._tables = tables

    @property
    def transaction(self) -> MemoryTransaction:
        return _TRANSACTION

    def raise_alerts(self, raised: Sequence[tuple[AlertFacts, AlertRule]], now: datetime) -> None:
        # The memory store keeps no outbox: nothing is sent from a simulation.
        return

    def settle_alerts(
        self,
        settled: Sequence[tuple[FireRow, Settlement]],
        stored: Mapping[str, StoredTrigger | StoreError],
        now: datetime,
    ) -> None:
        return  # no outbox (as raise_alerts)

    def follow(self, settled: Sequence[SettledRun], now: datetime) -> None:
        ledger.follow(self._tables, settled, now)

    def lock_triggers(self, ids: Sequence[str]) -> dict[str, TriggerRow]:
        rows = self._tables.triggers
        if len(ids) == 1:  # a tick's batch, most often
            row = rows.get(ids[0])
            return {} if row is None else {ids[0]: row}
        return {i: rows[i] for i in ids if i in rows}

    def apply_splits(self, splits: Sequence[RangeSplit], now: datetime) -> None:
        ledger.apply_splits(self._tables, splits, now)

    def lock_pools(self, pools: Collection[str]) -> dict[str, PoolUse]:
        return pool_use(self._tables, pools)  # the store's lock is held already

    def held(self, requests: Sequence[ClaimRequest]) -> tuple[set[Identity], set[str]]:
        tables = self._tables
        found: set[Identity] = set()
        keys: set[str] = set()
        for request in requests:
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

    def covered(self, backfills: Sequence[ClaimRequest]) -> set[tuple[str, datetime]]:
        ranges: dict[str, list[tuple[datetime, datetime]]] = {}
        ids = {r.trigger_id for r in backfills}
        for row in self._tables.fires.values():
            if row.trigger_id in ids and row.last_occurrence_at is not None:
                ranges.setdefault(row.trigger_id, []).append(
                    (row.occurrence_at, row.last_occurrence_at)
                )
        return {
            (r.trigger_id, r.occurrence_at)
            for r in backfills
            if any(first < r.occurrence_at <= last for first, last in ranges.get(r.trigger_id, ()))
        }

    def active_runs(self, trigger_ids: Collection[str]) -> dict[str, list[str | None]]:
        if not trigger_ids:
            return {}
        rows = [
            row
            for row in self._tables.with_outcome(Outcome.LAUNCHING, Outcome.LAUNCHED)
            if row.trigger_id in trigger_ids
        ]
        active: dict[str, list[str | None]] = {}
        for row in sorted(rows, key=lambda r: r.occurrence_at):
            active.setdefault(row.trigger_id, []).append(row.run_id)
        return active

    def insert(self, rows: Sequence[FireRow]) -> None:
        tables = self._tables
        tables.check_insertable(rows)
        for row in rows:
            tables.insert(row, checked=True)

    def update_triggers(self, updates: Sequence[TriggerUpdate], now: datetime) -> None:
        rows = self._tables.triggers
        for update in updates:
            row = rows[update.trigger_id]
            row.active_count = update.active_count
            row.buffered_count = update.buffered_count
            row.runs_launched = update.runs_launched
            row.watermark_at = update.watermark_at
            row.open_range_id = None
            row.updated_at = now
