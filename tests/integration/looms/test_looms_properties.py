"""Properties of real logs, written by a real runtime for generated flows and requests.

- A Python flow's log (with `parallel` calls among its steps) folds to the same state
  from any snapshot plus the delta after it, and replaying the flow function over
  its final journal asks for nothing new: it answers every call from the log and
  returns the recorded result.
- A signal delivered several times under one key is applied once.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from looms_runtime import Runtime, StartRequest, StepContext
from looms_runtime._engine.flow_asks import AskFinish, FlowAsk
from looms_runtime._engine.flow_session import FlowSession
from looms_runtime._history.events import RecordedEvent
from looms_runtime._history.fold import RunState, fold_recorded, state_from_json, state_to_json
from looms_runtime.flow import FlowContext, Retry, StepFailedError, WaitTimeoutError
from tests.factories import MakeRuntime

HERE = __name__
OPS = st.lists(
    st.sampled_from(["ok", "fail", "retry", "now", "id", "sleep", "signal", "par", "par_fail"]),
    max_size=8,
)
PROPERTY = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def echo(value: int) -> int:
    return value


def fail() -> None:
    raise RuntimeError("planned failure")


def fails_first(value: int, context: StepContext) -> int:
    if context.attempt == 1:
        raise RuntimeError("first attempt fails")
    return value


def program(ctx: FlowContext, ops: list[str]) -> list[Any]:
    """Interprets a generated list of operations through the flow API."""
    out: list[Any] = []
    for i, op in enumerate(ops):
        if op == "ok":
            out.append(ctx.step(f"s{i}", echo, i))
        elif op == "fail":
            try:
                ctx.step(f"s{i}", fail)
            except StepFailedError as exc:
                out.append(exc.attempts)
        elif op == "retry":
            out.append(ctx.step(f"s{i}", fails_first, i, retry=Retry(max_attempts=2, backoff=0)))
        elif op == "now":
            out.append(ctx.now().isoformat())
        elif op == "id":
            out.append(ctx.new_id())
        elif op == "sleep":
            ctx.sleep(0)
        elif op == "par":
            retry = Retry(max_attempts=2, backoff=0)
            out.append(
                ctx.parallel(
                    ctx.branch(f"s{i}a", echo, i), ctx.branch(f"s{i}b", fails_first, i, retry=retry)
                )
            )
        elif op == "par_fail":
            try:
                ctx.parallel(ctx.branch(f"s{i}a", echo, i), ctx.branch(f"s{i}b", fail))
            except StepFailedError as exc:
                out.append(exc.step)
        else:
            try:
                out.append(ctx.wait_signal("never", timeout=0))
            except WaitTimeoutError:
                out.append("timeout")
    return out


@pytest.fixture
def looms_db_url(looms_sqlite_url: str) -> str:
    """The properties are about logs, whichever database holds them: SQLite."""
    return looms_sqlite_url


@pytest.fixture
def runtime(make_runtime: MakeRuntime) -> Runtime:
    started = make_runtime()
    started.start()
    return started


def recorded(runtime: Runtime, run_id: str) -> list[RecordedEvent]:
    return [
        RecordedEvent(e.seq, e.type, e.version, json.loads(json.dumps(dict(e.payload))), 0)
        for e in runtime.get_events(run_id)
    ]


def run_program(runtime: Runtime, ops: list[str]) -> str:
    version = runtime.register_flow("program", {"kind": "python", "ref": f"{HERE}:program"})
    key = f"program:{len(runtime.list_runs(limit=1000))}"
    request = StartRequest(flow="program", version=version, input=ops, idempotency_key=key)
    run_id = runtime.start_run(request).run_id
    assert runtime.wait_settled(run_id, 30).status == "completed"
    return run_id


def replay(state: RunState, ops: list[str]) -> list[FlowAsk]:
    asks: list[FlowAsk] = []

    def submit(ask: FlowAsk) -> bool:
        asks.append(ask)
        return False  # nothing answers: a replay that needs an answer stops here

    FlowSession(
        run_id="replay",
        ref=f"{HERE}:program",
        input_json=json.dumps(ops),
        journal=state.journal,
        frontier=None,
        flow_version=None,
        clock_ms=lambda: 0,
        submit=submit,
    ).run()
    return asks


@PROPERTY
@given(ops=OPS, data=st.data())
def test_a_flow_log_folds_the_same_from_any_snapshot(
    runtime: Runtime, ops: list[str], data: st.DataObject
) -> None:
    log = recorded(runtime, run_program(runtime, ops))
    split = data.draw(st.integers(0, len(log)))

    snapshot = json.loads(json.dumps(state_to_json(fold_recorded(log[:split]))))
    resumed = fold_recorded(log[split:], state_from_json(snapshot))

    assert resumed == fold_recorded(log)


@PROPERTY
@given(ops=OPS)
def test_replaying_a_finished_flow_answers_every_call_from_its_log(
    runtime: Runtime, ops: list[str]
) -> None:
    run_id = run_program(runtime, ops)
    state = fold_recorded(recorded(runtime, run_id))

    asks = replay(state, ops)

    assert len(asks) == 1
    assert asks[0].values == ()
    assert asks[0].move == AskFinish(ok=True, result=state.result)


SIGNALS = {
    "kind": "steps",
    "steps": [{"id": f"w{i}", "type": "wait_signal", "signal": "go"} for i in range(3)],
}


@PROPERTY
@given(keys=st.lists(st.sampled_from("abcde"), min_size=1, max_size=10))
def test_a_signal_delivered_twice_under_one_key_is_applied_once(
    runtime: Runtime, keys: list[str]
) -> None:
    version = runtime.register_flow("signals", SIGNALS)
    key = f"signals:{len(runtime.list_runs(limit=1000))}"
    run_id = runtime.start_run(
        StartRequest(flow="signals", version=version, idempotency_key=key)
    ).run_id
    padded = keys + [f"pad{i}" for i in range(3)]

    for signal_key in padded:
        runtime.signal(run_id, "go", {"key": signal_key}, idempotency_key=signal_key)

    assert runtime.wait_settled(run_id, 20).status == "completed"
    applied = [
        e.payload["payload"]["key"] for e in runtime.get_events(run_id) if e.type == "wait_finished"
    ]
    assert len(applied) == 3
    assert len(set(applied)) == 3
    assert set(applied) <= set(padded)
