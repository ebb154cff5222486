"""The trigger store contract, run against the memory store, SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from looms_runtime.db import Database
from tests.factories import spec
from triggers.clock import utc
from triggers.errors import (
    CorruptRowError,
    LedgerChangedError,
    RevisionMismatchError,
    StaleOwnerError,
    UnknownTriggerError,
    WatermarkMovedError,
)
from triggers.model import Action, Outcome, Overlap, Reason, Trigger
from triggers.store._ranges import record_range
from triggers.store.protocol import (
    ApplyResult,
    Claim,
    ClaimRequest,
    Heartbeat,
    HistoryQuery,
    Launch,
    RangePiece,
    RangeRecord,
    RangeSplit,
    Reserved,
    Settlement,
    TriggerStore,
)
from triggers.store.schema import triggers as triggers_table
from triggers.store.sql import SqlTriggerStore

T0 = utc(2026, 1, 1)
LEASE = timedelta(minutes=5)


@pytest.fixture
def database(reused_database: Database) -> Database:
    """Every test here touches only the store's tables: an emptied database will do."""
    return reused_database


@pytest.fixture
def store(any_store: TriggerStore) -> TriggerStore:
    """Each implementation; a test that takes a database is the SQL store's alone."""
    return any_store


def claim(
    store: TriggerStore, trigger_id: str, minute: int, *, revision: int = 1, **extra: Any
) -> Claim:
    [result] = store.claim(
        [
            ClaimRequest(
                trigger_id=trigger_id,
                occurrence_at=T0 + timedelta(minutes=minute),
                expected_revision=revision,
                **extra,
            )
        ],
        owner="a",
        host="h",
        now=T0 + timedelta(minutes=minute),
        lease=LEASE,
    )
    assert isinstance(result, Claim), result
    return result


def reserved(store: TriggerStore, trigger_id: str, minute: int, **extra: Any) -> Reserved:
    """`claim`, of a fire or supersede the launcher starts (under its reservation)."""
    result = claim(store, trigger_id, minute, **extra)
    assert isinstance(result, Reserved), result
    return result


def test_apply_creates_updates_and_retires_by_declaration(store: TriggerStore) -> None:
    first = store.apply([spec("a"), spec("b")], now=T0)
    assert (first.created, first.updated, first.unchanged) == (["a", "b"], [], [])

    again = store.apply([spec("a"), spec("b")], now=T0 + timedelta(hours=1))
    assert again.unchanged == ["a", "b"]
    changed = store.apply([spec("a", every=timedelta(seconds=30))], now=T0 + timedelta(hours=2))
    assert changed.updated == ["a"]
    assert changed.retired == ["b"]

    a = store.get_trigger("a")
    b = store.get_trigger("b")
    assert a is not None and b is not None
    assert a.revision == 2
    assert a.watermark_at == T0  # an edit keeps the boundary already decided
    assert b.retired and not b.claimable


def test_apply_keeps_pause_and_revives_retired_trigger_without_debt(store: TriggerStore) -> None:
    store.apply([spec("a"), spec("b")], now=T0)
    store.set_paused("a", paused=True, note="maintenance", now=T0)
    store.apply([spec("a")], now=T0 + timedelta(hours=1))
    store.apply([spec("a"), spec("b")], now=T0 + timedelta(hours=5))
    a, b = store.get_trigger("a"), store.get_trigger("b")
    assert a is not None and a.paused and a.pause_note == "maintenance"
    assert b is not None and not b.retired
    assert b.watermark_at == T0 + timedelta(hours=5)


def test_retire_and_revive_keep_created_at_and_the_revision_the_lifecycle_reads(
    store: TriggerStore,
) -> None:
    # `triggers.lifecycle` tells a trigger's life from these: a first declaration is
    # revision 1, created_at survives a retirement and a revival, a retirement keeps the
    # revision, and a revival bumps it only when the declaration changed.
    store.apply([spec("a"), spec("b")], now=T0)
    retired = store.apply([spec("a")], now=T0 + timedelta(hours=1))
    assert retired.retired == ["b"]
    b = store.get_trigger("b")
    assert b is not None and b.retired
    assert (b.revision, b.created_at) == (1, T0)
    store.apply([spec("a"), spec("b")], now=T0 + timedelta(hours=2))
    b = store.get_trigger("b")
    assert b is not None and not b.retired
    assert (b.revision, b.created_at) == (1, T0)
    store.apply([spec("a")], now=T0 + timedelta(hours=3))
    store.apply([spec("a"), spec("b", every=timedelta(seconds=30))], now=T0 + timedelta(hours=4))
    b = store.get_trigger("b")
    assert b is not None and not b.retired
    assert (b.revision, b.created_at) == (2, T0)


def test_claim_fires_then_skips_overlap_and_advances_watermark(store: TriggerStore) -> None:
    store.apply([spec("a", overlap=Overlap.SKIP)], now=T0)
    first = claim(store, "a", 1)
    second = claim(store, "a", 2)
    assert isinstance(first, Reserved) and first.action is Action.FIRE and first.reservation
    assert first.idempotency_key == "a:2026-01-01T00:01:00Z"
    assert second.action is Action.SKIP and second.reason is Reason.OVERLAP
    trigger = store.get_trigger("a")
    assert trigger is not None
    assert trigger.watermark_at == T0 + timedelta(minutes=2)
    assert trigger.active_count == 1
    rows = store.history(HistoryQuery(trigger_id="a"))
    assert [(r.outcome, r.reason) for r in rows] == [
        (Outcome.SKIPPED, Reason.OVERLAP),
        (Outcome.LAUNCHING, None),
    ]


def test_watermarks_tell_what_another_daemon_decided_without_the_rows(
    store: TriggerStore,
) -> None:
    store.apply([spec("a"), spec("b")], now=T0)
    claim(store, "a", 3)

    found = store.watermarks(["a", "b", "gone"])

    assert found == {"a": T0 + timedelta(minutes=3), "b": T0}
    many = [f"t{n}" for n in range(1200)]  # more than one IN list's worth
    store.apply([spec(t) for t in many], now=T0)
    assert len(store.watermarks(many)) == 1200


def test_claim_of_decided_occurrence_is_duplicate_and_changes_nothing(
    store: TriggerStore,
) -> None:
    store.apply([spec("a", overlap=Overlap.ALLOW, max_active=5)], now=T0)
    claim(store, "a", 3)
    again = claim(store, "a", 3)
    older = claim(store, "a", 2)  # at or before the watermark: decided (perhaps in a range)
    assert again.action is Action.DUPLICATE
    assert older.action is Action.DUPLICATE
    assert len(store.history(HistoryQuery(trigger_id="a"))) == 1


def test_claim_batch_isolates_revision_mismatch_and_unknown_trigger(store: TriggerStore) -> None:
    store.apply([spec("a"), spec("b")], now=T0)
    results = store.claim(
        [
            ClaimRequest(
                trigger_id="a", occurrence_at=T0 + timedelta(minutes=1), expected_revision=7
            ),
            ClaimRequest(
                trigger_id="ghost", occurrence_at=T0 + timedelta(minutes=1), expected_revision=1
            ),
            ClaimRequest(
                trigger_id="b", occurrence_at=T0 + timedelta(minutes=1), expected_revision=1
            ),
        ],
        owner="a",
        host="h",
        now=T0 + timedelta(minutes=1),
        lease=LEASE,
    )
    assert isinstance(results[0], RevisionMismatchError)
    assert isinstance(results[1], UnknownTriggerError)
    assert isinstance(results[2], Claim) and results[2].action is Action.FIRE
    a = store.get_trigger("a")
    assert a is not None and a.watermark_at == T0


def test_claim_batch_sees_earlier_launch_of_same_batch(store: TriggerStore) -> None:
    store.apply([spec("a", overlap=Overlap.BUFFER_ALL, max_buffer=1)], now=T0)
    results = store.claim(
        [
            ClaimRequest(
                trigger_id="a", occurrence_at=T0 + timedelta(minutes=m), expected_revision=1
            )
            for m in (1, 2, 3)
        ],
        owner="a",
        host="h",
        now=T0 + timedelta(minutes=3),
        lease=LEASE,
    )
    assert [(r.action, r.reason) for r in results if isinstance(r, Claim)] == [
        (Action.FIRE, None),
        (Action.BUFFER, Reason.OVERLAP),
        (Action.SKIP, Reason.BUFFER_FULL),
    ]


def test_paused_or_disabled_trigger_ignores_scheduled_claims_but_not_manual(
    store: TriggerStore,
) -> None:
    store.apply([spec("a"), spec("off", enabled=False)], now=T0)
    store.set_paused("a", paused=True, note=None, now=T0)
    assert claim(store, "a", 1).action is Action.IGNORED
    assert claim(store, "off", 1).action is Action.IGNORED
    manual = claim(store, "a", 2, kind="manual", manual_key="k1")
    assert manual.action is Action.FIRE
    assert manual.idempotency_key == "a:manual:k1"
    repeat = store.claim(
        [
            ClaimRequest(
                trigger_id="a",
                occurrence_at=T0 + timedelta(minutes=9),
                expected_revision=1,
                kind="manual",
                manual_key="k1",
            )
        ],
        owner="a",
        host="h",
        now=T0 + timedelta(minutes=9),
        lease=LEASE,
    )
    assert isinstance(repeat[0], Claim) and repeat[0].action is Action.DUPLICATE
    a = store.get_trigger("a")
    assert a is not None and a.watermark_at == T0  # manual fires never move the watermark


def test_record_launched_swaps_reservation_and_fences_on_it(store: TriggerStore) -> None:
    store.apply([spec("a")], now=T0)
    fire = reserved(store, "a", 1)
    now = T0 + timedelta(minutes=1, seconds=1)
    [record] = store.record_launched([Launch(claim=fire, run_id="run-1")], now=now)
    assert not isinstance(record, Exception)
    assert record.outcome is Outcome.LAUNCHED
    forged = dataclasses.replace(fire, reservation="someone-else")
    [lost] = store.record_launched([Launch(claim=forged, run_id="run-2")], now=now)
    assert isinstance(lost, StaleOwnerError)
    [row] = store.history(HistoryQuery(trigger_id="a"))
    assert (row.outcome, row.run_id, row.launched_at) == (Outcome.LAUNCHED, "run-1", now)
    assert [r.run_id for r in store.active_runs()] == ["run-1"]


def test_released_reservation_is_retaken_with_same_key_and_old_owner_loses(
    store: TriggerStore,
) -> None:
    store.apply([spec("a")], now=T0)
    fire = reserved(store, "a", 1)
    store.release(fire, retry_at=T0 + timedelta(minutes=2), error="timeout")
    early = store.take_pending(
        owner="b", host="h2", now=T0 + timedelta(minutes=1, seconds=30), lease=LEASE
    )
    assert early == []
    [retaken] = store.take_pending(owner="b", host="h2", now=T0 + timedelta(minutes=2), lease=LEASE)
    assert retaken.idempotency_key == fire.idempotency_key
    assert retaken.reservation != fire.reservation
    [stale] = store.record_launched([Launch(claim=fire, run_id="r")], now=T0 + timedelta(minutes=2))
    assert isinstance(stale, StaleOwnerError)
    [ok] = store.record_launched([Launch(claim=retaken, run_id="r")], now=T0 + timedelta(minutes=2))
    assert not isinstance(ok, Exception)


def test_expired_lease_rearms_occurrence(store: TriggerStore) -> None:
    store.apply([spec("a")], now=T0)
    fire = reserved(store, "a", 1)
    assert store.take_pending(owner="b", host="h", now=T0 + timedelta(minutes=5), lease=LEASE) == []
    [retaken] = store.take_pending(owner="b", host="h", now=T0 + timedelta(minutes=7), lease=LEASE)
    assert retaken.occurrence_at == fire.occurrence_at


def test_record_settled_is_idempotent_and_frees_the_slot(store: TriggerStore) -> None:
    store.apply([spec("a")], now=T0)
    fire = reserved(store, "a", 1)
    store.record_launched([Launch(claim=fire, run_id="run-1")], now=T0)
    settle = [Settlement(trigger_id="a", run_id="run-1", state="completed")]
    [done] = store.record_settled(settle, now=T0 + timedelta(minutes=1, seconds=5))
    [again] = store.record_settled(settle, now=T0 + timedelta(minutes=2))
    assert done is not None and done.outcome is Outcome.COMPLETED
    assert again is None
    trigger = store.get_trigger("a")
    assert trigger is not None and trigger.active_count == 0
    assert claim(store, "a", 2).action is Action.FIRE


def test_failure_pauses_trigger_declared_pause_on_failure(store: TriggerStore) -> None:
    store.apply([spec("a", pause_on_failure=True)], now=T0)
    fire = reserved(store, "a", 1)
    store.record_launched([Launch(claim=fire, run_id="run-1")], now=T0)
    store.record_settled(
        [Settlement(trigger_id="a", run_id="run-1", state="failed", error="exit status 3")], now=T0
    )
    trigger = store.get_trigger("a")
    assert trigger is not None and trigger.paused
    assert trigger.pause_note == "exit status 3"


def test_buffered_occurrence_launches_when_the_active_run_settles(store: TriggerStore) -> None:
    store.apply([spec("a", overlap=Overlap.BUFFER)], now=T0)
    fire = reserved(store, "a", 1)
    assert claim(store, "a", 2).action is Action.BUFFER
    assert claim(store, "a", 3).action is Action.SKIP
    store.record_launched([Launch(claim=fire, run_id="run-1")], now=T0)
    assert store.take_pending(owner="a", host="h", now=T0 + timedelta(minutes=3), lease=LEASE) == []
    store.record_settled([Settlement(trigger_id="a", run_id="run-1", state="completed")], now=T0)
    [promoted] = store.take_pending(owner="a", host="h", now=T0 + timedelta(minutes=4), lease=LEASE)
    assert promoted.occurrence_at == T0 + timedelta(minutes=2)
    assert promoted.action is Action.FIRE
    trigger = store.get_trigger("a")
    assert trigger is not None
    assert (trigger.active_count, trigger.buffered_count) == (1, 0)


def test_ranges_merge_while_consecutive_and_are_fenced_on_the_watermark(
    store: TriggerStore,
) -> None:
    store.apply([spec("a")], now=T0)

    def missed(
        first: int, last: int, after: int, reason: Reason = Reason.CATCHUP_WINDOW
    ) -> RangeRecord:
        return RangeRecord(
            trigger_id="a",
            expected_revision=1,
            after=T0 + timedelta(minutes=after),
            first_at=T0 + timedelta(minutes=first),
            last_at=T0 + timedelta(minutes=last),
            count=last - first + 1,
            outcome=Outcome.MISSED,
            reason=reason,
        )

    assert store.record_ranges([missed(1, 3, 0), missed(4, 6, 3)], now=T0) == [None, None]
    [moved] = store.record_ranges([missed(7, 8, 3)], now=T0)
    assert isinstance(moved, WatermarkMovedError)
    assert store.record_ranges([missed(7, 8, 6, Reason.CATCHUP_POLICY)], now=T0) == [None]
    rows = store.history(HistoryQuery(trigger_id="a"))
    assert [(r.occurrence_at.minute, r.count, r.reason) for r in rows] == [
        (7, 2, Reason.CATCHUP_POLICY),
        (1, 6, Reason.CATCHUP_WINDOW),
    ]
    assert rows[1].last_occurrence_at == T0 + timedelta(minutes=6)
    claim(store, "a", 9)  # another row closes the range
    assert store.record_ranges([missed(10, 10, 9, Reason.CATCHUP_POLICY)], now=T0) == [None]
    assert len(store.history(HistoryQuery(trigger_id="a"))) == 4


def test_history_filters_and_orders_newest_first(store: TriggerStore) -> None:
    store.apply([spec("a"), spec("b")], now=T0)
    claim(store, "a", 1)
    claim(store, "a", 2)
    claim(store, "b", 3)
    assert [r.occurrence_at.minute for r in store.history(HistoryQuery())] == [3, 2, 1]
    skipped = store.history(HistoryQuery(outcomes=frozenset({Outcome.SKIPPED})))
    assert [(r.trigger_id, r.occurrence_at.minute) for r in skipped] == [("a", 2)]
    window = store.history(
        HistoryQuery(since=T0 + timedelta(minutes=2), until=T0 + timedelta(minutes=2))
    )
    assert [r.occurrence_at.minute for r in window] == [2]
    assert len(store.history(HistoryQuery(limit=1))) == 1
    last = store.last_records()
    assert last["a"].occurrence_at.minute == 2 and last["b"].occurrence_at.minute == 3


def test_recent_records_are_each_triggers_newest_as_history_orders_them(
    store: TriggerStore,
) -> None:
    store.apply([spec("a"), spec("b"), spec("c")], now=T0)
    for minute in (1, 2, 3, 4):
        claim(store, "a", minute)
    claim(store, "b", 5)
    claim(store, "a", 0, kind="backfill")  # inserted last, for the oldest occurrence
    found = store.recent_records(["a", "b", "c", "gone"], limit=3)
    assert set(found) == {"a", "b"}  # no rows: not there
    bars = store.recent_outcomes(["a", "b", "c"], limit=3)
    for trigger_id, rows in found.items():
        assert rows == store.history(HistoryQuery(trigger_id=trigger_id, limit=3))
        assert bars[trigger_id] == [(r.occurrence_at, r.outcome) for r in rows]
    assert set(bars) == {"a", "b"}
    assert [r.occurrence_at.minute for r in found["a"]] == [4, 3, 2]
    many = [f"t{n:03d}" for n in range(130)]  # more than one statement's worth
    store.apply([spec(t) for t in [*many, "a", "b", "c"]], now=T0)
    for minute, trigger_id in enumerate(many, start=1):
        claim(store, trigger_id, minute)
    newest = store.recent_records(many, limit=1)
    minutes = [(newest[t][0].occurrence_at - T0) // timedelta(minutes=1) for t in many]
    assert minutes == list(range(1, 131))
    assert store.triggers_with(Outcome.SKIPPED) == {"a"}  # a's later occurrences overlap
    assert store.triggers_with(Outcome.FAILED) == set()


def test_prune_deletes_only_old_settled_rows(store: TriggerStore) -> None:
    store.apply([spec("a")], now=T0)
    claim(store, "a", 1)  # launching: never pruned
    claim(store, "a", 2)  # skipped at T0+2m
    assert store.prune(older_than=T0 + timedelta(minutes=2)) == 0
    assert store.prune(older_than=T0 + timedelta(days=40)) == 1
    [left] = store.history(HistoryQuery())
    assert left.outcome is Outcome.LAUNCHING


def _quiet(
    store: TriggerStore, trigger_id: str, first: int, last: int, after: int, revision: int = 1
) -> None:
    [error] = store.record_ranges(
        [
            RangeRecord(
                trigger_id=trigger_id,
                expected_revision=revision,
                after=T0 + timedelta(minutes=after),
                first_at=T0 + timedelta(minutes=first),
                last_at=T0 + timedelta(minutes=last),
                count=last - first + 1,
                outcome=Outcome.SKIPPED,
                reason=Reason.PAUSED,
            )
        ],
        now=T0 + timedelta(minutes=last),
    )
    assert error is None


def _ranges(store: TriggerStore, trigger_id: str) -> list[tuple[int, int, int]]:
    """(first minute, last minute, count) per row, oldest first."""
    rows = store.history(HistoryQuery(trigger_id=trigger_id, limit=1000))
    return [
        (
            int((r.occurrence_at - T0).total_seconds() // 60),
            int(((r.last_occurrence_at or r.occurrence_at) - T0).total_seconds() // 60),
            r.count,
        )
        for r in reversed(rows)
    ]


def test_a_range_never_extends_a_row_of_another_trigger(store: TriggerStore) -> None:
    store.apply([spec("a"), spec("b")], now=T0)
    _quiet(store, "a", 1, 2, 0)  # a's open range row, the newest row of the ledger
    assert store.prune(older_than=T0 + timedelta(days=40)) == 1
    _quiet(store, "b", 1, 3, 0)  # SQLite may hand the pruned row's id to this one
    _quiet(store, "a", 4, 5, 2)
    assert _ranges(store, "b") == [(1, 3, 3)]
    assert _ranges(store, "a") == [(4, 5, 2)]


def test_a_range_row_does_not_span_a_retirement_or_an_edit(store: TriggerStore) -> None:
    store.apply([spec("a")], now=T0)
    store.set_paused("a", paused=True, note=None, now=T0)
    _quiet(store, "a", 1, 2, 0)
    store.apply([], now=T0 + timedelta(minutes=3))  # retired: its occurrences go unrecorded
    store.apply([spec("a")], now=T0 + timedelta(minutes=10))  # revived, owing nothing
    _quiet(store, "a", 11, 12, 10)
    store.apply([spec("a", every=timedelta(minutes=2))], now=T0 + timedelta(minutes=13))
    _quiet(store, "a", 14, 14, 12, revision=2)
    assert _ranges(store, "a") == [(1, 2, 2), (11, 12, 2), (14, 14, 1)]


def _blocked(database: Database, count: int = 1) -> None:
    """Wait until `count` transactions of the database wait for a lock."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with database.engine.connect() as conn:
            waiting = conn.execute(
                sa.text(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
            ).scalar_one()
        if waiting >= count:
            return
        time.sleep(0.01)
    raise AssertionError(f"fewer than {count} transactions wait for a lock")


def _in_thread(action: Any) -> tuple[threading.Thread, list[Any]]:
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(action())
        except Exception as exc:  # noqa: BLE001 (asserted by the caller)
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def _needs_concurrent_writers(database: Database) -> None:
    if database.is_sqlite:
        pytest.skip("SQLite writers take turns: the race needs concurrent transactions")


def test_prune_spares_a_range_row_extended_while_it_was_deleting(database: Database) -> None:
    store = SqlTriggerStore(database)
    _needs_concurrent_writers(database)
    store.apply([spec("a")], now=T0)
    _quiet(store, "a", 1, 2, 0)
    later = T0 + timedelta(days=40)
    extension = RangeRecord(
        trigger_id="a",
        expected_revision=1,
        after=T0 + timedelta(minutes=2),
        first_at=T0 + timedelta(minutes=3),
        last_at=T0 + timedelta(minutes=4),
        count=2,
        outcome=Outcome.SKIPPED,
        reason=Reason.PAUSED,
    )
    with database.engine.connect() as other, other.begin():
        # Another daemon extends the row (its settled_at is now fresh) and has not
        # committed yet when this one prunes.
        assert record_range(other, extension, later) is None
        thread, pruned = _in_thread(lambda: store.prune(older_than=later - timedelta(days=30)))
        _blocked(database)
    thread.join()
    assert pruned == [0]
    assert _ranges(store, "a") == [(1, 4, 4)]


def test_pending_pass_locks_trigger_rows_in_id_order(database: Database) -> None:
    store = SqlTriggerStore(database)
    _needs_concurrent_writers(database)
    store.apply([spec("a", overlap=Overlap.BUFFER_ALL), spec("z")], now=T0)
    launch(store, claim(store, "a", 1), "run-1")
    assert claim(store, "a", 2).action is Action.BUFFER  # a: a buffer to resolve
    claim(store, "z", 1)  # z: a reservation whose lease expires at minute 6
    with database.engine.connect() as other, other.begin():
        other.exec_driver_sql("SET LOCAL lock_timeout = '5s'")
        lock = "SELECT id FROM triggers WHERE id = '{}' FOR UPDATE"
        other.exec_driver_sql(lock.format("a"))  # as a claim of a and z does
        thread, taken = _in_thread(lambda: take(store, 10))
        _blocked(database)
        other.exec_driver_sql(lock.format("z"))
    thread.join()
    [claims] = taken
    assert [c.trigger_id for c in claims] == ["z"]


def test_recording_ranges_locks_trigger_rows_in_id_order(database: Database) -> None:
    store = SqlTriggerStore(database)
    _needs_concurrent_writers(database)
    store.apply([spec("a"), spec("z")], now=T0)

    def missed(trigger_id: str) -> RangeRecord:
        return RangeRecord(
            trigger_id=trigger_id,
            expected_revision=1,
            after=T0,
            first_at=T0 + timedelta(minutes=1),
            last_at=T0 + timedelta(minutes=2),
            count=2,
            outcome=Outcome.MISSED,
            reason=Reason.CATCHUP_WINDOW,
        )

    with database.engine.connect() as other, other.begin():
        other.exec_driver_sql("SET LOCAL lock_timeout = '5s'")
        lock = "SELECT id FROM triggers WHERE id = '{}' FOR UPDATE"
        other.exec_driver_sql(lock.format("a"))  # as a claim of a and z does
        # A tick's ranges come in the order its triggers fell due, not by id.
        thread, recorded = _in_thread(
            lambda: store.record_ranges([missed("z"), missed("a")], now=T0)
        )
        _blocked(database)
        other.exec_driver_sql(lock.format("z"))
    thread.join()
    assert recorded == [[None, None]]


def test_concurrent_applies_give_each_declaration_its_own_revision(database: Database) -> None:
    store = SqlTriggerStore(database)
    _needs_concurrent_writers(database)
    store.apply([spec("a")], now=T0)
    url = database.url.render_as_string(hide_password=False)
    others = [Database(url), Database(url)]
    try:
        with database.engine.connect() as other, other.begin():
            other.exec_driver_sql("SELECT id FROM triggers WHERE id = 'a' FOR UPDATE")
            runs = [
                _in_thread(
                    lambda db=db, v=v: SqlTriggerStore(db).apply(
                        [spec("a", input={"v": v}), spec("new")], now=T0 + timedelta(minutes=v)
                    )
                )
                for v, db in enumerate(others, start=1)
            ]
            _blocked(database, 2)
        for thread, _ in runs:
            thread.join()
    finally:
        for db in others:
            db.dispose()
    assert [type(outcome) for _, [outcome] in runs] == [ApplyResult, ApplyResult]
    a = store.get_trigger("a")
    assert a is not None and a.revision == 3
    assert store.get_trigger("new") is not None


def test_heartbeat_upserts_per_owner(store: TriggerStore) -> None:
    beat = Heartbeat(owner="h:1", host="h", pid=1, version="1", started_at=T0, last_tick_at=T0)
    store.heartbeat(beat)
    store.heartbeat(dataclasses.replace(beat, last_tick_at=T0 + timedelta(seconds=5)))
    [stored] = store.heartbeats()
    assert stored.last_tick_at == T0 + timedelta(seconds=5)


def test_corrupt_row_is_isolated_in_listing(database: Database) -> None:
    store = SqlTriggerStore(database)
    store.apply([spec("a"), spec("b")], now=T0)
    with database.write() as conn:
        conn.execute(
            sa.update(triggers_table)
            .where(triggers_table.c.id == "a")
            .values(declaration={"id": "a"}, digest="corrupt")
        )
    rows = store.list_triggers()
    assert isinstance(rows[0], CorruptRowError)
    assert rows[0].details["trigger_id"] == "a"
    assert isinstance(rows[1], Trigger) and rows[1].id == "b"
    [result] = store.claim(
        [
            ClaimRequest(
                trigger_id="a", occurrence_at=T0 + timedelta(minutes=1), expected_revision=1
            )
        ],
        owner="a",
        host="h",
        now=T0,
        lease=LEASE,
    )
    assert isinstance(result, CorruptRowError)


def test_unknown_trigger_pause_is_an_input_error(store: TriggerStore) -> None:
    with pytest.raises(UnknownTriggerError):
        store.set_paused("ghost", paused=True, note=None, now=T0)


# -- supersede ------------------------------------------------------------------------------


def batch(store: TriggerStore, trigger_id: str, minutes: list[int], **extra: Any) -> list[Claim]:
    """Claim several occurrences in one transaction, at the time of the last one."""
    results = store.claim(
        [
            ClaimRequest(
                trigger_id=trigger_id,
                occurrence_at=T0 + timedelta(minutes=m),
                expected_revision=1,
                **extra,
            )
            for m in minutes
        ],
        owner="a",
        host="h",
        now=T0 + timedelta(minutes=minutes[-1]),
        lease=LEASE,
    )
    assert all(isinstance(r, Claim) for r in results), results
    return [r for r in results if isinstance(r, Claim)]


def launch(store: TriggerStore, fire: Claim, run_id: str) -> None:
    assert isinstance(fire, Reserved), fire
    [record] = store.record_launched([Launch(claim=fire, run_id=run_id)], now=fire.occurrence_at)
    assert not isinstance(record, Exception), record


def ledger(store: TriggerStore, trigger_id: str = "a") -> list[tuple[int, Outcome, str | None]]:
    """(minute, outcome, reason) per row, oldest first."""
    rows = store.history(HistoryQuery(trigger_id=trigger_id, limit=1000))
    return [
        (
            int((r.occurrence_at - T0).total_seconds() // 60),
            r.outcome,
            r.reason.value if r.reason else None,
        )
        for r in reversed(rows)
    ]


def counters(store: TriggerStore, trigger_id: str = "a") -> tuple[int, int, int]:
    trigger = store.get_trigger(trigger_id)
    assert trigger is not None
    return trigger.active_count, trigger.buffered_count, trigger.runs_launched


def take(store: TriggerStore, minute: int) -> list[Reserved]:
    return store.take_pending(owner="a", host="h", now=T0 + timedelta(minutes=minute), lease=LEASE)


def test_supersede_claim_names_the_active_run(store: TriggerStore) -> None:
    store.apply([spec("a", overlap=Overlap.SUPERSEDE)], now=T0)
    launch(store, reserved(store, "a", 1), "run-1")
    second = reserved(store, "a", 2)
    assert (second.action, second.supersedes_run_id) == (Action.SUPERSEDE, "run-1")
    assert second.reservation
    assert counters(store) == (2, 0, 2)  # the prior run stays active until it is settled


def test_supersede_batch_launches_only_the_newest_when_nothing_runs(store: TriggerStore) -> None:
    store.apply([spec("a", overlap=Overlap.SUPERSEDE)], now=T0)
    claims = batch(store, "a", [1, 2, 3])
    assert [(c.action, c.reason) for c in claims] == [
        (Action.SUPERSEDED, Reason.OVERLAP),
        (Action.SUPERSEDED, Reason.OVERLAP),
        (Action.FIRE, None),
    ]
    assert [isinstance(c, Reserved) and bool(c.reservation) for c in claims] == [False, False, True]
    assert ledger(store) == [
        (1, Outcome.SUPERSEDED, "overlap"),
        (2, Outcome.SUPERSEDED, "overlap"),
        (3, Outcome.LAUNCHING, None),
    ]
    assert counters(store) == (1, 0, 1)


def test_supersede_batch_newest_supersedes_the_active_run(store: TriggerStore) -> None:
    store.apply([spec("a", overlap=Overlap.SUPERSEDE)], now=T0)
    launch(store, reserved(store, "a", 1), "run-1")
    claims = batch(store, "a", [2, 3, 4])
    assert [c.action for c in claims] == [Action.SUPERSEDED, Action.SUPERSEDED, Action.SUPERSEDE]
    assert isinstance(claims[-1], Reserved) and claims[-1].supersedes_run_id == "run-1"


def test_supersede_behind_a_reservation_buffers_then_the_newest_supersedes(
    store: TriggerStore,
) -> None:
    store.apply([spec("a", overlap=Overlap.SUPERSEDE)], now=T0)
    first = reserved(store, "a", 1)  # a reservation: no run the runtime could cancel yet
    assert claim(store, "a", 2).action is Action.BUFFER
    assert claim(store, "a", 3).action is Action.BUFFER
    assert take(store, 3) == []  # still no run id to supersede: the newest waits
    assert ledger(store)[1:] == [
        (2, Outcome.SUPERSEDED, "overlap"),
        (3, Outcome.BUFFERED, "overlap"),
    ]
    assert counters(store) == (1, 1, 1)
    launch(store, first, "run-1")
    [replacement] = take(store, 4)
    assert replacement.occurrence_at == T0 + timedelta(minutes=3)
    assert (replacement.action, replacement.supersedes_run_id) == (Action.SUPERSEDE, "run-1")
    assert ledger(store) == [
        (1, Outcome.LAUNCHED, None),
        (2, Outcome.SUPERSEDED, "overlap"),
        (3, Outcome.LAUNCHING, None),
    ]
    assert counters(store) == (2, 0, 2)


def test_released_supersede_keeps_the_prior_run_and_the_replacement_pending(
    store: TriggerStore,
) -> None:
    store.apply([spec("a", overlap=Overlap.SUPERSEDE)], now=T0)
    launch(store, reserved(store, "a", 1), "run-1")
    replacement = reserved(store, "a", 2)
    # The cancel of run-1 failed: the launcher gives the reservation back.
    store.release(replacement, retry_at=T0 + timedelta(minutes=2, seconds=5), error="cancel failed")
    assert [r.run_id for r in store.active_runs()] == ["run-1"]
    assert ledger(store) == [(1, Outcome.LAUNCHED, None), (2, Outcome.LAUNCHING, None)]
    assert take(store, 2) == []  # not before its retry time
    [retry] = store.take_pending(
        owner="b", host="h", now=T0 + timedelta(minutes=2, seconds=5), lease=LEASE
    )
    assert (retry.action, retry.supersedes_run_id) == (Action.SUPERSEDE, "run-1")
    assert retry.idempotency_key == replacement.idempotency_key
    store.record_settled([Settlement(trigger_id="a", run_id="run-1", state="superseded")], now=T0)
    launch(store, retry, "run-2")
    assert ledger(store) == [(1, Outcome.SUPERSEDED, None), (2, Outcome.LAUNCHED, None)]
    assert counters(store) == (1, 0, 2)


def test_superseded_run_already_seen_cancelled_is_recorded_superseded(
    store: TriggerStore,
) -> None:
    store.apply([spec("a", overlap=Overlap.SUPERSEDE)], now=T0)
    launch(store, claim(store, "a", 1), "run-1")
    store.record_settled([Settlement(trigger_id="a", run_id="run-1", state="cancelled")], now=T0)
    store.record_settled([Settlement(trigger_id="a", run_id="run-1", state="superseded")], now=T0)
    assert ledger(store) == [(1, Outcome.SUPERSEDED, None)]
    assert counters(store)[0] == 0


# -- buffers under a changed policy ---------------------------------------------------------


def _three_buffered(store: TriggerStore, **declared: object) -> None:
    """Run-1 active at minute 1; minutes 2, 3, 4 buffered under buffer_all."""
    store.apply([spec("a", overlap=Overlap.BUFFER_ALL, **declared)], now=T0)  # type: ignore[arg-type]
    launch(store, claim(store, "a", 1), "run-1")
    assert [c.action for c in batch(store, "a", [2, 3, 4])] == [Action.BUFFER] * 3


@pytest.mark.parametrize(
    ("policy", "extra", "expected", "launched"),
    [
        (
            Overlap.SKIP,
            {},
            [
                (2, Outcome.SKIPPED, "overlap"),
                (3, Outcome.SKIPPED, "overlap"),
                (4, Outcome.SKIPPED, "overlap"),
            ],
            [],
        ),
        (
            Overlap.BUFFER,
            {},
            [
                (2, Outcome.BUFFERED, "overlap"),
                (3, Outcome.SKIPPED, "overlap"),
                (4, Outcome.SKIPPED, "overlap"),
            ],
            [],
        ),
        (
            Overlap.BUFFER_ALL,
            {"max_buffer": 2},
            [
                (2, Outcome.BUFFERED, "overlap"),
                (3, Outcome.BUFFERED, "overlap"),
                (4, Outcome.SKIPPED, "buffer_full"),
            ],
            [],
        ),
        (
            Overlap.SUPERSEDE,
            {},
            [
                (2, Outcome.SUPERSEDED, "overlap"),
                (3, Outcome.SUPERSEDED, "overlap"),
                (4, Outcome.LAUNCHING, None),
            ],
            [(4, Action.SUPERSEDE)],
        ),
        (
            Overlap.ALLOW,
            {"max_active": 3},
            [
                (2, Outcome.LAUNCHING, None),
                (3, Outcome.LAUNCHING, None),
                (4, Outcome.SKIPPED, "overlap"),
            ],
            [(2, Action.FIRE), (3, Action.FIRE)],
        ),
    ],
    ids=["skip", "buffer", "buffer_all", "supersede", "allow"],
)
def test_policy_change_applies_to_buffered_occurrences_while_a_run_is_active(
    store: TriggerStore,
    policy: Overlap,
    extra: dict[str, int],
    expected: list[tuple[int, Outcome, str | None]],
    launched: list[tuple[int, Action]],
) -> None:
    _three_buffered(store)
    store.apply([spec("a", overlap=policy, **extra)], now=T0 + timedelta(minutes=4))  # type: ignore[arg-type]
    claims = take(store, 5)
    assert [
        (int((c.occurrence_at - T0).total_seconds() // 60), c.action) for c in claims
    ] == launched
    assert ledger(store) == [(1, Outcome.LAUNCHED, None), *expected]
    buffered = sum(1 for _, outcome, _ in expected if outcome is Outcome.BUFFERED)
    assert counters(store) == (1 + len(launched), buffered, 1 + len(launched))


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (Overlap.SKIP, [Outcome.LAUNCHING, Outcome.SKIPPED, Outcome.SKIPPED]),
        (Overlap.BUFFER, [Outcome.LAUNCHING, Outcome.BUFFERED, Outcome.SKIPPED]),
        (Overlap.BUFFER_ALL, [Outcome.LAUNCHING, Outcome.BUFFERED, Outcome.BUFFERED]),
        (Overlap.SUPERSEDE, [Outcome.SUPERSEDED, Outcome.SUPERSEDED, Outcome.LAUNCHING]),
    ],
    ids=["skip", "buffer", "buffer_all", "supersede"],
)
def test_policy_change_applies_to_buffered_occurrences_once_the_run_settled(
    store: TriggerStore, policy: Overlap, expected: list[Outcome]
) -> None:
    _three_buffered(store)
    store.apply([spec("a", overlap=policy)], now=T0 + timedelta(minutes=4))
    store.record_settled([Settlement(trigger_id="a", run_id="run-1", state="completed")], now=T0)
    take(store, 5)
    assert [outcome for _, outcome, _ in ledger(store)[1:]] == expected


def test_buffered_count_is_recomputed_from_the_ledger(database: Database) -> None:
    store = SqlTriggerStore(database)
    _three_buffered(store)
    with database.write() as conn:
        conn.execute(sa.update(triggers_table).values(buffered_count=0, active_count=7))
    assert take(store, 5) == []
    assert counters(store)[:2] == (1, 3)


def test_paused_trigger_holds_its_own_buffer_but_not_an_operators(store: TriggerStore) -> None:
    store.apply([spec("a", overlap=Overlap.BUFFER_ALL)], now=T0)
    first = claim(store, "a", 1)
    launch(store, first, "run-1")
    assert claim(store, "a", 2).action is Action.BUFFER
    manual = claim(store, "a", 3, kind="manual", manual_key="k")
    assert manual.action is Action.BUFFER
    store.set_paused("a", paused=True, note=None, now=T0)
    store.record_settled([Settlement(trigger_id="a", run_id="run-1", state="completed")], now=T0)
    [taken] = take(store, 4)
    assert taken.manual_key == "k"
    assert ledger(store)[1] == (2, Outcome.BUFFERED, "overlap")


def test_retired_trigger_drops_its_buffer_as_disabled(store: TriggerStore) -> None:
    _three_buffered(store)
    store.apply([spec("other")], now=T0 + timedelta(minutes=4))
    assert take(store, 5) == []
    assert {(o, r) for _, o, r in ledger(store)[1:]} == {(Outcome.SKIPPED, "disabled")}
    assert counters(store)[1] == 0


def test_buffered_occurrences_beyond_max_runs_are_skipped(store: TriggerStore) -> None:
    _three_buffered(store, max_runs=2)
    store.record_settled([Settlement(trigger_id="a", run_id="run-1", state="completed")], now=T0)
    [second] = take(store, 5)
    assert second.occurrence_at == T0 + timedelta(minutes=2)
    assert ledger(store)[2:] == [(3, Outcome.SKIPPED, "max_runs"), (4, Outcome.SKIPPED, "max_runs")]


def test_operator_fires_do_not_count_against_max_runs(store: TriggerStore) -> None:
    store.apply([spec("a", overlap=Overlap.ALLOW, max_active=5, max_runs=1)], now=T0)
    assert claim(store, "a", 1, kind="manual", manual_key="k").action is Action.FIRE
    assert claim(store, "a", 2).action is Action.FIRE
    assert claim(store, "a", 3).action is Action.IGNORED
    assert counters(store)[2] == 1


def test_buffer_keeps_one_behind_a_settled_run_until_the_pending_pass(
    store: TriggerStore,
) -> None:
    store.apply([spec("a", overlap=Overlap.BUFFER)], now=T0)
    launch(store, claim(store, "a", 1), "run-1")
    assert claim(store, "a", 2).action is Action.BUFFER
    store.record_settled([Settlement(trigger_id="a", run_id="run-1", state="completed")], now=T0)
    # The slot is free, but minute 2 takes it first: minute 3 waits behind it.
    assert claim(store, "a", 3).action is Action.BUFFER
    assert claim(store, "a", 4).action is Action.SKIP
    [promoted] = take(store, 4)
    assert promoted.occurrence_at == T0 + timedelta(minutes=2)
    assert [o for _, o, _ in ledger(store)[1:]] == [
        Outcome.LAUNCHING,
        Outcome.BUFFERED,
        Outcome.SKIPPED,
    ]


# -- backfill ------------------------------------------------------------------------------


def _missed(store: TriggerStore, first: int, last: int, after: int) -> None:
    [error] = store.record_ranges(
        [
            RangeRecord(
                trigger_id="a",
                expected_revision=1,
                after=T0 + timedelta(minutes=after),
                first_at=T0 + timedelta(minutes=first),
                last_at=T0 + timedelta(minutes=last),
                count=last - first + 1,
                outcome=Outcome.MISSED,
                reason=Reason.CATCHUP_WINDOW,
            )
        ],
        now=T0 + timedelta(minutes=last + 1),
    )
    assert error is None


def _piece(first: int, last: int) -> RangePiece:
    return RangePiece(
        first_at=T0 + timedelta(minutes=first),
        last_at=T0 + timedelta(minutes=last),
        count=last - first + 1,
    )


def test_backfill_carves_an_occurrence_out_of_a_range_row(store: TriggerStore) -> None:
    store.apply([spec("a")], now=T0)
    _missed(store, 1, 6, 0)
    split = RangeSplit(
        trigger_id="a",
        first_at=T0 + timedelta(minutes=1),
        last_at=T0 + timedelta(minutes=6),
        count=6,
        outcome=Outcome.MISSED,
        pieces=(_piece(1, 2), _piece(4, 6)),
    )
    [carved] = store.claim(
        [
            ClaimRequest(
                trigger_id="a",
                occurrence_at=T0 + timedelta(minutes=3),
                expected_revision=1,
                kind="backfill",
                overlap=Overlap.BUFFER_ALL,
            )
        ],
        splits=[split],
        owner="cli",
        host="h",
        now=T0 + timedelta(minutes=9),
        lease=timedelta(0),
    )
    assert isinstance(carved, Claim) and carved.action is Action.FIRE
    assert carved.idempotency_key == "a:2026-01-01T00:03:00Z"
    rows = list(reversed(store.history(HistoryQuery(trigger_id="a"))))
    assert [(r.occurrence_at.minute, r.outcome, r.count, r.reason) for r in rows] == [
        (1, Outcome.MISSED, 2, Reason.CATCHUP_WINDOW),
        (3, Outcome.LAUNCHING, 1, None),
        (4, Outcome.MISSED, 3, Reason.CATCHUP_WINDOW),
    ]
    assert sum(r.count for r in rows) == 6
    trigger = store.get_trigger("a")
    assert trigger is not None and trigger.watermark_at == T0 + timedelta(minutes=6)
    [taken] = take(store, 9)  # the daemon's next pending pass launches it
    assert taken.idempotency_key == carved.idempotency_key


def test_backfill_split_is_fenced_on_the_row_it_was_planned_from(store: TriggerStore) -> None:
    store.apply([spec("a")], now=T0)
    _missed(store, 1, 6, 0)
    stale = RangeSplit(
        trigger_id="a",
        first_at=T0 + timedelta(minutes=1),
        last_at=T0 + timedelta(minutes=5),
        count=5,
        outcome=Outcome.MISSED,
        pieces=(_piece(1, 2), _piece(4, 5)),
    )
    request = ClaimRequest(
        trigger_id="a",
        occurrence_at=T0 + timedelta(minutes=3),
        expected_revision=1,
        kind="backfill",
    )
    with pytest.raises(LedgerChangedError):
        store.claim([request], splits=[stale], owner="cli", host="h", now=T0, lease=LEASE)
    assert ledger(store) == [(1, Outcome.MISSED, "catchup_window")]
    # Without a split, an occurrence inside a range row is already decided.
    [inside] = store.claim([request], owner="cli", host="h", now=T0, lease=LEASE)
    assert isinstance(inside, Claim) and inside.action is Action.DUPLICATE


@pytest.mark.parametrize("change", ["edited", "retired"])
def test_backfill_split_is_undone_when_a_carved_occurrence_is_not_claimed(
    store: TriggerStore, change: str
) -> None:
    store.apply([spec("a")], now=T0)
    _missed(store, 1, 6, 0)
    # Between the backfill's reading and its claim, the trigger changed under it.
    later = T0 + timedelta(minutes=8)
    store.apply([spec("a", input={"v": 2})] if change == "edited" else [], now=later)
    split = RangeSplit(
        trigger_id="a",
        first_at=T0 + timedelta(minutes=1),
        last_at=T0 + timedelta(minutes=6),
        count=6,
        outcome=Outcome.MISSED,
        pieces=(_piece(1, 2), _piece(4, 6)),
    )
    request = ClaimRequest(
        trigger_id="a",
        occurrence_at=T0 + timedelta(minutes=3),
        expected_revision=1,
        kind="backfill",
    )
    with pytest.raises(LedgerChangedError):
        store.claim([request], splits=[split], owner="cli", host="h", now=later, lease=LEASE)
    rows = store.history(HistoryQuery(trigger_id="a"))
    assert [(r.occurrence_at.minute, r.outcome, r.count) for r in rows] == [(1, Outcome.MISSED, 6)]


def test_backfill_leaves_occurrences_after_the_watermark_to_the_scheduler(
    store: TriggerStore,
) -> None:
    store.apply([spec("a")], now=T0)
    before = claim(store, "a", -5, kind="backfill")
    after = claim(store, "a", 1, kind="backfill")
    assert before.action is Action.FIRE  # before the trigger existed: owed nothing, may be run
    assert after.action is Action.IGNORED
    assert len(ledger(store)) == 1


def test_backfill_beyond_max_buffer_is_never_dropped(store: TriggerStore) -> None:
    store.apply([spec("a", overlap=Overlap.SKIP, max_buffer=1)], now=T0 + timedelta(minutes=10))
    claims = batch(store, "a", [1, 2, 3, 4], kind="backfill", overlap=Overlap.BUFFER_ALL)
    assert [c.action for c in claims] == [Action.FIRE] + [Action.BUFFER] * 3


def test_last_records_are_by_newest_occurrence(store: TriggerStore) -> None:
    store.apply([spec("a")], now=T0 + timedelta(minutes=10))
    claim(store, "a", 11)
    claim(store, "a", 5, kind="backfill")  # inserted later, for an older occurrence
    assert store.last_records()["a"].occurrence_at == T0 + timedelta(minutes=11)


def test_listing_since_returns_only_rows_written_since(store: TriggerStore) -> None:
    store.apply([spec("a"), spec("b")], now=T0, source_digest="d1")
    store.set_paused("b", paused=True, note=None, now=T0 + timedelta(minutes=5))
    changed = store.list_triggers(changed_since=T0 + timedelta(minutes=1))
    assert [t.id for t in changed if isinstance(t, Trigger)] == ["b"]
    assert len(store.list_triggers()) == 2
    assert store.applied_digest() == "d1"
