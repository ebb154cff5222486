"""The claim's seam: what a claim batch (`_claim_batch.py`) reads and writes of its
store, row by row, inside the store's own write transaction.

Two adapters implement it: the SQL store's (`_sql_claim_rows.py`, SQL on the
transaction's connection) and the memory store's (`_memory_claim_rows.py`, its
tables under its lock). A method added here is added to both, and the store
contract suite holds them to the same answers.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from triggers.alert_rules import AlertFacts, AlertRule
from triggers.errors import StoreError
from triggers.store._decide import StoredTrigger
from triggers.store._dependents import SettledRun
from triggers.store._fire_row import FireRow
from triggers.store.protocol import (
    ClaimRequest,
    PoolUse,
    RangeSplit,
    Settlement,
    StoreTransaction,
)

Identity = tuple[str, datetime, str]
"""A ledger row's occurrence: trigger id, occurrence, manual key."""


@dataclass(frozen=True, slots=True)
class TriggerUpdate:
    """A trigger row as the claim leaves it: its counters and watermark."""

    trigger_id: str
    active_count: int
    buffered_count: int
    runs_launched: int
    watermark_at: datetime


class ClaimRows(Protocol):
    """What a claim batch reads and writes of its store, inside one transaction."""

    @property
    def transaction(self) -> StoreTransaction:
        """The transaction the runs started within the claim join."""
        ...

    def lock_triggers(self, ids: Sequence[str]) -> Mapping[str, StoredTrigger | StoreError]:
        """The trigger rows of `ids` that exist (sorted), locked for the transaction; a
        row that cannot be decoded is its error."""
        ...

    def apply_splits(self, splits: Sequence[RangeSplit], now: datetime) -> None:
        """Replace each split's range row by its pieces (see `RangeSplit`).

        Raises:
            LedgerChangedError: a row is gone or differs from what the caller read."""
        ...

    def lock_pools(self, pools: Collection[str]) -> dict[str, PoolUse]:
        """Lock `pools` for the transaction (after the trigger rows) and count each
        one's use from the ledger as the lock leaves it."""
        ...

    def held(self, requests: Sequence[ClaimRequest]) -> tuple[set[Identity], set[str]]:
        """Of the operators' requests (manual, backfill), the occurrences the ledger
        holds, and the manual idempotency keys it holds. (A scheduled occurrence has
        no row yet: every row at or before the watermark moved the watermark past it.)"""
        ...

    def covered(self, backfills: Sequence[ClaimRequest]) -> set[tuple[str, datetime]]:
        """The backfill occurrences that lie inside a range row, past its first one."""
        ...

    def active_runs(self, trigger_ids: Collection[str]) -> dict[str, list[str | None]]:
        """The active ledger rows' run ids (None for a reservation) of each trigger,
        oldest occurrence first."""
        ...

    def insert(self, rows: Sequence[FireRow]) -> None:
        """Add new ledger rows.

        Raises:
            DuplicateOccurrenceError: the ledger holds one's occurrence or key already."""
        ...

    def raise_alerts(self, raised: Sequence[tuple[AlertFacts, AlertRule]], now: datetime) -> None:
        """Add alerts to the outbox, once per alert id and channel."""
        ...

    def settle_alerts(
        self,
        settled: Sequence[tuple[FireRow, Settlement]],
        stored: Mapping[str, StoredTrigger | StoreError],
        now: datetime,
    ) -> None:
        """The `failed` and `recovered` alerts of runs that settled in their start (a
        start refused for good, a run completed within it), as a settlement raises them."""
        ...

    def follow(self, settled: Sequence[SettledRun], now: datetime) -> None:
        """Give the dependents of runs that settled in their start (completed within
        it) their occurrences, as a settlement gives them (`_dependents`)."""
        ...

    def update_triggers(self, updates: Sequence[TriggerUpdate], now: datetime) -> None:
        """Write each trigger's counters and watermark (in id order); its open range
        row closes (a claimed occurrence ends the range it would extend)."""
        ...
