"""Durable Python flows end to end: replay, retries, waits, values, determinism, versions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from looms_runtime import Runtime, StartRequest, StepContext
from looms_runtime.flow import FlowContext, NonRetryableError, Retry, StepFailedError
from tests.factories import MakeRuntime
from tests.support import wait_for

HERE = __name__
CALLS: list[str] = []
SESSIONS: list[str] = []
VARIANT = {"name": "first"}


@pytest.fixture(autouse=True)
def _fresh_module_state() -> None:
    CALLS.clear()
    SESSIONS.clear()
    VARIANT["name"] = "first"


@pytest.fixture
def looms_db_url(looms_sqlite_url: str) -> str:
    """Flow semantics do not depend on the database (crash tests cover both): SQLite."""
    return looms_sqlite_url


def record(name: str, value: Any = None) -> Any:
    CALLS.append(name)
    return value


def flaky(context: StepContext) -> int:
    CALLS.append(f"flaky:{context.attempt}")
    if context.attempt < 3:
        raise ValueError(f"attempt {context.attempt} failed")
    return context.attempt


def missing_key() -> None:
    CALLS.append("missing_key")
    raise KeyError("gone")


def refuse() -> None:
    CALLS.append("refuse")
    raise NonRetryableError("no point retrying")


def pipeline(ctx: FlowContext, data: dict[str, int]) -> dict[str, Any]:
    SESSIONS.append("pipeline")
    a = ctx.step("a", record, "a", data["n"])
    ctx.sleep(0)
    b = ctx.step("b", record, "b", a + 1)
    got = ctx.wait_signal("go")
    return {"a": a, "b": b, "got": got}


def retrying(ctx: FlowContext, _data: None) -> int:
    return ctx.step("flaky", flaky, retry=Retry(max_attempts=3, backoff=0.01))


def failing(ctx: FlowContext, data: dict[str, str]) -> str:
    retry = Retry(max_attempts=4, backoff=0.01, non_retryable=(KeyError,))
    fn = {"missing_key": missing_key, "refuse": refuse}[data["fn"]]
    try:
        ctx.step("doomed", fn, retry=retry)
    except StepFailedError as exc:
        if data.get("catch"):
            return f"caught: {exc}"
        raise
    return "unreachable"


def timing_out(ctx: FlowContext, _data: None) -> str:
    from looms_runtime.flow import WaitTimeoutError

    try:
        ctx.wait_signal("never", timeout=0.05)
    except WaitTimeoutError as exc:
        return str(exc)
    return "signalled"


def values(ctx: FlowContext, _data: None) -> list[str]:
    SESSIONS.append("values")
    now, new_id = ctx.now().isoformat(), ctx.new_id()
    ctx.sleep(0)
    return [now, new_id, ctx.now().isoformat(), ctx.new_id()]


def drifting(ctx: FlowContext, _data: None) -> str:
    ctx.step(VARIANT["name"], record, VARIANT["name"])
    ctx.wait_signal("go")
    return "done"


def versioned(ctx: FlowContext, _data: None) -> str | None:
    return ctx.flow_version


def unserializable(ctx: FlowContext, _data: None) -> object:
    return {1, 2}


def start(runtime: Runtime, function: str, data: Any = None, **definition: Any) -> str:
    version = runtime.register_flow(
        function, {"kind": "python", "ref": f"{HERE}:{function}", **definition}
    )
    request = StartRequest(flow=function, version=version, input=data, idempotency_key=function)
    return runtime.start_run(request).run_id


def event_types(runtime: Runtime, run_id: str) -> list[str]:
    return [event.type for event in runtime.get_events(run_id)]


@pytest.fixture
def runtime(make_runtime: MakeRuntime) -> Runtime:
    started = make_runtime()
    started.start()
    return started


def test_completed_steps_are_replayed_not_rerun(runtime: Runtime) -> None:
    run_id = start(runtime, "pipeline", {"n": 41})
    wait_for(lambda: "wait_started" in event_types(runtime, run_id))

    runtime.signal(run_id, "go", {"by": "ops"})

    assert runtime.wait_settled(run_id, 20).status == "completed"
    assert runtime.inspect_run(run_id).result == {"a": 41, "b": 42, "got": {"by": "ops"}}
    assert CALLS == ["a", "b"]
    assert len(SESSIONS) >= 3  # the function ran from the top after the sleep and the signal
    info = runtime.inspect_run(run_id)
    assert info.completed_steps == 4
    dispatched = [e.payload for e in runtime.get_events(run_id) if e.type == "effect_dispatched"]
    assert [(d["effect_id"], d["name"], d["step_index"]) for d in dispatched] == [
        ("a#0", "a", 0),
        ("b#2", "b", 2),
    ]


def test_a_failing_step_is_retried_durably_until_it_succeeds(runtime: Runtime) -> None:
    run_id = start(runtime, "retrying")

    assert runtime.wait_settled(run_id, 20).status == "completed"
    assert runtime.inspect_run(run_id).result == 3
    assert CALLS == ["flaky:1", "flaky:2", "flaky:3"]
    failures = [e.payload for e in runtime.get_events(run_id) if e.type == "effect_failed"]
    assert [f["error"] for f in failures] == [
        "ValueError: attempt 1 failed",
        "ValueError: attempt 2 failed",
    ]


@pytest.mark.parametrize("fn", ["missing_key", "refuse"])
def test_a_non_retryable_failure_is_final_and_may_be_caught(runtime: Runtime, fn: str) -> None:
    run_id = start(runtime, "failing", {"fn": fn, "catch": True})

    assert runtime.wait_settled(run_id, 20).status == "completed"
    assert [fn] == CALLS
    assert runtime.inspect_run(run_id).result.startswith("caught: step 'doomed' failed after 1")


def test_an_uncaught_step_failure_fails_the_run_with_its_error(runtime: Runtime) -> None:
    run_id = start(runtime, "failing", {"fn": "refuse"})

    status = runtime.wait_settled(run_id, 20)

    assert status.status == "failed"
    assert status.error == (
        "step 'doomed' failed after 1 attempt: NonRetryableError: no point retrying"
    )


def test_a_signal_wait_times_out_into_the_flow(runtime: Runtime) -> None:
    run_id = start(runtime, "timing_out")

    assert runtime.wait_settled(run_id, 20).status == "completed"
    assert runtime.inspect_run(run_id).result == "timed out waiting for signal 'never'"


def test_now_and_new_id_are_recorded_once_and_replayed(runtime: Runtime) -> None:
    run_id = start(runtime, "values")

    assert runtime.wait_settled(run_id, 20).status == "completed"
    recorded = [
        e.payload["value"] for e in runtime.get_events(run_id) if e.type == "flow_value_recorded"
    ]
    result = runtime.inspect_run(run_id).result
    assert len(SESSIONS) >= 2
    assert len(recorded) == 4
    assert result[1] == recorded[1]
    assert result[3] == recorded[3]
    assert result[1] != result[3]


def test_a_replay_asking_for_another_step_fails_the_run_loudly(runtime: Runtime) -> None:
    run_id = start(runtime, "drifting")
    wait_for(lambda: "wait_started" in event_types(runtime, run_id))
    VARIANT["name"] = "second"

    runtime.signal(run_id, "go")

    status = runtime.wait_settled(run_id, 20)
    assert status.status == "failed"
    assert "LMS-106" in (status.error or "")
    assert "asked for step 'second'" in (status.error or "")
    assert "recorded step 'first'" in (status.error or "")
    assert CALLS == ["first"]


def test_the_flow_reads_the_version_label_of_its_definition(runtime: Runtime) -> None:
    labelled = start(runtime, "versioned", version="2")

    assert runtime.wait_settled(labelled, 20).status == "completed"
    assert runtime.inspect_run(labelled).result == "2"


@pytest.mark.parametrize(
    ("function", "error"),
    [("unserializable", "the flow returned not a JSON value"), ("nowhere", "cannot load flow")],
)
def test_a_broken_flow_fails_its_run_clearly(runtime: Runtime, function: str, error: str) -> None:
    run_id = start(runtime, function)

    status = runtime.wait_settled(run_id, 20)

    assert status.status == "failed"
    assert error in (status.error or "")


def test_cancelling_a_waiting_flow_settles_it_cancelled(runtime: Runtime) -> None:
    run_id = start(runtime, "pipeline", {"n": 1})
    wait_for(lambda: "wait_started" in event_types(runtime, run_id))

    runtime.cancel(run_id, reason="operator")

    assert runtime.wait_settled(run_id, 20).status == "cancelled"
    assert CALLS == ["a", "b"]


def test_the_example_flow_runs_from_the_project_root(runtime: Runtime, tmp_path: Path) -> None:
    version = runtime.register_flow(
        "report", {"kind": "python", "ref": "examples.flows.report:build"}
    )
    data = {"title": "Test report", "out_dir": str(tmp_path), "review_timeout_s": 0}
    request = StartRequest(flow="report", version=version, input=data, idempotency_key="r")
    run_id = runtime.start_run(request).run_id

    assert runtime.wait_settled(run_id, 20).status == "completed"
    result = runtime.inspect_run(run_id).result
    assert result["reviewed_by"] is None
    assert Path(result["report"]).read_text().startswith("Test report\n")
