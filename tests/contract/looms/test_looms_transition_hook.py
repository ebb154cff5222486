"""The transition hook: a host's writes about a run's status commit with the run's events."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection
from structlog.testing import capture_logs

from looms_runtime import Database, RunTransition, StartRequest
from looms_runtime._cancel import CancelToken
from looms_runtime.schema import runs
from tests.factories import MakeRuntime
from tests.support import wait_for

LEDGER = sa.Table(
    "host_ledger",
    sa.MetaData(),
    sa.Column("run_id", sa.String, nullable=False),
    sa.Column("status", sa.String, nullable=False),
    sa.Column("previous", sa.String, nullable=False),
    sa.Column("seen_status", sa.String, nullable=True),
    sa.Column("trigger", sa.String, nullable=True),
)
NOOP = {"kind": "steps", "steps": []}
WAIT = {"kind": "steps", "steps": [{"id": "gate", "type": "wait_signal", "signal": "go"}]}


class Recorder:
    """A host hook that writes each transition into its own table, in the same transaction."""

    def __init__(self, *, fail: bool = False) -> None:
        self.fail = fail
        self.calls = 0
        self.lock = threading.Lock()

    def __call__(self, conn: Connection, changes: Sequence[RunTransition]) -> None:
        with self.lock:
            self.calls += 1
        for change in changes:
            seen = conn.execute(
                sa.select(runs.c.status).where(runs.c.run_id == change.run_id)
            ).scalar_one()
            conn.execute(
                LEDGER.insert().values(
                    run_id=change.run_id,
                    status=change.status,
                    previous=change.previous,
                    seen_status=seen,
                    trigger=change.attributes.get("trigger_id"),
                )
            )
        if self.fail:
            raise RuntimeError("the host's ledger refused")


@pytest.fixture
def ledger(looms_db: Database) -> Database:
    LEDGER.metadata.create_all(looms_db.engine)
    return looms_db


def recorded(db: Database, run_id: str) -> list[tuple[Any, ...]]:
    with db.read() as conn:
        query = sa.select(LEDGER.c.status, LEDGER.c.previous, LEDGER.c.seen_status).where(
            LEDGER.c.run_id == run_id
        )
        return [tuple(row) for row in conn.execute(query)]


def start(runtime: Any, definition: dict[str, Any], key: str = "k") -> str:
    version = runtime.register_flow("flow", definition)
    request = StartRequest(
        flow="flow", version=version, idempotency_key=key, attributes={"trigger_id": "t1"}
    )
    return str(runtime.start_run(request).run_id)


def test_a_settlement_is_handed_to_the_hook_inside_the_transaction_that_settles(
    make_runtime: MakeRuntime, ledger: Database
) -> None:
    runtime = make_runtime(transition_hook=Recorder())
    runtime.start()
    run_id = start(runtime, NOOP)

    assert runtime.wait_settled(run_id, 10).status == "completed"

    # The hook saw the run's header already `completed`: it ran in the settling transaction.
    assert recorded(ledger, run_id) == [("completed", "active", "completed")]


def test_parking_and_leaving_parked_are_handed_to_the_hook(
    make_runtime: MakeRuntime, ledger: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    step = {"id": "once", "type": "command", "argv": ["true"]}
    first = make_runtime(owner="first", lease=timedelta(seconds=1), attempts_dir=tmp_path / "a")
    # Dispatched, then lost with its attempt directories: its outcome is unknowable.
    monkeypatch.setattr(first._runner, "launch", lambda *args, **kwargs: CancelToken())
    first.start()
    run_id = start(first, {"kind": "steps", "steps": [step]})
    wait_for(lambda: [e.type for e in first.get_events(run_id)][-1] == "effect_dispatched")
    first.close(timeout=0.1)
    shutil.rmtree(tmp_path / "a")

    second = make_runtime(owner="second", lease=timedelta(seconds=1), transition_hook=Recorder())
    second.start()
    wait_for(lambda: second.inspect_run(run_id).state == "parked")
    assert second.count_runs(status="parked") == 1
    second.retry_effect(run_id, "once")

    assert second.wait_settled(run_id, 10).status == "completed"
    assert recorded(ledger, run_id) == [
        ("parked", "active", "parked"),
        ("active", "parked", "active"),
        ("completed", "active", "completed"),
    ]


def test_a_failing_hook_is_rolled_back_and_logged_and_the_run_still_settles(
    make_runtime: MakeRuntime, ledger: Database
) -> None:
    runtime = make_runtime(transition_hook=Recorder(fail=True))
    runtime.start()

    with capture_logs() as logs:
        run_id = start(runtime, NOOP)
        assert runtime.wait_settled(run_id, 10).status == "completed"

    assert recorded(ledger, run_id) == []
    assert any(entry["event"] == "transition_hook_failed" for entry in logs)


def test_no_hook_call_for_appends_that_change_no_status(
    make_runtime: MakeRuntime, ledger: Database
) -> None:
    hook = Recorder()
    runtime = make_runtime(transition_hook=hook)
    runtime.start()
    run_id = start(runtime, WAIT)
    wait_for(lambda: [e.type for e in runtime.get_events(run_id)][-1] == "wait_started")

    assert recorded(ledger, run_id) == []
    runtime.signal(run_id, "go")
    assert runtime.wait_settled(run_id, 10).status == "completed"
    assert recorded(ledger, run_id) == [("completed", "active", "completed")]
