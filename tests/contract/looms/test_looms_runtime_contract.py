"""The runtime's public contract, on SQLite and PostgreSQL alike."""

from __future__ import annotations

import hashlib
import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from looms_runtime import (
    Database,
    InvalidFlowError,
    InvalidRequestError,
    RunHandle,
    RunNotFoundError,
    RunSettled,
    StartConflictError,
    StartRequest,
    UnknownEventVersionError,
    UnknownFlowError,
)
from looms_runtime._history.planner import InboxItem
from looms_runtime._store.control import record_request
from looms_runtime.schema import events, snapshots
from looms_runtime.testing import ManualClock
from tests.factories import MakeRuntime

EMPTY = {"kind": "steps", "steps": []}
NAP = {"kind": "steps", "steps": [{"id": "nap", "type": "sleep", "duration_s": 0.05}]}
WAIT = {
    "kind": "steps",
    "steps": [{"id": "approval", "type": "wait_signal", "signal": "approved", "timeout_s": None}],
}


def request(version: str, key: str, **fields: Any) -> StartRequest:
    return StartRequest(
        flow=fields.pop("flow", "empty"), version=version, idempotency_key=key, **fields
    )


def test_register_flow_returns_the_canonical_digest_and_is_idempotent(
    make_runtime: MakeRuntime,
) -> None:
    runtime = make_runtime()
    definition = {"steps": [], "kind": "steps"}
    canonical = json.dumps(definition, sort_keys=True, separators=(",", ":"))

    version = runtime.register_flow("empty", definition)

    assert version == hashlib.sha256(canonical.encode()).hexdigest()[:16]
    assert runtime.register_flow("empty", dict(reversed(definition.items()))) == version


def test_register_flow_rejects_an_invalid_definition_listing_every_problem(
    make_runtime: MakeRuntime,
) -> None:
    runtime = make_runtime()
    bad = {
        "kind": "steps",
        "steps": [{"id": "", "type": "command", "argv": []}, {"type": "teleport"}],
    }

    with pytest.raises(InvalidFlowError) as caught:
        runtime.register_flow("bad", bad)

    problems = caught.value.details["problems"]
    assert isinstance(problems, list)
    assert len(problems) >= 3


def test_start_run_same_key_returns_the_same_run(make_runtime: MakeRuntime) -> None:
    runtime = make_runtime()
    version = runtime.register_flow("empty", EMPTY)

    first = runtime.start_run(request(version, "k1", input={"n": 1}))
    second = runtime.start_run(request(version, "k1", input={"n": 1}))

    assert first.created
    assert second == RunHandle(run_id=first.run_id, created=False)


@pytest.mark.parametrize(
    ("change", "named"),
    [({"input": {"n": 2}}, "input"), ({"env": {"A": "1"}}, "env")],
    ids=["input", "env"],
)
def test_start_run_same_key_with_other_identity_is_a_conflict_naming_it(
    make_runtime: MakeRuntime, change: dict[str, Any], named: str
) -> None:
    runtime = make_runtime()
    version = runtime.register_flow("empty", EMPTY)
    original = runtime.start_run(request(version, "k1", input={"n": 1}))

    with pytest.raises(StartConflictError) as caught:
        runtime.start_run(request(version, "k1", **{"input": {"n": 1}, **change}))

    assert caught.value.details["differs"] == [named]
    assert caught.value.details["run_id"] == original.run_id
    assert named in str(caught.value)


def test_start_run_same_key_with_another_version_is_a_conflict(make_runtime: MakeRuntime) -> None:
    runtime = make_runtime()
    old = runtime.register_flow("empty", EMPTY)
    new = runtime.register_flow("empty", NAP)
    runtime.start_run(request(old, "k1"))

    with pytest.raises(StartConflictError) as caught:
        runtime.start_run(request(new, "k1"))

    assert caught.value.details["differs"] == ["version"]


def test_start_runs_answers_each_request_in_order(make_runtime: MakeRuntime) -> None:
    runtime = make_runtime()
    version = runtime.register_flow("empty", EMPTY)
    runtime.start_run(request(version, "taken", input=1))

    results = runtime.start_runs(
        [
            request(version, "a"),
            request(version, "taken", input=2),
            request(version, "b", flow="nope"),
            request(version, "a"),
            request(version, "c", input={1, 2}),
        ]
    )

    assert isinstance(results[0], RunHandle)
    assert results[0].created
    assert isinstance(results[1], StartConflictError)
    assert isinstance(results[2], UnknownFlowError)
    assert results[3] == RunHandle(run_id=results[0].run_id, created=False)
    assert isinstance(results[4], InvalidRequestError)


def test_concurrent_duplicate_starts_from_two_threads_make_one_run_per_key(
    make_runtime: MakeRuntime,
) -> None:
    runtime = make_runtime()
    version = runtime.register_flow("empty", EMPTY)
    keys = [f"key-{i}" for i in range(50)]
    barrier = threading.Barrier(2)
    handles: list[list[RunHandle]] = []

    def start_all() -> None:
        barrier.wait()
        handles.append([runtime.start_run(request(version, key)) for key in keys])

    threads = [threading.Thread(target=start_all) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    left, right = handles
    assert [h.run_id for h in left] == [h.run_id for h in right]
    assert all(a.created != b.created for a, b in zip(left, right, strict=True))


def test_statuses_reports_unknown_ids_as_missing(make_runtime: MakeRuntime) -> None:
    runtime = make_runtime()
    version = runtime.register_flow("empty", EMPTY)
    handle = runtime.start_run(request(version, "k1"))

    found = runtime.statuses([handle.run_id, "no-such-run"])

    assert found[handle.run_id].status == "active"
    assert found["no-such-run"].status == "missing"


def test_zero_step_run_completes_and_reports_settlement(make_runtime: MakeRuntime) -> None:
    settled: list[RunSettled] = []
    reported = threading.Event()

    def on_settled(event: RunSettled) -> None:
        settled.append(event)
        reported.set()

    runtime = make_runtime(on_settled=on_settled)
    runtime.start()
    version = runtime.register_flow("empty", EMPTY)
    handle = runtime.start_run(request(version, "k1", attributes={"trigger_id": "nightly"}))

    status = runtime.wait_settled(handle.run_id, 10)

    # The status is durable before the hook runs: wait for the hook itself.
    assert reported.wait(10)
    assert status.status == "completed"
    assert status.settled_at is not None
    assert settled == [
        RunSettled(
            run_id=handle.run_id,
            status="completed",
            error=None,
            idempotency_key="k1",
            attributes={"trigger_id": "nightly"},
        )
    ]
    assert [e.type for e in runtime.get_events(handle.run_id)] == ["run_started", "run_completed"]


def test_runs_started_before_start_run_once_the_runtime_starts(make_runtime: MakeRuntime) -> None:
    runtime = make_runtime()
    version = runtime.register_flow("empty", EMPTY)
    handle = runtime.start_run(request(version, "k1"))
    assert runtime.statuses([handle.run_id])[handle.run_id].status == "active"

    runtime.start()

    assert runtime.wait_settled(handle.run_id, 10).status == "completed"


def test_durable_sleep_wakes_at_its_recorded_time(make_runtime: MakeRuntime) -> None:
    clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
    runtime = make_runtime(clock=clock)
    runtime.start()
    version = runtime.register_flow("nap", NAP)
    handle = runtime.start_run(request(version, "k1", flow="nap"))
    wake_at = clock() + timedelta(milliseconds=50)
    pause = threading.Event()
    while runtime.inspect_run(handle.run_id).next_wake_at is None:
        pause.wait(0.01)

    assert runtime.inspect_run(handle.run_id).next_wake_at == wake_at
    clock.advance(timedelta(milliseconds=50))
    runtime.rescan_timers()

    assert runtime.wait_settled(handle.run_id, 10).status == "completed"
    finished = runtime.get_events(handle.run_id)[-2]
    assert (finished.type, finished.created_at) == ("wait_finished", wake_at)


def test_signal_completes_a_waiting_step_once_per_key(make_runtime: MakeRuntime) -> None:
    runtime = make_runtime()
    runtime.start()
    version = runtime.register_flow("wait", WAIT)
    handle = runtime.start_run(request(version, "k1", flow="wait"))

    runtime.signal(handle.run_id, "approved", {"by": "ops"}, idempotency_key="s1")
    runtime.signal(handle.run_id, "approved", {"by": "ops"}, idempotency_key="s1")

    assert runtime.wait_settled(handle.run_id, 10).status == "completed"
    finished = [e for e in runtime.get_events(handle.run_id) if e.type == "wait_finished"]
    assert [e.payload["payload"] for e in finished] == [{"by": "ops"}]
    assert runtime.inspect_run(handle.run_id).result == {"by": "ops"}


TWO_GATES = {
    "kind": "steps",
    "steps": [
        {"id": "first", "type": "wait_signal", "signal": "approved", "timeout_s": 600},
        {"id": "nap", "type": "sleep", "duration_s": 0.01},
        {"id": "second", "type": "wait_signal", "signal": "released", "timeout_s": None},
    ],
}


def test_inspect_run_names_the_open_waits_and_the_signals_still_to_come(
    make_runtime: MakeRuntime,
) -> None:
    runtime = make_runtime()
    runtime.start()
    version = runtime.register_flow("gates", TWO_GATES)
    handle = runtime.start_run(request(version, "k1", flow="gates"))

    def waits_on(signal: str) -> Any:
        deadline = datetime.now(UTC) + timedelta(seconds=30)
        while datetime.now(UTC) < deadline:
            info = runtime.inspect_run(handle.run_id)
            if [w.signal for w in info.waits] == [signal]:
                return info
            threading.Event().wait(0.02)
        raise AssertionError(f"the run never waited for {signal!r}")

    first = waits_on("approved")
    [wait] = first.waits
    assert (wait.wait_id, wait.kind) == ("first", "signal")
    assert wait.until is not None and wait.until > first.created_at
    assert first.awaited_signals == ("approved", "released")
    runtime.signal(handle.run_id, "approved")
    second = waits_on("released")
    assert second.awaited_signals == ("released",) and second.waits[0].until is None
    runtime.signal(handle.run_id, "released")
    settled = runtime.wait_settled(handle.run_id, 10)
    assert settled.status == "completed"
    done = runtime.inspect_run(handle.run_id)
    assert done.waits == () and done.awaited_signals == ()


def test_a_request_says_whether_it_was_recorded_so_the_run_wakes_at_once(
    make_runtime: MakeRuntime, looms_db: Database
) -> None:
    runtime = make_runtime()
    version = runtime.register_flow("wait", WAIT)
    handle = runtime.start_run(request(version, "k1", flow="wait"))
    item = InboxItem(key="signal:s1", kind="signal", name="approved", payload={})

    # True wakes the run's worker at once; False leaves the request to the poll.
    assert record_request(looms_db, handle.run_id, item, None, now_ms=1) == ("active", True)
    assert record_request(looms_db, handle.run_id, item, None, now_ms=2) == ("active", False)


def test_cancel_of_a_settled_run_changes_nothing(make_runtime: MakeRuntime) -> None:
    runtime = make_runtime()
    runtime.start()
    version = runtime.register_flow("empty", EMPTY)
    handle = runtime.start_run(request(version, "k1"))
    runtime.wait_settled(handle.run_id, 10)

    status = runtime.cancel(handle.run_id, reason="too late")

    assert status.status == "completed"
    assert [e.type for e in runtime.get_events(handle.run_id)][-1] == "run_completed"


def test_cancel_of_a_waiting_run_settles_it_cancelled(make_runtime: MakeRuntime) -> None:
    runtime = make_runtime()
    runtime.start()
    version = runtime.register_flow("wait", WAIT)
    handle = runtime.start_run(request(version, "k1", flow="wait"))

    runtime.cancel(handle.run_id, reason="superseded")

    status = runtime.wait_settled(handle.run_id, 10)
    assert status.status == "cancelled"
    assert status.error == "cancelled: superseded"


def test_unknown_ids_raise_run_not_found(make_runtime: MakeRuntime) -> None:
    runtime = make_runtime()

    with pytest.raises(RunNotFoundError):
        runtime.inspect_run("nope")
    with pytest.raises(RunNotFoundError):
        runtime.get_events("nope")
    with pytest.raises(RunNotFoundError):
        runtime.cancel("nope")


def test_list_runs_lists_newest_first_and_filters_by_public_status(
    make_runtime: MakeRuntime,
) -> None:
    runtime = make_runtime()
    version = runtime.register_flow("empty", EMPTY)
    wait = runtime.register_flow("wait", WAIT)
    done = runtime.start_run(request(version, "done"))
    runtime.start()
    runtime.wait_settled(done.run_id, 10)
    waiting = runtime.start_run(request(wait, "waiting", flow="wait"))

    assert [r.run_id for r in runtime.list_runs()] == [waiting.run_id, done.run_id]
    assert [r.run_id for r in runtime.list_runs(status="active")] == [waiting.run_id]
    assert [r.run_id for r in runtime.list_runs(status="completed")] == [done.run_id]
    assert runtime.list_runs(limit=1)[0].run_id == waiting.run_id
    counts = {status: runtime.count_runs(status=status) for status in ("active", "completed")}
    assert counts == {"active": 1, "completed": 1}
    assert runtime.count_runs(status="parked") == 0
    with pytest.raises(InvalidRequestError):
        runtime.count_runs(status="sleeping")


def test_an_event_from_a_newer_runtime_fails_loudly(
    make_runtime: MakeRuntime, looms_db: Database
) -> None:
    runtime = make_runtime()
    version = runtime.register_flow("empty", EMPTY)
    handle = runtime.start_run(request(version, "k1"))
    with looms_db.write() as conn:
        conn.execute(
            sa.update(events)
            .where(events.c.run_id == handle.run_id, events.c.seq == 1)
            .values(version=99)
        )

    with pytest.raises(UnknownEventVersionError):
        runtime.inspect_run(handle.run_id)


def test_get_events_pages_by_sequence(make_runtime: MakeRuntime) -> None:
    runtime = make_runtime()
    runtime.start()
    version = runtime.register_flow("nap", NAP)
    handle = runtime.start_run(request(version, "k1", flow="nap"))
    runtime.wait_settled(handle.run_id, 10)

    everything = runtime.get_events(handle.run_id)
    page = runtime.get_events(handle.run_id, from_seq=2, limit=2)

    assert [e.seq for e in everything] == list(range(1, len(everything) + 1))
    assert [e.seq for e in page] == [2, 3]
    assert all(e.version == 1 for e in everything)


STEPS = {
    "kind": "steps",
    "steps": [{"id": f"nap{i}", "type": "sleep", "duration_s": 0} for i in range(4)],
}
CALLS = {
    "kind": "steps",
    "steps": [{"id": f"call{i}", "type": "python", "ref": "json:dumps"} for i in range(4)],
}


def test_snapshots_are_taken_and_a_corrupt_one_falls_back_to_the_log(
    make_runtime: MakeRuntime, looms_db: Database
) -> None:
    runtime = make_runtime(snapshot_every=3)
    version = runtime.register_flow("calls", CALLS)
    handle = runtime.start_run(request(version, "k1", flow="calls", input=[1]))
    runtime.start()
    assert runtime.wait_settled(handle.run_id, 10).status == "completed"
    with looms_db.read() as conn:
        kept = conn.execute(sa.select(snapshots.c.seq).where(snapshots.c.run_id == handle.run_id))
        assert list(kept.scalars()) == [8]
    with looms_db.write() as conn:
        conn.execute(sa.update(snapshots).values(state_hash="0" * 64))

    info = runtime.inspect_run(handle.run_id)

    assert info.completed_steps == 4
    assert info.status == "completed"


def test_replay_to_shows_the_state_after_any_event(make_runtime: MakeRuntime) -> None:
    runtime = make_runtime()
    runtime.start()
    version = runtime.register_flow("naps", STEPS)
    handle = runtime.start_run(request(version, "k1", flow="naps"))
    runtime.wait_settled(handle.run_id, 10)

    assert runtime.replay_to(handle.run_id, 1)["status"] == "active"
    assert runtime.replay_to(handle.run_id, 3)["completed_steps"] == 1
    assert runtime.replay_to(handle.run_id, 10_000)["status"] == "completed"


def test_close_never_cancels_a_run_and_the_next_start_resumes_it(
    make_runtime: MakeRuntime,
) -> None:
    first = make_runtime(owner="daemon")
    first.start()
    version = first.register_flow("wait", WAIT)
    handle = first.start_run(request(version, "k1", flow="wait"))
    first.close()
    assert first.statuses([handle.run_id])[handle.run_id].status == "active"

    second = make_runtime(owner="daemon")
    second.start()
    second.signal(handle.run_id, "approved")

    assert second.wait_settled(handle.run_id, 10).status == "completed"
