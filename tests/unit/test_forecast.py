"""`triggers next` tells what the timetable will do: its stops, its jitter, its bounds."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from tests.factories import spec
from triggers.clock import utc
from triggers.model import AtSchedule, Trigger, TriggerSpec
from triggers.scheduler.forecast import Forecast, Stop, forecast
from triggers.scheduler.occurrences import compile_schedule
from triggers.scheduler.timetable import Timetable

T0 = utc(2027, 1, 1)
HOUR = timedelta(hours=1)


def _trigger(declared: TriggerSpec, **state: object) -> Trigger:
    values: dict[str, object] = {
        "spec": declared,
        "revision": 1,
        "watermark_at": T0,
        "created_at": T0,
        "updated_at": T0,
        **state,
    }
    return Trigger(**values)  # type: ignore[arg-type]


def _forecast(declared: TriggerSpec, count: int = 5, **state: Any) -> Forecast:
    schedule = compile_schedule(
        declared.schedule,
        trigger_id=declared.id,
        timezone=declared.timezone,
        start_at=declared.start_at,
        end_at=declared.end_at,
    )
    return forecast(declared, schedule, after=T0, count=count, **state)


@pytest.mark.parametrize(
    ("declared", "state", "stop"),
    [
        (spec(every=HOUR), {"retired": True}, Stop.RETIRED),
        (spec(every=HOUR, enabled=False), {"paused": True}, Stop.DISABLED),
        (spec(every=HOUR), {"paused": True}, Stop.PAUSED),
        (spec(every=HOUR, max_runs=2), {"runs_launched": 2}, Stop.MAX_RUNS),
        (spec(schedule=AtSchedule(at=T0 - HOUR)), {}, Stop.ENDED),
        (spec(every=HOUR, end_at=T0), {}, Stop.ENDED),
    ],
    ids=["retired", "disabled-before-paused", "paused", "max-runs-reached", "at-passed", "ended"],
)
def test_a_trigger_that_takes_no_claims_has_no_next_fire_and_says_why(
    declared: TriggerSpec, state: dict[str, Any], stop: Stop
) -> None:
    found = _forecast(declared, **state)
    assert (found.fires, found.stop) == ([], stop)


def test_the_list_stops_after_the_launches_max_runs_leaves() -> None:
    found = _forecast(spec(every=HOUR, max_runs=5), runs_launched=3)
    assert [f.occurrence_at for f in found.fires] == [T0 + HOUR, T0 + 2 * HOUR]
    assert (found.stop, found.runs_left) == (Stop.MAX_RUNS, 2)


def test_the_list_stops_at_the_end_of_the_schedule() -> None:
    found = _forecast(spec(every=HOUR, end_at=T0 + 2 * HOUR))
    assert [f.occurrence_at for f in found.fires] == [T0 + HOUR, T0 + 2 * HOUR]
    assert found.stop is Stop.ENDED


def test_a_list_cut_at_its_count_has_no_stop() -> None:
    found = _forecast(spec(every=HOUR, max_runs=3), count=2)
    assert (len(found.fires), found.stop) == (2, None)
    found = _forecast(spec(every=HOUR, max_runs=2), count=2)
    assert (len(found.fires), found.stop) == (2, Stop.MAX_RUNS)


@pytest.mark.parametrize(
    "state",
    [{}, {"paused": True}, {"retired": True}, {"runs_launched": 3}, {"runs_launched": 1}],
    ids=["enabled", "paused", "retired", "max-runs-reached", "one-run-left"],
)
def test_the_first_fire_is_when_the_timetable_makes_the_trigger_due(
    state: dict[str, object],
) -> None:
    declared = spec(cron="0 * * * *", jitter=timedelta(minutes=7), max_runs=3)
    trigger = _trigger(declared, **state)
    entry = Timetable().sync(trigger)
    found = _forecast(
        declared,
        count=1,
        paused=trigger.paused,
        retired=trigger.retired,
        runs_launched=trigger.runs_launched,
    )
    first = found.fires[0].fires_at if found.fires else None
    assert entry.due_at == first
    if first is not None:
        assert T0 + HOUR <= first < T0 + HOUR + timedelta(minutes=7)


def test_every_fire_carries_its_local_time_and_jitter() -> None:
    declared = dataclasses.replace(spec(cron="30 2 * * *"), timezone="Europe/Berlin")
    found = _forecast(declared, count=2)
    assert [f.local.isoformat() for f in found.fires] == [
        "2027-01-01T02:30:00+01:00",
        "2027-01-02T02:30:00+01:00",
    ]
    assert all(f.fires_at == f.occurrence_at for f in found.fires)
