"""Alert declarations, ids, payloads and the claim's skip alerts: pure code."""

from __future__ import annotations

import textwrap
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from triggers.alert_rules import AlertEvent, AlertFacts, AlertRule, alert_payload
from triggers.declarations import parse_declarations
from triggers.errors import DeclarationError
from triggers.model import Outcome, Reason, Trigger, TriggerSpec
from triggers.store._alert_events import skip_alerts
from triggers.store._fire_row import FireRow

AT = datetime(2026, 12, 2, 2, 30, tzinfo=UTC)

DOC = textwrap.dedent(
    """\
    version: 1
    alerts:
      channels:
        ops: {webhook: {url: "https://hooks.example/abc", headers_file: /etc/h}}
        mail: {email: {to: [oncall@example.com]}}
        page: {command: [/usr/local/bin/page], timeout: 20s}
    defaults:
      alert: {to: [ops], on: [failed, blocked], late: 15m, repeat: 1h}
    flows:
      f: {steps: []}
    triggers:
      - {id: a, flow: f, every: 1h}
      - {id: b, flow: f, every: 1h, alert: {to: [mail, page], late: 1h}}
      - {id: c, flow: f, every: 1h, alert: {to: []}}
    """
)


def _problems(text: str) -> list[str]:
    with pytest.raises(DeclarationError) as caught:
        parse_declarations(text, source="t.yaml")
    found: list[dict[str, Any]] = caught.value.details["problems"]  # type: ignore[assignment]
    return [f"{p['line']}:{p['key']}: {p['message']}" for p in found]


def test_alert_rules_merge_over_defaults_key_by_key() -> None:
    declarations = parse_declarations(DOC, source="t.yaml")
    a, b, c = declarations.triggers
    assert a.alert is not None
    assert [channel.name for channel in a.alert.to] == ["ops"]
    assert a.alert.on == {AlertEvent.FAILED, AlertEvent.BLOCKED}
    assert a.alert.late == timedelta(minutes=15)
    assert b.alert is not None
    assert [channel.kind for channel in b.alert.to] == ["email", "command"]
    assert b.alert.late == timedelta(hours=1)
    assert b.alert.repeat == timedelta(hours=1)
    assert c.alert is None
    assert set(declarations.channels) == {"ops", "mail", "page"}


def test_alert_rule_survives_the_stored_form_and_changes_the_digest() -> None:
    spec = parse_declarations(DOC, source="t.yaml").triggers[1]
    assert TriggerSpec.from_json(spec.to_json()) == spec
    plain = parse_declarations(DOC.replace("alert: {to: []}", "alert: {to: [ops]}"), source="x")
    assert plain.triggers[2].digest() != parse_declarations(DOC, source="x").triggers[2].digest()


def test_a_trigger_without_alerts_keeps_its_digest() -> None:
    spec = parse_declarations(DOC, source="t.yaml").triggers[2]
    assert "alert" not in spec.to_json()


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (("to: [mail, page]", "to: [mial]"), "triggers[b].alert.to[0]: unknown channel 'mial'"),
        (("on: [failed, blocked]", "on: [faild]"), "defaults.alert.on[0]: unknown alert event"),
        (("timeout: 20s", "timeout: soon"), "alerts.channels.page.timeout: invalid duration"),
        (("{webhook: {url", "{email: {to: [x]}, webhook: {url"), "a channel sends one way"),
        (("to: [ops], on", "on"), "defaults.alert: an alert needs 'to'"),
    ],
    ids=["unknown-channel", "unknown-event", "bad-timeout", "two-kinds", "no-to"],
)
def test_bad_alert_declarations_are_reported_at_their_key(
    change: tuple[str, str], expected: str
) -> None:
    problems = _problems(DOC.replace(*change))
    assert any(expected in problem for problem in problems), problems


def test_alert_ids_name_the_event_of_the_occurrence() -> None:
    facts = AlertFacts(event=AlertEvent.FAILED, trigger_id="t", occurrence_at=AT, at=AT)
    assert facts.alert_id == "t:2026-12-02T02:30:00Z:failed"
    blocked = AlertFacts(
        event=AlertEvent.BLOCKED, trigger_id="t", occurrence_at=AT, at=AT, state_key="run-1"
    )
    assert blocked.alert_id == "t:blocked:run-1"


def test_the_payload_carries_a_one_line_text_and_the_error_tail() -> None:
    facts = AlertFacts(
        event=AlertEvent.FAILED,
        trigger_id="t",
        occurrence_at=AT,
        at=AT,
        run_id="r1",
        error="x" * 5000 + "\nboom",
    )
    payload = alert_payload(facts)
    assert payload["id"] == facts.alert_id
    assert (
        payload["text"] == "[triggers] t failed (occurrence 2026-12-02T02:30:00.000Z, run r1): boom"
    )
    assert "\n" not in payload["text"]
    assert payload["error"].endswith("boom")
    assert len(payload["error"]) <= 2001
    assert payload["links"]["logs"] == "triggers runs logs r1"


def _trigger(rule: AlertRule | None) -> Trigger:
    spec = parse_declarations(DOC, source="t.yaml").triggers[0]
    spec = TriggerSpec(
        **{**{k: getattr(spec, k) for k in spec.__slots__ if k != "_digest"}, "alert": rule}
    )
    return Trigger(spec=spec, revision=1, watermark_at=AT, created_at=AT, updated_at=AT)


def _skipped(at: datetime, reason: Reason, blocked_by: str | None = None) -> FireRow:
    return FireRow(
        trigger_id="a",
        occurrence_at=at,
        manual_key="",
        idempotency_key=f"a:{at.isoformat()}",
        kind="scheduled",
        outcome=Outcome.SKIPPED,
        reason=reason,
        revision=1,
        host="h",
        claimed_at=at,
        settled_at=at,
        lease_owner=None,
        lease_expires_at=None,
        supersedes_run_id=None,
        blocked_by=blocked_by,
    )


def test_skips_behind_one_parked_run_are_one_blocked_alert() -> None:
    rule = parse_declarations(DOC, source="t.yaml").triggers[0].alert
    trigger = _trigger(rule)
    rows = [_skipped(AT + timedelta(minutes=n), Reason.BLOCKED, "run-9") for n in range(3)]
    raised = skip_alerts([*rows, _skipped(AT, Reason.OVERLAP), None], {"a": trigger}, AT)
    assert {facts.alert_id for facts, _ in raised} == {"a:blocked:run-9"}
    assert skip_alerts(rows, {"a": _trigger(None)}, AT) == []
