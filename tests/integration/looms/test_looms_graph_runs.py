"""Graph flows on a real runtime: branches run at once, fail fast, cancel and survive a crash.

Each branch is a real command that appends to a log, so the assertions read what ran
and in which order.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from looms_runtime import Runtime, StartRequest
from tests.factories import MakeRuntime
from tests.support import lines, wait_for

CHILD = """
import sys, threading
from datetime import timedelta
from looms_runtime import Database, Runtime, StartRequest
url, definition, attempts = sys.argv[1], eval(sys.argv[2]), sys.argv[3]
runtime = Runtime(
    Database(url), owner="crashed", lease=timedelta(seconds=60), attempts_dir=attempts
)
runtime.start()
version = runtime.register_flow("backup", definition)
runtime.start_run(StartRequest(flow="backup", version=version, idempotency_key="k"))
threading.Event().wait()
"""


def step(step_id: str, script: str, **fields: Any) -> dict[str, Any]:
    return {"id": step_id, "type": "command", "argv": ["sh", "-c", script], **fields}


def held(name: str, log: Path, release: Path) -> str:
    """A branch that logs its start, holds until `release` exists, then logs its end."""
    return (
        f"echo '{name} start' >> {log}; "
        f"while [ ! -f {release} ]; do sleep 0.02; done; echo '{name} end' >> {log}"
    )


def start(runtime: Runtime, definition: dict[str, Any]) -> str:
    version = runtime.register_flow("backup", definition)
    request = StartRequest(flow="backup", version=version, idempotency_key="k")
    return runtime.start_run(request).run_id


@pytest.fixture
def looms_db_url(looms_sqlite_url: str) -> str:
    return looms_sqlite_url  # about processes; the store is covered on both engines elsewhere


@pytest.mark.timeout(60)
def test_branches_run_at_once_and_the_join_runs_after_all_of_them(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    log = tmp_path / "log"
    # Each dump waits for the other to have started: run one after another, they would
    # time out (exit 1) instead of completing.
    meet = (
        "touch {me}; i=0; "
        "while [ ! -f {other} ] && [ $i -lt 500 ]; do sleep 0.02; i=$((i+1)); done; "
        "[ -f {other} ]"
    )
    a, b = tmp_path / "a.started", tmp_path / "b.started"
    definition = {
        "kind": "steps",
        "steps": [
            step("dump-a", meet.format(me=a, other=b) + f" && echo a >> {log}", needs=[]),
            step("dump-b", meet.format(me=b, other=a) + f" && echo b >> {log}", needs=[]),
            step("upload", f"echo upload >> {log}", needs=["dump-a", "dump-b"]),
        ],
    }
    runtime = make_runtime()
    runtime.start()
    run_id = start(runtime, definition)

    assert runtime.wait_settled(run_id, 30).status == "completed"
    assert sorted(lines(log)[:2]) == ["a", "b"]
    assert lines(log)[2:] == ["upload"]
    types = [e.type for e in runtime.get_events(run_id)]
    assert types[1:3] == ["effect_dispatched", "effect_dispatched"]  # one commit, two branches


@pytest.mark.timeout(60)
def test_a_failed_branch_cancels_its_siblings_and_fails_the_run(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    log, release = tmp_path / "log", tmp_path / "release"
    definition = {
        "kind": "steps",
        "steps": [
            step("slow", held("slow", log, release), needs=[]),
            # Fails once its sibling is under way, so there is a sibling to stop.
            step(
                "broken",
                f"until grep -q 'slow start' {log} 2>/dev/null; do sleep 0.02; done; "
                f"echo broken >> {log}; echo 'disk full' >&2; exit 3",
                needs=[],
            ),
            step("upload", f"echo upload >> {log}", needs=["slow", "broken"]),
        ],
    }
    runtime = make_runtime()
    runtime.start()
    run_id = start(runtime, definition)

    status = runtime.wait_settled(run_id, 30)

    assert status.status == "failed"
    assert "'broken' failed after 1 attempt: exit code 3" in (status.error or "")
    assert sorted(lines(log)) == ["broken", "slow start"]  # slow was stopped, upload never ran
    types = [e.type for e in runtime.get_events(run_id)]
    assert "branch_failed" in types and "effect_cancelled" in types


@pytest.mark.timeout(60)
def test_cancelling_a_run_cancels_every_branch(make_runtime: MakeRuntime, tmp_path: Path) -> None:
    log, release = tmp_path / "log", tmp_path / "release"
    definition = {
        "kind": "steps",
        "steps": [
            step("one", held("one", log, release), needs=[]),
            step("two", held("two", log, release), needs=[]),
        ],
    }
    runtime = make_runtime()
    runtime.start()
    run_id = start(runtime, definition)
    wait_for(lambda: sorted(lines(log)) == ["one start", "two start"])

    runtime.cancel(run_id, grace=timedelta(seconds=2))

    assert runtime.wait_settled(run_id, 30).status == "cancelled"
    cancelled = [e for e in runtime.get_events(run_id) if e.type == "effect_cancelled"]
    assert sorted(e.payload["effect_id"] for e in cancelled) == ["one", "two"]


@pytest.mark.timeout(90)
def test_a_crash_mid_branch_keeps_completed_branches_and_adopts_the_running_one(
    looms_db_url: str, make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    log, release, attempts = tmp_path / "log", tmp_path / "release", tmp_path / "attempts"
    definition = {
        "kind": "steps",
        "steps": [
            step("quick", f"echo quick >> {log}", needs=[]),
            step("long", held("long", log, release), needs=[]),
            step("upload", f"echo upload >> {log}", needs=["quick", "long"]),
        ],
    }
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, looms_db_url, repr(definition), str(attempts)]
    )
    try:
        wait_for(lambda: sorted(lines(log)) == ["long start", "quick"])
        child.kill()
        child.wait()
        heir = make_runtime(owner="heir", lease=timedelta(seconds=60), attempts_dir=attempts)
        heir.start()
        run_id = next(r.run_id for r in heir.list_runs() if r.idempotency_key == "k")
        release.touch()

        assert heir.wait_settled(run_id, 30).status == "completed"
    finally:
        release.touch()
        if child.poll() is None:
            child.kill()
            child.wait()
    assert sorted(lines(log)) == ["long end", "long start", "quick", "upload"]
    assert lines(log)[-1] == "upload"
    assert "effect_ambiguous" not in [e.type for e in heir.get_events(run_id)]
