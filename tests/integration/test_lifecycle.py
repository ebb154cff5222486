"""Lifecycle controls through the scheduler: max_runs, start/end, pause_on_failure,
manual fires, disable and re-enable, ledger retention, and what `list` shows."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest

from looms_runtime.db import Database
from tests.clocks import FakeClock
from tests.factories import spec
from tests.integration.harness import Harness, ScriptedRunner
from triggers import services
from triggers.clock import utc
from triggers.model import Outcome, Overlap
from triggers.runner.protocol import LaunchRequest
from triggers.store.sql import SqlTriggerStore

T0 = utc(2022, 6, 1)


def runs_lasting(minutes: float | None, state: str = "completed") -> ScriptedRunner:
    length = None if minutes is None else timedelta(minutes=minutes)
    return ScriptedRunner(FakeClock(T0), lambda _request: (length, state))


@pytest.fixture
def h(reused_database: Database) -> Iterator[Harness]:
    harness = Harness(reused_database, start=T0, runner=runs_lasting(1))
    yield harness
    harness.close()


def view(h: Harness, trigger_id: str) -> services.TriggerView:
    [found] = [
        v for v in services.list_triggers(h.store, now=h.clock.now()) if v.trigger.id == trigger_id
    ]
    return found


# -- max_runs, start, end -------------------------------------------------------------------


def test_max_runs_stops_after_n_launches_and_list_shows_no_next_fire(h: Harness) -> None:
    h.apply([spec("n", cron="*/3 * * * *", max_runs=2)])
    assert view(h, "n").next_fire_at == h.at(3)
    h.run_until(h.at(20))
    assert h.ledger("n") == ["00:03 completed", "00:06 completed"]
    listed = view(h, "n")
    assert listed.next_fire_at is None
    assert listed.last is not None and listed.last.occurrence_at == h.at(6)


def test_skipped_occurrences_do_not_consume_max_runs(reused_database: Database) -> None:
    h = Harness(reused_database, start=T0, runner=runs_lasting(4))
    try:
        h.apply([spec("n", cron="*/3 * * * *", max_runs=2, overlap=Overlap.SKIP)])
        h.run_until(h.at(20))
        assert h.ledger("n") == ["00:03 completed", "00:06 skipped/overlap", "00:09 completed"]
    finally:
        h.close()


def test_manual_fires_do_not_consume_max_runs(h: Harness) -> None:
    h.apply([spec("n", cron="*/3 * * * *", max_runs=1)])
    h.run_until(h.at(1))
    services.claim_manual_fire(
        h.store, "n", now=h.at(1), key="k", overlap=None, owner="cli", host="h"
    )
    h.scheduler.refresh_soon()
    h.run_until(h.at(10))
    assert h.ledger("n") == ["00:01 completed", "00:03 completed"]


def test_start_and_end_bound_the_occurrences(h: Harness) -> None:
    h.apply([spec("b", cron="*/5 * * * *", start_at=h.at(10), end_at=h.at(20))])
    assert view(h, "b").next_fire_at == h.at(10)
    h.run_until(h.at(40))
    assert h.ledger("b") == ["00:10 completed", "00:15 completed", "00:20 completed"]
    assert view(h, "b").next_fire_at is None


# -- pause_on_failure -------------------------------------------------------------------------


def test_failure_pauses_with_the_failure_as_note_and_stops_launching(
    reused_database: Database,
) -> None:
    def script(request: LaunchRequest) -> tuple[timedelta | None, str]:
        return timedelta(minutes=2), "failed" if request.occurrence_at.minute == 5 else "completed"

    h = Harness(reused_database, start=T0, runner=ScriptedRunner(FakeClock(T0), script))
    try:
        h.apply([spec("f", cron="*/5 * * * *", pause_on_failure=True)])
        h.run_until(h.at(6))
        trigger = h.store.get_trigger("f")
        assert trigger is not None and not trigger.paused
        h.run_until(h.at(31))
        trigger = h.store.get_trigger("f")
        assert trigger is not None and trigger.paused
        assert trigger.pause_note == "exit status 1"
        assert h.ledger("f") == ["00:05 failed", "00:10 skipped/paused x5"]
        assert [r.idempotency_key for r in h.runner.requests] == ["f:2022-06-01T00:05:00Z"]
        assert view(h, "f").next_fire_at is None
    finally:
        h.close()


def test_cancellations_do_not_pause(reused_database: Database) -> None:
    h = Harness(reused_database, start=T0, runner=runs_lasting(None))
    try:
        h.apply([spec("c", cron="*/5 * * * *", pause_on_failure=True, overlap=Overlap.SUPERSEDE)])
        h.run_until(h.at(11))
        [run_id] = h.runner.active()
        h.runner.settle(run_id, "cancelled", "cancelled by an operator")
        h.run_until(h.at(16))
        assert h.ledger("c") == ["00:05 superseded", "00:10 cancelled", "00:15 launched"]
        trigger = h.store.get_trigger("c")
        assert trigger is not None and not trigger.paused
    finally:
        h.close()


# -- manual fires (scenarios 17, 18) and disable / re-enable (22) ------------------------------


def test_manual_fire_respects_overlap_unless_told_otherwise(reused_database: Database) -> None:
    h = Harness(reused_database, start=T0, runner=runs_lasting(25))
    try:
        h.apply([spec("s", cron="15 * * * *", overlap=Overlap.SKIP)])
        h.run_until(h.at(20))
        skipped = services.claim_manual_fire(
            h.store, "s", now=h.at(20), key=None, overlap=None, owner="cli", host="h"
        )
        assert (skipped.action.value, skipped.reason) == ("skip", "overlap")
        h.clock.set(h.at(30))
        allowed = services.claim_manual_fire(
            h.store, "s", now=h.at(30), key="now", overlap=Overlap.ALLOW, owner="cli", host="h"
        )
        assert allowed.idempotency_key == "s:manual:now"
        h.scheduler.refresh_soon()
        h.step()
        assert h.ledger("s") == [
            "00:15 launched",
            "00:20 skipped/overlap",
            "00:30 launched",
        ]
        assert len(h.runner.active()) == 2
    finally:
        h.close()


def test_manual_fire_bypasses_pause(h: Harness) -> None:
    h.apply([spec("p", cron="*/5 * * * *")])
    services.pause_trigger(h.store, "p", note=None, now=T0)
    h.run_until(h.at(7))
    services.claim_manual_fire(
        h.store, "p", now=h.at(7), key="go", overlap=None, owner="cli", host="h"
    )
    h.scheduler.refresh_soon()
    h.run_until(h.at(9))
    assert h.ledger("p") == ["00:05 skipped/paused", "00:07 completed"]


def test_reenabled_trigger_owes_nothing_for_the_disabled_time(h: Harness) -> None:
    h.apply([spec("d", cron="*/5 * * * *", enabled=False)])
    h.run_until(h.at(60))
    h.apply([spec("d", cron="*/5 * * * *")])
    h.run_until(h.at(66))
    # 01:00 fell while it was still disabled (the poll at 01:00 recorded it).
    assert h.ledger("d") == ["00:05 skipped/disabled x12", "01:05 completed"]
    assert next(r.idempotency_key for r in h.runner.requests) == "d:2022-06-01T01:05:00Z"


# -- retention ---------------------------------------------------------------------------------


class CountingStore(SqlTriggerStore):
    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self.prunes: list[datetime] = []

    def prune(self, *, older_than: datetime, limit: int = 10_000) -> int:
        self.prunes.append(older_than)
        return super().prune(older_than=older_than, limit=limit)


def test_retention_prunes_settled_rows_hourly_and_never_pending_ones(
    reused_database: Database,
) -> None:
    store = CountingStore(reused_database)
    runner = ScriptedRunner(
        FakeClock(T0), lambda r: (None if r.trigger_id == "stuck" else timedelta(0), "completed")
    )
    h = Harness(
        reused_database,
        start=T0,
        runner=runner,
        store=store,
        fire_retention=timedelta(days=1),
        poll_interval=timedelta(minutes=10),
    )
    try:
        h.apply(
            [
                spec("done", cron="0 * * * *"),
                spec("stuck", cron="0 * * * *", overlap=Overlap.BUFFER),
            ]
        )
        h.run_until(h.at(3 * 60))
        assert h.ledger("stuck") == [
            "01:00 launched",
            "02:00 buffered/overlap",
            "03:00 skipped/overlap",
        ]
        prunes_before = len(store.prunes)
        assert prunes_before == 4  # at 00:00, 01:00, 02:00, 03:00: polls every 10 min
        h.run_until(h.at(28 * 60 + 30))
        # The prune at 04:00 the next day took what settled before 04:00.
        done = h.history("done")
        assert next(r.occurrence_at for r in done) == utc(2022, 6, 1, 4)
        assert h.ledger("stuck")[:3] == [
            "01:00 launched",
            "02:00 buffered/overlap",
            "04:00 skipped/overlap",
        ]
        intervals = {b - a for a, b in zip(store.prunes, store.prunes[1:], strict=False)}
        assert min(intervals) >= timedelta(hours=1)
    finally:
        h.close()


# -- list ---------------------------------------------------------------------------------------


def test_list_shows_next_fire_last_outcome_and_active_run(reused_database: Database) -> None:
    h = Harness(reused_database, start=T0, runner=runs_lasting(None))
    try:
        h.apply([spec("l", cron="*/5 * * * *", overlap=Overlap.SKIP), spec("q", cron="0 0 1 1 *")])
        h.run_until(h.at(11))
        listed: dict[str, Any] = {
            v.trigger.id: v for v in services.list_triggers(h.store, now=h.clock.now())
        }
        assert listed["l"].next_fire_at == h.at(15)
        assert listed["l"].last.outcome is Outcome.SKIPPED
        assert listed["l"].active_run_id == h.runner.active()[0]
        assert listed["q"].next_fire_at == utc(2023, 1, 1)
        assert listed["q"].last is None and listed["q"].active_run_id is None
    finally:
        h.close()
