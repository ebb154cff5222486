"""Starting runs inside the caller's transaction, their first attempts dispatched with them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from looms_runtime import Database, RunHandle, StartConflictError, StartRequest
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
