"""Durable retries with backoff, and graceful cancellation of real commands."""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from looms_runtime import RunInfo, Runtime, StartRequest
from looms_runtime.testing import ManualClock
from tests.factories import MakeRuntime
from tests.support import wait_for

FAIL_UNTIL_THIRD = "import os, sys; sys.exit(0 if os.environ['LOOMS_ATTEMPT'] == '3' else 7)"


@pytest.fixture
def looms_db_url(looms_sqlite_url: str) -> str:
    """Retry and cancel logic does not depend on the database: SQLite only."""
    return looms_sqlite_url


def command(step_id: str, argv: list[str], **fields: Any) -> dict[str, Any]:
    step: dict[str, Any] = {
        "id": step_id,
        "type": "command",
        "argv": argv,
        "env": {},
        "cwd": None,
        "timeout_s": None,
        "retry": None,
        "idempotent": False,
    }
    step.update(fields)
    return step


def start(runtime: Runtime, *steps: dict[str, Any]) -> str:
    version = runtime.register_flow("flow", {"kind": "steps", "steps": list(steps)})
    return runtime.start_run(StartRequest(flow="flow", version=version, idempotency_key="k")).run_id


def effect_status(runtime: Runtime, run_id: str) -> Callable[[], str | None]:
    def read() -> str | None:
        info: RunInfo = runtime.inspect_run(run_id)
        return info.effects[0].status if info.effects else None

    return read


def test_failed_attempts_retry_with_backoff_until_one_succeeds(make_runtime: MakeRuntime) -> None:
    runtime = make_runtime()
    runtime.start()
    retry = {"max_attempts": 3, "backoff_s": 0.01, "max_backoff_s": 0.015}
    run_id = start(runtime, command("flaky", [sys.executable, "-c", FAIL_UNTIL_THIRD], retry=retry))

    assert runtime.wait_settled(run_id, 20).status == "completed"
    events = runtime.get_events(run_id)
    failures = [e.payload for e in events if e.type == "effect_failed"]
    assert [(f["attempt"], f["error"]) for f in failures] == [
        (1, "exit code 7"),
        (2, "exit code 7"),
    ]
    dispatched = [e.payload for e in events if e.type == "effect_dispatched"]
    assert [d["attempt"] for d in dispatched] == [1, 2, 3]
    assert dispatched[1]["dispatched_at"] >= failures[0]["next_attempt_at"]
    assert dispatched[2]["dispatched_at"] >= failures[1]["next_attempt_at"]


def test_attempts_exhausted_fail_the_run_with_the_last_error(make_runtime: MakeRuntime) -> None:
    runtime = make_runtime()
    runtime.start()
    retry = {"max_attempts": 2, "backoff_s": 0.01, "max_backoff_s": 0.01}
    run_id = start(
        runtime, command("bad", [sys.executable, "-c", "raise SystemExit(4)"], retry=retry)
    )

    status = runtime.wait_settled(run_id, 20)

    assert status.status == "failed"
    assert status.error == "step 'bad' failed after 2 attempts: exit code 4"


def test_backoff_waits_on_the_runtime_clock(make_runtime: MakeRuntime) -> None:
    clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
    runtime = make_runtime(clock=clock)
    runtime.start()
    retry = {"max_attempts": 3, "backoff_s": 60, "max_backoff_s": 600}
    run_id = start(runtime, command("flaky", [sys.executable, "-c", FAIL_UNTIL_THIRD], retry=retry))
    status = effect_status(runtime, run_id)

    wait_for(lambda: status() == "retry_wait")
    info = runtime.inspect_run(run_id)
    assert info.effects[0].next_attempt_at == clock() + timedelta(seconds=60)
    assert info.next_wake_at == clock() + timedelta(seconds=60)

    clock.advance(timedelta(seconds=59))
    runtime.rescan_timers()
    assert runtime.wait_settled(run_id, 0.3).status == "active"
    assert runtime.inspect_run(run_id).last_seq == info.last_seq

    clock.advance(timedelta(seconds=1))
    runtime.rescan_timers()
    wait_for(lambda: runtime.inspect_run(run_id).effects[0].attempt == 2)
    wait_for(lambda: status() == "retry_wait")
    assert runtime.inspect_run(run_id).effects[0].next_attempt_at == clock() + timedelta(
        seconds=120
    )

    clock.advance(timedelta(seconds=120))
    runtime.rescan_timers()
    assert runtime.wait_settled(run_id, 20).status == "completed"


def test_cancel_stops_a_long_command_within_its_grace(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    runtime = make_runtime()
    runtime.start()
    marker = tmp_path / "started"
    run_id = start(runtime, command("long", ["sh", "-c", f"touch {marker}; exec sleep 60"]))
    wait_for(marker.exists)

    runtime.cancel(run_id, reason="superseded", grace=timedelta(seconds=10))

    status = runtime.wait_settled(run_id, 10)
    assert status.status == "cancelled"
    assert status.error == "cancelled: superseded"
    types = [e.type for e in runtime.get_events(run_id)]
    assert types[-3:] == ["cancel_requested", "effect_cancelled", "run_cancelled"]
    cancelled = runtime.get_events(run_id)[-2].payload
    assert cancelled["output"]["signal"] == "SIGTERM"


def test_cancel_kills_a_command_that_ignores_sigterm_after_the_grace(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    runtime = make_runtime()
    runtime.start()
    marker = tmp_path / "started"
    script = f"trap '' TERM; touch {marker}; sleep 60"
    run_id = start(runtime, command("stubborn", ["sh", "-c", script]))
    wait_for(marker.exists)

    runtime.cancel(run_id, grace=timedelta(milliseconds=200))

    assert runtime.wait_settled(run_id, 10).status == "cancelled"
    cancelled = next(e for e in runtime.get_events(run_id) if e.type == "effect_cancelled")
    assert cancelled.payload["output"]["signal"] == "SIGKILL"


def test_cancel_during_a_retry_wait_settles_at_once(make_runtime: MakeRuntime) -> None:
    runtime = make_runtime()
    runtime.start()
    retry = {"max_attempts": 5, "backoff_s": 3600, "max_backoff_s": 3600}
    run_id = start(
        runtime, command("flaky", [sys.executable, "-c", "raise SystemExit(1)"], retry=retry)
    )
    wait_for(lambda: effect_status(runtime, run_id)() == "retry_wait")

    runtime.cancel(run_id)

    assert runtime.wait_settled(run_id, 10).status == "cancelled"
