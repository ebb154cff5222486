"""The memory store's tables: trigger rows, ledger rows, and the indexes over them.

Private to `triggers.store.memory`. A row here holds what the SQL store's row of
the same table holds (`schema.py`), instants as aware UTC datetimes cut to the
millisecond, as `UtcDateTime` stores them, so both stores hand back equal values.
A ledger row is a `FireRow` (`_fire_row.py`), the claim batch's own row type.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime

from triggers.errors import DuplicateOccurrenceError
from triggers.model import Outcome, Trigger, TriggerSpec
from triggers.store._fire_row import FireRow
from triggers.store.protocol import Heartbeat, RecordedDowntime


@dataclass(slots=True, kw_only=True)
class TriggerRow:
    """One row of `triggers`."""

    spec: TriggerSpec
    digest: str
    revision: int
    watermark_at: datetime
    created_at: datetime
    updated_at: datetime
    retired: bool = False
    paused: bool = False
    pause_note: str | None = None
    paused_at: datetime | None = None
    active_count: int = 0
    buffered_count: int = 0
    runs_launched: int = 0
    open_range_id: int | None = None
    blocked_by: str | None = None

    def snapshot(self) -> Trigger:
        return Trigger(
            spec=self.spec,
            revision=self.revision,
            paused=self.paused,
            pause_note=self.pause_note,
            paused_at=self.paused_at,
            retired=self.retired,
            watermark_at=self.watermark_at,
            active_count=self.active_count,
            buffered_count=self.buffered_count,
            runs_launched=self.runs_launched,
            blocked_by=self.blocked_by,
            created_at=self.created_at,
            updated_at=self.updated_at,
        )


@dataclass(slots=True)
class Tables:
    """Every table of the store, with the indexes its queries need.

    Ledger rows change outcome only through `set_outcome`, which keeps the
    per-outcome index true; `insert` checks the ledger's two unique keys."""

    triggers: dict[str, TriggerRow] = field(default_factory=dict)
    fires: dict[int, FireRow] = field(default_factory=dict)
    by_identity: dict[tuple[str, datetime, str], int] = field(default_factory=dict)
    by_key: dict[str, int] = field(default_factory=dict)
    by_run: dict[str, list[int]] = field(default_factory=dict)
    """Row ids by run id: almost always one (a list of one costs a third of a set)."""
    by_outcome: dict[Outcome, dict[int, FireRow]] = field(
        default_factory=lambda: {outcome: {} for outcome in Outcome}
    )
    heartbeats: dict[str, Heartbeat] = field(default_factory=dict)
    downtime: list[RecordedDowntime] = field(default_factory=list)
    meta: dict[str, str] = field(default_factory=dict)
    revisions: dict[tuple[str, int], TriggerSpec] = field(default_factory=dict)
    next_id: int = 1
    settled_floor: datetime | None = None
    """No row settled before this instant (a bound that lets an idle prune cost nothing)."""
    upstreams: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """The upstreams of each dependent trigger (`after:`), by the dependent's id: a
    settlement finds its dependents without reading every trigger."""

    def check_insertable(self, rows: Iterable[FireRow]) -> None:
        """Refuse rows whose occurrence or key the ledger (or another of them) holds.

        Raises:
            DuplicateOccurrenceError: as the SQL store's unique keys would.
        """
        identities: set[tuple[str, datetime, str]] = set()
        keys: set[str] = set()
        for row in rows:
            key = row.idempotency_key
            identity = (row.trigger_id, row.occurrence_at, row.manual_key)
            if (
                identity in self.by_identity
                or identity in identities
                or (key is not None and (key in self.by_key or key in keys))
            ):
                raise DuplicateOccurrenceError(
                    f"the ledger already holds occurrence {row.occurrence_at.isoformat()} "
                    f"of trigger {row.trigger_id!r}",
                    trigger_id=row.trigger_id,
                )
            identities.add(identity)
            if key is not None:
                keys.add(key)

    def insert(self, row: FireRow, *, checked: bool = False) -> FireRow:
        """Add a ledger row under a new id (`checked`: `check_insertable` said it may be).

        Raises:
            DuplicateOccurrenceError: the ledger holds its occurrence or its key already.
        """
        if not checked:
            self.check_insertable([row])
        row_id = row.id = self.next_id
        self.next_id += 1
        self.fires[row_id] = row
        self.by_identity[(row.trigger_id, row.occurrence_at, row.manual_key)] = row_id
        if row.idempotency_key is not None:
            self.by_key[row.idempotency_key] = row_id
        if row.run_id is not None:
            self.by_run.setdefault(row.run_id, []).append(row_id)
        self.by_outcome[row.outcome][row_id] = row
        if row.settled_at is not None:
            self.settled(row.settled_at)
        return row

    def delete(self, row: FireRow) -> None:
        del self.fires[row.id]
        self.by_identity.pop(row.identity, None)
        if row.idempotency_key is not None:
            self.by_key.pop(row.idempotency_key, None)
        self._unlink_run(row)
        self.by_outcome[row.outcome].pop(row.id, None)

    def set_outcome(self, row: FireRow, outcome: Outcome) -> None:
        if outcome is not row.outcome:
            del self.by_outcome[row.outcome][row.id]
            row.outcome = outcome
            self.by_outcome[outcome][row.id] = row

    def set_run(self, row: FireRow, run_id: str | None) -> None:
        self._unlink_run(row)
        row.run_id = run_id
        if run_id is not None:
            self.by_run.setdefault(run_id, []).append(row.id)

    def _unlink_run(self, row: FireRow) -> None:
        ids = None if row.run_id is None else self.by_run.get(row.run_id)
        if ids and row.id in ids:
            ids.remove(row.id)

    def settled(self, at: datetime | None) -> None:
        """Note a row settled at `at`, for `settled_floor`."""
        if at is not None and (self.settled_floor is None or at < self.settled_floor):
            self.settled_floor = at

    def with_outcome(self, *outcomes: Outcome) -> Iterator[FireRow]:
        for outcome in outcomes:
            yield from list(self.by_outcome[outcome].values())

    def of_run(self, run_id: str) -> list[FireRow]:
        ids = self.by_run.get(run_id)
        if not ids:
            return []
        if len(ids) == 1:  # almost always: a run is one occurrence's
            return [self.fires[ids[0]]]
        return [self.fires[i] for i in sorted(ids)]

    def adjust_active(self, deltas: dict[str, int], now: datetime) -> None:
        for trigger_id in sorted(deltas):
            row = self.triggers.get(trigger_id)
            if row is not None:
                row.active_count += deltas[trigger_id]
                row.updated_at = now

    def copy(self) -> Tables:
        """A copy whose rows can change without touching these (a transaction's undo)."""
        fires = {i: dataclasses.replace(row) for i, row in self.fires.items()}
        by_outcome: dict[Outcome, dict[int, FireRow]] = {outcome: {} for outcome in Outcome}
        for i, row in fires.items():
            by_outcome[row.outcome][i] = row
        return Tables(
            triggers={i: dataclasses.replace(row) for i, row in self.triggers.items()},
            fires=fires,
            by_identity=dict(self.by_identity),
            by_key=dict(self.by_key),
            by_run={run: list(ids) for run, ids in self.by_run.items()},
            by_outcome=by_outcome,
            heartbeats=dict(self.heartbeats),
            meta=dict(self.meta),
            revisions=copy.copy(self.revisions),
            next_id=self.next_id,
            settled_floor=self.settled_floor,
            upstreams=dict(self.upstreams),
        )


def ordered(rows: Iterable[FireRow]) -> list[FireRow]:
    """By occurrence, then id (the SQL store's `ORDER BY occurrence_at, id`)."""
    return sorted(rows, key=lambda row: (row.occurrence_at, row.id))
