"""The SQL store's alert outbox: pruning keeps what is still owed (SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from looms_runtime.db import Database
from tests.factories import spec
from triggers.alert_rules import AlertChannel, AlertEvent, AlertFacts, AlertRule
from triggers.clock import utc
from triggers.delivery import Attempt
from triggers.errors import RunnerRefusedError
from triggers.store import _alerts
from triggers.store.protocol import (
    Claimed,
    ClaimRequest,
    CompletedRun,
    StartResult,
    StoreTransaction,
)
from triggers.store.schema import alerts as alerts_table
from triggers.store.sql import SqlTriggerStore
from triggers.store.sql_alerts import SqlAlertOutbox

T0 = utc(2026, 1, 1)
HOOK = AlertChannel(name="hook", kind="webhook", config={"url": "http://127.0.0.1:9/x"})


def _raise(database: Database, trigger_id: str, at: datetime) -> None:
    facts = AlertFacts(event=AlertEvent.FAILED, trigger_id=trigger_id, occurrence_at=at, at=at)
    with database.write() as conn:
        _alerts.raise_alerts(conn, [(facts, AlertRule(to=(HOOK,)))], at)


def test_prune_deletes_old_delivered_and_failed_alerts_and_keeps_pending_and_recent(
    reused_database: Database,
) -> None:
    outbox = SqlAlertOutbox(reused_database)
    for trigger_id in ("delivered", "failed", "pending"):
        _raise(reused_database, trigger_id, T0)
    _raise(reused_database, "recent", T0 + timedelta(days=40))
    by_id = {r.trigger_id: r for r in outbox.claim(owner="o", now=T0, lease=timedelta(hours=1))}
    outbox.record(by_id["delivered"], owner="o", now=T0, delivered=True)
    outbox.record(by_id["failed"], owner="o", now=T0, delivered=False, error="gone")
    outbox.record(by_id["pending"], owner="o", now=T0, delivered=False, error="down", retry_at=T0)
    later = T0 + timedelta(days=41)
    with reused_database.write() as conn:
        conn.execute(
            alerts_table.update()
            .values(status="delivered")
            .where(alerts_table.c.trigger_id == "recent")
        )

    assert outbox.prune(older_than=later - timedelta(days=30)) == 2
    assert outbox.prune(older_than=later - timedelta(days=30)) == 0
    left = {r.trigger_id: r.status for r in outbox.list(trigger_id=None, status=None, limit=10)}
    assert left == {"pending": "pending", "recent": "delivered"}


def test_a_start_refused_for_good_alerts_failed_once_and_a_completion_in_its_start_recovers(
    reused_database: Database,
) -> None:
    store = SqlTriggerStore(reused_database)
    store.apply([spec("t", every=timedelta(minutes=1), alert=AlertRule(to=(HOOK,)))], now=T0)
    answers: list[StartResult] = [
        RunnerRefusedError("no flow 'gone' at version 'v'"),
        RunnerRefusedError("no flow 'gone' at version 'v'"),
        CompletedRun("run-3"),
    ]

    def launch(tx: StoreTransaction, claims: Sequence[Claimed]) -> tuple[list[StartResult], Any]:
        return [answers.pop(0) for _ in claims], lambda: None

    for minute in (1, 2, 3):
        at = T0 + timedelta(minutes=minute)
        store.claim(
            [ClaimRequest(trigger_id="t", occurrence_at=at, expected_revision=1)],
            owner="o",
            host="h",
            now=at,
            lease=timedelta(minutes=5),
            launch_within=launch,
        )

    found = SqlAlertOutbox(reused_database).list(trigger_id="t", status=None, limit=10)
    assert [(a.event, a.occurrence_at) for a in reversed(found)] == [
        ("failed", T0 + timedelta(minutes=1)),  # the second refusal: the same state
        ("recovered", T0 + timedelta(minutes=3)),
    ]
    assert "no flow 'gone'" in str(found[-1].payload["error"])
    assert "no run started" in str(found[-1].payload["text"])


def test_a_round_is_recorded_and_the_next_leased_in_one_exchange_fenced_on_the_lease(
    reused_database: Database,
) -> None:
    outbox = SqlAlertOutbox(reused_database)
    lease = timedelta(minutes=1)
    assert not outbox.due(owner="o", now=T0)
    for n in range(3):
        _raise(reused_database, f"t{n}", T0)
    assert outbox.due(owner="o", now=T0)
    first = outbox.claim(owner="o", now=T0, lease=lease, limit=2)
    assert [r.trigger_id for r in first] == ["t0", "t1"]
    assert first[0].payload["trigger_id"] == "t0"
    assert not outbox.claim(owner="other", now=T0, lease=lease)  # the channel is leased
    assert not outbox.due(owner="other", now=T0)
    assert outbox.due(owner="o", now=T0)  # t2, and its own leases
    done = [Attempt(record=r, at=T0, delivered=True, response="HTTP 200") for r in first]
    # Another sender's answers change nothing: the lease fences them.
    assert outbox.record_all(done, owner="other") == 0
    second = outbox.exchange(done, owner="o", now=T0, lease=lease, limit=2)
    assert [r.trigger_id for r in second] == ["t2"]
    retry = T0 + timedelta(seconds=5)
    refused = [Attempt(record=second[0], at=T0, delivered=False, error="HTTP 500", retry_at=retry)]
    assert outbox.exchange(refused, owner="o", now=T0, lease=lease) == []
    assert not outbox.due(owner="o", now=T0)
    assert outbox.due(owner="o", now=retry)
    listed = {r.trigger_id: r for r in outbox.list(limit=10)}
    assert {t: (r.status, r.attempts) for t, r in listed.items()} == {
        "t0": ("delivered", 1),
        "t1": ("delivered", 1),
        "t2": ("pending", 1),
    }
    assert listed["t0"].delivered_at == T0
    assert listed["t0"].response == "HTTP 200"
    assert listed["t2"].next_attempt_at == retry
    assert listed["t2"].last_error == "HTTP 500"
