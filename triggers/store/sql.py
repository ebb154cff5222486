"""The SQL trigger store (SQLite and PostgreSQL through SQLAlchemy Core).

Correctness comes from fences, not locks: every write to a trigger checks the
revision its caller computed from, every launch record checks the reservation,
and the ledger's UNIQUE (trigger_id, occurrence_at, manual_key) makes a second
claim of an occurrence impossible. Row locks (`FOR UPDATE` on PostgreSQL,
`BEGIN IMMEDIATE` on SQLite) only keep two claimers from wasting work.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
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
from triggers.store import _codec
from triggers.store._apply import ApplyPlan
from triggers.store._claims import ClaimBatch
from triggers.store._downtime import prune_downtime, read_downtime, write_heartbeat
from triggers.store._driver_errors import translated
from triggers.store._pending import pending_triggers, promote_buffered, take_expired
from triggers.store._ranges import record_range
from triggers.store._settlements import last_settled, record_run_changes, record_settlements
from triggers.store._shared import (
    adjust_active,
    chunks,
    fire_key,
    lock_triggers,
    read_triggers,
    select_triggers,
)
from triggers.store.protocol import (
    ActiveRun,
    ApplyResult,
    Claim,
    ClaimRequest,
    ClaimResult,
    Heartbeat,
    HistoryQuery,
    Launch,
    LaunchWithin,
    RangeRecord,
    RangeSplit,
    RecordedDowntime,
    RunChange,
    Settlement,
)
from triggers.store.schema import fires, heartbeats, meta, triggers

_APPLIED_DIGEST = "applied_declarations_digest"
_APPLY_LOCK = 0x7472_6967_6170  # the advisory lock of `apply` on PostgreSQL
_IN_CHUNK = 500  # ids per IN list: well under SQLite's bound on variables


def _set_meta(conn: Connection, key: str, value: str, now: datetime) -> None:
    updated = conn.execute(
        meta.update().where(meta.c.key == key).values(value=value, updated_at=now)
    ).rowcount
    if not updated:
        conn.execute(meta.insert().values(key=key, value=value, updated_at=now))


class SqlTriggerStore:
    """`TriggerStore` on a `Database` (see `triggers.store.protocol` for the contract)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    # -- declarations -------------------------------------------------------------

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
            _set_meta(conn, _APPLIED_DIGEST, source_digest or "", now)
        return result

    def applied_digest(self) -> str | None:
        with self._read() as conn:
            value = conn.execute(
                sa.select(meta.c.value).where(meta.c.key == _APPLIED_DIGEST)
            ).scalar()
        return value or None

    def list_triggers(
        self,
        *,
        changed_since: datetime | None = None,
        ids: Sequence[str] | None = None,
        after_id: str | None = None,
        limit: int | None = None,
    ) -> list[Trigger | StoreError]:
        statement = select_triggers()
        if changed_since is None:
            statement = statement.order_by(triggers.c.id)
        else:
            # Sorted here, not in SQL: asked for an order by id, SQLite would walk every
            # row in id order rather than the few that the updated_at index finds.
            statement = statement.where(triggers.c.updated_at >= changed_since)
        if after_id is not None:
            statement = statement.where(triggers.c.id > after_id)
        if limit is not None:
            statement = statement.limit(limit)
        with self._read() as conn:
            if ids is None:
                found = read_triggers(conn, statement)
            else:
                found = {}
                for part in chunks(sorted(ids)):
                    found.update(read_triggers(conn, statement.where(triggers.c.id.in_(part))))
        if changed_since is not None:
            return [found[trigger_id] for trigger_id in sorted(found)]
        return list(found.values())

    def declared_digests(self) -> dict[str, tuple[str, bool]]:
        with self._read() as conn:
            rows = conn.execute(sa.select(triggers.c.id, triggers.c.digest, triggers.c.retired))
            return {row.id: (row.digest, bool(row.retired)) for row in rows}

    def get_trigger(self, trigger_id: str) -> Trigger | None:
        with self._read() as conn:
            found = read_triggers(conn, select_triggers().where(triggers.c.id == trigger_id))
        trigger = found.get(trigger_id)
        if isinstance(trigger, StoreError):
            raise trigger
        return trigger

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
                conn,
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

    def release(self, claim: Claim, *, retry_at: datetime, error: str | None) -> None:
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

    def fail_launch(self, claim: Claim, *, error: str, now: datetime) -> None:
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
    ) -> list[Claim]:
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
        self, changes: Sequence[RunChange], *, now: datetime, within: object = None
    ) -> None:
        if not changes:
            return
        if within is None:
            with self._write() as conn:
                record_run_changes(conn, changes, now)
            return
        if not isinstance(within, Connection):
            raise TypeError(f"not a transaction of this store's database: {within!r}")
        with translated():
            record_run_changes(within, changes, now)

    def active_runs(self) -> list[ActiveRun]:
        with self._read() as conn:
            rows = conn.execute(
                sa.select(
                    fires.c.trigger_id, fires.c.occurrence_at, fires.c.manual_key, fires.c.run_id
                ).where(fires.c.outcome == Outcome.LAUNCHED.value)
            ).all()
        return [
            ActiveRun(
                trigger_id=r.trigger_id,
                occurrence_at=r.occurrence_at,
                manual_key=r.manual_key,
                run_id=r.run_id,
            )
            for r in rows
        ]

    # -- queries ----------------------------------------------------------------------

    def history(self, query: HistoryQuery) -> list[FireRecord]:
        statement = sa.select(fires)
        if query.trigger_id is not None:
            statement = statement.where(fires.c.trigger_id == query.trigger_id)
        if query.outcomes:
            statement = statement.where(
                fires.c.outcome.in_(sorted(o.value for o in query.outcomes))
            )
        if query.since is not None:
            statement = statement.where(
                sa.func.coalesce(fires.c.last_occurrence_at, fires.c.occurrence_at) >= query.since
            )
        if query.until is not None:
            statement = statement.where(fires.c.occurrence_at <= query.until)
        if not query.include_manual:
            statement = statement.where(fires.c.manual_key == "")
        statement = statement.order_by(fires.c.occurrence_at.desc(), fires.c.id.desc())
        statement = statement.limit(query.limit)
        with self._read() as conn:
            rows = conn.execute(statement).mappings().all()
        return [_codec.fire_from_row(row) for row in rows]

    def last_records(self) -> dict[str, FireRecord]:
        # By occurrence, not by insertion: a backfill inserts rows for old occurrences.
        ranked = sa.select(
            fires.c.id,
            sa.func.row_number()
            .over(
                partition_by=fires.c.trigger_id,
                order_by=(
                    sa.func.coalesce(fires.c.last_occurrence_at, fires.c.occurrence_at).desc(),
                    fires.c.id.desc(),
                ),
            )
            .label("rank"),
        ).subquery()
        newest = sa.select(ranked.c.id).where(ranked.c.rank == 1)
        with self._read() as conn:
            rows = conn.execute(sa.select(fires).where(fires.c.id.in_(newest))).mappings().all()
        return {row["trigger_id"]: _codec.fire_from_row(row) for row in rows}

    def last_settled(self) -> dict[str, dict[str, datetime]]:
        with self._read() as conn:
            return last_settled(conn)

    def heartbeat(self, beat: Heartbeat, *, down_after: timedelta | None = None) -> None:
        with self._write() as conn:
            write_heartbeat(conn, beat, down_after=down_after)

    def downtime(self, *, since: datetime, until: datetime) -> list[RecordedDowntime]:
        with self._read() as conn:
            return read_downtime(conn, since=since, until=until)

    def prune_downtime(self, *, older_than: datetime) -> int:
        with self._write() as conn:
            return prune_downtime(conn, older_than=older_than)

    def watermarks(self, trigger_ids: Collection[str]) -> dict[str, datetime]:
        found: dict[str, datetime] = {}
        ids = list(trigger_ids)
        with self._read() as conn:
            for start in range(0, len(ids), _IN_CHUNK):
                chunk = ids[start : start + _IN_CHUNK]
                statement = sa.select(triggers.c.id, triggers.c.watermark_at).where(
                    triggers.c.id.in_(chunk)
                )
                found.update({row.id: row.watermark_at for row in conn.execute(statement)})
        return found

    def heartbeats(self) -> list[Heartbeat]:
        with self._read() as conn:
            rows = (
                conn.execute(sa.select(heartbeats).order_by(heartbeats.c.last_tick_at.desc()))
                .mappings()
                .all()
            )
        return [_codec.heartbeat_from_row(row) for row in rows]

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

    def occurrence_counts(self) -> dict[str, int]:
        """Occurrences by outcome (a range row counts each of its occurrences), for `status`."""
        with self._read() as conn:
            rows = conn.execute(
                sa.select(fires.c.outcome, sa.func.sum(fires.c.count)).group_by(fires.c.outcome)
            ).all()
        return {row[0]: int(row[1]) for row in rows}

    # -- plumbing ---------------------------------------------------------------------

    @contextmanager
    def _write(self, *, urgent: bool = False) -> Iterator[Connection]:
        with translated(), self._db.write(urgent=urgent) as conn:
            yield conn

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        with translated(), self._db.read() as conn:
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
