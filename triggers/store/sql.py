"""The SQL trigger store (SQLite and PostgreSQL through SQLAlchemy Core).

Correctness comes from fences, not locks: every write to a trigger checks the
revision its caller computed from, every launch record checks the reservation,
and the ledger's UNIQUE (trigger_id, occurrence_at, manual_key) makes a second
claim of an occurrence impossible. Row locks (`FOR UPDATE` on PostgreSQL,
`BEGIN IMMEDIATE` on SQLite) only keep two claimers from wasting work.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from looms_runtime.db import Database
from triggers.errors import (
    StaleOwnerError,
    StoreError,
    TriggersError,
    UnknownTriggerError,
)
from triggers.model import FireRecord, Outcome, Trigger, TriggerSpec
from triggers.store._apply import ApplyPlan
from triggers.store._claim_batch import ClaimBatch
from triggers.store._downtime import prune_downtime, write_heartbeat
from triggers.store._driver_errors import translated
from triggers.store._pending import pending_triggers, promote_buffered, take_expired
from triggers.store._ranges import record_range
from triggers.store._settlements import record_run_changes, record_settlements
from triggers.store._sql_claim_rows import SqlClaimRows
from triggers.store._sql_common import (
    adjust_active,
    fire_key,
    lock_triggers,
    read_triggers,
    select_triggers,
)
from triggers.store.protocol import (
    ApplyResult,
    ClaimRequest,
    ClaimResult,
    Heartbeat,
    Launch,
    LaunchWithin,
    RangeRecord,
    RangeSplit,
    Reserved,
    RunChange,
    Settlement,
    StoreTransaction,
)
from triggers.store.schema import fires, heartbeats, meta, triggers
from triggers.store.sql_reads import APPLIED_DIGEST, SqlTriggerReads
from triggers.store.sql_transaction import SqlTransaction

_APPLY_LOCK = 0x7472_6967_6170  # the advisory lock of `apply` on PostgreSQL


def _set_meta(conn: Connection, key: str, value: str, now: datetime) -> None:
    updated = conn.execute(
        meta.update().where(meta.c.key == key).values(value=value, updated_at=now)
    ).rowcount
    if not updated:
        conn.execute(meta.insert().values(key=key, value=value, updated_at=now))


class SqlTriggerStore(SqlTriggerReads):
    """`TriggerStore` on a `Database` (see `triggers.store.protocol` for the contract):
    the reads of `SqlTriggerReads`, and every write."""

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self._db = db

    # -- declarations -------------------------------------------------------------

    @contextmanager
    def writing(self) -> Iterator[None]:
        with translated(), self._db.shared_write():
            yield

    def apply(
        self, specs: Sequence[TriggerSpec], *, now: datetime, source_digest: str | None = None
    ) -> ApplyResult:
        result = ApplyResult()
        with self._write() as conn:
            if conn.dialect.name == "postgresql":
                # Applies take turns: two computing a revision from the same row would
                # give two declarations one revision (which fences claims), and two
                # creating a trigger would collide on its id.
                conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_APPLY_LOCK)))
            stored = {
                row.id: row
                for row in conn.execute(
                    sa.select(
                        triggers.c.id,
                        triggers.c.digest,
                        triggers.c.revision,
                        triggers.c.retired,
                        triggers.c.watermark_at,
                    )
                    # In id order, as every write path locks them.
                    .order_by(triggers.c.id)
                    .with_for_update()
                )
            }
            plan = ApplyPlan(stored, now)
            for spec in specs:
                plan.add(spec, result)
            plan.retire_undeclared(result)
            plan.write(conn)
            _set_meta(conn, APPLIED_DIGEST, source_digest or "", now)
        return result

    def set_paused(
        self, trigger_id: str, *, paused: bool, note: str | None, now: datetime
    ) -> Trigger:
        with self._write() as conn:
            updated = conn.execute(
                triggers.update()
                .where(triggers.c.id == trigger_id)
                .values(
                    paused=paused,
                    pause_note=note if paused else None,
                    paused_at=now if paused else None,
                    updated_at=now,
                )
            )
            if updated.rowcount == 0:
                raise UnknownTriggerError(f"no trigger {trigger_id!r}", trigger_id=trigger_id)
            found = read_triggers(conn, select_triggers().where(triggers.c.id == trigger_id))
        trigger = found[trigger_id]
        if isinstance(trigger, StoreError):
            raise trigger
        return trigger

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
        with self._write(urgent=True) as conn:
            batch = ClaimBatch(
                SqlClaimRows(conn),
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
        with self._write() as conn:
            # All at once, in id order: one at a time, in the caller's order, could
            # deadlock against a claim on PostgreSQL.
            lock_triggers(conn, sorted({item.trigger_id for item in ranges}))
            return [record_range(conn, item, now) for item in ranges]

    def record_launched(
        self, launches: Sequence[Launch], *, now: datetime
    ) -> list[FireRecord | StoreError]:
        if not launches:
            return []
        params = [
            {
                "b_trigger": launch.claim.trigger_id,
                "b_occurrence": launch.claim.occurrence_at,
                "b_manual": launch.claim.manual_key,
                "b_reservation": launch.claim.reservation,
                "b_run": launch.run_id,
                "b_now": now,
            }
            for launch in launches
        ]
        statement = (
            fires.update()
            .where(
                fires.c.trigger_id == sa.bindparam("b_trigger"),
                fires.c.occurrence_at
                == sa.bindparam("b_occurrence", type_=fires.c.occurrence_at.type),
                fires.c.manual_key == sa.bindparam("b_manual"),
                fires.c.reservation == sa.bindparam("b_reservation"),
                fires.c.outcome == Outcome.LAUNCHING.value,
            )
            .values(
                outcome=Outcome.LAUNCHED.value,
                run_id=sa.bindparam("b_run"),
                launched_at=sa.bindparam("b_now", type_=fires.c.launched_at.type),
                reservation=None,
                lease_owner=None,
                lease_expires_at=None,
            )
        )
        with self._write() as conn:
            updated = conn.execute(statement, params).rowcount
            if updated == len(launches):
                lost: set[int] = set()
            else:
                lost = _lost_launches(conn, launches)
        return [
            StaleOwnerError(
                f"trigger {launch.claim.trigger_id!r} lost the reservation of "
                f"{launch.claim.idempotency_key}",
                trigger_id=launch.claim.trigger_id,
                run_id=launch.run_id,
            )
            if index in lost
            else _launched_record(launch, now)
            for index, launch in enumerate(launches)
        ]

    def release(self, claim: Reserved, *, retry_at: datetime, error: str | None) -> None:
        with self._write() as conn:
            conn.execute(
                fires.update()
                .where(
                    *fire_key(claim),
                    fires.c.reservation == claim.reservation,
                    fires.c.outcome == Outcome.LAUNCHING.value,
                )
                .values(lease_expires_at=retry_at, lease_owner=None, error=error)
            )

    def fail_launch(self, claim: Reserved, *, error: str, now: datetime) -> None:
        with self._write() as conn:
            lock_triggers(conn, [claim.trigger_id])  # trigger rows first, as everywhere
            updated = conn.execute(
                fires.update()
                .where(
                    *fire_key(claim),
                    fires.c.reservation == claim.reservation,
                    fires.c.outcome == Outcome.LAUNCHING.value,
                )
                .values(
                    outcome=Outcome.FAILED.value,
                    error=error,
                    settled_at=now,
                    reservation=None,
                    lease_owner=None,
                    lease_expires_at=None,
                )
            ).rowcount
            if updated:
                adjust_active(conn, {claim.trigger_id: -1}, now)

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
        with self._write() as conn:
            expired, buffered = pending_triggers(
                conn, now=now, limit=limit, dead_owners=dead_owners
            )
            stored = lock_triggers(conn, sorted({*expired, *buffered}))
            claims = take_expired(
                conn,
                expired,
                stored,
                owner=owner,
                host=host,
                now=now,
                lease=lease,
                limit=limit,
                dead_owners=dead_owners,
            )
            claims += promote_buffered(
                conn, buffered, stored, owner=owner, host=host, now=now, lease=lease
            )
        return claims

    def record_settled(
        self, settlements: Sequence[Settlement], *, now: datetime
    ) -> list[FireRecord | None]:
        if not settlements:
            return []
        with self._write() as conn:
            return record_settlements(conn, settlements, now)

    def record_run_changes(
        self,
        changes: Sequence[RunChange],
        *,
        now: datetime,
        within: StoreTransaction | None = None,
    ) -> None:
        if within is not None and not isinstance(within, SqlTransaction):
            raise TypeError(f"not a transaction of this store's database: {within!r}")
        if not changes:
            return
        if within is None:
            with self._write() as conn:
                record_run_changes(conn, changes, now)
            return
        with translated():
            record_run_changes(within.connection, changes, now)

    def heartbeat(self, beat: Heartbeat, *, down_after: timedelta | None = None) -> None:
        with self._write() as conn:
            write_heartbeat(conn, beat, down_after=down_after)

    def prune_downtime(self, *, older_than: datetime) -> int:
        with self._write() as conn:
            return prune_downtime(conn, older_than=older_than)

    def prune(self, *, older_than: datetime, limit: int = 10_000) -> int:
        settled = [
            o.value
            for o in (
                Outcome.COMPLETED,
                Outcome.FAILED,
                Outcome.CANCELLED,
                Outcome.SUPERSEDED,
                Outcome.SKIPPED,
                Outcome.MISSED,
            )
        ]
        is_doomed = (fires.c.outcome.in_(settled), fires.c.settled_at < older_than)
        doomed = sa.select(fires.c.id).where(*is_doomed).limit(limit).scalar_subquery()
        # Checked again on the deleted row itself: on PostgreSQL, a row that another
        # transaction changed meanwhile (a range extended) is re-read, but only the
        # conditions of the DELETE's own table are checked against its new version.
        statement = fires.delete().where(fires.c.id.in_(doomed), *is_doomed)
        with self._write() as conn:
            return int(conn.execute(statement).rowcount)

    def prune_heartbeats(self, *, older_than: datetime) -> int:
        with self._write() as conn:
            statement = heartbeats.delete().where(heartbeats.c.last_tick_at < older_than)
            return int(conn.execute(statement).rowcount)

    # -- plumbing ---------------------------------------------------------------------

    @contextmanager
    def _write(self, *, urgent: bool = False) -> Iterator[Connection]:
        with translated(), self._db.write(urgent=urgent) as conn:
            yield conn


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


def _lost_launches(conn: Connection, launches: Sequence[Launch]) -> set[int]:
    """Indexes of launches whose row does not now carry their run id."""
    lost = set()
    for index, launch in enumerate(launches):
        run_id = conn.execute(sa.select(fires.c.run_id).where(*fire_key(launch.claim))).scalar()
        if run_id != launch.run_id:
            lost.add(index)
    return lost


__all__ = ["SqlTriggerStore"]
