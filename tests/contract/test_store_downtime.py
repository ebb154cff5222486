"""Downtime: the heartbeat that ends a silence of every daemon records it (every store:
memory, SQLite and PostgreSQL)."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

import pytest

from looms_runtime.db import Database
from triggers.clock import utc
from triggers.store.protocol import Heartbeat, RecordedDowntime, TriggerStore, silence_limit
from triggers.store.sql import SqlTriggerStore

T0 = utc(2026, 1, 1)
LIMIT = silence_limit(timedelta(seconds=5))  # 20 s


@pytest.fixture
def store(any_store: TriggerStore) -> TriggerStore:
    return any_store


def beat(owner: str, at: datetime, *, started_at: datetime | None = None) -> Heartbeat:
    return Heartbeat(
        owner=owner,
        host="h",
        pid=1,
        version="1",
        started_at=started_at or at,
        last_tick_at=at,
    )


def everything(store: TriggerStore) -> list[RecordedDowntime]:
    return store.downtime(since=T0 - timedelta(days=365), until=T0 + timedelta(days=365))


def test_a_daemon_starting_after_the_last_one_fell_silent_records_the_gap_once(
    store: TriggerStore,
) -> None:
    store.heartbeat(beat("a", T0), down_after=LIMIT)
    store.heartbeat(beat("a", T0 + timedelta(seconds=5)), down_after=LIMIT)
    back = T0 + timedelta(hours=2)
    store.heartbeat(beat("b", back), down_after=LIMIT)
    store.heartbeat(beat("b", back + timedelta(seconds=1)), down_after=LIMIT)
    assert everything(store) == [
        RecordedDowntime(started_at=T0 + timedelta(seconds=5), ended_at=back, ended_by="b")
    ]


def test_the_first_daemon_ever_records_nothing(store: TriggerStore) -> None:
    store.heartbeat(beat("a", T0), down_after=LIMIT)
    assert everything(store) == []


def test_no_downtime_while_another_daemon_is_alive(store: TriggerStore) -> None:
    store.heartbeat(beat("a", T0), down_after=LIMIT)
    store.heartbeat(beat("b", T0 + LIMIT), down_after=LIMIT)  # a's last beat: LIMIT ago
    store.heartbeat(beat("a", T0 + LIMIT * 2), down_after=LIMIT)  # b beat since
    assert everything(store) == []


def test_a_daemon_that_itself_fell_silent_records_its_silence(store: TriggerStore) -> None:
    store.heartbeat(beat("a", T0), down_after=LIMIT)
    woke = T0 + timedelta(minutes=40)  # the host slept
    store.heartbeat(beat("a", woke, started_at=T0), down_after=LIMIT)
    assert everything(store) == [RecordedDowntime(started_at=T0, ended_at=woke, ended_by="a")]
    [stored] = store.heartbeats()
    assert stored.last_tick_at == woke


def test_without_down_after_a_heartbeat_only_records_liveness(store: TriggerStore) -> None:
    store.heartbeat(beat("a", T0))
    store.heartbeat(beat("b", T0 + timedelta(days=2)))
    assert everything(store) == []
    assert {b.owner for b in store.heartbeats()} == {"a", "b"}


def test_a_clock_stepped_back_is_no_downtime(store: TriggerStore) -> None:
    store.heartbeat(beat("a", T0), down_after=LIMIT)
    back = T0 - timedelta(hours=1)
    store.heartbeat(beat("a", back), down_after=LIMIT)
    store.heartbeat(beat("a", back + timedelta(seconds=5)), down_after=LIMIT)
    store.heartbeat(beat("b", back + timedelta(seconds=10)), down_after=LIMIT)
    assert everything(store) == []


def test_downtime_is_read_by_overlap_with_the_window_and_pruned_by_its_end(
    store: TriggerStore,
) -> None:
    hour = timedelta(hours=1)
    for number, hours in enumerate((0, 1, 3, 4, 6)):  # each start ends a silence
        store.heartbeat(beat(f"d{number}", T0 + hours * hour), down_after=LIMIT)
    found = store.downtime(since=T0 + 1.5 * hour, until=T0 + 5 * hour)
    assert [(d.started_at, d.ended_at, d.ended_by) for d in found] == [
        (T0 + hour, T0 + 3 * hour, "d2"),
        (T0 + 3 * hour, T0 + 4 * hour, "d3"),
        (T0 + 4 * hour, T0 + 6 * hour, "d4"),
    ]
    assert store.prune_downtime(older_than=T0 + 3.5 * hour) == 2
    assert [d.ended_by for d in everything(store)] == ["d3", "d4"]


def test_daemons_starting_together_after_an_outage_record_it_once(
    reused_database: Database,
) -> None:
    store = SqlTriggerStore(reused_database)
    store.heartbeat(beat("old", T0), down_after=LIMIT)
    back = T0 + timedelta(hours=1)
    others = [Database(reused_database.url.render_as_string(hide_password=False)) for _ in range(3)]
    barrier = threading.Barrier(len(others))
    errors: list[BaseException] = []

    def start(db: Database, owner: str) -> None:
        try:
            barrier.wait(timeout=10)
            SqlTriggerStore(db).heartbeat(beat(owner, back), down_after=LIMIT)
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(db, f"new-{n}")) for n, db in enumerate(others)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
    finally:
        for db in others:
            db.dispose()
    assert errors == []
    assert [(d.started_at, d.ended_at) for d in everything(store)] == [(T0, back)]
