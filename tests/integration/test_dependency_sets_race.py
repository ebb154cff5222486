"""`after: {all: [...]}` across two daemons' stores on one database: when the two
halves of a set settle at the same moment in two transactions, neither misses the
other's run and only one fires the set (SQLite's one writer, PostgreSQL's per-dependent
advisory lock)."""

from __future__ import annotations

import threading
from datetime import timedelta

from looms_runtime.db import Database
from tests.factories import spec
from triggers.clock import utc
from triggers.model import AfterSchedule, Overlap, Upstream
from triggers.store.protocol import ClaimRequest, HistoryQuery, Launch, Reserved, Settlement
from triggers.store.sql import SqlTriggerStore

T0 = utc(2026, 11, 1)
LEASE = timedelta(hours=1)
ROUNDS = 8


def test_two_stores_settling_the_halves_of_a_set_at_once_fire_it_once(database_url: str) -> None:
    both = AfterSchedule(
        upstreams=(Upstream(trigger="a"), Upstream(trigger="b")),
        join="all",
        within=timedelta(hours=1),
    )
    first, second = Database(database_url), Database(database_url)
    try:
        stores = [SqlTriggerStore(first), SqlTriggerStore(second)]
        stores[0].apply(
            [
                spec("a", overlap=Overlap.ALLOW, max_active=ROUNDS),
                spec("b", overlap=Overlap.ALLOW, max_active=ROUNDS),
                spec("both", schedule=both),
            ],
            now=T0,
        )
        for n in range(ROUNDS):
            _race(stores, n)
        found = stores[0].history(HistoryQuery(trigger_id="both"))
    finally:
        first.dispose()
        second.dispose()
    used = sorted(run for record in found for run in record.upstream_run_ids)
    assert len(found) == ROUNDS
    assert used == sorted([f"a-{n}" for n in range(ROUNDS)] + [f"b-{n}" for n in range(ROUNDS)])


def _race(stores: list[SqlTriggerStore], n: int) -> None:
    at = T0 + timedelta(minutes=n + 1)
    for store, trigger_id in zip(stores, ("a", "b"), strict=True):
        [fired] = store.claim(
            [ClaimRequest(trigger_id=trigger_id, occurrence_at=at, expected_revision=1)],
            owner="o",
            host="h",
            now=at,
            lease=LEASE,
        )
        assert isinstance(fired, Reserved), fired
        store.record_launched([Launch(claim=fired, run_id=f"{trigger_id}-{n}")], now=at)
    barrier = threading.Barrier(2)
    errors: list[Exception] = []

    def settle(store: SqlTriggerStore, trigger_id: str) -> None:
        try:
            barrier.wait()
            store.record_settled(
                [Settlement(trigger_id=trigger_id, run_id=f"{trigger_id}-{n}", state="completed")],
                now=at + timedelta(seconds=30),
            )
        except Exception as exc:  # noqa: BLE001 (reported below, on the test's thread)
            errors.append(exc)

    threads = [
        threading.Thread(target=settle, args=(store, trigger_id))
        for store, trigger_id in zip(stores, ("a", "b"), strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
