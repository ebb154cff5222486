"""The claim's pool rule, on the memory store, SQLite and PostgreSQL: at most `slots`
runs of all a pool's members are active at once, counted from the ledger."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa

from looms_runtime.db import Database
from tests.factories import spec
from triggers.clock import utc
from triggers.model import Action, Outcome, Overlap, PoolSpec, Reason
from triggers.store._claim_batch import ClaimBatch
from triggers.store._sql_claim_rows import SqlClaimRows
from triggers.store.protocol import (
    Claim,
    ClaimRequest,
    HistoryQuery,
    Launch,
    PoolUse,
    Reserved,
    Settlement,
    TriggerStore,
)
from triggers.store.sql import SqlTriggerStore

T0 = utc(2026, 11, 1)
LEASE = timedelta(hours=1)
POOL = PoolSpec(name="db-heavy", slots=2)


@pytest.fixture
def database(reused_database: Database) -> Database:
    return reused_database


@pytest.fixture
def store(any_store: TriggerStore) -> TriggerStore:
    return any_store


def at(minute: int) -> datetime:
    return T0 + timedelta(minutes=minute)


def claim(store: TriggerStore, *requests: tuple[str, int], owner: str = "o") -> list[Claim]:
    """Claim each (trigger, minute) in one batch, at the latest minute."""
    results = store.claim(
        [
            ClaimRequest(trigger_id=trigger_id, occurrence_at=at(minute), expected_revision=1)
            for trigger_id, minute in requests
        ],
        owner=owner,
        host="h",
        now=at(max(minute for _, minute in requests)),
        lease=LEASE,
    )
    assert all(isinstance(result, Claim) for result in results), results
    return [result for result in results if isinstance(result, Claim)]


def launch(store: TriggerStore, fired: Claim, run_id: str, minute: int) -> None:
    assert isinstance(fired, Reserved), fired
    [record] = store.record_launched([Launch(claim=fired, run_id=run_id)], now=at(minute))
    assert not isinstance(record, Exception), record


def settle(store: TriggerStore, trigger_id: str, run_id: str, minute: int) -> None:
    store.record_settled(
        [Settlement(trigger_id=trigger_id, run_id=run_id, state="completed")], now=at(minute)
    )


def row(store: TriggerStore, trigger_id: str, minute: int) -> tuple[object, ...]:
    rows = {r.occurrence_at: r for r in store.history(HistoryQuery(trigger_id=trigger_id))}
    found = rows[at(minute)]
    return (found.outcome, found.reason, found.reason_detail)


def test_full_pool_skips_a_skip_members_occurrence_naming_the_pool(store: TriggerStore) -> None:
    store.apply([spec(name, pool=POOL) for name in ("a", "b", "c")], now=T0)

    decided = claim(store, ("a", 1), ("b", 1), ("c", 1))

    assert [(c.action, c.reason) for c in decided] == [
        (Action.FIRE, None),
        (Action.FIRE, None),
        (Action.SKIP, Reason.POOL_FULL),
    ]
    assert row(store, "c", 1) == (Outcome.SKIPPED, Reason.POOL_FULL, "db-heavy")
    assert store.pool_use(["db-heavy"]) == {"db-heavy": PoolUse(active=2, waiting=0)}


def test_pool_counts_runs_claimed_by_every_owner_and_batch(store: TriggerStore) -> None:
    store.apply([spec(name, pool=POOL) for name in ("a", "b", "c")], now=T0)

    [a] = claim(store, ("a", 1), owner="one")
    [b] = claim(store, ("b", 1), owner="two")
    launch(store, a, "run-a", 1)
    [c] = claim(store, ("c", 2), owner="three")

    assert (a.action, b.action) == (Action.FIRE, Action.FIRE)
    assert (c.action, c.reason) == (Action.SKIP, Reason.POOL_FULL)


def test_slot_frees_when_its_run_settles(store: TriggerStore) -> None:
    store.apply([spec(name, pool=POOL) for name in ("a", "b", "c")], now=T0)
    a, _ = claim(store, ("a", 1), ("b", 1))
    launch(store, a, "run-a", 1)

    settle(store, "a", "run-a", 2)
    [c] = claim(store, ("c", 3))

    assert c.action is Action.FIRE
    assert store.pool_use(["db-heavy"])["db-heavy"].active == 2


def test_buffering_member_waits_for_a_slot_then_launches_in_turn(store: TriggerStore) -> None:
    store.apply(
        [
            spec("a", pool=POOL),
            spec("b", pool=POOL),
            spec("c", pool=POOL, overlap=Overlap.BUFFER),
            spec("d", pool=POOL, overlap=Overlap.BUFFER_ALL),
        ],
        now=T0,
    )
    a, _b = claim(store, ("a", 1), ("b", 1))
    launch(store, a, "run-a", 1)
    waiting = claim(store, ("c", 2), ("d", 3), ("c", 4))

    assert [(c.action, c.reason) for c in waiting] == [
        (Action.BUFFER, Reason.POOL_FULL),
        (Action.BUFFER, Reason.POOL_FULL),
        # `buffer` keeps one: the second waits behind the first, and is dropped.
        (Action.SKIP, Reason.POOL_FULL),
    ]
    assert row(store, "c", 2) == (Outcome.BUFFERED, Reason.POOL_FULL, "db-heavy")
    assert store.pool_use(["db-heavy"]) == {"db-heavy": PoolUse(active=2, waiting=2)}
    # Nothing frees yet: the pending pass launches nothing.
    assert store.take_pending(owner="o", host="h", now=at(5), lease=LEASE) == []
    # A skip member's new occurrence does not jump the queue, even with a slot free.
    settle(store, "a", "run-a", 6)
    [late] = claim(store, ("a", 6))
    assert (late.action, late.reason) == (Action.SKIP, Reason.POOL_FULL)

    [first] = store.take_pending(owner="o", host="h", now=at(7), lease=LEASE)

    assert (first.trigger_id, first.occurrence_at) == ("c", at(2))  # the oldest waiting
    assert row(store, "c", 2)[0] is Outcome.LAUNCHING
    assert row(store, "d", 3) == (Outcome.BUFFERED, Reason.POOL_FULL, "db-heavy")
    launch(store, first, "run-c", 7)
    settle(store, "c", "run-c", 8)
    [second] = store.take_pending(owner="o", host="h", now=at(9), lease=LEASE)
    assert (second.trigger_id, second.occurrence_at) == ("d", at(3))
    assert store.pool_use(["db-heavy"]) == {"db-heavy": PoolUse(active=2, waiting=0)}


def test_taken_over_launch_keeps_its_slot(store: TriggerStore) -> None:
    store.apply([spec(name, pool=POOL) for name in ("a", "b", "c")], now=T0)
    claim(store, ("a", 1), ("b", 1), owner="crashed")

    retaken = store.take_pending(
        owner="other", host="h", now=at(2), lease=LEASE, dead_owners=["crashed"]
    )
    [c] = claim(store, ("c", 3), owner="other")

    assert len(retaken) == 2
    assert (c.action, c.reason) == (Action.SKIP, Reason.POOL_FULL)
    assert store.pool_use(["db-heavy"])["db-heavy"].active == 2


def test_paused_members_waiting_occurrence_holds_no_place(store: TriggerStore) -> None:
    store.apply(
        [spec("a", pool=POOL), spec("b", pool=POOL), spec("c", pool=POOL, overlap=Overlap.BUFFER)],
        now=T0,
    )
    a, _ = claim(store, ("a", 1), ("b", 1))
    launch(store, a, "run-a", 1)
    claim(store, ("c", 2))
    store.set_paused("c", paused=True, note=None, now=at(3))
    settle(store, "a", "run-a", 4)

    [again] = claim(store, ("a", 5))

    assert again.action is Action.FIRE
    assert store.pool_use(["db-heavy"]) == {"db-heavy": PoolUse(active=2, waiting=0)}


def test_pool_resize_is_a_new_revision_and_a_trigger_outside_it_is_unbounded(
    store: TriggerStore,
) -> None:
    store.apply([spec("a", pool=POOL), spec("free")], now=T0)
    changed = store.apply(
        [spec("a", pool=PoolSpec(name="db-heavy", slots=3)), spec("free")], now=at(1)
    )

    assert changed.updated == ["a"] and changed.unchanged == ["free"]
    trigger = store.get_trigger("a")
    assert trigger is not None and trigger.revision == 2
    assert trigger.spec.pool == PoolSpec(name="db-heavy", slots=3)
    assert store.pool_use(["db-heavy", "none"]) == {
        "db-heavy": PoolUse(active=0, waiting=0),
        "none": PoolUse(active=0, waiting=0),
    }


def test_occurrence_buffered_behind_its_own_run_then_held_by_the_pool_keeps_its_turn(
    store: TriggerStore,
) -> None:
    store.apply(
        [
            spec("a", pool=POOL),
            spec("b", pool=POOL),
            spec("c", pool=POOL, overlap=Overlap.BUFFER),
            spec("d", pool=POOL),
        ],
        now=T0,
    )
    c, a = claim(store, ("c", 1), ("a", 1))
    launch(store, c, "run-c", 1)
    launch(store, a, "run-a", 1)
    [behind] = claim(store, ("c", 2))
    assert (behind.action, behind.reason) == (Action.BUFFER, Reason.OVERLAP)
    settle(store, "c", "run-c", 3)
    [b] = claim(store, ("b", 3))  # before any pending pass: the slot is free
    assert b.action is Action.FIRE

    # The pool, not its own run, holds c's occurrence now: it waits, counted.
    assert store.take_pending(owner="o", host="h", now=at(4), lease=LEASE) == []
    assert row(store, "c", 2) == (Outcome.BUFFERED, Reason.POOL_FULL, "db-heavy")
    assert store.pool_use(["db-heavy"]) == {"db-heavy": PoolUse(active=2, waiting=1)}
    settle(store, "a", "run-a", 5)
    [d] = claim(store, ("d", 5))
    assert (d.action, d.reason) == (Action.SKIP, Reason.POOL_FULL)
    [again] = store.take_pending(owner="o", host="h", now=at(6), lease=LEASE)
    assert (again.trigger_id, again.occurrence_at) == ("c", at(2))


def _waiting_for_a_lock(database: Database) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with database.engine.connect() as conn:
            waiting = conn.execute(
                sa.text(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
            ).scalar_one()
        if waiting:
            return
        time.sleep(0.01)
    raise AssertionError("no transaction waits for a lock")


def test_two_claims_of_one_pool_take_turns_so_neither_takes_a_slot_the_other_holds(
    database: Database,
) -> None:
    if database.is_sqlite:
        pytest.skip("SQLite writers take turns: the race needs concurrent transactions")
    store = SqlTriggerStore(database)
    store.apply([spec(name, pool=POOL) for name in ("a", "b", "c")], now=T0)
    claim(store, ("a", 1))
    request = ClaimRequest(trigger_id="b", occurrence_at=at(1), expected_revision=1)
    outcome: list[list[Claim]] = []
    with database.engine.connect() as other, other.begin():
        # Another daemon's claim of b has taken the last slot and not committed yet.
        [b] = ClaimBatch(
            SqlClaimRows(other), [request], owner="other", host="h", now=at(1), lease=LEASE
        ).run()
        assert isinstance(b, Claim) and b.action is Action.FIRE
        thread = threading.Thread(
            target=lambda: outcome.append(list(claim(store, ("c", 1), owner="this")))
        )
        thread.start()
        _waiting_for_a_lock(database)  # the pool's lock: c's claim waits for b's
    thread.join(timeout=30)
    [[c]] = outcome
    assert (c.action, c.reason) == (Action.SKIP, Reason.POOL_FULL)
    assert store.pool_use(["db-heavy"])["db-heavy"].active == 2


def test_occurrence_behind_its_own_run_holds_no_place_in_the_pool(store: TriggerStore) -> None:
    store.apply(
        [
            spec("a", pool=POOL),
            spec("b", pool=POOL),
            spec("d", pool=POOL, overlap=Overlap.BUFFER_ALL),
        ],
        now=T0,
    )
    a, b = claim(store, ("a", 1), ("b", 1))
    launch(store, a, "run-a", 1)
    launch(store, b, "run-b", 1)
    claim(store, ("d", 2), ("d", 3))
    assert store.pool_use(["db-heavy"])["db-heavy"].waiting == 2
    settle(store, "a", "run-a", 4)

    [first] = store.take_pending(owner="o", host="h", now=at(5), lease=LEASE)

    assert (first.trigger_id, first.occurrence_at) == ("d", at(2))
    # d's next one now waits for d's own run, not for the pool.
    assert row(store, "d", 3) == (Outcome.BUFFERED, Reason.OVERLAP, None)
    assert store.pool_use(["db-heavy"]) == {"db-heavy": PoolUse(active=2, waiting=0)}
    settle(store, "b", "run-b", 6)
    [again] = claim(store, ("a", 7))
    assert again.action is Action.FIRE
