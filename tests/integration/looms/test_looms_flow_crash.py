"""A runtime process killed with SIGKILL in the middle of a Python flow's step, then recovered.

The child process runs a real `Runtime` and two runs of `crash_flows.three_steps`
(the middle step declared idempotent in one, not in the other); it is killed while
both runs are inside their middle step. Steps append to log files, so the
assertions read what really ran: a completed step never runs again, the idempotent
one runs once more, the other parks as `ambiguous` until an operator retries it.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from functools import partial
from pathlib import Path

import pytest

from looms_runtime import Runtime
from tests.factories import MakeRuntime
from tests.support import in_middle_step, lines, wait_for

CHILD = """
import sys, threading
from datetime import timedelta
from looms_runtime import Database, Runtime, StartRequest
url, logs = sys.argv[1], eval(sys.argv[2])
runtime = Runtime(Database(url), owner="crashed", lease=timedelta(seconds=1))
runtime.start()
ref = "tests.integration.looms.crash_flows:three_steps"
version = runtime.register_flow("three", {"kind": "python", "ref": ref})
for key, (log, idempotent) in logs.items():
    data = {"log": log, "idempotent": idempotent}
    runtime.start_run(StartRequest(flow="three", version=version, idempotency_key=key, input=data))
threading.Event().wait()
"""


@pytest.fixture
def crashed(looms_db_url: str, tmp_path: Path) -> Iterator[dict[str, Path]]:
    """Two flow runs left inside step `b` by a runtime process killed with SIGKILL."""
    logs = {"again": tmp_path / "again.log", "once": tmp_path / "once.log"}
    spec = {"again": (str(logs["again"]), True), "once": (str(logs["once"]), False)}
    child = subprocess.Popen([sys.executable, "-c", CHILD, looms_db_url, repr(spec)])
    try:
        for log in logs.values():
            wait_for(partial(in_middle_step, log))
        child.kill()
        child.wait()
        yield logs
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def run_id_of(runtime: Runtime, key: str) -> str:
    return next(r.run_id for r in runtime.list_runs() if r.idempotency_key == key)


def middle(log: Path) -> list[str]:
    return [" ".join(line.split()[:2]) for line in lines(log) if line.startswith("b:")]


@pytest.mark.timeout(90)
def test_a_flow_recovers_rerunning_only_its_idempotent_step_in_flight(
    crashed: dict[str, Path], make_runtime: MakeRuntime
) -> None:
    runtime = make_runtime(owner="recovery", lease=timedelta(seconds=1))
    runtime.start()
    again, once = run_id_of(runtime, "again"), run_id_of(runtime, "once")

    assert runtime.wait_settled(again, 40).status == "completed"
    assert runtime.inspect_run(again).result == "b2"
    assert lines(crashed["again"])[0] == "a"
    assert middle(crashed["again"]) == ["b:1 start", "b:2 start", "b:2 end"]
    assert lines(crashed["again"])[-1] == "c"
    assert [e.type for e in runtime.get_events(again)].count("effect_ambiguous") == 1

    wait_for(lambda: runtime.inspect_run(once).state == "parked", timeout=40)
    parked = runtime.inspect_run(once)
    assert [(e.effect_id, e.step_id, e.attempt, e.status) for e in parked.effects] == [
        ("b#1", "b", 1, "ambiguous")
    ]
    assert "not idempotent" in (parked.park_reason or "")
    assert lines(crashed["once"])[0] == "a"
    assert middle(crashed["once"]) == ["b:1 start"]


@pytest.mark.timeout(90)
def test_a_parked_flow_resumes_on_an_operator_retry_without_rerunning_its_first_step(
    crashed: dict[str, Path], make_runtime: MakeRuntime
) -> None:
    runtime = make_runtime(owner="recovery", lease=timedelta(seconds=1))
    runtime.start()
    once = run_id_of(runtime, "once")
    wait_for(lambda: runtime.inspect_run(once).state == "parked", timeout=40)

    runtime.retry_effect(once, "b#1")

    assert runtime.wait_settled(once, 40).status == "completed"
    assert lines(crashed["once"]).count("a") == 1
    assert middle(crashed["once"]) == ["b:1 start", "b:2 start", "b:2 end"]
    assert lines(crashed["once"])[-1] == "c"
