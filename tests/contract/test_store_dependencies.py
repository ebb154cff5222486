"""Dependent triggers (`after:`) in the store, on the memory store, SQLite and
PostgreSQL: each upstream run that settles with a matching outcome gives each of its
dependents one occurrence, keyed by the run, recorded with the settlement."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Literal

import pytest

from looms_runtime.db import Database
from tests.factories import spec
from triggers.clock import utc
from triggers.dependency_links import dependent_links
from triggers.model import AfterSchedule, FireRecord, Outcome, Overlap, Reason, Requirement
from triggers.store.protocol import (
    Claimed,
    ClaimRequest,
    Completed,
    CompletedRun,
    HistoryQuery,
    Launch,
    Reserved,
    RunChange,
    Settlement,
    StartResult,
    StoreTransaction,
    TriggerStore,
)

UPSTREAM = spec("import", overlap=Overlap.ALLOW, max_active=5)
RunState = Literal["completed", "failed", "cancelled"]
T0 = utc(2026, 11, 1)
LEASE = timedelta(hours=1)


@pytest.fixture
def database(reused_database: Database) -> Database:
    return reused_database


@pytest.fixture
def store(any_store: TriggerStore) -> TriggerStore:
    store = any_store
    store.apply(
        [
            UPSTREAM,
            spec("report", schedule=AfterSchedule.of("import", "completed")),
            spec("alarm", schedule=AfterSchedule.of("import", "failed")),
            spec("audit", schedule=AfterSchedule.of("import", "settled")),
        ],
        now=T0,
    )
    return store


def at(minute: int) -> datetime:
    return T0 + timedelta(minutes=minute)


def run_import(store: TriggerStore, minute: int, run_id: str) -> None:
    """Claim and launch the upstream's occurrence at `minute` as `run_id`."""
    [fired] = store.claim(
        [ClaimRequest(trigger_id="import", occurrence_at=at(minute), expected_revision=1)],
        owner="o",
        host="h",
        now=at(minute),
        lease=LEASE,
    )
    assert isinstance(fired, Reserved), fired
    [record] = store.record_launched([Launch(claim=fired, run_id=run_id)], now=at(minute))
    assert not isinstance(record, Exception), record


def settle(store: TriggerStore, run_id: str, minute: int, state: RunState = "completed") -> None:
    store.record_settled(
        [Settlement(trigger_id="import", run_id=run_id, state=state)], now=at(minute)
    )


def rows(store: TriggerStore, trigger_id: str) -> list[FireRecord]:
    return sorted(store.history(HistoryQuery(trigger_id=trigger_id)), key=lambda r: r.occurrence_at)


def test_a_completed_run_gives_each_matching_dependent_one_occurrence(
    store: TriggerStore,
) -> None:
    run_import(store, 1, "run-1")
    settle(store, "run-1", 3)

    [report] = rows(store, "report")
    assert (report.outcome, report.occurrence_at) == (Outcome.BUFFERED, at(3))
    assert report.upstream_run_id == "run-1"
    assert report.idempotency_key == "report:after:run-1"
    assert report.to_json()["upstream_run_id"] == "run-1"
    assert [r.upstream_run_id for r in rows(store, "audit")] == ["run-1"]
    assert rows(store, "alarm") == []
    assert rows(store, "import")[0].upstream_run_id is None


def test_a_failed_run_fires_failed_and_settled_dependents_only(store: TriggerStore) -> None:
    run_import(store, 1, "run-1")
    settle(store, "run-1", 2, state="failed")
    run_import(store, 3, "run-2")
    settle(store, "run-2", 4, state="cancelled")

    assert rows(store, "report") == []
    assert [r.upstream_run_id for r in rows(store, "alarm")] == ["run-1"]
    assert [r.upstream_run_id for r in rows(store, "audit")] == ["run-1", "run-2"]


def test_the_pending_pass_launches_the_occurrence_keyed_by_the_upstream_run(
    store: TriggerStore,
) -> None:
    run_import(store, 1, "run-1")
    settle(store, "run-1", 2)

    taken = store.take_pending(owner="o", host="h", now=at(2), lease=LEASE)

    launched = {claim.trigger_id: claim for claim in taken}
    assert sorted(launched) == ["audit", "report"]
    report = launched["report"]
    assert (report.occurrence_at, report.idempotency_key) == (at(2), "report:after:run-1")
    [record] = store.record_launched([Launch(claim=report, run_id="rep-1")], now=at(2))
    assert isinstance(record, FireRecord), record
    assert (record.outcome, record.upstream_run_id) == (Outcome.LAUNCHED, "run-1")
    assert store.take_pending(owner="o", host="h", now=at(3), lease=LEASE) == []


def test_each_upstream_run_fires_once_however_often_its_settlement_is_recorded(
    store: TriggerStore,
) -> None:
    run_import(store, 1, "run-1")
    run_import(store, 2, "run-2")
    # Several daemons (threads here) record the same settlements at once, and again.
    barrier = threading.Barrier(4)
    errors: list[Exception] = []

    def record(minute: int) -> None:
        try:
            barrier.wait()
            store.record_settled(
                [
                    Settlement(trigger_id="import", run_id="run-1", state="completed"),
                    Settlement(trigger_id="import", run_id="run-2", state="completed"),
                ],
                now=at(minute),
            )
        except Exception as exc:  # noqa: BLE001 (reported below, on the test's thread)
            errors.append(exc)

    threads = [threading.Thread(target=record, args=(3 + n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    settle(store, "run-1", 9)

    assert errors == []
    assert sorted(r.upstream_run_id or "" for r in rows(store, "report")) == ["run-1", "run-2"]
    taken = store.take_pending(owner="o", host="h", now=at(10), lease=LEASE)
    assert sorted(c.trigger_id for c in taken) == ["audit", "report"]  # skip: one at a time


def test_a_dependent_launches_by_its_overlap_policy(store: TriggerStore) -> None:
    store.apply(
        [
            UPSTREAM,
            spec("report", schedule=AfterSchedule.of("import")),
            spec("queued", schedule=AfterSchedule.of("import"), overlap=Overlap.BUFFER),
        ],
        now=at(0),
    )
    run_import(store, 1, "run-1")
    settle(store, "run-1", 2)
    first = {
        c.trigger_id: c for c in store.take_pending(owner="o", host="h", now=at(2), lease=LEASE)
    }
    for trigger_id, claim in first.items():
        store.record_launched([Launch(claim=claim, run_id=f"{trigger_id}-1")], now=at(2))
    run_import(store, 3, "run-2")
    settle(store, "run-2", 4)

    assert store.take_pending(owner="o", host="h", now=at(4), lease=LEASE) == []

    report = rows(store, "report")[-1]
    assert (report.outcome, report.reason, report.upstream_run_id) == (
        Outcome.SKIPPED,
        Reason.OVERLAP,
        "run-2",
    )
    queued = rows(store, "queued")[-1]
    assert (queued.outcome, queued.upstream_run_id) == (Outcome.BUFFERED, "run-2")
    store.record_settled(
        [Settlement(trigger_id="queued", run_id="queued-1", state="completed")], now=at(5)
    )
    [later] = store.take_pending(owner="o", host="h", now=at(5), lease=LEASE)
    assert (later.trigger_id, later.idempotency_key) == ("queued", "queued:after:run-2")


def test_a_retired_dependent_is_given_nothing(store: TriggerStore) -> None:
    store.apply([UPSTREAM, spec("alarm", schedule=AfterSchedule.of("import"))], now=T0)
    run_import(store, 1, "run-1")
    settle(store, "run-1", 2)

    assert rows(store, "report") == []
    assert [r.upstream_run_id for r in rows(store, "alarm")] == ["run-1"]


def test_the_runtimes_commit_of_a_settlement_gives_the_occurrence_once(
    store: TriggerStore,
) -> None:
    run_import(store, 1, "run-1")
    change = RunChange(trigger_id="import", run_id="run-1", state="completed")

    store.record_run_changes([change], now=at(2))
    store.record_run_changes([change], now=at(3))

    assert [(r.occurrence_at, r.upstream_run_id) for r in rows(store, "report")] == [
        (at(2), "run-1")
    ]


def test_a_run_completed_within_its_start_gives_its_dependents_their_occurrences(
    store: TriggerStore,
) -> None:
    # A flow with nothing to run completes in the claim's own transaction: no settlement
    # follows, so the claim gives the dependents what a settlement would.
    def launch(tx: StoreTransaction, claims: Sequence[Claimed]) -> tuple[list[StartResult], Any]:
        return [CompletedRun("run-1")], lambda: None

    [done] = store.claim(
        [ClaimRequest(trigger_id="import", occurrence_at=at(1), expected_revision=1)],
        owner="o",
        host="h",
        now=at(1),
        lease=LEASE,
        launch_within=launch,
    )

    assert isinstance(done, Completed) and done.run_id == "run-1"
    [report] = rows(store, "report")
    assert (report.outcome, report.occurrence_at) == (Outcome.BUFFERED, at(1))
    assert (report.upstream_run_id, report.idempotency_key) == ("run-1", "report:after:run-1")
    assert [r.upstream_run_id for r in rows(store, "audit")] == ["run-1"]
    assert rows(store, "alarm") == []


def test_maybe_dependents_finds_every_live_dependent_without_reading_every_trigger(
    store: TriggerStore,
) -> None:
    store.apply(
        [
            UPSTREAM,
            spec("report", schedule=AfterSchedule.of("import", "completed")),
            spec("alarm", schedule=AfterSchedule.of("import", "failed")),
            spec("audit", schedule=AfterSchedule.of("import", "settled")),
            spec(
                "nightly",
                cron="0 3 * * *",
                requires=Requirement(trigger="import", outcome="completed", since=LEASE),
            ),
            spec("elsewhere", cron="0 4 * * *", description='mentions "requires" in words'),
            *(spec(f"plain-{n}", cron="0 5 * * *") for n in range(20)),
        ],
        now=T0,
    )
    found = store.maybe_dependents("import")

    links = dependent_links("import", found)
    assert [(link.trigger_id, link.via) for link in links] == [
        ("alarm", "after"),
        ("audit", "after"),
        ("nightly", "requires"),
        ("report", "after"),
    ]
    store.apply(
        [UPSTREAM, spec("report", schedule=AfterSchedule.of("import", "completed"))],
        now=T0,
    )
    assert [
        link.trigger_id for link in dependent_links("import", store.maybe_dependents("import"))
    ] == ["report"]  # the retired ones are gone
