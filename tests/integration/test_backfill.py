"""Backfill through the services and the scheduler: order, idempotency, carving, cap."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
from typer.testing import CliRunner

from looms_runtime.db import Database
from tests.clocks import FakeClock
from tests.factories import spec
from tests.integration.harness import Harness, ScriptedRunner
from triggers import services
from triggers.cli import app
from triggers.clock import utc
from triggers.errors import BackfillTooLargeError, InvalidTimeError
from triggers.model import CatchupPolicy, Outcome, Overlap, TriggerSpec
from triggers.runner.fake import FakeRunner
from triggers.runner.protocol import LaunchRequest
from triggers.scheduler.backfill import BackfillResult, BackfillStatus
from triggers.store.sql import SqlTriggerStore

T0 = utc(2022, 6, 1)
EVENING = "0,17,34,51 19 31 * *"  # 19:00, 19:17, 19:34 and 19:51 on the 31st


def run_backfill(
    h: Harness, trigger_id: str, start: datetime, end: datetime, **options: object
) -> BackfillResult:
    result = services.claim_backfill(
        h.store,
        trigger_id,
        start_at=start,
        end_at=end,
        now=h.clock.now(),
        owner="cli",
        host="cli-host",
        **options,  # type: ignore[arg-type]
    )
    h.scheduler.refresh_soon()  # the daemon's next poll
    return result


def statuses(result: BackfillResult) -> list[tuple[str, str]]:
    return [(item.occurrence_at.strftime("%H:%M"), item.status.value) for item in result.items]


@pytest.fixture
def evening(reused_database: Database) -> Iterator[Harness]:
    lengths = {0: 4, 17: 4, 34: 10, 51: 3}

    def script(request: LaunchRequest) -> tuple[timedelta | None, str]:
        return timedelta(minutes=lengths[request.occurrence_at.minute]), "completed"

    h = Harness(reused_database, start=T0, runner=ScriptedRunner(FakeClock(T0), script))
    h.apply([spec("e", cron=EVENING, overlap=Overlap.SKIP)])
    yield h
    h.close()


def test_backfill_launches_the_range_one_after_another_in_order(evening: Harness) -> None:
    h = evening
    h.run_until(h.at(5))
    result = run_backfill(h, "e", utc(2022, 5, 31), T0)
    assert statuses(result) == [
        ("19:00", "launching"),
        ("19:17", "buffered"),
        ("19:34", "buffered"),
        ("19:51", "buffered"),
    ]
    assert result.overlap is Overlap.BUFFER_ALL  # despite the trigger's skip
    h.run_until(h.at(30))
    assert h.launched_at("e") == {
        "19:00": "00:05",
        "19:17": "00:09",
        "19:34": "00:13",
        "19:51": "00:23",
    }
    assert h.ledger("e") == [f"19:{m} completed" for m in ("00", "17", "34", "51")]
    assert [r.idempotency_key for r in h.runner.requests] == [
        f"e:2022-05-31T19:{m}:00Z" for m in ("00", "17", "34", "51")
    ]


def test_running_the_same_backfill_again_launches_nothing_new(evening: Harness) -> None:
    h = evening
    h.run_until(h.at(5))
    run_backfill(h, "e", utc(2022, 5, 31), T0)
    h.run_until(h.at(30))
    again = run_backfill(h, "e", utc(2022, 5, 31), T0)
    h.run_until(h.at(40))
    assert {item.status for item in again.items} == {BackfillStatus.ALREADY_DECIDED}
    assert {item.previous for item in again.items} == {Outcome.COMPLETED}
    assert len(h.runner.requests) == 4


def test_backfill_range_ends_are_inclusive(evening: Harness) -> None:
    h = evening
    h.run_until(h.at(5))
    at = utc(2022, 5, 31, 19, 17)
    exact = run_backfill(h, "e", at, at)
    assert [i.idempotency_key for i in exact.items] == ["e:2022-05-31T19:17:00Z"]
    later = at + timedelta(milliseconds=500)
    assert run_backfill(h, "e", later, later).items == []


def _downtime(db: Database, **declared: object) -> Harness:
    """Every minute from 12:00; no daemon from 12:02 to 13:00 (window 30m, latest):
    12:59 launches, 13:00 (within grace) meets it and is skipped."""
    runner = FakeRunner(auto_complete=True)
    t0 = utc(2026, 3, 1, 12)
    first = Harness(db, start=t0, runner=runner)
    first.apply([_every_minute(**declared)])
    first.run_until(t0 + timedelta(minutes=2))
    first.close()
    h = Harness(db, start=t0 + timedelta(hours=1), runner=runner, owner="daemon-b")
    h.step()
    return h


def _every_minute(**declared: object) -> TriggerSpec:
    return spec(
        "m",
        every=timedelta(minutes=1),
        catchup=CatchupPolicy.LATEST,
        window=timedelta(minutes=30),
        **declared,  # type: ignore[arg-type]
    )


def test_backfill_carves_missed_occurrences_out_of_their_ranges(reused_database: Database) -> None:
    h = _downtime(reused_database)
    try:
        assert h.ledger("m") == [
            "12:01 completed",
            "12:02 completed",
            "12:03 missed/catchup_window x27",
            "12:30 missed/catchup_policy x29",
            "12:59 completed",
            "13:00 skipped/overlap",
        ]
        result = run_backfill(h, "m", utc(2026, 3, 1, 12, 2), utc(2026, 3, 1, 12, 4))
        assert statuses(result) == [
            ("12:02", "already_decided"),
            ("12:03", "launching"),
            ("12:04", "buffered"),
        ]
        assert [i.previous for i in result.items] == [
            Outcome.COMPLETED,
            Outcome.MISSED,
            Outcome.MISSED,
        ]
        result = run_backfill(h, "m", utc(2026, 3, 1, 12, 31), utc(2026, 3, 1, 12, 31))
        h.advance(timedelta(seconds=30))
        assert h.ledger("m") == [
            "12:01 completed",
            "12:02 completed",
            "12:03 completed",
            "12:04 completed",
            "12:05 missed/catchup_window x25",
            "12:30 missed/catchup_policy",
            "12:31 completed",
            "12:32 missed/catchup_policy x27",
            "12:59 completed",
            "13:00 skipped/overlap",
        ]
        assert sum(r.count for r in h.history("m")) == 60  # each minute, exactly once
    finally:
        h.close()


def test_backfill_leaves_a_range_recorded_under_another_schedule_alone(
    reused_database: Database,
) -> None:
    h = _downtime(reused_database)
    try:
        h.store.apply(
            [spec("m", every=timedelta(minutes=2), window=timedelta(minutes=30))],
            now=h.clock.now(),
        )
        result = run_backfill(h, "m", utc(2026, 3, 1, 12, 10), utc(2026, 3, 1, 12, 12))
        assert statuses(result) == [("12:10", "already_decided"), ("12:12", "already_decided")]
        assert sum(r.count for r in h.history("m")) == 60
    finally:
        h.close()


def test_backfill_leaves_what_the_scheduler_has_not_decided_yet(reused_database: Database) -> None:
    h = _downtime(reused_database)
    try:
        h.clock.set(utc(2026, 3, 1, 13, 3))  # 13:01..13:03 due, not yet decided
        result = run_backfill(h, "m", utc(2026, 3, 1, 12, 59), utc(2026, 3, 1, 13, 2))
        assert statuses(result) == [
            ("12:59", "already_decided"),
            ("13:00", "launching"),  # carved out of its own `skipped` row
            ("13:01", "undecided"),
            ("13:02", "undecided"),
        ]
        assert [i.previous for i in result.items] == [
            Outcome.COMPLETED,
            Outcome.SKIPPED,
            None,
            None,
        ]
    finally:
        h.close()


def test_backfill_respects_an_overlap_override(reused_database: Database) -> None:
    h = _downtime(reused_database)
    try:
        start, end = utc(2026, 3, 1, 12, 10), utc(2026, 3, 1, 12, 12)
        result = run_backfill(h, "m", start, end, overlap=Overlap.SUPERSEDE)
        assert statuses(result) == [
            ("12:10", "superseded"),
            ("12:11", "superseded"),
            ("12:12", "launching"),
        ]
        h.step()
        assert [r.idempotency_key for r in h.runner.requests][-1] == "m:2026-03-01T12:12:00Z"
        assert "12:10 superseded/overlap" in h.ledger("m")
    finally:
        h.close()


def test_backfill_bypasses_pause(reused_database: Database) -> None:
    h = _downtime(reused_database)
    try:
        services.pause_trigger(h.store, "m", note=None, now=h.clock.now())
        h.clock.set(utc(2026, 3, 1, 13, 10))  # paused 13:01..13:10, not yet recorded
        result = run_backfill(h, "m", utc(2026, 3, 1, 13, 5), utc(2026, 3, 1, 13, 5))
        assert statuses(result) == [("13:05", "launching")]
        assert [i.previous for i in result.items] == [Outcome.SKIPPED]
        h.step()
        assert h.ledger("m")[-3:] == [
            "13:01 skipped/paused x4",
            "13:05 completed",
            "13:06 skipped/paused x5",
        ]
    finally:
        h.close()


def test_backfill_refuses_more_occurrences_than_the_cap(reused_database: Database) -> None:
    h = _downtime(reused_database)
    try:
        start, end = utc(2026, 2, 28), utc(2026, 3, 1)
        with pytest.raises(BackfillTooLargeError) as caught:
            run_backfill(h, "m", start, end)
        assert caught.value.details["count"] == 1441
        assert "1441 occurrences" in str(caught.value) and "--max 1441" in str(caught.value)
        assert caught.value.exit_code == 2
        result = run_backfill(h, "m", start, end, max_count=1441)
        assert len(result.items) == 1441
        with pytest.raises(InvalidTimeError):
            run_backfill(h, "m", end, start)
    finally:
        h.close()


def test_backfill_command_prints_json_and_exits_2_over_the_cap(sqlite_url: str) -> None:
    db = Database(sqlite_url)
    try:
        SqlTriggerStore(db).apply([_every_minute()], now=utc(2022, 1, 2))
    finally:
        db.dispose()
    cli = CliRunner()
    env = {"TRIGGERS_DATABASE_URL": sqlite_url}
    base = ["backfill", "m", "--from", "2022-01-01T00:00:00Z"]
    done = cli.invoke(app, [*base, "--to", "2022-01-01T00:02:00Z", "--json"], env=env)
    assert done.exit_code == 0, done.output
    document = json.loads(done.stdout)
    assert document["counts"]["launching"] == 1 and document["counts"]["buffered"] == 2
    assert [i["occurrence"] for i in document["items"]] == [
        f"2022-01-01T00:0{m}:00.000Z" for m in range(3)
    ]
    refused = cli.invoke(app, [*base, "--to", "2022-01-02T00:00:00Z", "--json"], env=env)
    assert refused.exit_code == 2
    error = json.loads(refused.stderr)["error"]
    assert error["code"] == "TRG-114" and error["details"]["count"] == 1441
    assert refused.stdout == ""
    allowed = cli.invoke(app, [*base, "--to", "2022-01-02T00:00:00Z", "--max", "1441"], env=env)
    assert allowed.exit_code == 0, allowed.output
    assert "1441 occurrences" in allowed.stdout
