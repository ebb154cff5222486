"""A run's log lines carry its id and the attributes the host asked the runtime to bind."""

from __future__ import annotations

import sys
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from looms_runtime import Runtime, StartRequest
from tests.factories import MakeRuntime

HERE = __name__


def chatty(_value: object) -> str:
    """A Python step that logs for itself, on the effect's thread."""
    structlog.get_logger().info("step_said_hello")
    return "ok"


@pytest.fixture
def looms_db_url(looms_sqlite_url: str) -> str:
    """Log context does not depend on the database: SQLite only."""
    return looms_sqlite_url


FLOW: dict[str, Any] = {
    "kind": "steps",
    "steps": [
        {"id": "hello", "type": "python", "ref": f"{HERE}:chatty"},
        {
            "id": "boom",
            "type": "command",
            "argv": [sys.executable, "-c", "raise SystemExit(3)"],
            "env": {},
            "cwd": None,
            "timeout_s": None,
            "retry": None,
            "idempotent": False,
        },
    ],
}


def _run(runtime: Runtime, key: str, trigger_id: str) -> str:
    version = runtime.register_flow("flow", FLOW)
    handle = runtime.start_run(
        StartRequest(
            flow="flow",
            version=version,
            idempotency_key=key,
            attributes={"trigger_id": trigger_id, "occurrence": "2026-01-01T00:00:00Z"},
        )
    )
    assert runtime.wait_settled(handle.run_id, 20).status == "failed"
    return handle.run_id


def test_every_line_about_a_run_carries_its_bound_attributes(make_runtime: MakeRuntime) -> None:
    runtime = make_runtime(log_attributes=("trigger_id",))
    runtime.start()
    with capture_logs([structlog.contextvars.merge_contextvars]) as logs:
        first = _run(runtime, "a", "nightly")
        second = _run(runtime, "b", "hourly")

    about = {run_id: [e for e in logs if e.get("run_id") == run_id] for run_id in (first, second)}
    events = {e["event"] for e in about[first]}
    # The worker's lines, an effect thread's lines and the step's own line.
    assert {"effect_dispatched", "effect_failed", "step_said_hello", "run_settled"} <= events
    assert {e.get("trigger_id") for e in about[first]} == {"nightly"}
    assert {e.get("trigger_id") for e in about[second]} == {"hourly"}
    # Attributes not asked for stay out of the lines.
    assert not any("occurrence" in e for e in logs)


def test_a_failed_step_is_a_warning_and_no_attribute_is_bound_unless_asked(
    make_runtime: MakeRuntime,
) -> None:
    runtime = make_runtime()
    runtime.start()
    with capture_logs([structlog.contextvars.merge_contextvars]) as logs:
        run_id = _run(runtime, "a", "nightly")

    [failed] = [e for e in logs if e["event"] == "effect_failed"]
    assert failed["log_level"] == "warning"
    assert failed["run_id"] == run_id
    assert not any("trigger_id" in e for e in logs)
