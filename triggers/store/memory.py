"""A trigger store in memory: the SQL store's contract, without a database.

`triggers simulate` runs the real scheduler against it, thousands of simulated
days a second; it passes the store contract suite beside the SQL store on SQLite
and PostgreSQL (`tests/contract`), so the two cannot drift. The decisions are the
ones every store shares (`_decide.py`); what SQL does with rows is done with
Python objects under one lock, so each method is one transaction: it lands whole
or not at all. Nothing survives the process.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Collection, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import datetime, timedelta

from triggers.errors import StaleOwnerError, StoreError, TriggersError, UnknownTriggerError
from triggers.model import FireRecord, Outcome, Trigger, TriggerSpec, trigger_state, upstreams_of
from triggers.store import _memory_ledger as ledger
from triggers.store._claim_batch import ClaimBatch
from triggers.store._fire_row import FireRow, cut
from triggers.store._memory_claim_rows import MemoryClaimRows, MemoryTransaction
from triggers.store._memory_pools import pool_use
from triggers.store._memory_rows import Tables, TriggerRow
from triggers.store.protocol import (
    ActiveRun,
    ApplyResult,
    ClaimRequest,
    ClaimResult,
    Heartbeat,
    HistoryQuery,
    Launch,
    LaunchWithin,
    ListedState,
    PoolUse,
    RangeRecord,
    RangeSplit,
    RecordedDowntime,
    Reserved,
    RunChange,
    Settlement,
    StoreTransaction,
    TriggerListQuery,
)

__all__ = ["MemoryTriggerStore"]

_APPLIED_DIGEST = "applied_declarations_digest"
_SETTLED = frozenset(
    {
        Outcome.COMPLETED,
        Outcome.FAILED,
        Outcome.CANCELLED,
        Outcome.SUPERSEDED,
        Outcome.SKIPPED,
        Outcome.MISSED,
    }
)


class MemoryTriggerStore:
    """`TriggerStore` in this process's memory (see `triggers.store.protocol`)."""

    def __init__(self) -> None:
        self._tables = Tables()
        self._lock = threading.RLock()

    # -- declarations -------------------------------------------------------------

    def apply(
        self, specs: Sequence[TriggerSpec], *, now: datetime, source_digest: str | None = None
    ) -> ApplyResult:
        result = ApplyResult()
        now = cut(now)
        with self._lock:
            tables = self._tables
            declared = set()
            for spec in specs:
                declared.add(spec.id)
                self._apply_one(spec, now, result)
            for trigger_id in sorted(tables.triggers):
                row = tables.triggers[trigger_id]
                if trigger_id not in declared and not row.retired:
                    row.retired, row.updated_at = True, now
                    result.retired.append(trigger_id)
            tables.meta[_APPLIED_DIGEST] = source_digest or ""
        return result

    def _apply_one(self, spec: TriggerSpec, now: datetime, result: ApplyResult) -> None:
        tables = self._tables
        upstreams = upstreams_of(spec)
        if upstreams:
            tables.upstreams[spec.id] = upstreams
        else:
            tables.upstreams.pop(spec.id, None)
        digest = spec.digest()
        row = tables.triggers.get(spec.id)
        if row is None:
            tables.triggers[spec.id] = TriggerRow(
                spec=spec,
                digest=digest,
                revision=1,
                watermark_at=now,
                created_at=now,
                updated_at=now,
            )
            tables.revisions[(spec.id, 1)] = spec
            result.created.append(spec.id)
            return
        if row.digest == digest and not row.retired:
            result.unchanged.append(spec.id)
            return
        if row.digest != digest:
            row.revision += 1
            tables.revisions[(spec.id, row.revision)] = spec
        if row.retired:
            # A revived trigger owes nothing for the time it was retired.
            row.watermark_at = max(row.watermark_at, now)
        # A range row stays under one declaration and never spans unrecorded time.
        row.spec, row.digest, row.retired, row.open_range_id = spec, digest, False, None
        row.updated_at = now
        result.updated.append(spec.id)

    def applied_digest(self) -> str | None:
        with self._lock:
            return self._tables.meta.get(_APPLIED_DIGEST) or None

    def maybe_dependents(self, trigger_id: str) -> list[Trigger]:
        with self._lock:
            rows = [self._tables.triggers[i] for i in sorted(self._tables.triggers)]
            return [t for row in rows if not (t := row.snapshot()).retired]

    def list_triggers(
        self,
        *,
        changed_since: datetime | None = None,
        ids: Sequence[str] | None = None,
        after_id: str | None = None,
        limit: int | None = None,
    ) -> list[Trigger | StoreError]:
        with self._lock:
            chosen = sorted(self._tables.triggers if ids is None else set(ids))
            rows = [
                row
                for row in (self._tables.triggers.get(i) for i in chosen)
                if row is not None
                and (changed_since is None or row.updated_at >= changed_since)
                and (after_id is None or row.spec.id > after_id)
            ]
            if limit is not None:
                rows = rows[:limit]
            return [row.snapshot() for row in rows]

    def find_triggers(self, query: TriggerListQuery) -> list[Trigger | StoreError]:
        words = query.search.casefold()
        found: list[Trigger | StoreError] = []
        with self._lock:
            failing = self._newest_failed() if query.state == "failing" else set()
            running = {row.trigger_id for row in self._tables.with_outcome(Outcome.LAUNCHED)}
            for trigger_id in sorted(self._tables.triggers):
                row = self._tables.triggers[trigger_id]
                if query.after_id is not None and trigger_id <= query.after_id:
                    continue
                described = (row.spec.description or "").casefold()
                if words and words not in trigger_id.casefold() and words not in described:
                    continue
                if _listed_state(row) != query.state and not (
                    query.state in ("all", "failing", "running") and not row.retired
                ):
                    continue
                if query.state == "failing" and trigger_id not in failing:
                    continue
                if query.state == "running" and trigger_id not in running:
                    continue
                found.append(row.snapshot())
                if len(found) == query.limit:
                    break
        return found

    def _newest_failed(self) -> set[str]:
        """The triggers whose newest ledger row (by occurrence, then id) failed."""
        newest: dict[str, FireRow] = {}
        for row in self._tables.fires.values():
            best = newest.get(row.trigger_id)
            if best is None or _NEWEST_LAST(row) > _NEWEST_LAST(best):
                newest[row.trigger_id] = row
        return {t for t, row in newest.items() if row.outcome is Outcome.FAILED}

    def reading(self) -> AbstractContextManager[None]:
        return nullcontext()  # each read is already consistent under the lock

    def writing(self) -> AbstractContextManager[None]:
        return nullcontext()  # each write stands under the lock

    def declared_digests(self) -> dict[str, tuple[str, bool]]:
        with self._lock:
            return {i: (row.digest, row.retired) for i, row in self._tables.triggers.items()}

    def get_trigger(self, trigger_id: str) -> Trigger | None:
        with self._lock:
            row = self._tables.triggers.get(trigger_id)
            return None if row is None else row.snapshot()

    def set_paused(
        self, trigger_id: str, *, paused: bool, note: str | None, now: datetime
    ) -> Trigger:
        now = cut(now)
        with self._lock:
            row = self._tables.triggers.get(trigger_id)
            if row is None:
                raise UnknownTriggerError(f"no trigger {trigger_id!r}", trigger_id=trigger_id)
            row.paused = paused
            row.pause_note = note if paused else None
            row.paused_at = now if paused else None
            row.updated_at = now
            return row.snapshot()

    # -- claims ---------------------------------------------------------------------

    def claim(
        self,
        requests: Sequence[ClaimRequest],
        *,
        owner: str,
        host: str,
        now: datetime,
        lease: timedelta,
        splits: Sequence[RangeSplit] = (),
        launch_within: LaunchWithin | None = None,
    ) -> list[ClaimResult]:
        if not requests:
            return []
        # Without splits nothing is written before every request is decided and the
        # runs have answered (`ClaimBatch`): the lock alone makes it one transaction.
        with self._undoable() if splits else self._lock:
            batch = ClaimBatch(
                MemoryClaimRows(self._tables),
                requests,
                owner=owner,
                host=host,
                now=now,
                lease=lease,
                splits=splits,
                launch_within=launch_within,
            )
            results = batch.run()
        batch.after_commit()  # committed: the runs started within it may go on
        return results

    def record_ranges(
        self, ranges: Sequence[RangeRecord], *, now: datetime
    ) -> list[TriggersError | None]:
        with self._lock:
            return [ledger.record_range(self._tables, item, now) for item in ranges]

    def record_launched(
        self, launches: Sequence[Launch], *, now: datetime
    ) -> list[FireRecord | StoreError]:
        now = cut(now)
        results: list[FireRecord | StoreError] = []
        with self._lock:
            for launch in launches:
                row = self._row_of(launch.claim)
                if (
                    row is not None
                    and row.reservation == launch.claim.reservation
                    and row.outcome is Outcome.LAUNCHING
                ):
                    self._tables.set_outcome(row, Outcome.LAUNCHED)
                    self._tables.set_run(row, launch.run_id)
                    row.launched_at = now
                    row.reservation = row.lease_owner = row.lease_expires_at = None
                if row is None or row.run_id != launch.run_id:
                    claim = launch.claim
                    results.append(
                        StaleOwnerError(
                            f"trigger {claim.trigger_id!r} lost the reservation of "
                            f"{claim.idempotency_key}",
                            trigger_id=claim.trigger_id,
                            run_id=launch.run_id,
                        )
                    )
                else:
                    results.append(_launched_record(launch, now))
        return results

    def release(self, claim: Reserved, *, retry_at: datetime, error: str | None) -> None:
        with self._lock:
            row = self._reserved(claim)
            if row is not None:
                row.lease_expires_at, row.lease_owner, row.error = cut(retry_at), None, error

    def fail_launch(self, claim: Reserved, *, error: str, now: datetime) -> None:
        now = cut(now)
        with self._lock:
            row = self._reserved(claim)
            if row is None:
                return
            self._tables.set_outcome(row, Outcome.FAILED)
            row.error, row.settled_at = error, now
            row.reservation = row.lease_owner = row.lease_expires_at = None
            self._tables.settled(now)
            self._tables.adjust_active({claim.trigger_id: -1}, now)

    def take_pending(
        self,
        *,
        owner: str,
        host: str,
        now: datetime,
        lease: timedelta,
        limit: int = 500,
        dead_owners: Sequence[str] = (),
    ) -> list[Reserved]:
        with self._lock:
            return ledger.take_pending(
                self._tables,
                owner=owner,
                host=host,
                now=now,
                lease=lease,
                limit=limit,
                dead_owners=dead_owners,
            )

    def record_settled(
        self, settlements: Sequence[Settlement], *, now: datetime
    ) -> list[FireRecord | None]:
        if not settlements:
            return []
        with self._lock:
            return ledger.record_settlements(self._tables, settlements, now)

    def record_run_changes(
        self,
        changes: Sequence[RunChange],
        *,
        now: datetime,
        within: StoreTransaction | None = None,
    ) -> None:
        if within is not None and not isinstance(within, MemoryTransaction):
            raise TypeError(f"not a transaction of this store: {within!r}")
        if changes:
            with self._lock:
                ledger.record_run_changes(self._tables, changes, now)

    def pool_use(self, pools: Collection[str]) -> dict[str, PoolUse]:
        with self._lock:
            return pool_use(self._tables, pools)

    def active_runs(self) -> list[ActiveRun]:
        with self._lock:
            return [
                ActiveRun(
                    trigger_id=row.trigger_id,
                    occurrence_at=row.occurrence_at,
                    manual_key=row.manual_key,
                    run_id=row.run_id,
                )
                for row in self._tables.with_outcome(Outcome.LAUNCHED)
                if row.run_id is not None
            ]

    # -- queries ----------------------------------------------------------------------

    def history(self, query: HistoryQuery) -> list[FireRecord]:
        with self._lock:
            rows = list(self._tables.fires.values())
            if not _everything(query):
                rows = [row for row in rows if _matches(row, query)]
            rows.sort(key=_NEWEST_LAST, reverse=True)
            return [row.record() for row in rows[: query.limit]]

    def recent_records(
        self, trigger_ids: Sequence[str], *, limit: int
    ) -> dict[str, list[FireRecord]]:
        wanted = set(trigger_ids)
        found: dict[str, list[FireRow]] = {}
        with self._lock:
            for row in self._tables.fires.values():
                if row.trigger_id in wanted:
                    found.setdefault(row.trigger_id, []).append(row)
            return {
                trigger_id: [
                    row.record() for row in sorted(rows, key=_NEWEST_LAST, reverse=True)[:limit]
                ]
                for trigger_id, rows in found.items()
            }

    def recent_outcomes(
        self, trigger_ids: Sequence[str], *, limit: int
    ) -> dict[str, list[tuple[datetime, Outcome]]]:
        return {
            trigger_id: [(r.occurrence_at, r.outcome) for r in records]
            for trigger_id, records in self.recent_records(trigger_ids, limit=limit).items()
        }

    def triggers_with(self, outcome: Outcome) -> set[str]:
        with self._lock:
            return {row.trigger_id for row in self._tables.with_outcome(outcome)}

    def last_records(self) -> dict[str, FireRecord]:
        newest: dict[str, FireRow] = {}
        with self._lock:
            for row in self._tables.fires.values():
                best = newest.get(row.trigger_id)
                if best is None or (row.newest_at, row.id) > (best.newest_at, best.id):
                    newest[row.trigger_id] = row
            return {trigger_id: row.record() for trigger_id, row in newest.items()}

    def last_settled(self) -> dict[str, dict[str, datetime]]:
        found: dict[str, dict[str, datetime]] = {"completed": {}, "failed": {}}
        with self._lock:
            for row in self._tables.with_outcome(Outcome.COMPLETED, Outcome.FAILED):
                if row.settled_at is None:
                    continue
                latest = found[row.outcome.value]
                if row.trigger_id not in latest or row.settled_at > latest[row.trigger_id]:
                    latest[row.trigger_id] = row.settled_at
        return found

    def heartbeat(self, beat: Heartbeat, *, down_after: timedelta | None = None) -> None:
        with self._lock:
            beats = self._tables.heartbeats
            if down_after is not None and beats:
                last = max(other.last_tick_at for other in beats.values())
                if beat.last_tick_at - last > down_after:
                    self._tables.downtime.append(
                        RecordedDowntime(
                            started_at=last, ended_at=beat.last_tick_at, ended_by=beat.owner
                        )
                    )
            beats[beat.owner] = beat

    def downtime(self, *, since: datetime, until: datetime) -> list[RecordedDowntime]:
        with self._lock:
            found = [
                d for d in self._tables.downtime if d.ended_at >= since and d.started_at <= until
            ]
        return sorted(found, key=lambda d: d.started_at)

    def prune_downtime(self, *, older_than: datetime) -> int:
        with self._lock:
            kept = [d for d in self._tables.downtime if d.ended_at >= older_than]
            pruned = len(self._tables.downtime) - len(kept)
            self._tables.downtime = kept
        return pruned

    def watermarks(self, trigger_ids: Collection[str]) -> dict[str, datetime]:
        with self._lock:
            rows = self._tables.triggers
            return {t: rows[t].watermark_at for t in trigger_ids if t in rows}

    def heartbeats(self) -> list[Heartbeat]:
        with self._lock:
            beats = list(self._tables.heartbeats.values())
        return sorted(beats, key=lambda beat: beat.last_tick_at, reverse=True)

    def prune(self, *, older_than: datetime, limit: int = 10_000) -> int:
        with self._lock:
            tables = self._tables
            if tables.settled_floor is None or older_than <= tables.settled_floor:
                return 0  # nothing settled that long ago: no row to look at
            doomed = [
                row
                for row in tables.with_outcome(*_SETTLED)
                if row.settled_at is not None and row.settled_at < older_than
            ][:limit]
            for row in doomed:
                tables.delete(row)
            kept = [row.settled_at for row in tables.fires.values() if row.settled_at is not None]
            tables.settled_floor = min(kept, default=None)
            return len(doomed)

    def prune_heartbeats(self, *, older_than: datetime) -> int:
        with self._lock:
            beats = self._tables.heartbeats
            gone = [owner for owner, beat in beats.items() if beat.last_tick_at < older_than]
            for owner in gone:
                del beats[owner]
            return len(gone)

    def occurrence_counts(self) -> dict[str, int]:
        """Occurrences by outcome (a range row counts each of its occurrences)."""
        counts: dict[str, int] = {}
        with self._lock:
            for row in self._tables.fires.values():
                counts[row.outcome.value] = counts.get(row.outcome.value, 0) + row.count
        return counts

    # -- plumbing ---------------------------------------------------------------------

    @contextmanager
    def _undoable(self) -> Iterator[None]:
        """One transaction that may fail part-way, and is then rolled back."""
        with self._lock:
            saved = self._tables.copy()
            try:
                yield
            except BaseException:
                self._tables = saved
                raise

    def _row_of(self, claim: Reserved) -> FireRow | None:
        found = self._tables.by_identity.get(
            (claim.trigger_id, cut(claim.occurrence_at), claim.manual_key)
        )
        return None if found is None else self._tables.fires[found]

    def _reserved(self, claim: Reserved) -> FireRow | None:
        row = self._row_of(claim)
        if row is None or row.reservation != claim.reservation:
            return None
        return row if row.outcome is Outcome.LAUNCHING else None


_NEWEST_LAST = operator.attrgetter("occurrence_at", "id")


def _listed_state(row: TriggerRow) -> ListedState:
    """`find_triggers`' state of a row, as `Trigger.state` words it."""
    return trigger_state(
        retired=row.retired,
        enabled=row.spec.enabled,
        paused=row.paused,
        blocked=bool(row.blocked_by),
    )


def _everything(query: HistoryQuery) -> bool:
    """Whether `query` keeps every row (a simulation reads the whole ledger)."""
    return (
        query.trigger_id is None
        and not query.outcomes
        and query.since is None
        and query.until is None
        and query.include_manual
    )


def _matches(row: FireRow, query: HistoryQuery) -> bool:
    return (
        (query.trigger_id is None or row.trigger_id == query.trigger_id)
        and (not query.outcomes or row.outcome in query.outcomes)
        and (query.since is None or row.newest_at >= query.since)
        and (query.until is None or row.occurrence_at <= query.until)
        and (query.include_manual or row.manual_key == "")
    )


def _launched_record(launch: Launch, now: datetime) -> FireRecord:
    claim = launch.claim
    return FireRecord(
        trigger_id=claim.trigger_id,
        occurrence_at=claim.occurrence_at,
        outcome=Outcome.LAUNCHED,
        run_id=launch.run_id,
        revision=claim.trigger.revision,
        launched_at=now,
        manual_key=claim.manual_key,
        idempotency_key=claim.idempotency_key,
    )
