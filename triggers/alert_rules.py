"""Alerts as declared and as raised: channels, a trigger's rule, one alert (docs/alerts.md).

Pure values. A trigger's rule carries its channels' definitions whole, so a change of a
channel is a change of every trigger that sends to it (a new revision), and an alert in
the outbox says by itself where it goes.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from triggers.clock import iso, iso_key

JsonValue = Any


class AlertEvent(enum.StrEnum):
    """What an alert says happened (DESIGN.md "Alert events")."""

    FAILED = "failed"
    MISSED = "missed"
    SKIPPED = "skipped"
    BLOCKED = "blocked"
    LATE = "late"
    STUCK = "stuck"
    RECOVERED = "recovered"
    TEST = "test"


DEFAULT_EVENTS = frozenset(
    {
        AlertEvent.FAILED,
        AlertEvent.MISSED,
        AlertEvent.BLOCKED,
        AlertEvent.LATE,
        AlertEvent.STUCK,
        AlertEvent.RECOVERED,
    }
)
"""`on` when a rule does not say: everything but `skipped` (which `blocked` narrows)."""

CHANNEL_KINDS = ("webhook", "email", "command")


@dataclass(frozen=True, slots=True, kw_only=True)
class AlertChannel:
    """A declared channel: its name, its kind and that kind's settings as JSON."""

    name: str
    kind: str
    config: Mapping[str, JsonValue]

    def to_json(self) -> dict[str, JsonValue]:
        return {"name": self.name, "kind": self.kind, "config": dict(self.config)}

    @classmethod
    def from_json(cls, data: Mapping[str, JsonValue]) -> AlertChannel:
        return cls(name=data["name"], kind=data["kind"], config=dict(data["config"]))


@dataclass(frozen=True, slots=True, kw_only=True)
class AlertRule:
    """A trigger's `alert:` after `defaults.alert` is merged in."""

    to: tuple[AlertChannel, ...]
    on: frozenset[AlertEvent] = DEFAULT_EVENTS
    late: timedelta | None = None
    stuck: timedelta | None = None
    repeat: timedelta | None = None

    def wants(self, event: AlertEvent) -> bool:
        """Whether this rule sends `event` (`recovered` follows `failed`)."""
        if event is AlertEvent.RECOVERED:
            return AlertEvent.RECOVERED in self.on or AlertEvent.FAILED in self.on
        if event is AlertEvent.SKIPPED:
            return AlertEvent.SKIPPED in self.on
        return event in self.on

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "to": [channel.to_json() for channel in self.to],
            "on": sorted(event.value for event in self.on),
            "late_s": _seconds(self.late),
            "stuck_s": _seconds(self.stuck),
            "repeat_s": _seconds(self.repeat),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, JsonValue]) -> AlertRule:
        return cls(
            to=tuple(AlertChannel.from_json(item) for item in data["to"]),
            on=frozenset(AlertEvent(name) for name in data["on"]),
            late=_span(data.get("late_s")),
            stuck=_span(data.get("stuck_s")),
            repeat=_span(data.get("repeat_s")),
        )


def _seconds(value: timedelta | None) -> float | None:
    return None if value is None else value.total_seconds()


def _span(value: float | None) -> timedelta | None:
    return None if value is None else timedelta(seconds=value)


@dataclass(frozen=True, slots=True, kw_only=True)
class AlertFacts:
    """What a ledger transition tells an alert: the event and the row it is about."""

    event: AlertEvent
    trigger_id: str
    occurrence_at: datetime
    at: datetime
    outcome: str | None = None
    reason: str | None = None
    run_id: str | None = None
    error: str | None = None
    last_occurrence_at: datetime | None = None
    count: int = 1
    blocked_by: str | None = None
    manual_key: str = ""
    state_key: str | None = None
    """Names the state the alert is about when that is not the occurrence: a trigger
    blocked behind one parked run is one `blocked` alert, however many skips it makes."""

    @property
    def alert_id(self) -> str:
        """The stable id: one event of one occurrence is one alert, whoever writes it.

        A reminder (`failed` again after `repeat`) is another occurrence's failure, so
        another id.
        """
        if self.state_key is not None:
            return f"{self.trigger_id}:{self.event.value}:{self.state_key}"
        occurrence = iso_key(self.occurrence_at)
        manual = f":manual:{self.manual_key}" if self.manual_key else ""
        return f"{self.trigger_id}:{occurrence}{manual}:{self.event.value}"


ERROR_TAIL = 2000
"""At most this many characters of a run's error (its stderr tail) go into an alert."""


def alert_payload(facts: AlertFacts) -> dict[str, JsonValue]:
    """The JSON document every channel sends (docs/alerts.md "The payload")."""
    error = facts.error
    if error is not None and len(error) > ERROR_TAIL:
        error = "…" + error[-ERROR_TAIL:]
    return {
        "id": facts.alert_id,
        "event": facts.event.value,
        "trigger_id": facts.trigger_id,
        "occurrence": iso(facts.occurrence_at),
        "last_occurrence": None
        if facts.last_occurrence_at is None
        else iso(facts.last_occurrence_at),
        "count": facts.count,
        "outcome": facts.outcome,
        "reason": facts.reason,
        "run_id": facts.run_id,
        "blocked_by": facts.blocked_by,
        "error": error,
        "at": iso(facts.at),
        "text": alert_text(facts),
        "links": _links(facts),
    }


def alert_text(facts: AlertFacts) -> str:
    """One line, as Slack and Mattermost incoming webhooks show `text`."""
    occurrence = iso(facts.occurrence_at)
    head = f"[triggers] {facts.trigger_id}"
    match facts.event:
        case AlertEvent.FAILED:
            first = (facts.error or "").strip().splitlines()[-1:] or [""]
            detail = f": {first[0][:200]}" if first[0] else ""
            run = f", run {facts.run_id}" if facts.run_id else ", no run started"
            return f"{head} failed (occurrence {occurrence}{run}){detail}"
        case AlertEvent.RECOVERED:
            return f"{head} recovered: run {facts.run_id} completed (occurrence {occurrence})"
        case AlertEvent.MISSED:
            span = _span_text(facts)
            return f"{head} missed {facts.count} occurrence(s) {span} ({facts.reason})"
        case AlertEvent.BLOCKED:
            return f"{head} skipped {occurrence}: blocked by run {facts.blocked_by}"
        case AlertEvent.SKIPPED:
            return f"{head} skipped {_span_text(facts)} ({facts.reason})"
        case AlertEvent.LATE:
            return f"{head} late: occurrence {occurrence} has not completed by its deadline"
        case AlertEvent.STUCK:
            return f"{head} stuck: run {facts.run_id} (occurrence {occurrence}) is still running"
        case AlertEvent.TEST:
            return f"{head}: a test alert"


def _span_text(facts: AlertFacts) -> str:
    if facts.last_occurrence_at is None or facts.count <= 1:
        return iso(facts.occurrence_at)
    return f"{iso(facts.occurrence_at)}..{iso(facts.last_occurrence_at)}"


def _links(facts: AlertFacts) -> dict[str, str]:
    occurrence = iso(facts.occurrence_at)
    links = {
        "history": f"triggers history {facts.trigger_id} --since {occurrence}",
        "describe": f"triggers describe {facts.trigger_id}",
        "api_history": f"/api/v1/triggers/{facts.trigger_id}/history",
    }
    if facts.run_id:
        links["run"] = f"triggers runs show {facts.run_id}"
        links["logs"] = f"triggers runs logs {facts.run_id}"
        links["api_run"] = f"/api/v1/runs/{facts.run_id}"
    return links


@dataclass(frozen=True, slots=True, kw_only=True)
class AlertRecord:
    """One alert to one channel in the outbox: what it says, where it goes, how it went."""

    id: int
    alert_id: str
    channel: str
    event: str
    trigger_id: str
    occurrence_at: datetime
    payload: Mapping[str, JsonValue]
    destination: Mapping[str, JsonValue]
    status: str
    """`pending` (to deliver, or retried at `next_attempt_at`), `delivered` or `failed`."""
    attempts: int
    created_at: datetime
    next_attempt_at: datetime
    delivered_at: datetime | None = None
    last_error: str | None = None
    response: str | None = None

    def to_json(self) -> dict[str, JsonValue]:
        """The alert as `alerts list --json` and `/api/v1/alerts` show it."""
        return {
            "id": self.alert_id,
            "channel": self.channel,
            "kind": self.destination.get("kind"),
            "event": self.event,
            "trigger_id": self.trigger_id,
            "occurrence": iso(self.occurrence_at),
            "status": self.status,
            "attempts": self.attempts,
            "created_at": iso(self.created_at),
            "next_attempt_at": iso(self.next_attempt_at) if self.status == "pending" else None,
            "delivered_at": None if self.delivered_at is None else iso(self.delivered_at),
            "last_error": self.last_error,
            "response": self.response,
            "text": self.payload.get("text"),
        }
