"""Dependent triggers with several upstreams (`after: {all: [...]}` and `{any: [...]}`)
in the store, on the memory store, SQLite and PostgreSQL: `any:` gives an occurrence
per matching run; `all:` one per set of unused matching runs within its window, keyed
by the run that completed the set, each run used at most once."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

import pytest

from looms_runtime.db import Database
from tests.factories import spec
from triggers.clock import utc
from triggers.model import AfterSchedule, FireRecord, Outcome, Overlap, Upstream
from triggers.store.protocol import (
    ClaimRequest,
    HistoryQuery,
    Launch,
    Reserved,
    RunChange,
    Settlement,
    TriggerStore,
)

RunState = Literal["completed", "failed", "cancelled"]
T0 = utc(2026, 11, 1)
LEASE = timedelta(hours=1)
UPSTREAMS = [spec(name, overlap=Overlap.ALLOW, max_active=5) for name in ("a", "b", "c")]


def after(
    join: Literal["all", "any"], *listed: str, within: timedelta | None = None
) -> AfterSchedule:
    upstreams = tuple(
        Upstream(trigger=item.split(":")[0], outcome=[*item.split(":"), "completed"][1])
        for item in listed
    )
    return AfterSchedule(upstreams=upstreams, join=join, within=within)


@pytest.fixture
def database(reused_database: Database) -> Database:
    return reused_database


@pytest.fixture
def store(any_store: TriggerStore) -> TriggerStore:
    any_store.apply(
        [
            *UPSTREAMS,
            spec("both", schedule=after("all", "a", "b", within=timedelta(hours=1))),
            spec("either", schedule=after("any", "a", "b:failed")),
        ],
        now=T0,
    )
    return any_store


def at(minute: int) -> datetime:
    return T0 + timedelta(minutes=minute)


def launch(store: TriggerStore, trigger_id: str, minute: int, run_id: str) -> None:
    [fired] = store.claim(
        [ClaimRequest(trigger_id=trigger_id, occurrence_at=at(minute), expected_revision=1)],
        owner="o",
        host="h",
        now=at(minute),
        lease=LEASE,
    )
    assert isinstance(fired, Reserved), fired
    [record] = store.record_launched([Launch(claim=fired, run_id=run_id)], now=at(minute))
    assert not isinstance(record, Exception), record


def settle(
    store: TriggerStore, trigger_id: str, run_id: str, minute: int, state: RunState = "completed"
) -> None:
    store.record_settled(
        [Settlement(trigger_id=trigger_id, run_id=run_id, state=state)], now=at(minute)
    )


def run(
    store: TriggerStore, trigger_id: str, run_id: str, minute: int, state: RunState = "completed"
) -> None:
    launch(store, trigger_id, minute, run_id)
    settle(store, trigger_id, run_id, minute, state)


def rows(store: TriggerStore, trigger_id: str) -> list[FireRecord]:
    found = store.history(HistoryQuery(trigger_id=trigger_id))
    return sorted(found, key=lambda r: (r.occurrence_at, r.upstream_run_id or ""))


def sets(store: TriggerStore, trigger_id: str) -> list[tuple[str | None, list[str]]]:
    return [(r.upstream_run_id, r.upstream_run_ids) for r in rows(store, trigger_id)]


def test_all_fires_once_every_upstream_has_a_matching_run(store: TriggerStore) -> None:
    run(store, "a", "a-1", 1)
    assert rows(store, "both") == []

    run(store, "b", "b-1", 2)

    [both] = rows(store, "both")
    assert (both.outcome, both.occurrence_at) == (Outcome.BUFFERED, at(2))
    assert (both.upstream_run_id, both.upstream_run_ids) == ("b-1", ["a-1", "b-1"])
    assert both.idempotency_key == "both:after:b-1"
    assert both.to_json()["upstream_run_ids"] == ["a-1", "b-1"]


def test_all_uses_each_upstream_run_once_oldest_first(store: TriggerStore) -> None:
    run(store, "a", "a-1", 1)
    run(store, "a", "a-2", 2)
    run(store, "b", "b-1", 3)
    run(store, "b", "b-2", 4)
    run(store, "b", "b-3", 5)

    assert sets(store, "both") == [("b-1", ["a-1", "b-1"]), ("b-2", ["a-2", "b-2"])]


def test_all_counts_only_runs_within_its_window(store: TriggerStore) -> None:
    run(store, "a", "a-1", 1)
    run(store, "b", "b-1", 62)  # a-1 settled 61 minutes ago: outside `within: 1h`
    assert rows(store, "both") == []

    run(store, "a", "a-2", 90)

    assert sets(store, "both") == [("a-2", ["a-2", "b-1"])]


def test_all_ignores_runs_whose_outcome_does_not_match(store: TriggerStore) -> None:
    run(store, "a", "a-1", 1, state="failed")
    run(store, "b", "b-1", 2)
    assert rows(store, "both") == []

    run(store, "a", "a-2", 3)

    assert sets(store, "both") == [("a-2", ["a-2", "b-1"])]


def test_any_fires_once_per_matching_run_of_any_upstream(store: TriggerStore) -> None:
    run(store, "a", "a-1", 1)
    run(store, "b", "b-1", 2)  # completed: `either` waits for b's failures only
    run(store, "b", "b-2", 3, state="failed")
    run(store, "a", "a-2", 4, state="failed")

    assert sets(store, "either") == [("a-1", ["a-1"]), ("b-2", ["b-2"])]
    assert [r.idempotency_key for r in rows(store, "either")] == [
        "either:after:a-1",
        "either:after:b-2",
    ]


def test_runs_settled_together_complete_one_set(store: TriggerStore) -> None:
    launch(store, "a", 1, "a-1")
    launch(store, "b", 1, "b-1")

    store.record_settled(
        [
            Settlement(trigger_id="a", run_id="a-1", state="completed"),
            Settlement(trigger_id="b", run_id="b-1", state="completed"),
        ],
        now=at(2),
    )

    [(last, used)] = sets(store, "both")
    assert sorted(used) == ["a-1", "b-1"]
    assert last in used


def test_a_settlement_recorded_twice_completes_its_set_once(store: TriggerStore) -> None:
    run(store, "a", "a-1", 1)
    launch(store, "b", 2, "b-1")
    change = RunChange(trigger_id="b", run_id="b-1", state="completed")

    store.record_run_changes([change], now=at(3))
    store.record_run_changes([change], now=at(4))
    settle(store, "b", "b-1", 5)

    assert sets(store, "both") == [("b-1", ["a-1", "b-1"])]


def test_a_set_dependent_is_found_by_any_of_its_upstreams(store: TriggerStore) -> None:
    store.apply(
        [
            *UPSTREAMS,
            spec("three", schedule=after("all", "c", "a", "b", within=timedelta(hours=2))),
        ],
        now=at(0),
    )
    run(store, "b", "b-1", 1)
    run(store, "c", "c-1", 2)
    run(store, "a", "a-1", 3)

    assert sets(store, "three") == [("a-1", ["c-1", "a-1", "b-1"])]
    assert rows(store, "both") == []  # retired by that apply


def test_the_pending_pass_launches_a_set_occurrence_by_its_key(store: TriggerStore) -> None:
    run(store, "a", "a-1", 1)
    run(store, "b", "b-1", 2)

    taken = {
        c.trigger_id: c for c in store.take_pending(owner="o", host="h", now=at(2), lease=LEASE)
    }

    claim = taken["both"]
    assert claim.idempotency_key == "both:after:b-1"
    [record] = store.record_launched([Launch(claim=claim, run_id="both-1")], now=at(2))
    assert isinstance(record, FireRecord), record
    assert (record.outcome, record.upstream_run_id) == (Outcome.LAUNCHED, "b-1")
    [launched] = rows(store, "both")
    assert (launched.outcome, launched.upstream_run_ids) == (Outcome.LAUNCHED, ["a-1", "b-1"])
