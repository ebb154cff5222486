"""The scheduler on SQLite and PostgreSQL, with a fake clock and a scripted runner."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from looms_runtime.db import Database
from tests.factories import spec
from tests.integration.harness import Harness
from triggers import services
from triggers.clock import utc
from triggers.errors import RunnerError, RunnerTimeoutError
from triggers.metrics import UnrecordedMetrics
from triggers.model import CatchupPolicy, Outcome, Overlap, Reason, RunStatus
from triggers.runner.fake import FakeRunner
from triggers.scheduler.dispatch import CLAIM_BATCH
from triggers.store.protocol import ClaimRequest, ClaimResult
from triggers.store.schema import triggers as triggers_table
from triggers.store.sql import SqlTriggerStore

T0 = utc(2026, 3, 1, 12)


@pytest.fixture
def harness(database: Database) -> Iterator[Harness]:
    h = Harness(database, start=T0)
    yield h
    h.close()


def test_every_occurrence_launches_once_with_its_key(harness: Harness) -> None:
    harness.runner.auto_complete = True
    harness.apply([spec("tick", every=timedelta(seconds=10))])
    harness.advance(timedelta(minutes=1))
    rows = harness.history("tick")
    assert [r.occurrence_at for r in rows] == [T0 + timedelta(seconds=10 * n) for n in range(1, 7)]
    assert {r.outcome for r in rows} == {Outcome.COMPLETED}
    keys = [request.idempotency_key for request in harness.runner.requests]
    assert keys == [f"tick:2026-03-01T12:{s // 60:02d}:{s % 60:02d}Z" for s in range(10, 61, 10)]
    assert len({r.run_id for r in rows}) == 6
    assert all(r.launched_at is not None and r.launched_at >= r.occurrence_at for r in rows)


def test_run_env_names_trigger_and_occurrence(harness: Harness) -> None:
    harness.apply([spec("tick", every=timedelta(minutes=1))])
    harness.advance(timedelta(minutes=1))
    [request] = harness.runner.requests
    assert request.env == {
        "TRIGGERS_TRIGGER_ID": "tick",
        "TRIGGERS_OCCURRENCE": "2026-03-01T12:01:00.000Z",
    }


def test_skip_policy_records_overlap_while_run_is_active(harness: Harness) -> None:
    harness.apply([spec("long", every=timedelta(minutes=1), overlap=Overlap.SKIP)])
    harness.advance(timedelta(minutes=3))
    [run_id] = harness.runner.active()
    harness.runner.settle(run_id, "completed")
    harness.advance(timedelta(minutes=1))
    assert harness.outcomes("long") == [
        ("12:01:00", Outcome.COMPLETED, None, 1),
        ("12:02:00", Outcome.SKIPPED, "overlap", 1),
        ("12:03:00", Outcome.SKIPPED, "overlap", 1),
        ("12:04:00", Outcome.LAUNCHED, None, 1),
    ]


def test_buffer_launches_pending_occurrence_when_run_settles(harness: Harness) -> None:
    harness.apply([spec("buf", every=timedelta(minutes=1), overlap=Overlap.BUFFER)])
    harness.advance(timedelta(minutes=3))
    [first] = harness.runner.active()
    harness.runner.settle(first, "failed", "exit status 1")
    harness.step()  # the monitor recorded it; the next tick promotes the buffered one
    harness.step()
    assert harness.outcomes("buf") == [
        ("12:01:00", Outcome.FAILED, None, 1),
        ("12:02:00", Outcome.LAUNCHED, None, 1),
        ("12:03:00", Outcome.SKIPPED, "overlap", 1),
    ]
    failed = harness.history("buf")[0]
    assert failed.error == "exit status 1"


def test_downtime_catchup_latest_launches_newest_and_accounts_the_rest(database: Database) -> None:
    first = Harness(database, start=T0)
    first.runner.auto_complete = True
    first.apply([spec("m", every=timedelta(minutes=1), window=timedelta(minutes=30))])
    first.advance(timedelta(minutes=2))
    first.close()
    # No daemon ticks for an hour; a new one starts.
    second = Harness(
        database, start=T0 + timedelta(hours=1, minutes=2), runner=first.runner, owner="daemon-b"
    )
    second.step()
    second.close()
    rows = second.outcomes("m")
    # 12:32 is exactly the window old: still inside it. The newest of the late ones
    # (13:01) launches; 13:02 is within grace, so it is dispatched too, and meets
    # the overlap policy while 13:01 runs.
    assert rows == [
        ("12:01:00", Outcome.COMPLETED, None, 1),
        ("12:02:00", Outcome.COMPLETED, None, 1),
        ("12:03:00", Outcome.MISSED, "catchup_window", 29),
        ("12:32:00", Outcome.MISSED, "catchup_policy", 29),
        ("13:01:00", Outcome.COMPLETED, None, 1),
        ("13:02:00", Outcome.SKIPPED, "overlap", 1),
    ]
    assert sum(count for *_, count in rows) == 62  # every minute accounted for, once


def test_catchup_all_dispatches_each_in_order(harness: Harness) -> None:
    harness.runner.auto_complete = True
    harness.apply(
        [
            spec(
                "all",
                every=timedelta(minutes=1),
                catchup=CatchupPolicy.ALL,
                overlap=Overlap.BUFFER_ALL,
            )
        ]
    )
    harness.clock.set(T0 + timedelta(minutes=5, seconds=30))  # a stalled tick
    harness.step()
    for _ in range(6):
        harness.step()
    outcomes = harness.outcomes("all")
    assert [o[0] for o in outcomes] == [f"12:0{m}:00" for m in range(1, 6)]
    assert {o[1] for o in outcomes} == {Outcome.COMPLETED}


def test_new_trigger_owes_nothing_from_before_it_was_applied(harness: Harness) -> None:
    harness.clock.set(T0 + timedelta(hours=3))
    harness.apply([spec("late", every=timedelta(minutes=1))])
    harness.step()
    assert harness.history("late") == []


def test_edited_trigger_is_decided_from_its_new_declaration(harness: Harness) -> None:
    harness.runner.auto_complete = True
    harness.apply([spec("e", every=timedelta(minutes=1))])
    harness.advance(timedelta(minutes=2))
    # Edited behind the scheduler's back: its in-memory revision is now stale.
    harness.store.apply([spec("e", every=timedelta(minutes=5))], now=harness.clock.now())
    harness.advance(timedelta(minutes=10))
    times = [o[0] for o in harness.outcomes("e")]
    assert times == ["12:01:00", "12:02:00", "12:05:00", "12:10:00"]
    trigger = harness.store.get_trigger("e")
    assert trigger is not None and trigger.revision == 2


def test_pause_records_skipped_range_and_resume_does_not_launch_it(harness: Harness) -> None:
    harness.runner.auto_complete = True
    harness.apply([spec("p", every=timedelta(minutes=1))])
    harness.advance(timedelta(minutes=1))
    services.pause_trigger(harness.store, "p", note="db maintenance", now=harness.clock.now())
    harness.scheduler.refresh_soon()
    harness.advance(timedelta(minutes=10))
    services.resume_trigger(harness.store, "p", now=harness.clock.now())
    harness.scheduler.refresh_soon()
    harness.advance(timedelta(minutes=2))
    assert harness.outcomes("p") == [
        ("12:01:00", Outcome.COMPLETED, None, 1),
        ("12:02:00", Outcome.SKIPPED, "paused", 10),
        ("12:12:00", Outcome.COMPLETED, None, 1),
        ("12:13:00", Outcome.COMPLETED, None, 1),
    ]


def test_disabled_trigger_occurrences_are_skipped_with_reason(harness: Harness) -> None:
    harness.apply([spec("off", every=timedelta(minutes=1), enabled=False)])
    harness.advance(timedelta(minutes=3))
    harness.scheduler.refresh_soon()  # quiet triggers are accounted at each poll
    harness.step()
    rows = harness.history("off")
    assert sum(r.count for r in rows) == 3
    assert {(r.outcome, r.reason) for r in rows} == {(Outcome.SKIPPED, Reason.DISABLED)}
    assert harness.runner.requests == []


def test_clock_stepped_back_keeps_polling_within_the_poll_interval(harness: Harness) -> None:
    harness.runner.auto_complete = True
    harness.apply([spec("h", every=timedelta(hours=1))])
    harness.run_until(T0 + timedelta(minutes=30))
    stepped = T0 - timedelta(minutes=30)
    harness.clock.set(stepped)  # NTP steps the wall clock an hour back
    fired = services.claim_manual_fire(
        harness.store, "h", now=stepped, key="k", overlap=None, owner="cli", host="elsewhere"
    )
    # Another host, on the same stepped clock, applies a new trigger.
    harness.store.apply(
        [spec("h", every=timedelta(hours=1)), spec("n", every=timedelta(minutes=5))], now=stepped
    )
    harness.advance(timedelta(minutes=15))  # more than the poll interval (10 minutes)
    assert harness.ledger("n") == ["11:35 completed", "11:40 completed", "11:45 completed"]
    [row] = [r for r in harness.history("h") if r.manual_key == "k"]
    assert row.idempotency_key == fired.idempotency_key
    assert row.outcome is Outcome.COMPLETED
    [beat] = harness.store.heartbeats()
    assert stepped < beat.last_tick_at <= harness.clock.now()


def test_failed_start_is_retried_under_the_same_key(harness: Harness) -> None:
    harness.apply([spec("flaky", every=timedelta(hours=1))])
    harness.runner.fail_starts.add("flaky:2026-03-01T13:00:00Z")
    harness.run_until(T0 + timedelta(hours=1))
    assert harness.outcomes("flaky") == [("13:00:00", Outcome.LAUNCHING, None, 1)]
    harness.runner.fail_starts.clear()
    harness.advance(timedelta(seconds=10))
    [row] = harness.history("flaky")
    assert row.outcome is Outcome.LAUNCHED
    keys = [r.idempotency_key for r in harness.runner.requests]
    assert keys == ["flaky:2026-03-01T13:00:00Z", "flaky:2026-03-01T13:00:00Z"]


def test_start_without_answer_meets_its_deadline_and_stays_pending(database: Database) -> None:
    class Silent(FakeRunner):
        """A runtime elsewhere that never answers (a start within a claim cannot hang)."""

        def __init__(self) -> None:
            super().__init__(starts_within=False)
            self.release = threading.Event()

        def start(self, requests):  # type: ignore[no-untyped-def]
            self.release.wait(30)
            return super().start(requests)

    runner = Silent()
    h = Harness(database, start=T0, runner=runner, start_timeout=timedelta(milliseconds=200))
    try:
        h.apply([spec("slow", every=timedelta(hours=1))])
        h.run_until(T0 + timedelta(hours=1))
        [row] = h.history("slow")
        assert row.outcome is Outcome.LAUNCHING
        assert row.error is not None and "did not answer" in row.error
    finally:
        runner.release.set()
        h.close()


def test_retry_after_an_edit_records_the_run_the_unanswered_start_began(
    database: Database,
) -> None:
    class Unanswered(FakeRunner):
        """Starts every run, but the first answer for each key never arrives."""

        def __init__(self) -> None:
            super().__init__()
            self.answered: set[str] = set()

        def start(self, requests):  # type: ignore[no-untyped-def]
            results = super().start(requests)
            answers = []
            for request, result in zip(requests, results, strict=True):
                if request.idempotency_key in self.answered:
                    answers.append(result)
                else:
                    self.answered.add(request.idempotency_key)
                    answers.append(RunnerTimeoutError("the start did not answer", timeout_s=5))
            return answers

    runner = Unanswered()
    h = Harness(database, start=T0, runner=runner)
    try:
        h.apply([spec("e", every=timedelta(hours=1), input={"v": 1})])
        h.run_until(T0 + timedelta(hours=1))
        [run_id] = runner.active()
        assert h.outcomes("e") == [("13:00:00", Outcome.LAUNCHING, None, 1)]
        h.apply([spec("e", every=timedelta(hours=1), input={"v": 2})])  # edited meanwhile
        h.advance(timedelta(seconds=10))
        [row] = h.history("e")
        assert (row.outcome, row.run_id) == (Outcome.LAUNCHED, run_id)
        runner.settle(run_id, "completed")
        h.step()
        [row] = h.history("e")
        assert (row.outcome, row.run_id) == (Outcome.COMPLETED, run_id)
    finally:
        h.close()


def test_restart_adopts_active_runs_and_settles_them(database: Database) -> None:
    runner = FakeRunner()
    first = Harness(database, start=T0, runner=runner)
    first.apply([spec("r", every=timedelta(hours=1))])
    first.run_until(T0 + timedelta(hours=1))
    first.close()
    [run_id] = runner.active()
    runner.settle(run_id, "completed")  # finished while no daemon watched
    second = Harness(
        database, start=T0 + timedelta(hours=1, minutes=5), runner=runner, owner="daemon-b"
    )
    second.step()
    second.close()
    [row] = second.history("r")
    assert (row.outcome, row.run_id) == (Outcome.COMPLETED, run_id)


def test_vanished_run_is_recorded_failed(harness: Harness) -> None:
    harness.apply([spec("v", every=timedelta(hours=1))])
    harness.run_until(T0 + timedelta(hours=1))
    [run_id] = harness.runner.active()
    with harness.runner._lock:  # the runtime lost it
        harness.runner._runs[run_id] = RunStatus(state="missing")
    harness.scheduler.monitor.check_now()
    [row] = harness.history("v")
    assert row.outcome is Outcome.FAILED
    assert row.error == f"run {run_id} is unknown to the runtime"


def test_one_corrupt_trigger_does_not_stop_the_others(harness: Harness) -> None:
    harness.runner.auto_complete = True
    harness.apply(
        [spec("bad", every=timedelta(minutes=1)), spec("good", every=timedelta(minutes=1))]
    )
    with harness.db.write() as conn:
        conn.execute(
            sa.update(triggers_table)
            .where(triggers_table.c.id == "bad")
            .values(declaration={"broken": True}, digest="corrupt")
        )
    harness.advance(timedelta(minutes=3))
    assert [o[1] for o in harness.outcomes("good")] == [Outcome.COMPLETED] * 3
    assert harness.history("bad") == []


def test_two_schedulers_on_one_store_decide_each_occurrence_once(database: Database) -> None:
    runner = FakeRunner(auto_complete=True)
    a = Harness(database, start=T0, runner=runner, owner="daemon-a")
    b = Harness(
        Database(str(database.url.render_as_string(hide_password=False))),
        start=T0,
        runner=runner,
        owner="daemon-b",
    )
    specs = [
        spec(f"t{n}", every=timedelta(seconds=1), overlap=Overlap.ALLOW, max_active=1000)
        for n in range(20)
    ]
    a.apply(specs)
    b.scheduler.refresh_soon()
    errors: list[BaseException] = []

    def drive(h: Harness) -> None:
        try:
            for second in range(1, 31):
                h.clock.set(T0 + timedelta(seconds=second))
                h.step()
        except BaseException as exc:  # noqa: BLE001 (re-raised by the assertion below)
            errors.append(exc)

    threads = [threading.Thread(target=drive, args=(h,)) for h in (a, b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    a.close()
    b.close()
    b.db.dispose()
    assert errors == []
    rows = a.history()
    per_occurrence = Counter((r.trigger_id, r.occurrence_at) for r in rows)
    assert len(per_occurrence) == 20 * 30
    assert set(per_occurrence.values()) == {1}
    assert Counter(r.idempotency_key for r in runner.requests).most_common(1)[0][1] == 1


def test_runner_error_on_inspection_keeps_run_watched(harness: Harness) -> None:
    class Blind(FakeRunner):
        blind = True

        def inspect(self, run_ids):  # type: ignore[no-untyped-def]
            if self.blind:
                raise RunnerError("runtime unavailable")
            return super().inspect(run_ids)

    runner = Blind()
    h = Harness(harness.db, start=T0, runner=runner, owner="daemon-c")
    try:
        h.apply([spec("i", every=timedelta(hours=1))])
        h.run_until(T0 + timedelta(hours=1))
        [run_id] = runner.active()
        with runner._lock:
            runner._runs[run_id] = RunStatus(state="completed")
        h.scheduler.monitor.check_now()
        assert h.history("i")[0].outcome is Outcome.LAUNCHED
        runner.blind = False
        h.scheduler.monitor.check_now()
        assert h.history("i")[0].outcome is Outcome.COMPLETED
    finally:
        h.close()


def test_many_new_triggers_are_compiled_a_batch_per_tick_and_all_fire(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    from triggers.scheduler import engine

    monkeypatch.setattr(engine, "_SYNC_BATCH", 2)
    harness.runner.auto_complete = True
    harness.apply([spec(f"t{n}", every=timedelta(minutes=1)) for n in range(5)])
    wake = harness.scheduler.tick()
    assert len(harness.scheduler._timetable.entries) == 2
    assert wake == harness.clock.now()  # the rest are compiled at the next tick, at once
    harness.advance(timedelta(minutes=1))
    assert len(harness.scheduler._timetable.entries) == 5
    assert sorted(r.trigger_id for r in harness.history()) == [f"t{n}" for n in range(5)]


def test_a_run_completed_in_its_start_is_settled_in_the_claim_and_never_watched(
    database: Database,
) -> None:
    runner = FakeRunner()
    runner.empty_flows.add("noop")
    inspected: list[str] = []
    inspect = runner.inspect

    def inspecting(run_ids: Sequence[str]) -> dict[str, RunStatus]:
        inspected.extend(run_ids)
        return inspect(run_ids)

    runner.inspect = inspecting  # type: ignore[method-assign]
    settled: list[tuple[str, str]] = []

    class Counting(UnrecordedMetrics):
        def run_settled(self, trigger_id: str, outcome: str, at: datetime) -> None:
            settled.append((trigger_id, outcome))

    h = Harness(database, start=T0, runner=runner, metrics=Counting())
    h.apply([spec("e", every=timedelta(minutes=1), max_active=1)])
    h.run_until(T0 + timedelta(minutes=5))
    h.close()

    rows = h.history("e")
    # `max_active: 1` and `skip`: a run never held beyond its start blocks no occurrence.
    assert [r.outcome for r in rows] == [Outcome.COMPLETED] * 5
    assert all(r.launched_at == r.settled_at == r.occurrence_at for r in rows)
    assert inspected == []  # the monitor watched none of them
    assert settled == [("e", "completed")] * 5
    stored = h.store.get_trigger("e")
    assert stored is not None and (stored.active_count, stored.runs_launched) == (0, 5)


def test_a_tick_of_more_triggers_than_a_claim_batch_claims_them_in_several_commits(
    database: Database,
) -> None:
    store = SqlTriggerStore(database)
    batches: list[int] = []
    claim = store.claim

    def claiming(requests: Sequence[ClaimRequest], **options: Any) -> list[ClaimResult]:
        batches.append(len(requests))
        return claim(requests, **options)

    store.claim = claiming  # type: ignore[method-assign]
    runner = FakeRunner(auto_complete=True)
    h = Harness(database, start=T0, runner=runner, store=store)
    count = CLAIM_BATCH * 2 + 10
    h.apply([spec(f"t{n:03d}", every=timedelta(seconds=1)) for n in range(count)])
    h.step()
    batches.clear()
    h.clock.set(T0 + timedelta(seconds=1))
    h.step()
    h.close()

    assert batches == [CLAIM_BATCH, CLAIM_BATCH, 10]
    rows = [r for r in h.history() if r.occurrence_at == T0 + timedelta(seconds=1)]
    assert len(rows) == count
    assert {r.outcome for r in rows} == {Outcome.COMPLETED}
    assert Counter(r.idempotency_key for r in runner.requests).most_common(1)[0][1] == 1


def test_a_stop_during_a_tick_leaves_the_rest_for_the_next_daemon_each_claimed_once(
    database: Database,
) -> None:
    # SIGTERM while a tick works through its batches (10,000 triggers behind): the
    # batch in progress commits, the rest stay due in the store (their watermarks
    # unmoved), and the next daemon claims each of them once.
    store = SqlTriggerStore(database)
    claim = store.claim
    h = Harness(database, start=T0, runner=FakeRunner(auto_complete=True), store=store)
    count = CLAIM_BATCH * 2 + 10
    h.apply([spec(f"t{n:03d}", every=timedelta(minutes=1)) for n in range(count)])
    h.step()
    batches: list[int] = []

    def claiming(requests: Sequence[ClaimRequest], **options: Any) -> list[ClaimResult]:
        batches.append(len(requests))
        h.scheduler.stop()  # the signal arrives while the first batch is claimed
        return claim(requests, **options)

    store.claim = claiming  # type: ignore[method-assign]
    occurrence = T0 + timedelta(minutes=1)
    h.clock.set(occurrence)
    h.step()
    h.close()
    assert batches == [CLAIM_BATCH]
    # The scheduler's own view agrees: an unclaimed trigger is still due.
    last = h.scheduler.entries[f"t{count - 1:03d}"]
    assert last.due_at is not None
    assert last.watermark_at < occurrence <= last.due_at
    assert len([r for r in h.history() if r.occurrence_at == occurrence]) == CLAIM_BATCH

    after = Harness(
        database, start=occurrence, owner="daemon-b", runner=FakeRunner(auto_complete=True)
    )
    after.step()
    after.close()
    rows = [r for r in after.history() if r.occurrence_at == occurrence]
    assert len(rows) == count
    assert Counter(r.trigger_id for r in rows).most_common(1)[0][1] == 1
