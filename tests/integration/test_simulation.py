"""A simulation writes the ledger the real engine writes over the same scenario.

Each scenario runs twice: through `triggers.simulation` (the scheduler inline, the
memory store, the simulated runner, polls once a day), and through the daemon's
own configuration on SQLite and PostgreSQL (`engine_replay.EnginePlayer`: launcher
and monitor threads, the SQL store, the scripted runner of the scheduler's suites,
polls every ten minutes). Both ledgers must hold the same occurrences with the
same outcomes, reasons and ranges.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from looms_runtime.db import Database
from tests.integration.engine_replay import EnginePlayer
from triggers.clock import iso, utc
from triggers.declarations import parse_declarations
from triggers.model import FireRecord, TriggerSpec
from triggers.simulation import ClockJump, Downtime, Edit, Pause, Scenario, simulate

pytestmark = pytest.mark.timeout(300)

T0 = utc(2027, 3, 27)
Row = tuple[str, str, str, str | None, int, str | None]


def _specs(body: str) -> list[TriggerSpec]:
    text = "version: 1\nflows:\n  job: {steps: []}\ntriggers:\n" + body
    return list(parse_declarations(text, source="scenario.yaml").triggers)


_CALENDARS = (
    "calendars:\n"
    "  de-by: {holidays: {country: DE, subdiv: BY}}\n"
    '  dst-day: {dates: ["2027-03-28"]}\n'
    '  nights: {cron: ["* 0-5 * * *"]}\n'
)


def _calendar_specs(body: str) -> list[TriggerSpec]:
    text = f"version: 1\n{_CALENDARS}flows:\n  job: {{steps: []}}\ntriggers:\n" + body
    return list(parse_declarations(text, source="scenario.yaml").triggers)


def _at(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def _rows(records: list[FireRecord]) -> list[Row]:
    rows = [
        (
            iso(r.occurrence_at),
            r.trigger_id,
            r.outcome.value,
            r.reason.value if r.reason else None,
            r.count,
            iso(r.last_occurrence_at) if r.last_occurrence_at else None,
        )
        for r in records
    ]
    return sorted(rows)


SCENARIOS = {
    "dst-night-long-backup-and-hourly-overlap": Scenario(
        specs=_specs(
            '  - {id: backup, flow: job, cron: "30 2 * * *", timezone: Europe/Berlin}\n'
            '  - {id: report, flow: job, cron: "*/30 * * * *", timezone: Europe/Berlin}\n'
            "  - {id: sync, flow: job, every: 20m, overlap: buffer}\n"
        ),
        start_at=T0,
        end_at=_at(60),
        durations={"backup": timedelta(minutes=70), "sync": timedelta(minutes=45)},
        default_duration=timedelta(minutes=40),
    ),
    "downtime-catch-up-under-each-policy": Scenario(
        specs=_specs(
            "  - {id: latest, flow: job, every: 30m}\n"
            "  - {id: all, flow: job, every: 30m, catchup: {policy: all, window: 2h},"
            " overlap: buffer_all}\n"
            "  - {id: none, flow: job, every: 30m, catchup: {policy: none}}\n"
            '  - {id: daily, flow: job, cron: "0 6 * * *"}\n'
        ),
        start_at=T0,
        end_at=_at(30),
        default_duration=timedelta(minutes=10),
        downtimes=[
            Downtime(start_at=_at(3.1), end_at=_at(7.2)),
            Downtime(start_at=_at(20), end_at=_at(20.5)),
        ],
    ),
    "pause-resume-and-a-pause-to-the-end": Scenario(
        specs=_specs(
            "  - {id: a, flow: job, every: 15m}\n"
            '  - {id: b, flow: job, cron: "0 * * * *", overlap: skip}\n'
            "  - {id: off, flow: job, every: 1h, enabled: false}\n"
        ),
        start_at=T0,
        end_at=_at(12),
        default_duration=timedelta(minutes=5),
        durations={"b": timedelta(minutes=90)},
        pauses=[
            Pause(trigger_id="a", start_at=_at(2), end_at=_at(5)),
            Pause(trigger_id="b", start_at=_at(9)),
        ],
        downtimes=[Downtime(start_at=_at(4), end_at=_at(6))],
    ),
    "supersede-buffer-and-allow-with-long-runs": Scenario(
        specs=_specs(
            "  - {id: sup, flow: job, every: 10m, overlap: supersede}\n"
            "  - {id: one, flow: job, every: 10m, overlap: buffer}\n"
            "  - {id: many, flow: job, every: 10m, overlap: buffer_all, max_buffer: 3}\n"
            "  - {id: two, flow: job, every: 10m, overlap: allow, max_active: 2}\n"
        ),
        start_at=T0,
        end_at=_at(6),
        default_duration=timedelta(minutes=25),
        downtimes=[Downtime(start_at=_at(2), end_at=_at(2.5))],
    ),
    "max-runs-end-jitter-and-a-start": Scenario(
        specs=_specs(
            "  - {id: three, flow: job, every: 1h, max_runs: 3}\n"
            '  - {id: ends, flow: job, every: 30m, end: "2027-03-27T05:00:00Z"}\n'
            "  - {id: jittered, flow: job, every: 1h, jitter: 20m}\n"
            '  - {id: later, flow: job, every: 1h, start: "2027-03-27T08:00:00Z"}\n'
            '  - {id: once, flow: job, at: "2027-03-27T04:30:00Z"}\n'
        ),
        start_at=T0,
        end_at=_at(12),
        default_duration=timedelta(minutes=5),
    ),
    "clock-jumps-forwards-and-back": Scenario(
        specs=_specs(
            "  - {id: hourly, flow: job, every: 1h}\n"
            '  - {id: quarter, flow: job, cron: "*/15 * * * *", catchup: {policy: all}}\n'
        ),
        start_at=T0,
        end_at=_at(10),
        default_duration=timedelta(minutes=2),
        jumps=[
            ClockJump(at=_at(2.1), by=timedelta(hours=2)),
            ClockJump(at=_at(6.1), by=-timedelta(minutes=50)),
        ],
    ),
    "an-edit-changes-one-trigger-and-retires-another": Scenario(
        specs=_specs(
            "  - {id: keep, flow: job, every: 1h}\n"
            "  - {id: change, flow: job, every: 1h, overlap: skip}\n"
            "  - {id: gone, flow: job, every: 30m}\n"
        ),
        start_at=T0,
        end_at=_at(8),
        default_duration=timedelta(minutes=50),
        edits=[
            Edit(
                at=_at(3.5),
                specs=_specs(
                    "  - {id: keep, flow: job, every: 1h}\n"
                    "  - {id: change, flow: job, every: 20m, overlap: buffer}\n"
                    "  - {id: new, flow: job, every: 45m}\n"
                ),
            )
        ],
        pauses=[Pause(trigger_id="new", start_at=_at(5), end_at=_at(6))],
    ),
    # Easter Monday, a DST day excluded by date, nights by cron wall times; the
    # excluded occurrences take no slot of the long runs they fall behind.
    "holiday-dst-day-and-nights-excluded": Scenario(
        specs=_calendar_specs(
            '  - {id: backup, flow: job, cron: "30 2 * * *", timezone: Europe/Berlin,'
            " exclude: [de-by, dst-day]}\n"
            "  - {id: sync, flow: job, every: 50m, timezone: Europe/Berlin,"
            " exclude: [nights], overlap: buffer}\n"
            '  - {id: weekday, flow: job, cron: "0 9 * * *", timezone: Europe/Berlin,'
            " exclude: [de-by]}\n"
        ),
        start_at=T0,
        end_at=_at(80),
        durations={"sync": timedelta(minutes=70)},
        default_duration=timedelta(minutes=5),
    ),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_a_simulation_writes_the_ledger_the_real_engine_writes(
    name: str, database: Database
) -> None:
    scenario = SCENARIOS[name]

    simulated = _rows(simulate(scenario).records)
    engine = _rows(EnginePlayer(database, scenario).play())

    assert simulated == engine
    assert len({row[2] for row in simulated}) > 1  # a scenario that tells something
    if "excluded" in name:
        assert {row[3] for row in simulated} >= {"calendar", "overlap"}
