"""The alerts a simulated ledger would raise (`simulate --alerts`): one per state change."""

from __future__ import annotations

from datetime import timedelta

from tests.factories import spec
from triggers.alert_rules import AlertChannel, AlertEvent, AlertRule
from triggers.clock import utc
from triggers.model import CatchupPolicy, FireRecord, Outcome, Reason
from triggers.simulation import Downtime, Edit, Scenario, forecast_alerts, simulate

T0 = utc(2027, 1, 10)
HOUR = timedelta(hours=1)
OPS = AlertChannel(name="ops", kind="webhook", config={"url": "https://hooks.example/x"})


def rule(**values: object) -> AlertRule:
    return AlertRule(to=(OPS,), **values)  # type: ignore[arg-type]


def events(found: list) -> list[tuple[str, str, object]]:  # type: ignore[type-arg]
    return [(a.facts.event.value, a.facts.trigger_id, a.facts.at) for a in found]


def test_an_outage_is_one_missed_alert_when_the_daemon_comes_back() -> None:
    hourly = spec("hourly", every=HOUR, catchup=CatchupPolicy.NONE, alert=rule())
    scenario = Scenario(
        specs=[hourly],
        start_at=T0,
        end_at=T0 + 12 * HOUR,
        downtimes=[Downtime(start_at=T0 + 4 * HOUR + timedelta(minutes=30), end_at=T0 + 8 * HOUR)],
    )
    result = simulate(scenario)

    found = forecast_alerts(result.records, scenario, end_at=result.end_at)

    assert events(found) == [("missed", "hourly", T0 + 8 * HOUR)]
    assert found[0].facts.count == 3  # 05:00, 06:00, 07:00
    assert found[0].channels == ("ops",)


def test_a_run_past_its_late_and_stuck_deadlines_alerts_once_each_at_the_deadline() -> None:
    nightly = spec("nightly", cron="30 2 * * *", alert=rule(late=HOUR, stuck=2 * HOUR))
    scenario = Scenario(
        specs=[nightly],
        start_at=T0,
        end_at=T0 + 2 * 24 * HOUR,
        durations={"nightly": 3 * HOUR},
    )
    result = simulate(scenario)

    found = forecast_alerts(result.records, scenario, end_at=result.end_at)

    first, second = T0 + timedelta(hours=2, minutes=30), T0 + timedelta(hours=26, minutes=30)
    assert events(found) == [
        ("late", "nightly", first + HOUR),
        ("stuck", "nightly", first + 2 * HOUR),
        ("late", "nightly", second + HOUR),
        ("stuck", "nightly", second + 2 * HOUR),
    ]


def test_a_run_within_its_deadlines_and_a_rule_without_the_event_raise_nothing() -> None:
    quick = spec("quick", every=HOUR, alert=rule(late=HOUR, stuck=HOUR))
    quiet = spec("quiet", every=HOUR, alert=rule(on=frozenset({AlertEvent.FAILED}), late=HOUR))
    scenario = Scenario(
        specs=[quick, quiet],
        start_at=T0,
        end_at=T0 + 6 * HOUR,
        durations={"quick": timedelta(minutes=59), "quiet": 3 * HOUR},
    )
    result = simulate(scenario)

    assert forecast_alerts(result.records, scenario, end_at=result.end_at) == []


def test_a_deadline_past_the_end_of_the_range_is_not_raised() -> None:
    nightly = spec("nightly", cron="0 22 * * *", alert=rule(late=4 * HOUR))
    scenario = Scenario(
        specs=[nightly], start_at=T0, end_at=T0 + 23 * HOUR, durations={"nightly": 5 * HOUR}
    )
    result = simulate(scenario)

    assert forecast_alerts(result.records, scenario, end_at=result.end_at) == []


def _row(trigger_id: str, hour: int, outcome: Outcome, **values: object) -> FireRecord:
    at = T0 + hour * HOUR
    return FireRecord(
        trigger_id=trigger_id,
        occurrence_at=at,
        outcome=outcome,
        claimed_at=at,
        launched_at=at if outcome in (Outcome.FAILED, Outcome.COMPLETED) else None,
        settled_at=at + timedelta(minutes=1),
        run_id=f"run-{hour}",
        **values,  # type: ignore[arg-type]
    )


def test_a_failing_spell_alerts_once_then_every_repeat_and_recovers_once() -> None:
    hourly = spec("hourly", every=HOUR, alert=rule(repeat=3 * HOUR))
    scenario = Scenario(specs=[hourly], start_at=T0, end_at=T0 + 12 * HOUR)
    records = [
        _row("hourly", 1, Outcome.COMPLETED),
        *(_row("hourly", h, Outcome.FAILED, error="disk full") for h in range(2, 8)),
        _row("hourly", 8, Outcome.COMPLETED),
        _row("hourly", 9, Outcome.COMPLETED),
    ]

    found = forecast_alerts(records, scenario, end_at=scenario.end_at)

    minute = timedelta(minutes=1)
    assert events(found) == [
        ("failed", "hourly", T0 + 2 * HOUR + minute),
        ("failed", "hourly", T0 + 5 * HOUR + minute),  # three hours later: a reminder
        ("recovered", "hourly", T0 + 8 * HOUR + minute),
    ]
    assert found[0].facts.error == "disk full"
    assert found[2].facts.error is None


def test_skips_behind_one_parked_run_are_one_blocked_alert_and_skipped_is_asked_for() -> None:
    blocked = spec("blocked", every=HOUR, alert=rule())
    skipping = spec("skipping", every=HOUR, alert=rule(on=frozenset({AlertEvent.SKIPPED})))
    scenario = Scenario(specs=[blocked, skipping], start_at=T0, end_at=T0 + 6 * HOUR)
    parked = {"reason": Reason.BLOCKED, "blocked_by": "run-parked"}
    records = [
        *(_row("blocked", h, Outcome.SKIPPED, **parked) for h in (1, 2, 3)),
        _row("skipping", 1, Outcome.SKIPPED, reason=Reason.OVERLAP),
        _row("skipping", 2, Outcome.SKIPPED, reason=Reason.OVERLAP),
    ]

    found = forecast_alerts(records, scenario, end_at=scenario.end_at)

    assert sorted((a.facts.event.value, a.facts.trigger_id) for a in found) == [
        ("blocked", "blocked"),
        ("skipped", "skipping"),
        ("skipped", "skipping"),
    ]


def test_the_rule_in_force_is_the_one_the_file_of_that_moment_declares() -> None:
    before = spec("hourly", every=HOUR, catchup=CatchupPolicy.NONE)
    after = spec("hourly", every=HOUR, catchup=CatchupPolicy.NONE, alert=rule())
    scenario = Scenario(
        specs=[before],
        start_at=T0,
        end_at=T0 + 12 * HOUR,
        downtimes=[
            Downtime(start_at=T0 + HOUR + timedelta(minutes=30), end_at=T0 + 4 * HOUR),
            Downtime(start_at=T0 + 6 * HOUR + timedelta(minutes=30), end_at=T0 + 9 * HOUR),
        ],
        edits=[Edit(at=T0 + 5 * HOUR, specs=[after])],
    )
    result = simulate(scenario)

    found = forecast_alerts(result.records, scenario, end_at=result.end_at)

    assert events(found) == [("missed", "hourly", T0 + 9 * HOUR)]
