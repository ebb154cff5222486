"""A runtime process killed with SIGKILL in the middle of a command step, then recovered.

The child process runs a real `Runtime` and two runs of the same three steps; the
middle step sleeps on its first attempt, and the child is killed while it does. Every
command appends to a log file, so the assertions read what really ran.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from looms_runtime import Database, Runtime
from tests.factories import MakeRuntime
from tests.integration.looms.support import in_middle_step, lines, wait_for

CHILD = """
import sys, threading
from datetime import timedelta
from looms_runtime import Database, Runtime, StartRequest
url, flows = sys.argv[1], eval(sys.argv[2])
runtime = Runtime(Database(url), owner="crashed", lease=timedelta(seconds=1))
runtime.start()
for name, definition in flows.items():
    version = runtime.register_flow(name, definition)
    runtime.start_run(StartRequest(flow=name, version=version, idempotency_key=name))
threading.Event().wait()
"""

MIDDLE = (
    'echo "b:$LOOMS_ATTEMPT start $$" >> {log}; '
    'if [ "$LOOMS_ATTEMPT" = 1 ]; then sleep 60; fi; '
    'echo "b:$LOOMS_ATTEMPT end" >> {log}'
)


def flow(log: Path, *, idempotent: bool) -> dict[str, Any]:
    def step(step_id: str, script: str, **fields: Any) -> dict[str, Any]:
        return {
            "id": step_id,
            "type": "command",
            "argv": ["sh", "-c", script],
            "env": {},
            "cwd": None,
            "timeout_s": None,
            "retry": None,
            "idempotent": False,
            **fields,
        }

    return {
        "kind": "steps",
        "steps": [
            step("a", f"echo a >> {log}"),
            step("b", MIDDLE.format(log=log), idempotent=idempotent),
            step("c", f"echo c >> {log}"),
        ],
    }


@pytest.fixture
def crashed(looms_db_url: str, tmp_path: Path) -> Iterator[dict[str, Path]]:
    """Two runs left in flight in step `b` by a runtime process killed with SIGKILL."""
    logs = {"again": tmp_path / "again.log", "once": tmp_path / "once.log"}
    flows = {
        "again": flow(logs["again"], idempotent=True),
        "once": flow(logs["once"], idempotent=False),
    }
    child = subprocess.Popen([sys.executable, "-c", CHILD, looms_db_url, repr(flows)])
    orphans: list[int] = []
    try:
        for log in logs.values():
            wait_for(partial(in_middle_step, log))
        child.kill()
        child.wait()
        for log in logs.values():
            orphans.extend(int(line.split()[-1]) for line in lines(log) if line.startswith("b:1"))
        yield logs
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        for pid in orphans:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


def run_id_of(runtime: Runtime, key: str) -> str:
    return next(r.run_id for r in runtime.list_runs() if r.idempotency_key == key)


@pytest.mark.timeout(60)
def test_recovery_reruns_idempotent_steps_once_and_parks_the_others(
    crashed: dict[str, Path], make_runtime: MakeRuntime
) -> None:
    runtime = make_runtime(owner="recovery", lease=timedelta(seconds=1))
    runtime.start()
    again, once = run_id_of(runtime, "again"), run_id_of(runtime, "once")

    assert runtime.wait_settled(again, 30).status == "completed"
    assert lines(crashed["again"])[0] == "a"
    assert [line.split()[:2] for line in lines(crashed["again"])[1:3]] == [
        ["b:1", "start"],
        ["b:2", "start"],
    ]
    assert lines(crashed["again"])[3:] == ["b:2 end", "c"]
    types = [e.type for e in runtime.get_events(again)]
    assert types.count("effect_ambiguous") == 1

    wait_for(lambda: runtime.inspect_run(once).state == "parked", timeout=30)
    parked = runtime.inspect_run(once)
    assert parked.status == "active"
    assert [(e.effect_id, e.attempt, e.status) for e in parked.effects] == [("b", 1, "ambiguous")]
    assert parked.completed_steps == 1
    assert "not idempotent" in (parked.park_reason or "")
    assert [line.split()[:2] for line in lines(crashed["once"])] == [["a"], ["b:1", "start"]]


@pytest.mark.timeout(60)
def test_an_operator_retry_resumes_a_parked_run_without_rerunning_completed_steps(
    crashed: dict[str, Path], make_runtime: MakeRuntime
) -> None:
    runtime = make_runtime(owner="recovery", lease=timedelta(seconds=1))
    runtime.start()
    once = run_id_of(runtime, "once")
    wait_for(lambda: runtime.inspect_run(once).state == "parked", timeout=30)

    runtime.retry_effect(once, "b")

    assert runtime.wait_settled(once, 30).status == "completed"
    assert lines(crashed["once"])[0] == "a"
    assert lines(crashed["once"])[2:] == [
        "b:2 start " + lines(crashed["once"])[2].split()[-1],
        "b:2 end",
        "c",
    ]


@pytest.mark.timeout(60)
def test_the_same_owner_recovers_its_runs_at_start_without_waiting_for_its_lease(
    looms_db_url: str, crashed: dict[str, Path]
) -> None:
    database = Database(looms_db_url)
    runtime = Runtime(database, owner="crashed", lease=timedelta(seconds=60))
    try:
        runtime.start()
        again = run_id_of(runtime, "again")
        assert runtime.wait_settled(again, 30).status == "completed"
        assert lines(crashed["again"])[-1] == "c"
    finally:
        runtime.close(timeout=5)
        database.dispose()
