"""Alerts the claim batch raises for the rows it writes (both stores, decided once)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from triggers.alert_rules import AlertEvent, AlertFacts, AlertRule
from triggers.errors import StoreError
from triggers.model import Outcome, Reason
from triggers.store._decide import StoredTrigger
from triggers.store._fire_row import FireRow


def skip_alerts(
    rows: Sequence[FireRow | None], stored: Mapping[str, StoredTrigger | StoreError], now: datetime
) -> list[tuple[AlertFacts, AlertRule]]:
    """The `blocked` and `skipped` alerts of the batch's skipped rows, per their rules.

    A trigger blocked behind a parked run raises one `blocked` alert for that run,
    however many of its occurrences are skipped behind it."""
    raised: list[tuple[AlertFacts, AlertRule]] = []
    for row in rows:
        if row is None or row.outcome is not Outcome.SKIPPED:
            continue
        trigger = stored.get(row.trigger_id)
        rule = None if isinstance(trigger, StoreError | None) else trigger.spec.alert
        if rule is None:
            continue
        blocked = row.reason is Reason.BLOCKED
        event = AlertEvent.BLOCKED if blocked and rule.wants(AlertEvent.BLOCKED) else None
        if event is None and rule.wants(AlertEvent.SKIPPED):
            event = AlertEvent.SKIPPED
        if event is None:
            continue
        facts = AlertFacts(
            event=event,
            trigger_id=row.trigger_id,
            occurrence_at=row.occurrence_at,
            manual_key=row.manual_key,
            at=now,
            outcome=Outcome.SKIPPED.value,
            reason=row.reason.value if row.reason else None,
            blocked_by=row.blocked_by,
            state_key=row.blocked_by if event is AlertEvent.BLOCKED and row.blocked_by else None,
        )
        raised.append((facts, rule))
    return raised
