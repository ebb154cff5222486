"""A runtime process killed with SIGKILL in the middle of a `parallel` call, then recovered.

The child process runs a real `Runtime` and two runs of `crash_flows.three_branches`
(branch `b` declared idempotent in one, not in the other). It is killed once, in
both runs, branch `quick` completed, branch `flaky` failed its first attempt and
waits for its retry, and branch `b` is inside its first attempt; the log says so
(the test reads it before the kill). Branches append to log files, so the
assertions read what really ran: the completed branch never runs again, the retry
runs once when the log says it is due, `b` follows the ambiguity rules, and the
call joins with every branch's result at its own position.
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

BACKOFF_S = 4.0
"""Long enough for the kill to come first (the child would retry `flaky` itself)."""

CHILD = """
import sys, threading
from datetime import timedelta
from functools import partial
from looms_runtime import Database, Runtime, StartRequest
url, logs, backoff = sys.argv[1], eval(sys.argv[2]), float(sys.argv[3])
runtime = Runtime(Database(url), owner="crashed", lease=timedelta(seconds=1))
runtime.start()
ref = "tests.integration.looms.crash_flows:three_branches"
version = runtime.register_flow("branches", {"kind": "python", "ref": ref})
for key, (log, idempotent) in logs.items():
    data = {"log": log, "idempotent": idempotent, "backoff_s": backoff}
    request = StartRequest(flow="branches", version=version, idempotency_key=key, input=data)
    runtime.start_run(request)
threading.Event().wait()
"""


def durable(observer: Runtime, key: str) -> bool:
    """Whether the log of run `key` holds quick's success and flaky's first failure."""
    run_id = next((r.run_id for r in observer.list_runs() if r.idempotency_key == key), None)
    if run_id is None:
        return False
    seen = {(e.type, e.payload.get("effect_id")) for e in observer.get_events(run_id)}
    return {("effect_succeeded", "quick#0"), ("effect_failed", "flaky#2")} <= seen


@pytest.fixture
def crashed(
    looms_db_url: str, make_runtime: MakeRuntime, tmp_path: Path
) -> Iterator[dict[str, Path]]:
    """Two runs left mid-call by a runtime process killed with SIGKILL."""
    logs = {"again": tmp_path / "again.log", "once": tmp_path / "once.log"}
    spec = {"again": (str(logs["again"]), True), "once": (str(logs["once"]), False)}
    observer = make_runtime(owner="observer")  # never started: it only reads the store
    argv = [sys.executable, "-c", CHILD, looms_db_url, repr(spec), str(BACKOFF_S)]
    child = subprocess.Popen(argv)
    try:
        for key, log in logs.items():
            wait_for(partial(in_middle_step, log), timeout=30)
            wait_for(partial(durable, observer, key), timeout=30)
        child.kill()
        child.wait()
        yield logs
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def run_id_of(runtime: Runtime, key: str) -> str:
    return next(r.run_id for r in runtime.list_runs() if r.idempotency_key == key)


def dispatches(runtime: Runtime, run_id: str) -> list[tuple[str, int]]:
    return [
        (e.payload["effect_id"], e.payload["attempt"])
        for e in runtime.get_events(run_id)
        if e.type == "effect_dispatched"
    ]


def assert_joined_once(runtime: Runtime, run_id: str, log: Path) -> None:
    """The call joined every branch once, each at its position, then the upload ran;
    the retry was dispatched once, when the log said it was due."""
    assert runtime.inspect_run(run_id).result == ["quick", "b2", "flaky2"]
    assert lines(log).count("quick") == 1
    assert [line for line in lines(log) if line.startswith("flaky")] == ["flaky:1", "flaky:2"]
    assert lines(log)[-1] == "upload"
    assert lines(log).count("upload") == 1
    sent = dispatches(runtime, run_id)
    assert sent[:3] == [("quick#0", 1), ("b#1", 1), ("flaky#2", 1)]
    assert sorted(sent[3:5]) == [("b#1", 2), ("flaky#2", 2)]  # in the order they came due
    assert sent[5:] == [("upload#3", 1)]
    events = runtime.get_events(run_id)
    [failed] = [e.payload for e in events if e.type == "effect_failed"]
    [retried] = [
        e.payload
        for e in events
        if e.type == "effect_dispatched" and e.payload["effect_id"] == "flaky#2"
    ][1:]
    assert retried["dispatched_at"] >= failed["next_attempt_at"]


def middle(log: Path) -> list[str]:
    return [" ".join(line.split()[:2]) for line in lines(log) if line.startswith("b:")]


@pytest.mark.timeout(120)
def test_a_crash_mid_call_keeps_completed_branches_and_reruns_only_the_idempotent_one(
    crashed: dict[str, Path], make_runtime: MakeRuntime
) -> None:
    runtime = make_runtime(owner="recovery", lease=timedelta(seconds=1))
    runtime.start()
    again, once = run_id_of(runtime, "again"), run_id_of(runtime, "once")

    assert runtime.wait_settled(again, 60).status == "completed"
    assert middle(crashed["again"]) == ["b:1 start", "b:2 start", "b:2 end"]
    assert_joined_once(runtime, again, crashed["again"])
    ambiguous = [
        e.payload["effect_id"] for e in runtime.get_events(again) if e.type == "effect_ambiguous"
    ]
    assert ambiguous == ["b#1"]

    wait_for(lambda: runtime.inspect_run(once).state == "parked", timeout=60)
    parked = runtime.inspect_run(once)
    assert {(e.effect_id, e.attempt, e.status) for e in parked.effects} == {
        ("b#1", 1, "ambiguous"),
        ("flaky#2", 1, "retry_wait"),
    }
    assert "not idempotent" in (parked.park_reason or "")
    assert middle(crashed["once"]) == ["b:1 start"]
    assert lines(crashed["once"]).count("quick") == 1


@pytest.mark.timeout(120)
def test_a_parked_call_resumes_and_joins_after_an_operator_retry(
    crashed: dict[str, Path], make_runtime: MakeRuntime
) -> None:
    runtime = make_runtime(owner="recovery", lease=timedelta(seconds=1))
    runtime.start()
    once = run_id_of(runtime, "once")
    wait_for(lambda: runtime.inspect_run(once).state == "parked", timeout=60)

    runtime.retry_effect(once, "b#1")

    assert runtime.wait_settled(once, 60).status == "completed"
    assert middle(crashed["once"]) == ["b:1 start", "b:2 start", "b:2 end"]
    assert_joined_once(runtime, once, crashed["once"])
