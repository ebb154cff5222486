"""A database that fails a commit, or loses the answer to one, loses no outcome."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from looms_runtime import Database, DatabaseError, Runtime, StartRequest, schema
from looms_runtime.testing import ManualClock

FLOW = {
    "kind": "steps",
    "steps": [
        {
            "id": "work",
            "type": "command",
            "argv": [sys.executable, "-c", "print('done')"],
            "idempotent": False,
        }
    ],
}


class FlakyDatabase(Database):
    """Fails the next write transaction that commits a given event type.

    `lose_answer=False`: the transaction is rolled back (the commit failed).
    `lose_answer=True`: it commits, then the caller sees a driver error (the answer
    was lost on the way back), as a dropped connection during COMMIT would do.
    """

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.fail_on: str | None = None
        self.lose_answer = False
        self.failures = 0
        self._lock = threading.Lock()

    @contextmanager
    def write(self, *, urgent: bool = False) -> Iterator[Connection]:
        with super().write(urgent=urgent) as conn:
            yield conn
            if not self.lose_answer and self._should_fail(conn):
                raise self._error()
        if self.lose_answer and self._armed_and_hit():
            raise self._error()

    def _should_fail(self, conn: Connection) -> bool:
        with self._lock:
            if self.fail_on is None:
                return False
            hit = conn.execute(
                sa.select(sa.func.count())
                .select_from(schema.events)
                .where(schema.events.c.type == self.fail_on)
            ).scalar_one()
            if hit:
                self.fail_on = None
                self.failures += 1
            return bool(hit)

    def _armed_and_hit(self) -> bool:
        with self._lock:
            if self.fail_on is None:
                return False
        with super().read() as conn:
            return self._should_fail(conn)

    @staticmethod
    def _error() -> sa.exc.OperationalError:
        return sa.exc.OperationalError("COMMIT", {}, Exception("disk I/O error"))


@pytest.fixture
def flaky(looms_sqlite_url: str) -> Iterator[FlakyDatabase]:
    database = FlakyDatabase(looms_sqlite_url)
    yield database
    database.dispose()


@pytest.mark.parametrize("lose_answer", [False, True], ids=["commit-failed", "answer-lost"])
def test_an_outcome_survives_a_failed_commit(flaky: FlakyDatabase, lose_answer: bool) -> None:
    runtime = Runtime(flaky, owner="flaky")
    try:
        runtime.start()
        version = runtime.register_flow("flow", FLOW)
        flaky.lose_answer = lose_answer
        flaky.fail_on = "effect_succeeded"
        handle = runtime.start_run(StartRequest(flow="flow", version=version, idempotency_key="k"))

        assert runtime.wait_settled(handle.run_id, 20).status == "completed"
        types = [e.type for e in runtime.get_events(handle.run_id)]
        assert flaky.failures == 1
        assert types == [
            "run_started",
            "effect_dispatched",
            "effect_succeeded",
            "run_completed",
        ]
    finally:
        runtime.close()


def test_database_errors_surface_as_store_errors(tmp_path: Path) -> None:
    database = Database(f"sqlite:///{tmp_path / 'missing-tables.sqlite'}")
    runtime = Runtime(database, owner="x")
    try:
        with pytest.raises(DatabaseError, match="database"):
            runtime.register_flow("flow", FLOW)
    finally:
        runtime.close()
        database.dispose()


def test_a_start_whose_answer_was_lost_is_driven_when_it_is_retried(
    flaky: FlakyDatabase,
) -> None:
    runtime = Runtime(flaky, owner="flaky")
    try:
        runtime.start()
        version = runtime.register_flow("flow", FLOW)
        request = StartRequest(flow="flow", version=version, idempotency_key="k")
        flaky.lose_answer = True
        flaky.fail_on = "run_started"
        with pytest.raises(DatabaseError):
            runtime.start_run(request)

        handle = runtime.start_run(request)

        assert flaky.failures == 1
        assert not handle.created
        assert runtime.wait_settled(handle.run_id, 20).status == "completed"
    finally:
        runtime.close()


def test_the_sweep_drives_a_run_whose_start_answer_was_lost(flaky: FlakyDatabase) -> None:
    clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
    runtime = Runtime(flaky, owner="flaky", clock=clock)
    try:
        runtime.start()
        version = runtime.register_flow("flow", FLOW)
        flaky.lose_answer = True
        flaky.fail_on = "run_started"
        with pytest.raises(DatabaseError):
            runtime.start_run(StartRequest(flow="flow", version=version, idempotency_key="k"))
        (stranded,) = runtime.list_runs()
        assert runtime.inspect_run(stranded.run_id).last_seq == 1

        clock.advance(timedelta(seconds=30))

        assert runtime.wait_settled(stranded.run_id, 20).status == "completed"
    finally:
        runtime.close()
