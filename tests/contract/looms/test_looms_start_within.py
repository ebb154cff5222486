"""Starting runs inside the caller's transaction, their first attempts dispatched with them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from looms_runtime import Database, RunHandle, StartConflictError, StartRequest
from looms_runtime._store import bulk
from looms_runtime.schema import runs
from tests.factories import MakeRuntime
from tests.support import lines


def command(log: Path) -> dict[str, Any]:
    return {
        "kind": "steps",
        "steps": [{"id": "a", "type": "command", "argv": ["sh", "-c", f"echo ran >> {log}"]}],
    }


def request(version: str, key: str = "k", value: object = None) -> StartRequest:
    return StartRequest(flow="flow", version=version, idempotency_key=key, input=value)


def count_runs(db: Database) -> int:
    with db.read() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(runs)).scalar_one())


def test_runs_commit_with_the_callers_transaction_and_start_their_first_step_at_once(
    make_runtime: MakeRuntime, looms_db: Database, tmp_path: Path
) -> None:
    runtime = make_runtime()
    runtime.start()
    version = runtime.register_flow("flow", command(tmp_path / "log"))

    with looms_db.write() as conn:
        results, after_commit = runtime.start_within(conn, [request(version)])
    after_commit()
    [handle] = results

    assert isinstance(handle, RunHandle) and handle.created
    assert runtime.wait_settled(handle.run_id, 30).status == "completed"
    assert lines(tmp_path / "log") == ["ran"]
    events = runtime.get_events(handle.run_id)
    assert [(e.seq, e.type) for e in events] == [
        (1, "run_started"),
        (2, "effect_dispatched"),  # committed with the start: one commit before the step runs
        (3, "effect_succeeded"),
        (4, "run_completed"),
    ]


def test_runs_started_in_a_transaction_that_rolls_back_do_not_exist(
    make_runtime: MakeRuntime, looms_db: Database, tmp_path: Path
) -> None:
    runtime = make_runtime()
    runtime.start()
    version = runtime.register_flow("flow", command(tmp_path / "log"))

    def failing_caller() -> None:
        with looms_db.write() as conn:
            runtime.start_within(conn, [request(version)])
            raise RuntimeError("the caller's own write failed")

    with pytest.raises(RuntimeError):
        failing_caller()

    assert count_runs(looms_db) == 0
    assert lines(tmp_path / "log") == []


def test_a_key_started_within_is_idempotent_and_refuses_another_identity(
    make_runtime: MakeRuntime, looms_db: Database, tmp_path: Path
) -> None:
    runtime = make_runtime()
    version = runtime.register_flow("flow", command(tmp_path / "log"))
    with looms_db.write() as conn:
        [first], _ = runtime.start_within(conn, [request(version, value=1)])

    with looms_db.write() as conn:
        [again, other], _ = runtime.start_within(
            conn, [request(version, value=1), request(version, value=2)]
        )

    assert isinstance(first, RunHandle)
    assert again == RunHandle(run_id=first.run_id, created=False)
    assert isinstance(other, StartConflictError)
    assert count_runs(looms_db) == 1


def echo(value: object) -> object:
    """A Python step that returns its input."""
    return value


def test_runs_of_one_flow_in_a_batch_each_run_their_own_input(
    make_runtime: MakeRuntime, looms_db: Database, tmp_path: Path
) -> None:
    runtime = make_runtime()
    runtime.start()
    version = runtime.register_flow(
        "flow",
        {
            "kind": "steps",
            "steps": [{"id": "echo", "type": "python", "ref": f"{__name__}:echo"}],
        },
    )
    other = runtime.register_flow("other", command(tmp_path / "log"))

    with looms_db.write() as conn:
        results, after_commit = runtime.start_within(
            conn,
            [
                request(version, key="a", value={"n": 1}),
                StartRequest(flow="other", version=other, idempotency_key="b"),
                request(version, key="c", value={"n": 3}),
            ],
        )
    after_commit()

    handles = [r for r in results if isinstance(r, RunHandle)]
    assert len(handles) == 3
    settled = [runtime.wait_settled(h.run_id, 30) for h in handles]
    assert [s.status for s in settled] == ["completed"] * 3
    outputs = [
        next(e.payload.get("output") for e in runtime.get_events(h.run_id) if e.seq == 3)
        for h in (handles[0], handles[2])
    ]
    assert outputs == [{"n": 1}, {"n": 3}]
    assert lines(tmp_path / "log") == ["ran"]
    for handle in handles:
        types = [e.type for e in runtime.get_events(handle.run_id)]
        assert types == ["run_started", "effect_dispatched", "effect_succeeded", "run_completed"]


def test_a_run_with_nothing_to_run_completes_in_its_start_as_a_worker_would_complete_it(
    make_runtime: MakeRuntime, looms_db: Database
) -> None:
    settled: list[str] = []
    transitions: list[str] = []
    runtime = make_runtime(
        on_settled=lambda event: settled.append(event.run_id),
        transition_hook=lambda conn, changes: transitions.extend(c.run_id for c in changes),
    )
    runtime.start()
    version = runtime.register_flow("flow", {"kind": "steps", "steps": []})

    with looms_db.write() as conn:
        results, after_commit = runtime.start_within(conn, [request(version, key="within")])
    after_commit()
    [by_worker] = runtime.start_runs([request(version, key="worker")])
    assert isinstance(by_worker, RunHandle)
    assert runtime.wait_settled(by_worker.run_id, 30).status == "completed"

    [handle] = results
    assert isinstance(handle, RunHandle)
    assert (handle.created, handle.completed) == (True, True)
    info = runtime.wait_settled(handle.run_id, 5)
    assert (info.status, info.error) == ("completed", None)
    assert info.settled_at is not None
    # The same log as a worker writes; nothing else hears of it: the caller records it.
    logs = [
        [(e.seq, e.type, e.version, e.payload) for e in runtime.get_events(run_id)]
        for run_id in (handle.run_id, by_worker.run_id)
    ]
    assert logs[0] == logs[1]
    assert [seq for seq, *_ in logs[0]] == [1, 2]
    assert settled == [by_worker.run_id]
    assert transitions == [by_worker.run_id]
    with looms_db.read() as conn:
        rows = {
            row.run_id: row
            for row in conn.execute(
                sa.select(runs.c.run_id, runs.c.status, runs.c.last_seq, runs.c.result)
            )
        }
    assert (rows[handle.run_id].status, rows[handle.run_id].last_seq) == ("completed", 2)
    assert rows[handle.run_id].result == rows[by_worker.run_id].result


def test_a_run_completed_in_a_start_that_rolls_back_does_not_exist(
    make_runtime: MakeRuntime, looms_db: Database
) -> None:
    runtime = make_runtime()
    version = runtime.register_flow("flow", {"kind": "steps", "steps": []})

    handles: list[object] = []

    def failing_caller() -> None:
        with looms_db.write() as conn:
            handles.extend(runtime.start_within(conn, [request(version)])[0])
            raise RuntimeError("the caller's own write failed")

    with pytest.raises(RuntimeError):
        failing_caller()

    [handle] = handles
    assert isinstance(handle, RunHandle) and handle.completed
    assert count_runs(looms_db) == 0


def test_start_rows_reach_the_driver_in_the_statements_own_column_order(looms_db: Database) -> None:
    # Rows are built as tuples in `_RUN_COLUMNS`/`_EVENT_COLUMNS` order; a compiled
    # statement naming its columns in another order would reorder every row of every start.
    with looms_db.read() as conn:
        assert [bulk._compile(conn, which)[1] for which in ("runs", "events")] == [None, None]


def test_an_event_write_the_database_refuses_is_the_drivers_error_as_sqlalchemy_reports_it(
    looms_db: Database,
) -> None:
    # On PostgreSQL events go by COPY, around SQLAlchemy's execution: its errors must
    # still arrive as SQLAlchemy's, which the runtime and the store map (a lost server
    # to "unavailable"), and leave the connection usable.
    orphan = [("no-such-run", 1, "run_started", 1, "{}", 0)]
    with pytest.raises(sa.exc.IntegrityError), looms_db.write() as conn:
        bulk.bulk_insert(conn, "events", orphan)
    assert count_runs(looms_db) == 0
