"""The alert outbox in SQL: raised in the ledger change's transaction, delivered under a lease.

An alert's row is unique per (alert id, channel), and the alert id is derived from the
event and its occurrence, so a transition recorded twice (a retried commit, two daemons
on one PostgreSQL) raises one alert. Failures are alerted per state change: a trigger's
row in `alert_states` says a failure was alerted and not yet followed by a success.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from triggers.alert_rules import AlertEvent, AlertFacts, AlertRule, alert_payload
from triggers.clock import from_ms, to_ms
from triggers.model import Outcome, Trigger
from triggers.store._decide import TriggerView
from triggers.store._read_sql import chunks
from triggers.store._sql_common import (
    executemany,
    lock_triggers,
    read_triggers,
    select_triggers,
)
from triggers.store.protocol import Settlement
from triggers.store.schema import alert_states, alerts, fires, triggers

PENDING, DELIVERED, FAILED = "pending", "delivered", "failed"


def raise_alerts(
    conn: Connection, raised: Sequence[tuple[AlertFacts, AlertRule]], now: datetime
) -> None:
    """Write each alert once per channel of its rule; an alert already there is left be."""
    rows = [
        {
            "alert_id": facts.alert_id,
            "channel": channel.name,
            "event": facts.event.value,
            "trigger_id": facts.trigger_id,
            "occurrence_at": facts.occurrence_at,
            "payload": alert_payload(facts),
            "destination": channel.to_json(),
            "status": PENDING,
            "attempts": 0,
            "created_at": now,
            "next_attempt_at": now,
        }
        for facts, rule in raised
        for channel in rule.to
    ]
    if not rows:
        return
    # Loaded here: a query command on SQLite never loads the PostgreSQL dialect.
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert  # noqa: PLC0415

        statement: Any = pg_insert(alerts)
    else:
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert  # noqa: PLC0415

        statement = sqlite_insert(alerts)
    statement = statement.on_conflict_do_nothing(
        index_elements=[alerts.c.alert_id, alerts.c.channel]
    )
    conn.execute(statement, rows)


def alert_settlements(
    conn: Connection,
    settled: Sequence[tuple[Mapping[Any, Any], Settlement]],
    stored: Mapping[str, Trigger | TriggerView | Exception],
    now: datetime,
) -> None:
    """Raise `failed`, its reminders and `recovered` for settled ledger rows, in order.

    `stored` holds the decoded triggers of the failed rows (locked by the caller); the
    triggers of completed rows are read only when a failure of theirs was alerted.
    """
    failing = [(row, s) for row, s in settled if s.state == "failed"]
    completed = [row["trigger_id"] for row, s in settled if s.state == "completed"]
    watched = {row["trigger_id"] for row, _ in failing if _rule_of(stored, row, AlertEvent.FAILED)}
    if not watched and (not completed or not _any_states(conn)):
        return  # nothing alerted, and no failure alerted before that a success recovers
    states = _states(conn, sorted(watched | set(completed)))
    stored_states = set(states)
    recovering = sorted({tid for tid in completed if tid in states} - stored.keys())
    triggers_by_id: dict[str, Trigger | TriggerView | Exception] = dict(stored)
    if recovering:
        triggers_by_id.update(lock_triggers(conn, recovering))
    raised: list[tuple[AlertFacts, AlertRule]] = []
    for row, settlement in settled:
        trigger_id = row["trigger_id"]
        state = states.get(trigger_id)
        if state is not None and state.get("gone"):
            state = None
        if settlement.state == "failed":
            rule = _rule_of(triggers_by_id, row, AlertEvent.FAILED)
            if rule is None:
                continue
            if state is None or (
                rule.repeat is not None and now - state["reminded_at"] >= rule.repeat
            ):
                raised.append((_facts(AlertEvent.FAILED, row, settlement, now), rule))
                states[trigger_id] = {
                    "failing_since": state["failing_since"] if state else now,
                    "reminded_at": now,
                    "new": trigger_id not in stored_states,
                }
        elif settlement.state == "completed" and state is not None:
            rule = _rule_of(triggers_by_id, row, AlertEvent.RECOVERED)
            if rule is not None:
                raised.append((_facts(AlertEvent.RECOVERED, row, settlement, now), rule))
            states[trigger_id] = {**state, "gone": True}
    _write_states(conn, states)
    raise_alerts(conn, raised, now)


def _rule_of(
    found: Mapping[str, Trigger | TriggerView | Exception],
    row: Mapping[Any, Any],
    event: AlertEvent,
) -> AlertRule | None:
    trigger = found.get(row["trigger_id"])
    if trigger is None or isinstance(trigger, Exception) or trigger.spec.alert is None:
        return None
    return trigger.spec.alert if trigger.spec.alert.wants(event) else None


def _facts(
    event: AlertEvent, row: Mapping[Any, Any], settlement: Settlement, now: datetime
) -> AlertFacts:
    return AlertFacts(
        event=event,
        trigger_id=row["trigger_id"],
        occurrence_at=_instant(row["occurrence_at"]),
        manual_key=row["manual_key"] or "",
        at=now,
        outcome=settlement.state,
        run_id=settlement.run_id,
        error=settlement.error if event is AlertEvent.FAILED else None,
    )


def _instant(value: datetime | int) -> datetime:
    return value if isinstance(value, datetime) else from_ms(int(value))


_STATES = sa.select(alert_states).where(
    alert_states.c.trigger_id.in_(sa.bindparam("b_ids", expanding=True))
)


def _any_states(conn: Connection) -> bool:
    """Whether any trigger's failure is alerted now: a settlement of successes alone
    (a thousand a second) then reads nothing more."""
    return conn.exec_driver_sql("SELECT 1 FROM alert_states LIMIT 1").first() is not None


def _states(conn: Connection, trigger_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for part in chunks(trigger_ids):
        for row in conn.execute(_STATES, {"b_ids": list(part)}).mappings():
            found[row["trigger_id"]] = dict(row)
    return found


def _write_states(conn: Connection, states: Mapping[str, Mapping[str, Any]]) -> None:
    gone = sorted(tid for tid, state in states.items() if state.get("gone"))
    new = [
        {"trigger_id": tid, "failing_since": s["failing_since"], "reminded_at": s["reminded_at"]}
        for tid, s in sorted(states.items())
        if s.get("new") and not s.get("gone")
    ]
    changed = [
        {"b_id": tid, "b_since": s["failing_since"], "b_reminded_at": s["reminded_at"]}
        for tid, s in sorted(states.items())
        if "new" in s and not s["new"] and not s.get("gone")
    ]
    if gone:
        conn.execute(alert_states.delete().where(alert_states.c.trigger_id.in_(gone)))
    if new:
        conn.execute(alert_states.insert(), new)
    if changed:
        conn.execute(
            alert_states.update()
            .where(alert_states.c.trigger_id == sa.bindparam("b_id"))
            .values(
                failing_since=sa.bindparam("b_since", type_=alert_states.c.failing_since.type),
                reminded_at=sa.bindparam("b_reminded_at", type_=alert_states.c.reminded_at.type),
            ),
            changed,
        )


# ---- deadlines ----------------------------------------------------------------------

_LIVE = (Outcome.LAUNCHING.value, Outcome.LAUNCHED.value, Outcome.BUFFERED.value)
_LIVE_ROWS = sa.select(
    fires.c.trigger_id,
    fires.c.occurrence_at,
    fires.c.manual_key,
    fires.c.outcome,
    fires.c.run_id,
    fires.c.launched_at,
).where(fires.c.outcome.in_(_LIVE))


def deadline_alerts(conn: Connection, now: datetime) -> list[tuple[AlertFacts, AlertRule]]:
    """The `late` alerts of live occurrences past their trigger's `late`, and the
    `stuck` ones of runs running past its `stuck`: to raise with `raise_alerts`.

    Reads only the live ledger rows (as many as active and buffered runs), so a read
    transaction is enough: an occurrence live at `now` past its deadline is late
    whatever happens next, and the ids make a deadline found twice (by several
    daemons, or again at the next check) one alert."""
    rows = conn.execute(_LIVE_ROWS).mappings().all()
    if not rows:
        return []
    ids = sorted({row["trigger_id"] for row in rows})
    found: dict[str, Trigger | Exception] = {}
    for part in chunks(ids):
        found.update(read_triggers(conn, select_triggers().where(triggers.c.id.in_(part))))
    raised: list[tuple[AlertFacts, AlertRule]] = []
    for row in rows:
        trigger = found.get(row["trigger_id"])
        rule = trigger.spec.alert if isinstance(trigger, Trigger) else None
        if rule is None:
            continue
        common = {
            "trigger_id": row["trigger_id"],
            "occurrence_at": row["occurrence_at"],
            "manual_key": row["manual_key"] or "",
            "at": now,
            "outcome": row["outcome"],
            "run_id": row["run_id"],
        }
        late = rule.late
        if late is not None and rule.wants(AlertEvent.LATE) and row["occurrence_at"] + late <= now:
            raised.append((AlertFacts(event=AlertEvent.LATE, **common), rule))
        stuck, started = rule.stuck, row["launched_at"]
        if (
            stuck is not None
            and started is not None
            and row["outcome"] == Outcome.LAUNCHED.value
            and rule.wants(AlertEvent.STUCK)
            and started + stuck <= now
        ):
            raised.append((AlertFacts(event=AlertEvent.STUCK, **common), rule))
    return raised


# ---- delivery -----------------------------------------------------------------------


_CANDIDATES = (
    sa.select(
        alerts.c.id,
        alerts.c.channel,
        alerts.c.next_attempt_at,
        alerts.c.lease_owner,
        alerts.c.lease_expires_at,
    )
    .where(alerts.c.status == PENDING)
    .order_by(alerts.c.id)
)


def _takeable(
    candidates: Sequence[Mapping[Any, Any]], *, owner: str, now: datetime, limit: int
) -> list[int]:
    """The ids of the pending `candidates` (oldest first) that may be sent now: a
    channel whose oldest pending alert waits for a retry, or is leased elsewhere,
    gives none, so its alerts arrive in the order they were raised."""
    blocked: set[str] = set()
    taken: list[int] = []
    for row in candidates:
        channel = row["channel"]
        if channel in blocked:
            continue
        leased = row["lease_expires_at"] is not None and row["lease_expires_at"] > now
        if row["next_attempt_at"] > now or (leased and row["lease_owner"] != owner):
            blocked.add(channel)
            continue
        taken.append(row["id"])
        if len(taken) >= limit:
            break
    return taken


def alerts_due(conn: Connection, *, owner: str, now: datetime, limit: int) -> bool:
    """Whether `lease_alerts` would lease anything now: a read, so a sender woken by
    every settlement takes no write lock while nothing is owed."""
    rows = conn.execute(_CANDIDATES.limit(limit * 4)).mappings().all()
    return bool(_takeable(rows, owner=owner, now=now, limit=1))


def lease_alerts(
    conn: Connection, *, owner: str, now: datetime, lease: timedelta, limit: int
) -> list[int]:
    """Lease the alerts due now, oldest first, each channel's in order (`_takeable`);
    their ids.

    Only the few columns the choice needs are read (on PostgreSQL locked, so two
    daemons' senders take turns); `read_alerts` reads the leased alerts whole, after
    the commit, since no other sender changes them while the lease holds."""
    statement = _CANDIDATES.limit(limit * 4)
    if conn.dialect.name == "postgresql":
        statement = statement.with_for_update()
    candidates = conn.execute(statement).mappings().all()
    taken = _takeable(candidates, owner=owner, now=now, limit=limit)
    for part in chunks(taken):
        conn.execute(
            alerts.update()
            .where(alerts.c.id.in_(part))
            .values(lease_owner=owner, lease_expires_at=now + lease)
        )
    return taken


_RECORD = (
    alerts.update()
    .where(
        alerts.c.id == sa.bindparam("b_id"),
        alerts.c.lease_owner == sa.bindparam("b_owner"),
        alerts.c.status == sa.literal_column(f"'{PENDING}'"),
    )
    .values(
        status=sa.bindparam("b_status"),
        attempts=alerts.c.attempts + sa.literal_column("1"),
        next_attempt_at=sa.bindparam("b_next_at", type_=sa.BigInteger()),
        delivered_at=sa.bindparam("b_delivered_at", type_=sa.BigInteger()),
        last_error=sa.bindparam("b_error"),
        response=sa.bindparam("b_response"),
        lease_owner=sa.null(),
        lease_expires_at=sa.null(),
    )
)


def record_alerts(conn: Connection, answers: Sequence[DeliveryAnswer], *, owner: str) -> int:
    """Record delivery attempts in one statement, each fenced on its lease; how many
    were still leased by `owner` (the others were taken over: their answers are
    dropped, and the new holder sends them again under the same id)."""
    rows = []
    for answer in answers:
        if answer.delivered:
            status, next_at = DELIVERED, answer.at
        elif answer.retry_at is not None:
            status, next_at = PENDING, answer.retry_at
        else:
            status, next_at = FAILED, answer.at
        rows.append(
            {
                "b_id": answer.record_id,
                "b_owner": owner,
                "b_status": status,
                "b_next_at": to_ms(next_at),
                "b_delivered_at": to_ms(answer.at) if answer.delivered else None,
                "b_error": answer.error,
                "b_response": answer.response,
            }
        )
    return executemany(conn, _RECORD, rows)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeliveryAnswer:
    """One delivery attempt's answer, as `record_alerts` writes it."""

    record_id: int
    at: datetime
    delivered: bool
    error: str | None = None
    response: str | None = None
    retry_at: datetime | None = None
    """None for a failed attempt: failed for good."""


def record_alert(
    conn: Connection,
    *,
    record_id: int,
    owner: str,
    now: datetime,
    delivered: bool,
    error: str | None,
    response: str | None,
    retry_at: datetime | None,
) -> bool:
    """Record one delivery attempt, fenced on the lease; False: the lease was lost."""
    answer = DeliveryAnswer(
        record_id=record_id,
        at=now,
        delivered=delivered,
        error=error,
        response=response,
        retry_at=retry_at,
    )
    return bool(record_alerts(conn, [answer], owner=owner))


def prune_alerts(conn: Connection, *, older_than: datetime, limit: int) -> int:
    """Delete up to `limit` delivered or failed alerts raised before `older_than` (a
    pending one stays, however old: it is still owed)."""
    doomed = (
        sa.select(alerts.c.id)
        .where(alerts.c.status.in_([DELIVERED, FAILED]), alerts.c.created_at < older_than)
        .order_by(alerts.c.id)
        .limit(limit)
    )
    ids = [row[0] for row in conn.execute(doomed)]
    if ids:
        conn.execute(alerts.delete().where(alerts.c.id.in_(ids)))
    return len(ids)


def count_alerts(conn: Connection) -> dict[str, int]:
    """How many alerts are pending, delivered and failed."""
    rows = conn.execute(sa.select(alerts.c.status, sa.func.count()).group_by(alerts.c.status))
    found = {PENDING: 0, DELIVERED: 0, FAILED: 0}
    found.update({status: int(count) for status, count in rows})
    return found
