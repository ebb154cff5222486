"""What the runtime tells the store about runs: settlements, blocking runs, gone daemons.

Run against the memory store, SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest

from looms_runtime.db import Database
from tests.factories import spec
from triggers.clock import utc
from triggers.errors import RunnerError, RunnerRefusedError
from triggers.model import Action, FireRecord, Outcome, Overlap, Reason
from triggers.scheduler.liveness import UnknownHost, gone_owners
from triggers.store.protocol import (
    Claim,
    Claimed,
    ClaimRequest,
    Completed,
    CompletedRun,
    Deferred,
    Heartbeat,
    HistoryQuery,
    Launch,
    Launched,
    Refused,
    Reserved,
    RunChange,
    StartResult,
    StoreTransaction,
    TriggerStore,
)
from triggers.store.sql import SqlTriggerStore
from triggers.store.sql_transaction import SqlTransaction

T0 = utc(2026, 1, 1)
LEASE = timedelta(minutes=5)


@pytest.fixture
def store(any_store: TriggerStore) -> TriggerStore:
    """Each implementation; a test that takes a database is the SQL store's alone."""
    return any_store


def claim(store: TriggerStore, trigger_id: str, minute: int, *, owner: str = "a") -> Claim:
    at = T0 + timedelta(minutes=minute)
    [result] = store.claim(
        [ClaimRequest(trigger_id=trigger_id, occurrence_at=at, expected_revision=1)],
        owner=owner,
        host="h",
        now=at,
        lease=LEASE,
    )
    assert isinstance(result, Claim), result
    return result


def launched(store: TriggerStore, trigger_id: str, minute: int, run_id: str) -> Claim:
    first = claim(store, trigger_id, minute)
    assert isinstance(first, Reserved), first
    [record] = store.record_launched([Launch(claim=first, run_id=run_id)], now=first.occurrence_at)
    assert isinstance(record, FireRecord), record
    assert record.outcome is Outcome.LAUNCHED
    return first


def outcomes(store: TriggerStore, trigger_id: str) -> list[tuple[Outcome, Reason | None]]:
    rows = store.history(HistoryQuery(trigger_id=trigger_id))
    return [(row.outcome, row.reason) for row in reversed(rows)]


def test_a_settlement_inside_the_callers_transaction_settles_the_ledger_row(
    reused_database: Database,
) -> None:
    store = SqlTriggerStore(reused_database)
    store.apply([spec("a")], now=T0)
    launched(store, "a", 1, "run-1")

    with reused_database.write() as conn:
        store.record_run_changes(
            [RunChange(trigger_id="a", run_id="run-1", state="failed", error="exit code 3")],
            now=T0 + timedelta(minutes=2),
            within=SqlTransaction(conn),
        )

    [row] = store.history(HistoryQuery(trigger_id="a"))
    assert (row.outcome, row.error) == (Outcome.FAILED, "exit code 3")
    trigger = store.get_trigger("a")
    assert trigger is not None and trigger.active_count == 0


def test_a_parked_run_blocks_its_trigger_and_later_occurrences_name_it(
    store: TriggerStore,
) -> None:
    store.apply([spec("a", overlap=Overlap.SKIP)], now=T0)
    launched(store, "a", 1, "run-1")

    store.record_run_changes(
        [RunChange(trigger_id="a", run_id="run-1", state="parked", error="ambiguous")],
        now=T0 + timedelta(minutes=1),
    )
    skipped = claim(store, "a", 2)

    trigger = store.get_trigger("a")
    assert trigger is not None and trigger.blocked_by == "run-1"
    assert (skipped.action, skipped.reason) == (Action.SKIP, Reason.BLOCKED)
    newest = store.history(HistoryQuery(trigger_id="a"))[0]
    assert (newest.outcome, newest.reason, newest.blocked_by) == (
        Outcome.SKIPPED,
        Reason.BLOCKED,
        "run-1",
    )


def test_a_run_leaving_parked_or_settling_unblocks_its_trigger(store: TriggerStore) -> None:
    store.apply([spec("a"), spec("b")], now=T0)
    launched(store, "a", 1, "run-a")
    launched(store, "b", 1, "run-b")
    parked = [
        RunChange(trigger_id="a", run_id="run-a", state="parked"),
        RunChange(trigger_id="b", run_id="run-b", state="parked"),
    ]
    store.record_run_changes(parked, now=T0)

    store.record_run_changes(
        [
            RunChange(trigger_id="a", run_id="run-a", state="active"),
            RunChange(trigger_id="b", run_id="run-b", state="cancelled", error="cancelled"),
        ],
        now=T0 + timedelta(minutes=1),
    )

    a, b = store.get_trigger("a"), store.get_trigger("b")
    assert a is not None and a.blocked_by is None
    assert b is not None and b.blocked_by is None
    assert outcomes(store, "b") == [(Outcome.CANCELLED, None)]


def test_an_unblock_for_another_run_leaves_the_blocking_run_in_place(
    store: TriggerStore,
) -> None:
    store.apply([spec("a", overlap=Overlap.ALLOW)], now=T0)
    store.record_run_changes([RunChange(trigger_id="a", run_id="run-1", state="parked")], now=T0)

    store.record_run_changes([RunChange(trigger_id="a", run_id="run-2", state="active")], now=T0)

    trigger = store.get_trigger("a")
    assert trigger is not None and trigger.blocked_by == "run-1"


def test_a_launch_whose_record_was_lost_is_recorded_when_its_run_changes(
    store: TriggerStore,
) -> None:
    store.apply([spec("a")], now=T0)
    pending = claim(store, "a", 1)  # the runtime started it; the ledger never heard
    assert isinstance(pending, Reserved), pending

    store.record_run_changes(
        [
            RunChange(
                trigger_id="a",
                run_id="run-1",
                state="completed",
                idempotency_key=pending.idempotency_key,
            )
        ],
        now=T0 + timedelta(minutes=1),
    )

    [row] = store.history(HistoryQuery(trigger_id="a"))
    assert (row.outcome, row.run_id) == (Outcome.COMPLETED, "run-1")
    # The launcher's own record, arriving late, finds the row carrying its run.
    [late] = store.record_launched([Launch(claim=pending, run_id="run-1")], now=T0)
    assert isinstance(late, FireRecord), late
    assert late.run_id == "run-1"


def test_the_reservations_of_a_gone_daemon_are_taken_before_their_lease_ends(
    store: TriggerStore,
) -> None:
    store.apply([spec("a")], now=T0)
    claim(store, "a", 1, owner="dead")
    now = T0 + timedelta(minutes=1, seconds=5)  # well inside the five-minute lease

    kept = store.take_pending(owner="b", host="h", now=now, lease=LEASE)
    taken = store.take_pending(owner="b", host="h", now=now, lease=LEASE, dead_owners=["dead"])

    assert kept == []
    assert [c.idempotency_key for c in taken] == ["a:2026-01-01T00:01:00Z"]


def beat(owner: str, *, last_s: float, stopped: bool = False) -> Heartbeat:
    at = T0 + timedelta(seconds=last_s)
    return Heartbeat(
        owner=owner,
        host="h",
        pid=1,
        version="1",
        started_at=T0,
        last_tick_at=at,
        stopped_at=at if stopped else None,
    )


def test_a_daemon_is_gone_when_it_stopped_or_stopped_ticking_for_an_owner_lease() -> None:
    now = T0 + timedelta(seconds=60)
    beats = [
        beat("me", last_s=0),
        beat("live", last_s=55),
        beat("stopped", last_s=59, stopped=True),
        beat("silent", last_s=45),
    ]

    gone = gone_owners(
        beats, me="me", now=now, owner_lease=timedelta(seconds=10), host=UnknownHost()
    )

    assert gone == ["stopped", "silent"]


def test_fires_launched_within_the_claim_are_recorded_launched_in_one_commit(
    store: TriggerStore,
) -> None:
    store.apply([spec("a"), spec("b"), spec("c"), spec("d")], now=T0)
    seen: list[str] = []
    committed: list[bool] = []

    def launch(tx: StoreTransaction, claims: Sequence[Claimed]) -> tuple[list[StartResult], Any]:
        seen.extend(claim.idempotency_key for claim in claims)
        results: list[StartResult] = [
            "run-a",
            RunnerRefusedError("no flow 'gone' at version 'v'"),
            RunnerError("the runtime did not answer"),
            CompletedRun("run-d"),
        ]
        return results, lambda: committed.append(True)

    at = T0 + timedelta(minutes=1)
    results = store.claim(
        [ClaimRequest(trigger_id=t, occurrence_at=at, expected_revision=1) for t in "abcd"],
        owner="o",
        host="h",
        now=at,
        lease=LEASE,
        launch_within=launch,
    )

    assert seen == [f"{t}:2026-01-01T00:01:00Z" for t in "abcd"]
    assert committed == [True]
    a, b, c, d = results
    # Launched, refused for good, not answered (retried from 5 s on), completed in its start:
    # none left for the launcher to start.
    assert isinstance(a, Launched) and a.run_id == "run-a"
    assert isinstance(b, Refused) and b.error == "no flow 'gone' at version 'v'"
    assert isinstance(c, Deferred) and c.retry_at == at + timedelta(seconds=5)
    assert isinstance(d, Completed) and (d.run_id, d.trigger.active_count) == ("run-d", 0)
    rows = {r.trigger_id: r for r in store.history(HistoryQuery())}
    assert (rows["a"].outcome, rows["a"].run_id, rows["a"].launched_at) == (
        Outcome.LAUNCHED,
        "run-a",
        at,
    )
    assert (rows["b"].outcome, rows["b"].error) == (Outcome.FAILED, "no flow 'gone' at version 'v'")
    assert (rows["c"].outcome, rows["c"].error) == (Outcome.LAUNCHING, "the runtime did not answer")
    # Completed in its start: settled in the same commit, nothing left to watch or count.
    assert (
        rows["d"].outcome,
        rows["d"].run_id,
        rows["d"].launched_at,
        rows["d"].settled_at,
        rows["d"].error,
    ) == (Outcome.COMPLETED, "run-d", at, at, None)
    assert [run.run_id for run in store.active_runs()] == ["run-a"]
    # Retried by the pending pass once its retry is due, not before.
    assert store.take_pending(owner="o", host="h", now=at, lease=LEASE) == []
    [again] = store.take_pending(owner="o", host="h", now=at + timedelta(seconds=5), lease=LEASE)
    assert again.trigger_id == "c"
    stored = [store.get_trigger(t) for t in "abcd"]
    assert [t.active_count if t else None for t in stored] == [1, 0, 1, 0]
    assert [t.runs_launched if t else None for t in stored] == [1, 1, 1, 1]
