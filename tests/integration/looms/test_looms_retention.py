"""Trimming the log behind snapshots, and purging settled runs down to tombstones."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from looms_runtime import (
    Database,
    HistoryTrimmedError,
    KeyPurgedError,
    RunHandle,
    RunNotFoundError,
    Runtime,
    StartConflictError,
    StartRequest,
)
from looms_runtime.schema import events, runs
from looms_runtime.testing import ManualClock
from tests.factories import MakeRuntime
from tests.support import wait_for

CALLS = {
    "kind": "steps",
    "steps": [{"id": f"call{i}", "type": "python", "ref": "json:dumps"} for i in range(5)],
}
GATE = {
    "kind": "steps",
    "steps": [
        {"id": "nap", "type": "sleep", "duration_s": 0},
        {"id": "gate", "type": "wait_signal", "signal": "go"},
    ],
}
EMPTY = {"kind": "steps", "steps": []}


def start(runtime: Runtime, name: str, definition: Mapping[str, Any], key: str) -> RunHandle:
    version = runtime.register_flow(name, definition)
    return runtime.start_run(StartRequest(flow=name, version=version, idempotency_key=key))


def test_trimming_keeps_the_log_behind_the_snapshot_answerable(make_runtime: MakeRuntime) -> None:
    runtime = make_runtime(trim_events=True, snapshot_every=3)
    runtime.start()
    handle = start(runtime, "calls", CALLS, "k1")
    assert runtime.wait_settled(handle.run_id, 20).status == "completed"

    info = runtime.inspect_run(handle.run_id)
    kept = runtime.get_events(handle.run_id)

    assert info.completed_steps == 5
    assert info.first_seq > 1
    assert [e.seq for e in kept] == list(range(info.first_seq, info.last_seq + 1))
    assert runtime.replay_to(handle.run_id, info.last_seq)["status"] == "completed"
    assert runtime.replay_to(handle.run_id, info.first_seq - 1)["seq"] == info.first_seq - 1
    with pytest.raises(HistoryTrimmedError) as caught:
        runtime.replay_to(handle.run_id, 1)
    assert caught.value.details["first_seq"] == info.first_seq


def test_a_trimmed_run_resumes_from_its_snapshot_after_a_restart(
    make_runtime: MakeRuntime,
) -> None:
    first = make_runtime(owner="daemon", trim_events=True)
    first.start()
    handle = start(first, "gate", GATE, "k1")
    wait_for(lambda: first.inspect_run(handle.run_id).first_seq > 1)
    first.close()

    second = make_runtime(owner="daemon", trim_events=True)
    second.start()
    second.signal(handle.run_id, "go", {"ok": True})

    assert second.wait_settled(handle.run_id, 20).status == "completed"
    assert second.inspect_run(handle.run_id).result == {"ok": True}


def test_purge_removes_settled_runs_in_batches_and_keeps_their_keys(
    make_runtime: MakeRuntime, looms_db: Database
) -> None:
    runtime = make_runtime()
    runtime.start()
    done = [start(runtime, "empty", EMPTY, f"done-{i}") for i in range(5)]
    for handle in done:
        runtime.wait_settled(handle.run_id, 20)
    waiting = start(runtime, "gate", GATE, "waiting")

    purged = runtime.purge_settled(older_than=timedelta(0), batch_size=2)

    assert purged == 5
    assert [r.run_id for r in runtime.list_runs()] == [waiting.run_id]
    with looms_db.read() as conn:
        tombstones = sa.select(sa.func.count()).where(runs.c.purged_at.is_not(None))
        assert conn.execute(tombstones).scalar() == 5
        kept = sa.select(sa.func.count()).where(events.c.run_id.in_([h.run_id for h in done]))
        assert conn.execute(kept).scalar() == 0
    status = runtime.statuses([done[0].run_id])[done[0].run_id]
    assert (status.status, status.settled_at is not None) == ("completed", True)
    with pytest.raises(RunNotFoundError) as caught:
        runtime.inspect_run(done[0].run_id)
    assert caught.value.details["status"] == "completed"
    with pytest.raises(RunNotFoundError):
        runtime.get_events(done[0].run_id)


def test_a_start_with_a_purged_key_is_a_conflict_naming_the_tombstone(
    make_runtime: MakeRuntime,
) -> None:
    runtime = make_runtime()
    runtime.start()
    handle = start(runtime, "empty", EMPTY, "nightly:2030-01-01T02:30:00Z")
    runtime.wait_settled(handle.run_id, 20)
    runtime.purge_settled(older_than=timedelta(0))

    with pytest.raises(KeyPurgedError) as caught:
        start(runtime, "empty", EMPTY, "nightly:2030-01-01T02:30:00Z")

    assert isinstance(caught.value, StartConflictError)
    assert caught.value.code == "LMS-408"
    assert caught.value.details["run_id"] == handle.run_id
    assert caught.value.details["status"] == "completed"
    assert [r.run_id for r in runtime.list_runs()] == []


def test_purge_keeps_runs_settled_within_the_retention(make_runtime: MakeRuntime) -> None:
    clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
    runtime = make_runtime(clock=clock)
    runtime.start()
    old = start(runtime, "empty", EMPTY, "old")
    runtime.wait_settled(old.run_id, 20)
    clock.advance(timedelta(days=2))
    new = start(runtime, "empty", EMPTY, "new")
    runtime.wait_settled(new.run_id, 20)

    assert runtime.purge_settled(older_than=timedelta(days=1)) == 1
    assert [r.run_id for r in runtime.list_runs()] == [new.run_id]


def test_retention_runs_by_itself_and_forgets_tombstones_after_theirs(
    make_runtime: MakeRuntime,
) -> None:
    clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
    runtime = make_runtime(
        clock=clock, retention=timedelta(days=1), tombstone_retention=timedelta(days=7)
    )
    runtime.start()
    handle = start(runtime, "empty", EMPTY, "k1")
    runtime.wait_settled(handle.run_id, 20)

    clock.advance(timedelta(days=2))
    wait_for(lambda: runtime.list_runs() == [])
    with pytest.raises(KeyPurgedError):
        start(runtime, "empty", EMPTY, "k1")

    clock.advance(timedelta(days=8))
    wait_for(lambda: runtime.statuses([handle.run_id])[handle.run_id].status == "missing")
    again = start(runtime, "empty", EMPTY, "k1")
    assert again.created
    assert again.run_id != handle.run_id
