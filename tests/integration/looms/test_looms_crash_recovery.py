"""A runtime process killed with SIGKILL in the middle of a command step, then recovered.

The child process runs a real `Runtime` and two runs of the same three steps; the
middle step holds until the test releases it, and the child is killed meanwhile.
Every command appends to a log file, so the assertions read what really ran.

Command attempts run under supervisor processes, so the middle step runs on after
the kill and the next runtime adopts it: it runs once, and nothing is ambiguous.
Only when the supervisor dies too (as on a reboot) is the step's outcome unknown.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from looms_runtime import Database, Runtime
from tests.factories import MakeRuntime
from tests.support import in_middle_step, lines, wait_for

CHILD = """
import sys, threading
from datetime import timedelta
from looms_runtime import Database, Runtime, StartRequest
url, flows, attempts, owner, lease = sys.argv[1:6]
runtime = Runtime(
    Database(url), owner=owner, lease=timedelta(seconds=float(lease)), attempts_dir=attempts
)
runtime.start()
for name, definition in eval(flows).items():
    version = runtime.register_flow(name, definition)
    runtime.start_run(StartRequest(flow=name, version=version, idempotency_key=name))
threading.Event().wait()
"""

MIDDLE = (
    'echo "b:$LOOMS_ATTEMPT start $$" >> {log}; '
    "while [ ! -f {release} ]; do sleep 0.02; done; "
    'echo "b:$LOOMS_ATTEMPT end" >> {log}'
)


def flow(log: Path, release: Path, *, idempotent: bool) -> dict[str, Any]:
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
            step("b", MIDDLE.format(log=log, release=release), idempotent=idempotent),
            step("c", f"echo c >> {log}"),
        ],
    }


@dataclass
class Crash:
    """Two runs left in step `b` by a runtime process killed with SIGKILL."""

    logs: dict[str, Path]
    release: Path
    attempts: Path

    def supervisors(self) -> list[dict[str, Any]]:
        found = [p.read_text() for p in self.attempts.glob("*/*/spawned")]
        return [json.loads(text) for text in found if text]

    def kill_supervisors(self) -> None:
        """Kill the supervisors and their commands, as a reboot would."""
        for status in self.supervisors():
            with contextlib.suppress(ProcessLookupError):
                os.kill(status["supervisor_pid"], signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(status["pid"], signal.SIGKILL)


def crash(
    looms_db_url: str, tmp_path: Path, *, owner: str = "crashed", lease_s: float = 1.0
) -> Iterator[Crash]:
    release = tmp_path / "release"
    logs = {"again": tmp_path / "again.log", "once": tmp_path / "once.log"}
    flows = {
        "again": flow(logs["again"], release, idempotent=True),
        "once": flow(logs["once"], release, idempotent=False),
    }
    attempts = tmp_path / "attempts"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, looms_db_url, repr(flows), str(attempts), owner, str(lease_s)]
    )
    crashed = Crash(logs=logs, release=release, attempts=attempts)
    try:
        for log in logs.values():
            wait_for(partial(in_middle_step, log))
        child.kill()
        child.wait()
        yield crashed
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        release.touch()
        crashed.kill_supervisors()


@pytest.fixture
def crashed(looms_db_url: str, tmp_path: Path) -> Iterator[Crash]:
    yield from crash(looms_db_url, tmp_path)


def run_id_of(runtime: Runtime, key: str) -> str:
    return next(r.run_id for r in runtime.list_runs() if r.idempotency_key == key)


def event_types(runtime: Runtime, run_id: str) -> list[str]:
    return [e.type for e in runtime.get_events(run_id)]


@pytest.mark.timeout(60)
def test_a_step_in_flight_at_a_crash_runs_on_and_is_adopted_by_the_next_runtime(
    crashed: Crash, make_runtime: MakeRuntime
) -> None:
    runtime = make_runtime(owner="heir", lease=timedelta(seconds=1), attempts_dir=crashed.attempts)
    runtime.start()
    again, once = run_id_of(runtime, "again"), run_id_of(runtime, "once")

    crashed.release.touch()

    for run_id, log in ((again, crashed.logs["again"]), (once, crashed.logs["once"])):
        assert runtime.wait_settled(run_id, 30).status == "completed"
        assert [line.split()[:2] for line in lines(log)] == [
            ["a"],
            ["b:1", "start"],
            ["b:1", "end"],
            ["c"],
        ]
        assert "effect_ambiguous" not in event_types(runtime, run_id)
    wait_for(lambda: not list(crashed.attempts.glob("*/*")))  # directories cleaned up


@pytest.mark.timeout(60)
def test_a_step_whose_supervisor_died_too_is_ambiguous_rerun_if_idempotent_else_parked(
    crashed: Crash, make_runtime: MakeRuntime
) -> None:
    crashed.kill_supervisors()
    runtime = make_runtime(owner="heir", lease=timedelta(seconds=1), attempts_dir=crashed.attempts)
    runtime.start()
    again, once = run_id_of(runtime, "again"), run_id_of(runtime, "once")
    crashed.release.touch()

    assert runtime.wait_settled(again, 30).status == "completed"
    assert [line.split()[:2] for line in lines(crashed.logs["again"])] == [
        ["a"],
        ["b:1", "start"],
        ["b:2", "start"],
        ["b:2", "end"],
        ["c"],
    ]
    assert event_types(runtime, again).count("effect_ambiguous") == 1

    wait_for(lambda: runtime.inspect_run(once).state == "parked", timeout=30)
    parked = runtime.inspect_run(once)
    assert [(e.effect_id, e.attempt, e.status) for e in parked.effects] == [("b", 1, "ambiguous")]
    assert parked.completed_steps == 1
    assert "not idempotent" in (parked.park_reason or "")
    assert "supervisor" in (parked.effects[0].last_error or "")
    assert [line.split()[:2] for line in lines(crashed.logs["once"])] == [["a"], ["b:1", "start"]]


@pytest.mark.timeout(60)
def test_an_operator_retry_resumes_a_parked_run_without_rerunning_completed_steps(
    crashed: Crash, make_runtime: MakeRuntime
) -> None:
    crashed.kill_supervisors()
    runtime = make_runtime(owner="heir", lease=timedelta(seconds=1), attempts_dir=crashed.attempts)
    runtime.start()
    once = run_id_of(runtime, "once")
    wait_for(lambda: runtime.inspect_run(once).state == "parked", timeout=30)
    crashed.release.touch()

    runtime.retry_effect(once, "b")

    assert runtime.wait_settled(once, 30).status == "completed"
    assert [line.split()[:2] for line in lines(crashed.logs["once"])] == [
        ["a"],
        ["b:1", "start"],
        ["b:2", "start"],
        ["b:2", "end"],
        ["c"],
    ]


@pytest.mark.timeout(60)
def test_a_dead_owner_on_this_host_is_taken_over_at_once_not_after_its_lease(
    looms_db_url: str, tmp_path: Path, make_runtime: MakeRuntime
) -> None:
    for crashed in crash(looms_db_url, tmp_path, owner="crashed", lease_s=3600):
        heir = make_runtime(
            owner="heir", lease=timedelta(seconds=3600), attempts_dir=crashed.attempts
        )
        heir.start()
        again = run_id_of(heir, "again")
        crashed.release.touch()

        # An hour-long lease: only the dead process's pid lets the heir take the runs.
        assert heir.wait_settled(again, 20).status == "completed"
        assert heir.inspect_run(again).owner == "heir"


@pytest.mark.timeout(60)
def test_the_same_owner_recovers_its_runs_at_start_without_waiting_for_its_lease(
    looms_db_url: str, crashed: Crash
) -> None:
    database = Database(looms_db_url)
    runtime = Runtime(
        database, owner="crashed", lease=timedelta(seconds=60), attempts_dir=crashed.attempts
    )
    try:
        runtime.start()
        again = run_id_of(runtime, "again")
        crashed.release.touch()
        assert runtime.wait_settled(again, 30).status == "completed"
        assert lines(crashed.logs["again"])[-1] == "c"
    finally:
        runtime.close(timeout=5)
        database.dispose()
