"""What a simulation answers, and that `next` says what the simulated daemon does.

(`tests/integration/test_simulation.py` checks the simulation against the daemon's
own configuration on SQL stores.)
"""

from __future__ import annotations

import dataclasses
import gc
from datetime import datetime, timedelta

import pytest

from tests.factories import spec
from triggers.clock import utc
from triggers.errors import InputError
from triggers.model import (
    AfterSchedule,
    AtSchedule,
    CronSchedule,
    Outcome,
    Overlap,
    Reason,
    Requirement,
    TriggerSpec,
)
from triggers.scheduler.forecast import forecast
from triggers.scheduler.occurrences import compile_schedule, count_occurrences
from triggers.simulation import ClockJump, Downtime, Edit, Interval, Pause, Scenario, simulate

T0 = utc(2027, 3, 1)
DAY = timedelta(days=1)
HOUR = timedelta(hours=1)
MINUTE = timedelta(minutes=1)


def test_a_month_of_a_daily_trigger_takes_a_tick_per_occurrence_and_poll() -> None:
    result = simulate(
        Scenario(specs=[spec("daily", cron="0 6 * * *")], start_at=T0, end_at=T0 + 30 * DAY)
    )

    assert [r.outcome for r in result.records] == [Outcome.COMPLETED] * 30
    assert result.ticks <= 2 * 30 + 2  # never second by second: its fires and its polls
    assert result.runs == 30


def test_a_run_still_going_at_the_end_is_launched_and_the_end_is_inclusive() -> None:
    result = simulate(
        Scenario(
            specs=[spec("hourly", every=HOUR)],
            start_at=T0,
            end_at=T0 + 2 * HOUR,
            default_duration=timedelta(minutes=90),
        )
    )

    assert [(r.occurrence_at, r.outcome, r.reason) for r in result.records] == [
        (T0 + HOUR, Outcome.LAUNCHED, None),
        (T0 + 2 * HOUR, Outcome.SKIPPED, Reason.OVERLAP),
    ]


def test_a_pause_to_the_end_is_recorded_up_to_the_end() -> None:
    result = simulate(
        Scenario(
            specs=[spec("hourly", every=HOUR)],
            start_at=T0,
            end_at=T0 + 10 * HOUR,
            pauses=[Pause(trigger_id="hourly", start_at=T0 + 3.5 * HOUR)],
        )
    )

    paused = result.records[-1]
    assert (paused.outcome, paused.reason, paused.count) == (Outcome.SKIPPED, Reason.PAUSED, 7)
    assert (paused.occurrence_at, paused.last_occurrence_at) == (T0 + 4 * HOUR, T0 + 10 * HOUR)


def test_downtime_is_given_on_the_ledger_clock_within_the_range() -> None:
    result = simulate(
        Scenario(
            specs=[spec("hourly", every=HOUR)],
            start_at=T0,
            end_at=T0 + DAY,
            downtimes=[
                Downtime(start_at=T0 + 5 * HOUR, end_at=T0 + 6 * HOUR),
                Downtime(start_at=T0 + 5.5 * HOUR, end_at=T0 + 7 * HOUR),  # overlapping: joined
                Downtime(start_at=T0 + 20 * HOUR, end_at=T0 + 2 * DAY),  # cut at the end
            ],
            jumps=[ClockJump(at=T0 + 2 * HOUR, by=timedelta(minutes=30))],
        )
    )

    shift = timedelta(minutes=30)
    assert result.downtime == [
        Interval(start_at=T0 + 5 * HOUR + shift, end_at=T0 + 7 * HOUR + shift),
        Interval(start_at=T0 + 20 * HOUR + shift, end_at=T0 + DAY + shift),
    ]
    missed = [r for r in result.records if r.outcome is Outcome.MISSED]
    assert [(r.occurrence_at, r.count) for r in missed] == [(T0 + 6 * HOUR, 1)]


def test_an_edit_applies_a_new_declaration_and_retires_what_it_lacks() -> None:
    result = simulate(
        Scenario(
            specs=[spec("a", every=HOUR), spec("b", every=HOUR)],
            start_at=T0,
            end_at=T0 + 6 * HOUR,
            edits=[Edit(at=T0 + 3.5 * HOUR, specs=[spec("a", every=2 * HOUR)])],
        )
    )

    fired = {(r.trigger_id, r.occurrence_at.hour) for r in result.records}
    assert fired == {("a", 1), ("a", 2), ("a", 3), ("a", 4), ("a", 6), ("b", 1), ("b", 2), ("b", 3)}


def test_a_pause_of_a_trigger_not_declared_yet_is_refused_naming_the_option() -> None:
    scenario = Scenario(
        specs=[spec("a", every=HOUR)],
        start_at=T0,
        end_at=T0 + 6 * HOUR,
        pauses=[Pause(trigger_id="later", start_at=T0 + HOUR)],
        edits=[Edit(at=T0 + 2 * HOUR, specs=[spec("a", every=HOUR), spec("later", every=HOUR)])],
    )

    with pytest.raises(InputError, match="--pause later@"):
        simulate(scenario)


def _berlin(declared: TriggerSpec) -> TriggerSpec:
    return dataclasses.replace(declared, timezone="Europe/Berlin")


FORECASTS = {
    "dst-moved-fixed-time": _berlin(spec("backup", cron="30 2 * * *")),
    "dst-merged-wall-times": _berlin(spec("merged", cron="0,30 2 * * *")),
    "max-runs": spec("limited", cron="15 */6 * * *", max_runs=5),
    "end": spec("ending", every=timedelta(hours=7), end_at=utc(2027, 3, 29, 12)),
    "jitter": spec("jittered", cron="0 */4 * * *", jitter=timedelta(minutes=30)),
    "at": spec("once", schedule=AtSchedule(at=utc(2027, 3, 28, 9))),
    "calendar-like-cron": _berlin(spec("monthly", schedule=CronSchedule(expression="0 6 L * *"))),
}


@pytest.mark.parametrize("name", list(FORECASTS))
def test_next_says_what_the_simulated_daemon_fires(name: str) -> None:
    declared = FORECASTS[name]
    start, end = utc(2027, 3, 26), utc(2027, 4, 2)
    schedule = compile_schedule(
        declared.schedule,
        trigger_id=declared.id,
        timezone=declared.timezone,
        start_at=declared.start_at,
        end_at=declared.end_at,
    )
    told = forecast(declared, schedule, after=start, count=1000)
    result = simulate(Scenario(specs=[declared], start_at=start, end_at=end))

    launched = [(r.occurrence_at, r.launched_at) for r in result.records if r.run_id]
    # The ledger keeps instants to the millisecond.
    assert launched == [(f.occurrence_at, _ms(f.fires_at)) for f in told.fires if f.fires_at <= end]
    assert {r.outcome for r in result.records} <= {Outcome.COMPLETED, Outcome.LAUNCHED}


def _ms(at: datetime) -> datetime:
    return at.replace(microsecond=at.microsecond // 1000 * 1000)


def test_a_range_without_a_daemon_leaves_an_empty_ledger() -> None:
    result = simulate(
        Scenario(
            specs=[spec("hourly", every=HOUR)],
            start_at=T0,
            end_at=T0 + DAY,
            downtimes=[Downtime(start_at=T0 - DAY, end_at=T0 + 2 * DAY)],
        )
    )

    assert (result.records, result.downtime) == ([], [Interval(start_at=T0, end_at=T0 + DAY)])


def test_a_run_without_a_stated_duration_takes_no_time_and_overlaps_nothing() -> None:
    result = simulate(
        Scenario(
            specs=[spec("heartbeat", every=timedelta(seconds=30))], start_at=T0, end_at=T0 + HOUR
        )
    )

    outcomes = {record.outcome.value for record in result.records}
    assert outcomes == {"completed"} and len(result.records) == 120  # 00:00:30 .. 01:00


def test_the_rows_for_a_renderer_are_history_rows_and_downtime_spans() -> None:
    from triggers.cli._common import fire_json
    from triggers.cli._foresight import simulated_history

    scenario = Scenario(
        specs=[spec("hourly", every=HOUR)],
        start_at=T0,
        end_at=T0 + 6 * HOUR,
        default_duration=MINUTE,  # the run of the range's last instant is still going
        downtimes=[Downtime(start_at=T0 + 2.5 * HOUR, end_at=T0 + 4.5 * HOUR)],
    )

    rows, downtime = simulated_history(scenario)

    assert rows == [fire_json(record) for record in simulate(scenario).records]
    assert downtime == [(T0 + 2.5 * HOUR, T0 + 4.5 * HOUR)]
    assert [row["outcome"] for row in rows] == [
        "completed",
        "completed",
        "missed",
        "completed",
        "completed",
        "launched",
    ]


def test_years_of_a_weekly_trigger_keep_every_occurrence() -> None:
    result = simulate(
        Scenario(
            specs=[spec("weekly", cron="0 6 * * MON")],
            start_at=T0,
            end_at=T0 + 3 * 365 * DAY,
            jumps=[ClockJump(at=T0 + DAY, by=-30 * DAY)],
        )
    )

    # The clock read 30 days less from day 1 on: those weeks were decided already.
    weekly = compile_schedule(CronSchedule(expression="0 6 * * MON"), trigger_id="weekly")
    expected = count_occurrences(weekly, after=T0, until=T0 + 3 * 365 * DAY - 30 * DAY)
    assert len(result.records) == expected == 153
    assert {r.outcome for r in result.records} == {Outcome.COMPLETED}


def test_a_simulation_leaves_the_collector_on_and_its_ledger_old() -> None:
    scenario = Scenario(specs=[spec("hourly", every=HOUR)], start_at=T0, end_at=T0 + 30 * DAY)
    # This test owns the collector's state it asserts: a daemon another test ran in
    # this process may have frozen its start-up (`gc.freeze`), even after that test.
    gc.unfreeze()
    gc.collect()
    result = simulate(scenario)

    assert gc.isenabled() and gc.get_freeze_count() == 0
    # The ledger it kept is in the oldest generation, not left for a young pass.
    young = {id(o) for generation in (0, 1) for o in gc.get_objects(generation)}
    assert len(result.records) == 30 * 24 and id(result.records[0]) not in young
    assert id(result.records) not in young


def test_a_simulation_keeps_what_the_process_froze_frozen() -> None:
    scenario = Scenario(specs=[spec("daily", cron="0 6 * * *")], start_at=T0, end_at=T0 + DAY)
    gc.freeze()
    try:
        assert gc.get_freeze_count() > 0
        simulate(scenario)
        # (Some of them may be freed meanwhile; none is moved back.)
        assert gc.get_freeze_count() > 0 and gc.isenabled()
    finally:
        gc.unfreeze()


def test_a_duration_longer_than_a_triggers_period_is_warned_about() -> None:
    scenario = Scenario(
        specs=[spec("hourly", every=HOUR), spec("daily", cron="0 6 * * *")],
        start_at=T0,
        end_at=T0 + DAY,
        default_duration=90 * MINUTE,
        durations={"daily": 2 * HOUR},
    )

    assert scenario.warnings() == [
        "--duration 1h30m: longer than hourly's period (1h): "
        "the next occurrences meet the overlap policy (skip)"
    ]
    assert (
        Scenario(specs=[spec("hourly", every=HOUR)], start_at=T0, end_at=T0 + DAY).warnings() == []
    )
    both = Scenario(
        specs=[spec("a", every=HOUR), spec("b", every=HOUR, overlap=Overlap.BUFFER)],
        start_at=T0,
        end_at=T0 + DAY,
        default_duration=2 * HOUR,
    )
    assert both.warnings() == [
        "--duration 2h: longer than the period of a, b (1h): "
        "the next occurrences meet the overlap policy (buffer, skip)"
    ]


def test_a_chain_of_dependent_triggers_runs_each_after_the_one_before() -> None:
    result = simulate(
        Scenario(
            specs=[
                spec("import", cron="0 2 * * *"),
                spec("report", schedule=AfterSchedule.of("import")),
                spec("cleanup", schedule=AfterSchedule.of("report", "settled")),
                spec("page", schedule=AfterSchedule.of("import", "failed")),
            ],
            start_at=T0,
            end_at=T0 + 2 * DAY,
            default_duration=timedelta(minutes=20),
        )
    )

    ran = [(r.trigger_id, r.occurrence_at, r.outcome) for r in result.records]
    at_two = T0 + 2 * HOUR
    assert ran == [
        (trigger_id, day + at_two + n * 20 * MINUTE, Outcome.COMPLETED)
        for day in (timedelta(0), DAY)
        for n, trigger_id in enumerate(("import", "report", "cleanup"))
    ]
    by_run = {r.run_id: r for r in result.records}
    for record in result.records:
        if record.trigger_id != "import":
            assert record.upstream_run_id is not None
            upstream = by_run[record.upstream_run_id]
            assert upstream.settled_at == record.occurrence_at


def test_a_requirement_skips_an_occurrence_its_trigger_has_not_completed_within() -> None:
    needs = Requirement(trigger="import", outcome="completed", since=7 * HOUR)
    strict = Requirement(trigger="import", outcome="completed", since=30 * MINUTE)
    failed = Requirement(trigger="import", outcome="failed", since=DAY)
    result = simulate(
        Scenario(
            specs=[
                spec("import", cron="0 2 * * *"),
                spec("report", cron="0 1,9 * * *", requires=needs),
                spec("strict", cron="0 9 * * *", requires=strict),
                spec("on-failure", cron="0 9 * * *", requires=failed),
            ],
            start_at=T0,
            end_at=T0 + 10 * HOUR,
            default_duration=timedelta(minutes=20),
        )
    )

    decided = {
        (r.trigger_id, r.occurrence_at.hour): (r.outcome, r.reason, r.reason_detail)
        for r in result.records
    }
    skipped = (Outcome.SKIPPED, Reason.REQUIREMENT)
    assert decided[("report", 1)] == (*skipped, "import completed within 7h")
    assert decided[("report", 9)] == (Outcome.COMPLETED, None, None)
    assert decided[("strict", 9)] == (*skipped, "import completed within 30m")
    assert decided[("on-failure", 9)] == (*skipped, "import failed within 1d")
