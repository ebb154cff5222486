"""The ledger's last success and last failure per trigger (what the metrics start from)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from looms_runtime.db import Database
from tests.factories import spec
from triggers.clock import utc
from triggers.store.protocol import ClaimRequest, Launch, Reserved, Settlement, TriggerStore

T0 = utc(2026, 1, 1)


@pytest.fixture
def database(reused_database: Database) -> Database:
    return reused_database


@pytest.fixture
def store(any_store: TriggerStore) -> TriggerStore:
    """Each implementation; a test that takes a database is the SQL store's alone."""
    return any_store


def _settle(store: TriggerStore, trigger_id: str, minute: int, state: str) -> None:
    at = T0 + timedelta(minutes=minute)
    [claim] = store.claim(
        [ClaimRequest(trigger_id=trigger_id, occurrence_at=at, expected_revision=1)],
        owner="a",
        host="h",
        now=at,
        lease=timedelta(minutes=5),
    )
    assert isinstance(claim, Reserved), claim
    run_id = f"{trigger_id}-{minute}"
    store.record_launched([Launch(claim=claim, run_id=run_id)], now=at)
    store.record_settled(
        [Settlement(trigger_id=trigger_id, run_id=run_id, state=state)],  # type: ignore[arg-type]
        now=at + timedelta(seconds=30),
    )


def test_last_settled_gives_each_triggers_latest_success_and_failure(
    store: TriggerStore,
) -> None:
    store.apply([spec("a"), spec("b"), spec("c")], now=T0)
    _settle(store, "a", 1, "completed")
    _settle(store, "a", 2, "failed")
    _settle(store, "a", 3, "completed")
    _settle(store, "b", 1, "failed")
    _settle(store, "c", 1, "cancelled")

    found = store.last_settled()

    assert found["completed"] == {"a": T0 + timedelta(minutes=3, seconds=30)}
    assert found["failed"] == {
        "a": T0 + timedelta(minutes=2, seconds=30),
        "b": T0 + timedelta(minutes=1, seconds=30),
    }
