"""Several runtimes on one PostgreSQL database: one run per key, and takeover of a dead owner."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest
import sqlalchemy as sa

from looms_runtime import Database, RunHandle, Runtime, StartRequest
from looms_runtime.schema import runs

WAIT = {
    "kind": "steps",
    "steps": [{"id": "gate", "type": "wait_signal", "signal": "go", "timeout_s": None}],
}

pytestmark = pytest.mark.postgres


@pytest.fixture
def two_databases(looms_postgres_url: str) -> Iterator[tuple[Database, Database]]:
    first, second = Database(looms_postgres_url), Database(looms_postgres_url)
    yield first, second
    for database in (first, second):
        assert database.checked_out() == 0
        database.dispose()


def test_two_runtimes_starting_the_same_keys_make_one_run_per_key(
    two_databases: tuple[Database, Database],
) -> None:
    runtimes = [Runtime(db, owner=f"daemon-{i}") for i, db in enumerate(two_databases)]
    version = runtimes[0].register_flow("wait", WAIT)
    runtimes[1].register_flow("wait", WAIT)
    keys = [f"nightly:{i}" for i in range(40)]
    barrier = threading.Barrier(2)
    answers: dict[int, list[RunHandle]] = {}

    def launch(index: int) -> None:
        barrier.wait()
        answers[index] = [
            runtimes[index].start_run(
                StartRequest(flow="wait", version=version, idempotency_key=key)
            )
            for key in keys
        ]

    threads = [threading.Thread(target=launch, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for runtime in runtimes:
        runtime.close()

    assert [h.run_id for h in answers[0]] == [h.run_id for h in answers[1]]
    assert all(a.created != b.created for a, b in zip(answers[0], answers[1], strict=True))
    with two_databases[0].read() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(runs)).scalar_one() == len(keys)


def test_a_live_runtime_takes_over_the_runs_of_an_owner_without_a_lease(
    two_databases: tuple[Database, Database],
) -> None:
    live = Runtime(two_databases[1], owner="live", lease=timedelta(milliseconds=600))
    live.start()
    gone = Runtime(two_databases[0], owner="gone")
    version = gone.register_flow("wait", WAIT)
    try:
        handle = gone.start_run(StartRequest(flow="wait", version=version, idempotency_key="k"))
        live.signal(handle.run_id, "go")

        assert live.wait_settled(handle.run_id, 20).status == "completed"
        assert live.inspect_run(handle.run_id).owner == "live"
    finally:
        gone.close()
        live.close()
