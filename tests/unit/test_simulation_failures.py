"""`simulate --fail`: chosen runs fail in the simulation, so the dependents waiting
for a failure fire and those waiting for a completion do not; and `after:` with
several upstreams plays as the store decides it."""

from __future__ import annotations

from datetime import timedelta

from tests.factories import spec
from triggers.clock import utc
from triggers.model import AfterSchedule, Outcome, Upstream
from triggers.simulation import FAILED_ERROR, Failure, Scenario, simulate

T0 = utc(2027, 3, 1)
DAY = timedelta(days=1)
HOUR = timedelta(hours=1)
MINUTE = timedelta(minutes=1)
CHAIN = [
    spec("import", cron="0 2 * * *"),
    spec("report", schedule=AfterSchedule.of("import")),
    spec("page", schedule=AfterSchedule.of("import", "failed")),
]


def _ran(scenario: Scenario) -> list[tuple[str, str]]:
    return [(r.trigger_id, r.outcome.value) for r in simulate(scenario).records]


def test_a_failed_run_fires_the_failed_dependents_not_the_completed_ones() -> None:
    failure = Failure(trigger_id="import", start_at=T0 + 2 * HOUR, end_at=T0 + 2 * HOUR)
    scenario = Scenario(
        specs=CHAIN,
        start_at=T0,
        end_at=T0 + 2 * DAY,
        default_duration=20 * MINUTE,
        failures=[failure],
    )

    result = simulate(scenario)

    assert [(r.trigger_id, r.outcome.value) for r in result.records] == [
        ("import", "failed"),
        ("page", "completed"),
        ("import", "completed"),
        ("report", "completed"),
    ]
    assert result.records[0].error == FAILED_ERROR
    assert result.records[1].upstream_run_id == result.records[0].run_id


def test_a_range_fails_every_run_starting_in_it() -> None:
    failure = Failure(trigger_id="import", start_at=T0, end_at=T0 + DAY + 3 * HOUR)
    scenario = Scenario(
        specs=CHAIN,
        start_at=T0,
        end_at=T0 + 3 * DAY,
        default_duration=20 * MINUTE,
        failures=[failure],
    )

    assert _ran(scenario) == [
        ("import", "failed"),
        ("page", "completed"),
        ("import", "failed"),
        ("page", "completed"),
        ("import", "completed"),
        ("report", "completed"),
    ]


def test_all_waits_for_each_upstream_and_any_fires_on_each() -> None:
    both = AfterSchedule(
        upstreams=(Upstream(trigger="a"), Upstream(trigger="b")), join="all", within=2 * HOUR
    )
    either = AfterSchedule(
        upstreams=(
            Upstream(trigger="a", outcome="failed"),
            Upstream(trigger="b", outcome="failed"),
        ),
        join="any",
    )
    scenario = Scenario(
        specs=[
            spec("a", cron="0 1 * * *"),
            spec("b", cron="30 1 * * *"),
            spec("both", schedule=both),
            spec("either", schedule=either),
        ],
        start_at=T0,
        end_at=T0 + 2 * DAY,
        default_duration=10 * MINUTE,
        failures=[Failure(trigger_id="a", start_at=T0 + DAY, end_at=T0 + 2 * DAY)],
    )

    result = simulate(scenario)

    ran = [(r.trigger_id, r.outcome, r.occurrence_at) for r in result.records]
    assert ran == [
        ("a", Outcome.COMPLETED, T0 + HOUR),
        ("b", Outcome.COMPLETED, T0 + 90 * MINUTE),
        ("both", Outcome.COMPLETED, T0 + 100 * MINUTE),
        ("a", Outcome.FAILED, T0 + DAY + HOUR),
        ("either", Outcome.COMPLETED, T0 + DAY + 70 * MINUTE),
        ("b", Outcome.COMPLETED, T0 + DAY + 90 * MINUTE),
    ]
    by_trigger = {r.trigger_id: r for r in result.records}
    assert by_trigger["both"].upstream_run_ids == [
        result.records[0].run_id,
        result.records[1].run_id,
    ]


def test_a_failure_no_run_starts_within_is_told_apart() -> None:
    hit = Failure(trigger_id="import", start_at=T0 + 2 * HOUR, end_at=T0 + 2 * HOUR)
    missed = Failure(trigger_id="import", start_at=T0 + 3 * HOUR, end_at=T0 + 4 * HOUR)
    scenario = Scenario(
        specs=CHAIN, start_at=T0, end_at=T0 + DAY, default_duration=MINUTE, failures=[hit, missed]
    )

    result = simulate(scenario)

    assert result.failed_starts == [("import", T0 + 2 * HOUR)]
    assert result.unmatched(scenario.failures) == [missed]
