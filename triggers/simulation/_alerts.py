"""The alerts a simulated ledger would raise (`simulate --alerts`), none of them sent.

The daemon raises an alert from a ledger transition, in the transaction that writes
it (docs/alerts.md "What is sent when"); a simulation has the whole ledger at its end,
so its alerts are read off the rows by the same rules: one per state change, a
failing trigger's reminders `repeat` apart, `late` and `stuck` at the instant their
deadline passes (a daemon finds them within its deadline check, 5 s, later).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from triggers.alert_rules import AlertEvent, AlertFacts, AlertRule
from triggers.model import FireRecord, Outcome, Reason, TriggerSpec
from triggers.simulation._scenario import Scenario


@dataclass(frozen=True, slots=True, kw_only=True)
class ForecastAlert:
    """An alert the scenario raises: what it says, and the channels it would go to."""

    facts: AlertFacts
    channels: tuple[str, ...]


class _Rules:
    """Each trigger's rule as the file in force at an instant declares it."""

    def __init__(self, scenario: Scenario) -> None:
        files = [(scenario.start_at, scenario.specs)]
        files += sorted(((edit.at, edit.specs) for edit in scenario.edits), key=lambda f: f[0])
        self._files = [(at, {spec.id: spec for spec in specs}) for at, specs in files]

    def at(self, trigger_id: str, instant: datetime) -> AlertRule | None:
        in_force = self._files[0][1]
        for since, specs in self._files[1:]:
            if since > instant:
                break
            in_force = specs
        spec: TriggerSpec | None = in_force.get(trigger_id)
        return spec.alert if spec is not None else None


def forecast_alerts(
    records: Sequence[FireRecord], scenario: Scenario, *, end_at: datetime
) -> list[ForecastAlert]:
    """The alerts of `records` (a simulated ledger), in the order they are raised."""
    rules = _Rules(scenario)
    raised: list[tuple[AlertFacts, AlertRule]] = []
    blocked_by: set[tuple[str, str]] = set()
    for record in records:
        raised += _decided(record, rules, blocked_by)
        raised += _deadlines(record, rules, end_at)
    raised += _settlements(records, rules)
    raised.sort(key=lambda item: (item[0].at, item[0].trigger_id, item[0].occurrence_at))
    return [
        ForecastAlert(facts=facts, channels=tuple(channel.name for channel in rule.to))
        for facts, rule in raised
    ]


def _decided(
    record: FireRecord, rules: _Rules, blocked_by: set[tuple[str, str]]
) -> list[tuple[AlertFacts, AlertRule]]:
    """`missed`, `skipped` and `blocked`: raised by the claim that decides the row."""
    if record.outcome not in (Outcome.MISSED, Outcome.SKIPPED):
        return []
    at = record.claimed_at or record.settled_at or record.occurrence_at
    rule = rules.at(record.trigger_id, at)
    if rule is None:
        return []
    event = AlertEvent.MISSED if record.outcome is Outcome.MISSED else AlertEvent.SKIPPED
    state_key = None
    if record.reason is Reason.BLOCKED and rule.wants(AlertEvent.BLOCKED):
        event, state_key = AlertEvent.BLOCKED, record.blocked_by
        if state_key is not None:
            if (record.trigger_id, state_key) in blocked_by:
                return []  # one alert per parked run, however many skips behind it
            blocked_by.add((record.trigger_id, state_key))
    if not rule.wants(event):
        return []
    facts = AlertFacts(
        event=event,
        trigger_id=record.trigger_id,
        occurrence_at=record.occurrence_at,
        last_occurrence_at=record.last_occurrence_at if record.count > 1 else None,
        count=record.count,
        at=at,
        outcome=record.outcome.value,
        reason=record.reason.value if record.reason else None,
        blocked_by=record.blocked_by,
        manual_key=record.manual_key,
        state_key=state_key,
    )
    return [(facts, rule)]


def _deadlines(
    record: FireRecord, rules: _Rules, end_at: datetime
) -> list[tuple[AlertFacts, AlertRule]]:
    """`late` (not settled `late` after its occurrence) and `stuck` (running `stuck`
    after it started), at the instant the deadline passes within the range."""
    if record.outcome in (Outcome.MISSED, Outcome.SKIPPED):
        return []
    raised: list[tuple[AlertFacts, AlertRule]] = []
    rule = rules.at(record.trigger_id, record.occurrence_at)
    if rule is None:
        return raised
    settled = record.settled_at

    def facts(event: AlertEvent, at: datetime) -> AlertFacts:
        return AlertFacts(
            event=event,
            trigger_id=record.trigger_id,
            occurrence_at=record.occurrence_at,
            manual_key=record.manual_key,
            at=at,
            outcome=Outcome.LAUNCHED.value,
            run_id=record.run_id,
        )

    if rule.late is not None and rule.wants(AlertEvent.LATE):
        due = record.occurrence_at + rule.late
        if due <= end_at and (settled is None or settled > due):
            raised.append((facts(AlertEvent.LATE, due), rule))
    started = record.launched_at
    if rule.stuck is not None and started is not None and rule.wants(AlertEvent.STUCK):
        due = started + rule.stuck
        if due <= end_at and (settled is None or settled > due):
            raised.append((facts(AlertEvent.STUCK, due), rule))
    return raised


def _settlements(
    records: Sequence[FireRecord], rules: _Rules
) -> list[tuple[AlertFacts, AlertRule]]:
    """`failed` once per failing spell (and every `repeat`), `recovered` when it ends."""
    settled = sorted(
        (
            (r.settled_at, r.trigger_id, n, r)
            for n, r in enumerate(records)
            if r.settled_at is not None and r.outcome in (Outcome.FAILED, Outcome.COMPLETED)
        ),
        key=lambda item: item[:3],
    )
    failing: dict[str, datetime] = {}  # trigger -> when its failure was last alerted
    raised: list[tuple[AlertFacts, AlertRule]] = []
    for at, _, _, record in settled:
        rule = rules.at(record.trigger_id, at)
        reminded = failing.get(record.trigger_id)
        event: AlertEvent | None = None
        if record.outcome is Outcome.FAILED:
            if rule is None or not rule.wants(AlertEvent.FAILED):
                continue
            if reminded is None or (rule.repeat is not None and at - reminded >= rule.repeat):
                event = AlertEvent.FAILED
                failing[record.trigger_id] = at
        elif reminded is not None:
            del failing[record.trigger_id]
            if rule is not None and rule.wants(AlertEvent.RECOVERED):
                event = AlertEvent.RECOVERED
        if event is None or rule is None:
            continue
        facts = AlertFacts(
            event=event,
            trigger_id=record.trigger_id,
            occurrence_at=record.occurrence_at,
            manual_key=record.manual_key,
            at=at,
            outcome=record.outcome.value,
            run_id=record.run_id,
            error=record.error if event is AlertEvent.FAILED else None,
        )
        raised.append((facts, rule))
    return raised
