"""The alert sender on the SQL outbox: rounds of leased alerts, answers recorded with
the next round's lease, nothing written while nothing is owed (SQLite and PostgreSQL)."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import pytest

from looms_runtime.db import Database
from tests.clocks import FakeClock
from triggers import delivery
from triggers.alert_rules import AlertChannel, AlertEvent, AlertFacts, AlertRecord, AlertRule
from triggers.clock import utc
from triggers.delivery import AlertSender, Answer, SenderOptions, SmtpServer
from triggers.store import _alerts
from triggers.store.sql_alerts import AttemptLike, SqlAlertOutbox

T0 = utc(2026, 1, 1)
HOOK = AlertChannel(name="hook", kind="webhook", config={"url": "http://127.0.0.1:9/a"})
PAGE = AlertChannel(name="page", kind="webhook", config={"url": "http://127.0.0.1:9/b"})


class CountingOutbox(SqlAlertOutbox):
    """The SQL outbox, counting the write transactions the sender asks for."""

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self.writes: list[str] = []

    def claim(self, **kwargs: Any) -> list[AlertRecord]:
        self.writes.append("claim")
        return super().claim(**kwargs)

    def exchange(self, attempts: Sequence[AttemptLike], **kwargs: Any) -> list[AlertRecord]:
        self.writes.append("exchange")
        return super().exchange(attempts, **kwargs)

    def record_all(self, attempts: Sequence[AttemptLike], **kwargs: Any) -> int:
        self.writes.append("record_all")
        return super().record_all(attempts, **kwargs)


def _raise(db: Database, channel: AlertChannel, *trigger_ids: str) -> None:
    raised = [
        (
            AlertFacts(event=AlertEvent.FAILED, trigger_id=tid, occurrence_at=T0, at=T0),
            AlertRule(to=(channel,)),
        )
        for tid in trigger_ids
    ]
    with db.write() as conn:
        _alerts.raise_alerts(conn, raised, T0)


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """(channel URL, alert id) of every delivery; the `page` channel answers 500."""
    found: list[tuple[str, str]] = []

    def deliver(destination: Mapping[str, Any], payload: Mapping[str, Any], **_: Any) -> Answer:
        url = str(destination["config"]["url"])
        found.append((url, str(payload["trigger_id"])))
        if url.endswith("/b"):
            return Answer(delivered=False, detail="HTTP 500 down")
        return Answer(delivered=True, detail="HTTP 200 ok")

    monkeypatch.setattr(delivery, "deliver", deliver)
    return found


def _sender(outbox: SqlAlertOutbox, clock: FakeClock, *, batch: int) -> AlertSender:
    return AlertSender(
        outbox,
        clock=clock,
        owner="me",
        smtp=SmtpServer(),
        options=SenderOptions(batch=batch, backoff=timedelta(seconds=2)),
    )


def test_rounds_record_their_answers_with_the_next_lease_and_keep_each_channels_order(
    reused_database: Database, sent: list[tuple[str, str]]
) -> None:
    outbox = CountingOutbox(reused_database)
    clock = FakeClock(T0)
    sender = _sender(outbox, clock, batch=2)
    stop = threading.Event()
    assert sender.deliver_due(stop) is False
    assert outbox.writes == []  # nothing owed: not even a lease taken

    _raise(reused_database, HOOK, "a1", "a2", "a3", "a4", "a5")
    _raise(reused_database, PAGE, "p1", "p2")
    assert sender.deliver_due(stop) is False
    # Rounds of two: the page channel's first alert fails, so its second waits behind it.
    assert sent == [
        ("http://127.0.0.1:9/a", "a1"),
        ("http://127.0.0.1:9/a", "a2"),
        ("http://127.0.0.1:9/a", "a3"),
        ("http://127.0.0.1:9/a", "a4"),
        ("http://127.0.0.1:9/a", "a5"),
        ("http://127.0.0.1:9/b", "p1"),
    ]
    assert outbox.writes == ["claim", "exchange", "exchange", "exchange"]
    statuses = {(r.trigger_id, r.status, r.attempts) for r in outbox.list(limit=10)}
    assert statuses == {
        *((f"a{n}", "delivered", 1) for n in range(1, 6)),
        ("p1", "pending", 1),
        ("p2", "pending", 0),
    }

    outbox.writes.clear()
    assert sender.deliver_due(stop) is False
    assert outbox.writes == []  # p1 waits for its retry: no write while nothing is due
    clock.advance(timedelta(seconds=2))
    assert sender.deliver_due(stop) is False
    assert sent[-1] == ("http://127.0.0.1:9/b", "p1")  # retried first, p2 still behind it
    assert ("http://127.0.0.1:9/b", "p2") not in sent


def test_a_long_round_stops_within_its_lease_and_the_rest_is_sent_next(
    reused_database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    outbox = CountingOutbox(reused_database)
    clock = FakeClock(T0)
    found: list[str] = []

    def slow(destination: Mapping[str, Any], payload: Mapping[str, Any], **_: Any) -> Answer:
        found.append(str(payload["trigger_id"]))
        clock.advance(timedelta(seconds=40))  # a receiver taking its time
        return Answer(delivered=True, detail="HTTP 200")

    monkeypatch.setattr(delivery, "deliver", slow)
    sender = AlertSender(
        outbox,
        clock=clock,
        owner="me",
        smtp=SmtpServer(),
        options=SenderOptions(lease=timedelta(minutes=2), deadlines_every=timedelta(hours=1)),
    )
    _raise(reused_database, HOOK, "a1", "a2", "a3", "a4", "a5")
    stop = threading.Event()
    assert sender.deliver_due(stop) is False
    # Two in the first minute (half the lease), then the rest in the next rounds.
    assert found == ["a1", "a2", "a3", "a4", "a5"]
    assert outbox.writes == ["claim", "exchange", "exchange", "exchange"]
    assert {r.status for r in outbox.list(limit=10)} == {"delivered"}
    delivered_at: list[datetime | None] = [r.delivered_at for r in outbox.list(limit=10)]
    assert all(at is not None for at in delivered_at)
