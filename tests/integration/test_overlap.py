"""Overlap policies through the scheduler: a fake clock and runs of scripted length.

Scenarios 1-7 of the scheduler reference (every 5 minutes from 2022-06-01T00:00Z,
after Temporal's schedule tests), the supersede edge cases, and a policy change
that reaches occurrences already buffered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from datetime import timedelta
from typing import Any

import pytest

from looms_runtime.db import Database
from tests.clocks import FakeClock
from tests.factories import spec
from tests.integration.harness import Harness, ScriptedRunner
from triggers.clock import utc
from triggers.model import CatchupPolicy, Overlap
from triggers.runner.protocol import LaunchRequest

T0 = utc(2022, 6, 1)
EVERY_5M = "*/5 * * * *"


def lasting(minutes: Mapping[int, float | None], *, default: float | None = 2) -> ScriptedRunner:
    """Runs whose length depends on the minute of their occurrence (None: never ends)."""

    def script(request: LaunchRequest) -> tuple[timedelta | None, str]:
        length = minutes.get(request.occurrence_at.minute, default)
        return (None if length is None else timedelta(minutes=length)), "completed"

    return ScriptedRunner(FakeClock(T0), script)


Make = Callable[..., Harness]


@pytest.fixture
def make(reused_database: Database) -> Iterator[Make]:
    """Harnesses on the test database, closed at teardown."""
    made: list[Harness] = []

    def build(runner: ScriptedRunner, **options: Any) -> Harness:
        harness = Harness(reused_database, start=T0, runner=runner, **options)
        made.append(harness)
        return harness

    yield build
    for harness in made:
        harness.close()


def test_skip_records_the_overlapping_occurrence_and_fires_the_next_on_time(make: Make) -> None:
    h = make(lasting({5: 7, 15: 2}))
    h.apply([spec("s", cron=EVERY_5M, overlap=Overlap.SKIP)])
    h.run_until(h.at(18))
    assert h.ledger("s") == ["00:05 completed", "00:10 skipped/overlap", "00:15 completed"]
    assert [r.idempotency_key for r in h.runner.requests] == [
        "s:2022-06-01T00:05:00Z",
        "s:2022-06-01T00:15:00Z",
    ]


def test_buffer_holds_one_and_launches_it_when_the_run_settles(make: Make) -> None:
    h = make(lasting({5: 22}))
    h.apply([spec("b", cron=EVERY_5M, overlap=Overlap.BUFFER)])
    h.run_until(h.at(26))
    assert h.ledger("b") == [
        "00:05 launched",
        "00:10 buffered/overlap",
        "00:15 skipped/overlap",
        "00:20 skipped/overlap",
        "00:25 skipped/overlap",
    ]
    h.run_until(h.at(32))
    assert h.ledger("b") == [
        "00:05 completed",
        "00:10 completed",
        "00:15 skipped/overlap",
        "00:20 skipped/overlap",
        "00:25 skipped/overlap",
        "00:30 completed",
    ]
    assert h.launched_at("b") == {"00:05": "00:05", "00:10": "00:27", "00:30": "00:30"}


def test_buffer_all_runs_every_occurrence_one_after_another(make: Make) -> None:
    h = make(lasting({5: 12, 10: 2, 15: 3, 20: 1}))
    h.apply([spec("a", cron=EVERY_5M, overlap=Overlap.BUFFER_ALL)])
    h.run_until(h.at(28))
    assert h.launched_at("a") == {
        "00:05": "00:05",
        "00:10": "00:17",
        "00:15": "00:19",
        "00:20": "00:22",
        "00:25": "00:25",
    }
    assert all(row.endswith("completed") for row in h.ledger("a"))


def test_buffer_all_bounded_by_max_buffer_skips_as_buffer_full(make: Make) -> None:
    h = make(lasting({5: 17, 10: 1, 15: 1}))
    h.apply([spec("m", cron=EVERY_5M, overlap=Overlap.BUFFER_ALL, max_buffer=2)])
    h.run_until(h.at(20.5))
    assert h.ledger("m") == [
        "00:05 launched",
        "00:10 buffered/overlap",
        "00:15 buffered/overlap",
        "00:20 skipped/buffer_full",
    ]
    h.run_until(h.at(26))
    assert h.launched_at("m") == {
        "00:05": "00:05",
        "00:10": "00:22",
        "00:15": "00:23",
        "00:25": "00:25",
    }


def test_supersede_cancels_the_active_run_and_launches_the_new_one(make: Make) -> None:
    h = make(lasting({5: None}))
    h.apply([spec("c", cron=EVERY_5M, overlap=Overlap.SUPERSEDE)])
    h.run_until(h.at(11))
    first = h.runner.run_for("c:2022-06-01T00:05:00Z")
    assert h.runner.cancelled == [first]
    assert h.ledger("c") == ["00:05 superseded", "00:10 launched"]
    assert h.launched_at("c") == {"00:05": "00:05", "00:10": "00:10"}
    [superseded, _] = h.history("c")
    assert superseded.run_id == first and superseded.settled_at == h.at(10)


def test_allow_launches_every_occurrence_at_its_time_concurrently(make: Make) -> None:
    h = make(lasting({}, default=12))
    h.apply([spec("w", cron=EVERY_5M, overlap=Overlap.ALLOW, max_active=5)])
    h.run_until(h.at(21))
    assert h.launched_at("w") == {m: m for m in ("00:05", "00:10", "00:15", "00:20")}
    assert len(h.runner.active()) == 3  # :05 ended at :17


def test_allow_skips_beyond_max_active(make: Make) -> None:
    h = make(lasting({}, default=12))
    h.apply([spec("w", cron=EVERY_5M, overlap=Overlap.ALLOW, max_active=2)])
    h.run_until(h.at(21))
    assert h.ledger("w") == [
        "00:05 completed",
        "00:10 launched",
        "00:15 skipped/overlap",
        "00:20 launched",
    ]


def test_supersede_collapses_occurrences_due_together_into_the_newest(
    reused_database: Database,
) -> None:
    runner = lasting({})
    h = Harness(reused_database, start=T0, runner=runner)
    h.apply(
        [
            spec(
                "k",
                cron=EVERY_5M,
                overlap=Overlap.SUPERSEDE,
                catchup=CatchupPolicy.ALL,
                window=timedelta(hours=1),
            )
        ]
    )
    h.step()
    h.close()
    # A restart after a downtime: three occurrences come due in one tick.
    restarted = Harness(reused_database, start=T0 + timedelta(minutes=16), runner=runner, owner="b")
    restarted.step()
    restarted.close()
    assert restarted.ledger("k") == [
        "00:05 superseded/overlap",
        "00:10 superseded/overlap",
        "00:15 launched",
    ]
    assert [r.idempotency_key for r in runner.requests] == ["k:2022-06-01T00:15:00Z"]


def test_failed_cancel_keeps_the_prior_run_active_and_retries_the_replacement(make: Make) -> None:
    runner = lasting({5: None})
    runner.fail_cancels = 1
    h = make(runner)
    h.apply([spec("f", cron=EVERY_5M, overlap=Overlap.SUPERSEDE)])
    h.run_until(h.at(10))
    prior = runner.run_for("f:2022-06-01T00:05:00Z")
    assert h.ledger("f") == ["00:05 launched", "00:10 launching"]
    assert [r.run_id for r in h.store.active_runs()] == [prior]
    assert runner.run_for("f:2022-06-01T00:10:00Z") is None  # never started meanwhile
    [pending] = h.history("f")[1:]
    assert pending.error is not None and "cancel" in pending.error
    h.run_until(h.at(10) + timedelta(seconds=6))  # the launcher retries after 5 s
    assert h.ledger("f") == ["00:05 superseded", "00:10 launched"]
    assert h.launched_at("f")["00:10"] == "00:10:05"
    assert runner.cancelled == [prior]  # the failed attempt never reached the runtime


def test_supersede_behind_a_reservation_supersedes_once_the_run_exists(make: Make) -> None:
    runner = lasting({5: None})
    runner.fail_starts.add("r:2022-06-01T00:05:00Z")  # the runtime does not answer yet
    h = make(runner)
    h.apply([spec("r", cron=EVERY_5M, overlap=Overlap.SUPERSEDE)])
    h.run_until(h.at(12))
    assert h.ledger("r") == ["00:05 launching", "00:10 buffered/overlap"]
    runner.fail_starts.clear()
    h.run_until(h.at(12) + timedelta(seconds=10))
    assert h.ledger("r") == ["00:05 superseded", "00:10 launched"]
    assert runner.cancelled == [runner.run_for("r:2022-06-01T00:05:00Z")]


def test_policy_change_reaches_occurrences_already_buffered(make: Make) -> None:
    h = make(lasting({5: None}))
    h.apply([spec("p", cron=EVERY_5M, overlap=Overlap.BUFFER_ALL)])
    h.run_until(h.at(16))
    assert h.ledger("p")[1:] == ["00:10 buffered/overlap", "00:15 buffered/overlap"]
    h.apply([spec("p", cron=EVERY_5M, overlap=Overlap.SKIP)])
    h.step()
    assert h.ledger("p") == [
        "00:05 launched",
        "00:10 skipped/overlap",
        "00:15 skipped/overlap",
    ]
    trigger = h.store.get_trigger("p")
    assert trigger is not None and trigger.buffered_count == 0
