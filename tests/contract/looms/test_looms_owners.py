"""The owners table: owners long gone that hold no unsettled run are forgotten."""

from __future__ import annotations

import time

import sqlalchemy as sa

from looms_runtime import Database, RunHandle, StartRequest
from looms_runtime._store.control import prune_owners
from looms_runtime.schema import owners, runs
from tests.factories import MakeRuntime
from tests.support import wait_for

DAY_MS = 24 * 3_600_000
NOW_MS = 1_900_000_000_000


def add_owner(db: Database, owner: str, *, expired_days_ago: float, now_ms: int = NOW_MS) -> None:
    expires_at = now_ms - int(expired_days_ago * DAY_MS)
    with db.write() as conn:
        conn.execute(
            owners.insert().values(
                owner=owner,
                host="h",
                pid=1,
                started_at=expires_at - DAY_MS,
                heartbeat_at=expires_at - 10_000,
                expires_at=expires_at,
            )
        )


def known_owners(db: Database) -> set[str]:
    with db.read() as conn:
        return set(conn.execute(sa.select(owners.c.owner)).scalars())


def test_owners_gone_a_week_without_unsettled_runs_are_forgotten(
    make_runtime: MakeRuntime, looms_db: Database
) -> None:
    runtime = make_runtime()
    version = runtime.register_flow("flow", {"kind": "steps", "steps": []})
    [holding] = runtime.start_runs(
        [StartRequest(flow="flow", version=version, idempotency_key="k")]
    )
    assert isinstance(holding, RunHandle)
    add_owner(looms_db, "old-idle", expired_days_ago=8)
    add_owner(looms_db, "old-holding", expired_days_ago=8)
    add_owner(looms_db, "recent", expired_days_ago=1)
    with looms_db.write() as conn:  # an unsettled run still names the old owner
        conn.execute(
            runs.update().where(runs.c.run_id == holding.run_id).values(lease_owner="old-holding")
        )

    with looms_db.write() as conn:
        forgotten = prune_owners(conn, owner="me", before_ms=NOW_MS - 7 * DAY_MS)

    assert forgotten == 1
    assert {"old-holding", "recent"} <= known_owners(looms_db)
    assert "old-idle" not in known_owners(looms_db)


def test_the_runtime_forgets_old_owners_as_it_runs(
    make_runtime: MakeRuntime, looms_db: Database
) -> None:
    add_owner(looms_db, "gone-long-ago", expired_days_ago=30, now_ms=int(time.time() * 1000))
    runtime = make_runtime()
    runtime.start()

    wait_for(lambda: "gone-long-ago" not in known_owners(looms_db))
    assert known_owners(looms_db)  # its own row stays
