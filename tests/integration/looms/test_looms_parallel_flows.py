"""`ctx.parallel` on a real runtime: branches at once, joins, failures, cancels, retries.

Branches record what they did in `CALLS`; where an order matters, a branch waits for
an event the test sets once it has seen the log it expects, so nothing depends on
timing.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from looms_runtime import Runtime, StartRequest, StepContext
from looms_runtime.flow import FlowContext, Retry, StepFailedError
from tests.factories import MakeRuntime
from tests.support import wait_for

HERE = __name__
CALLS: list[str] = []
SESSIONS: list[str] = []
VARIANT = {"second": "b"}
RELEASE = threading.Event()
MEET = threading.Barrier(2, timeout=10)
LOCK = threading.Lock()


@pytest.fixture(autouse=True)
def _fresh_module_state() -> None:
    CALLS.clear()
    SESSIONS.clear()
    VARIANT["second"] = "b"
    RELEASE.clear()
    MEET.reset()


@pytest.fixture
def looms_db_url(looms_sqlite_url: str) -> str:
    """Branch semantics do not depend on the database (the crash tests cover both)."""
    return looms_sqlite_url


@pytest.fixture
def runtime(make_runtime: MakeRuntime) -> Runtime:
    started = make_runtime()
    started.start()
    return started


def called(name: str) -> None:
    with LOCK:
        CALLS.append(name)


def meet(name: str) -> str:
    """Returns only once the other branch runs too: run one after the other, both fail."""
    called(name)
    MEET.wait()
    return f"{name}.dump"


def echo(name: str) -> str:
    called(name)
    return name


def held(name: str) -> str:
    called(f"{name}:start")
    RELEASE.wait(20)
    called(f"{name}:end")
    return name


def broken(name: str) -> None:
    called(name)
    raise RuntimeError("disk full")


def broken_after_release(name: str) -> None:
    RELEASE.wait(20)
    broken(name)


def stoppable(name: str, context: StepContext) -> str:
    called(f"{name}:start")
    if context.wait_cancelled(20):
        called(f"{name}:stopped")
        raise RuntimeError("stopped")
    return name


def flaky(name: str, context: StepContext) -> str:
    called(f"{name}:{context.attempt}")
    if context.attempt == 1:
        raise ValueError("first attempt fails")
    return f"{name}{context.attempt}"


def steady(name: str) -> str:
    """Runs until its sibling's second attempt ran: the retry happens beside it."""
    wait_for(lambda: "flaky:2" in CALLS, timeout=20)
    return echo(name)


def backup(ctx: FlowContext, _data: None) -> dict[str, Any]:
    a, b = ctx.parallel(
        ctx.branch("dump-a", meet, "a"), ctx.branch("dump-b", meet, "b", idempotent=True)
    )
    upload = ctx.step("upload", echo, f"upload {a} {b}")
    return {"dumps": [a, b], "upload": upload}


def out_of_order(ctx: FlowContext, _data: None) -> list[str]:
    return ctx.parallel(ctx.branch("slow", held, "slow"), ctx.branch("fast", echo, "fast"))


def fail_fast(ctx: FlowContext, _data: None) -> str:
    try:
        ctx.parallel(
            ctx.branch("waiting", stoppable, "waiting"),
            ctx.branch("broken", broken, "broken"),
            ctx.branch("never", echo, "never"),
            max_parallel=2,
        )
    except StepFailedError as exc:
        return f"caught: {exc}"
    return "unreachable"


def patient(ctx: FlowContext, _data: None) -> list[str]:
    return ctx.parallel(
        ctx.branch("first", broken_after_release, "first"),
        ctx.branch("second", broken, "second"),
        ctx.branch("third", held, "third"),
        fail_fast=False,
    )


def cancellable(ctx: FlowContext, _data: None) -> list[str]:
    return ctx.parallel(ctx.branch("one", stoppable, "one"), ctx.branch("two", stoppable, "two"))


def stubborn(ctx: FlowContext, _data: None) -> list[str]:
    return ctx.parallel(ctx.branch("polite", stoppable, "polite"), ctx.branch("deaf", held, "deaf"))


def retrying(ctx: FlowContext, data: dict[str, float]) -> list[str]:
    SESSIONS.append("retrying")
    retry = Retry(max_attempts=2, backoff=data["backoff"])
    sibling = steady if data["beside"] else echo
    return ctx.parallel(
        ctx.branch("flaky", flaky, "flaky", retry=retry), ctx.branch("steady", sibling, "steady")
    )


def bounded(ctx: FlowContext, _data: None) -> list[str]:
    return ctx.parallel(*(ctx.branch(f"b{i}", echo, f"b{i}") for i in range(5)), max_parallel=2)


def drifting(ctx: FlowContext, _data: None) -> str:
    ctx.parallel(ctx.branch("a", echo, "a"), ctx.branch(VARIANT["second"], echo, "b"))
    ctx.wait_signal("go")
    return "done"


def meddling(ctx: FlowContext, _data: None) -> str:
    try:
        ctx.parallel(ctx.branch("meddler", lambda: ctx.now().isoformat()))
    except StepFailedError as exc:
        return str(exc)
    return "unreachable"


def start(runtime: Runtime, function: str, data: Any = None) -> str:
    version = runtime.register_flow(function, {"kind": "python", "ref": f"{HERE}:{function}"})
    request = StartRequest(flow=function, version=version, input=data, idempotency_key=function)
    return runtime.start_run(request).run_id


def events(runtime: Runtime, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    return [(e.type, dict(e.payload)) for e in runtime.get_events(run_id)]


def of_type(runtime: Runtime, run_id: str, kind: str) -> list[dict[str, Any]]:
    return [payload for type_, payload in events(runtime, run_id) if type_ == kind]


def test_branches_run_at_once_and_join_in_argument_order(runtime: Runtime) -> None:
    run_id = start(runtime, "backup")

    assert runtime.wait_settled(run_id, 30).status == "completed"
    assert runtime.inspect_run(run_id).result == {
        "dumps": ["a.dump", "b.dump"],
        "upload": "upload a.dump b.dump",
    }
    log = events(runtime, run_id)
    assert [t for t, _ in log[1:4]] == [
        "parallel_started",
        "effect_dispatched",
        "effect_dispatched",
    ]  # one commit: the call and the attempts it starts
    assert log[1][1] == {
        "position": 0,
        "names": ["dump-a", "dump-b"],
        "fail_fast": True,
        "max_parallel": 4,
    }
    dispatched = of_type(runtime, run_id, "effect_dispatched")
    assert [(d["effect_id"], d["step_index"], d.get("branch_of")) for d in dispatched] == [
        ("dump-a#0", 0, 0),
        ("dump-b#1", 1, 0),
        ("upload#2", 2, None),
    ]
    assert [d["idempotent"] for d in dispatched[:2]] == [False, True]


def test_a_branch_that_finishes_first_is_joined_at_its_own_position(runtime: Runtime) -> None:
    run_id = start(runtime, "out_of_order")
    wait_for(
        lambda: any(
            p["effect_id"] == "fast#1" for p in of_type(runtime, run_id, "effect_succeeded")
        )
    )
    RELEASE.set()

    assert runtime.wait_settled(run_id, 30).status == "completed"
    assert runtime.inspect_run(run_id).result == ["slow", "fast"]
    finished = [p["effect_id"] for p in of_type(runtime, run_id, "effect_succeeded")]
    assert finished == ["fast#1", "slow#0"]


def test_a_failed_branch_stops_its_siblings_and_the_flow_may_catch_it(runtime: Runtime) -> None:
    run_id = start(runtime, "fail_fast")

    assert runtime.wait_settled(run_id, 30).status == "completed"
    result = runtime.inspect_run(run_id).result
    assert result == "caught: step 'broken' failed after 1 attempt: RuntimeError: disk full"
    assert sorted(CALLS) == ["broken", "waiting:start", "waiting:stopped"]  # never did not start
    assert [p["effect_id"] for p in of_type(runtime, run_id, "effect_cancelled")] == ["waiting#0"]
    dispatched = [p["effect_id"] for p in of_type(runtime, run_id, "effect_dispatched")]
    assert dispatched == ["waiting#0", "broken#1"]


def test_without_fail_fast_siblings_finish_and_the_first_failure_by_position_counts(
    runtime: Runtime,
) -> None:
    run_id = start(runtime, "patient")
    wait_for(lambda: len(of_type(runtime, run_id, "effect_failed")) == 1)  # second failed first
    RELEASE.set()

    status = runtime.wait_settled(run_id, 30)

    assert status.status == "failed"
    assert status.error == "step 'first' failed after 1 attempt: RuntimeError: disk full"
    assert "third:end" in CALLS
    failures = [p["effect_id"] for p in of_type(runtime, run_id, "effect_failed")]
    assert failures == ["second#1", "first#0"]
    assert not of_type(runtime, run_id, "effect_cancelled")


def test_cancelling_the_run_cancels_every_branch(runtime: Runtime) -> None:
    run_id = start(runtime, "cancellable")
    wait_for(lambda: sorted(CALLS) == ["one:start", "two:start"])

    runtime.cancel(run_id, reason="operator")

    assert runtime.wait_settled(run_id, 30).status == "cancelled"
    cancelled = [p["effect_id"] for p in of_type(runtime, run_id, "effect_cancelled")]
    assert sorted(cancelled) == ["one#0", "two#1"]
    assert sorted(CALLS) == ["one:start", "one:stopped", "two:start", "two:stopped"]


def test_a_branch_that_ignores_the_cancel_is_abandoned_and_its_late_result_kept(
    runtime: Runtime,
) -> None:
    run_id = start(runtime, "stubborn")
    wait_for(lambda: sorted(CALLS) == ["deaf:start", "polite:start"])

    runtime.cancel(run_id, grace=timedelta(milliseconds=200))

    assert runtime.wait_settled(run_id, 30).status == "cancelled"
    cancelled = {p["effect_id"]: p["error"] for p in of_type(runtime, run_id, "effect_cancelled")}
    assert cancelled["polite#0"] == "RuntimeError: stopped"
    assert cancelled["deaf#1"].startswith("abandoned")
    RELEASE.set()
    wait_for(lambda: bool(of_type(runtime, run_id, "effect_outcome_late")))
    [late] = of_type(runtime, run_id, "effect_outcome_late")
    assert (late["effect_id"], late["ok"], late["output"]) == ("deaf#1", True, "deaf")


def test_a_branch_retries_after_its_backoff_while_its_sibling_runs(runtime: Runtime) -> None:
    run_id = start(runtime, "retrying", {"backoff": 0.05, "beside": True})

    assert runtime.wait_settled(run_id, 30).status == "completed"
    assert runtime.inspect_run(run_id).result == ["flaky2", "steady"]
    assert SESSIONS == ["retrying"]  # the backoff was waited out in the session
    [failed] = of_type(runtime, run_id, "effect_failed")
    assert failed["next_attempt_at"] is not None
    order = [(t, p["effect_id"], p.get("attempt")) for t, p in events(runtime, run_id)[2:-1]]
    assert order == [
        ("effect_dispatched", "flaky#0", 1),
        ("effect_dispatched", "steady#1", 1),
        ("effect_failed", "flaky#0", 1),
        ("effect_dispatched", "flaky#0", 2),
        ("effect_succeeded", "flaky#0", 2),
        ("effect_succeeded", "steady#1", 1),
    ]


def test_a_backoff_with_nothing_else_running_releases_the_session(runtime: Runtime) -> None:
    run_id = start(runtime, "retrying", {"backoff": 0.2, "beside": False})

    assert runtime.wait_settled(run_id, 30).status == "completed"
    assert runtime.inspect_run(run_id).result == ["flaky2", "steady"]
    assert len(SESSIONS) == 2  # resumed from the log once the retry was due
    assert CALLS.count("steady") == 1
    assert sorted(c for c in CALLS if c.startswith("flaky")) == ["flaky:1", "flaky:2"]


def test_max_parallel_bounds_the_branches_running_at_once(runtime: Runtime) -> None:
    run_id = start(runtime, "bounded")

    assert runtime.wait_settled(run_id, 30).status == "completed"
    assert runtime.inspect_run(run_id).result == [f"b{i}" for i in range(5)]
    running: set[str] = set()
    for kind, payload in events(runtime, run_id):
        if kind == "effect_dispatched":
            running.add(payload["effect_id"])
        elif kind == "effect_succeeded":
            running.discard(payload["effect_id"])
        assert len(running) <= 2
    assert [t for t, _ in events(runtime, run_id)[1:4]] == [
        "parallel_started",
        "effect_dispatched",
        "effect_dispatched",
    ]


def test_a_replay_that_asks_for_other_branches_fails_the_run(runtime: Runtime) -> None:
    run_id = start(runtime, "drifting")
    wait_for(lambda: bool(of_type(runtime, run_id, "wait_started")))
    VARIANT["second"] = "c"

    runtime.signal(run_id, "go")

    status = runtime.wait_settled(run_id, 30)
    assert status.status == "failed"
    assert "LMS-106" in (status.error or "")
    assert "asked for parallel ['a', 'c']; the log recorded parallel ['a', 'b']" in (
        status.error or ""
    )
    assert sorted(CALLS) == ["a", "b"]


def test_a_branch_that_calls_ctx_fails_clearly(runtime: Runtime) -> None:
    run_id = start(runtime, "meddling")

    assert runtime.wait_settled(run_id, 30).status == "completed"
    assert "ctx is the flow's own" in runtime.inspect_run(run_id).result


def test_the_backup_example_dumps_in_parallel_then_uploads(
    runtime: Runtime, tmp_path: Path
) -> None:
    version = runtime.register_flow(
        "backup-example", {"kind": "python", "ref": "examples.flows.backup:build"}
    )
    data = {"databases": ["app", "auth", "billing"], "out_dir": str(tmp_path)}
    request = StartRequest(flow="backup-example", version=version, input=data, idempotency_key="b")
    run_id = runtime.start_run(request).run_id

    assert runtime.wait_settled(run_id, 30).status == "completed"
    result = runtime.inspect_run(run_id).result
    assert [Path(p).name for p in result["dumps"]] == ["app.dump", "auth.dump", "billing.dump"]
    manifest = Path(result["manifest"]).read_text().splitlines()
    assert [line.split()[0] for line in manifest] == ["app.dump", "auth.dump", "billing.dump"]
    started = of_type(runtime, run_id, "parallel_started")
    assert started[0]["names"] == ["dump-app", "dump-auth", "dump-billing"]
