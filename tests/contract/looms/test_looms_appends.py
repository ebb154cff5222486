"""Appends of one group commit are fenced together; a lost fence fails that append only."""

from __future__ import annotations

from looms_runtime import Database, FencedError, StartRequest
from looms_runtime._history.events import EventType, new_event
from looms_runtime._store.reads import load_header, read_events
from looms_runtime._store.rows import AppendJob
from looms_runtime._store.writes import append_many
from tests.factories import MakeRuntime

EMPTY = {"kind": "steps", "steps": []}


def job(run_id: str, *, expected: int, settled: bool = False) -> AppendJob:
    event = (
        new_event(EventType.RUN_COMPLETED, result={"n": 1})
        if settled
        else new_event(EventType.CANCEL_REQUESTED, reason="test")
    )
    return AppendJob(
        run_id=run_id,
        expected_seq=expected,
        lease_epoch=1,
        events=(event,),
        now_ms=5,
        status="completed" if settled else "active",
        next_wake_at=None,
        settled=settled,
        result={"n": 1} if settled else None,
    )


def test_a_batch_of_appends_keeps_winners_and_fails_only_the_lost_fence(
    make_runtime: MakeRuntime, looms_db: Database
) -> None:
    runtime = make_runtime()  # never started: nothing else appends to these runs
    version = runtime.register_flow("empty", EMPTY)
    ids = [
        runtime.start_run(StartRequest(flow="empty", version=version, idempotency_key=k)).run_id
        for k in ("a", "b", "c")
    ]

    with looms_db.write() as conn:
        outcomes = append_many(
            conn,
            [
                job(ids[0], expected=1),
                job(ids[1], expected=7),
                job(ids[2], expected=1, settled=True),
            ],
        )

    assert outcomes[0] == 2
    assert isinstance(outcomes[1], FencedError)
    assert outcomes[2] == 2
    with looms_db.read() as conn:
        headers = [load_header(conn, run_id) for run_id in ids]
        logs = [read_events(conn, run_id, from_seq=1) for run_id in ids]
    assert [h.last_seq if h else None for h in headers] == [2, 1, 2]
    assert [len(log) for log in logs] == [2, 1, 2]
    settled = headers[2]
    assert settled is not None
    assert (settled.status, settled.result, settled.settled_at) == ("completed", {"n": 1}, 5)
