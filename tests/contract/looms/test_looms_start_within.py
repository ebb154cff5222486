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
