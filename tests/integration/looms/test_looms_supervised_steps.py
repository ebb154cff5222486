"""Command attempts under supervisors: a closing runtime detaches, the next one adopts.

These run in one process: a runtime is closed (not killed) while its command runs,
or loses an attempt between its dispatch and its start, and a second runtime on the
same database and attempts directory takes the run over.
"""

from __future__ import annotations

import json
import os
import signal
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from looms_runtime import Runtime, StartRequest
from looms_runtime._cancel import CancelToken
from tests.factories import MakeRuntime
from tests.support import lines, wait_for


@pytest.fixture
def looms_db_url(looms_sqlite_url: str) -> str:
    return looms_sqlite_url  # about processes and files; the engine is the same on both


def held(log: Path, release: Path) -> dict[str, Any]:
    script = (
        f'echo "start $LOOMS_ATTEMPT" >> {log}; '
        f"while [ ! -f {release} ]; do sleep 0.02; done; "
        f'echo "end $LOOMS_ATTEMPT" >> {log}'
    )
    return {
        "kind": "steps",
        "steps": [{"id": "work", "type": "command", "argv": ["sh", "-c", script]}],
    }


def start(runtime: Runtime, definition: dict[str, Any]) -> str:
    version = runtime.register_flow("held", definition)
    request = StartRequest(flow="held", version=version, idempotency_key="k")
    return runtime.start_run(request).run_id


@pytest.mark.timeout(60)
def test_closing_leaves_a_command_running_and_the_next_runtime_adopts_it(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    log, release, attempts = tmp_path / "log", tmp_path / "release", tmp_path / "attempts"
    first = make_runtime(owner="first", attempts_dir=attempts, lease=timedelta(seconds=1))
    first.start()
    run_id = start(first, held(log, release))
    wait_for(lambda: lines(log) == ["start 1"])

    # Released only after close returns: a close that waited would never return. The
    # lease is not handed back (the command runs on), so the second runtime takes the
    # run once it lapses (a new process on this host takes it at once: see the crash tests).
    first.close(timeout=30)
    assert lines(log) == ["start 1"]
    second = make_runtime(owner="second", attempts_dir=attempts)
    second.start()
    release.touch()

    assert second.wait_settled(run_id, 30).status == "completed"
    assert lines(log) == ["start 1", "end 1"]
    types = [e.type for e in second.get_events(run_id)]
    assert types == ["run_started", "effect_dispatched", "effect_succeeded", "run_completed"]


@pytest.mark.timeout(60)
def test_an_attempt_dispatched_but_never_started_is_started_not_called_ambiguous(
    make_runtime: MakeRuntime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log, release, attempts = tmp_path / "log", tmp_path / "release", tmp_path / "attempts"
    release.touch()
    first = make_runtime(owner="first", attempts_dir=attempts, lease=timedelta(seconds=1))
    # The owner stops right after the dispatch committed, before any process started.
    monkeypatch.setattr(first._runner, "launch", lambda *args, **kwargs: CancelToken())
    first.start()
    run_id = start(first, held(log, release))
    wait_for(lambda: [e.type for e in first.get_events(run_id)][-1] == "effect_dispatched")
    first.close(timeout=0.1)
    assert lines(log) == []

    second = make_runtime(owner="second", attempts_dir=attempts, lease=timedelta(seconds=1))
    second.start()

    assert second.wait_settled(run_id, 30).status == "completed"
    assert lines(log) == ["start 1", "end 1"]
    types = [e.type for e in second.get_events(run_id)]
    assert types == ["run_started", "effect_dispatched", "effect_succeeded", "run_completed"]


@pytest.mark.timeout(60)
def test_an_adopted_attempts_output_has_its_secrets_redacted(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    log, release, attempts = tmp_path / "log", tmp_path / "release", tmp_path / "attempts"
    secret = tmp_path / "secret"
    secret.write_text("hunter2-the-password\n")
    definition = held(log, release)
    step = definition["steps"][0]
    step["argv"][-1] += '; echo "pw=$PW"'
    step["secrets"] = {"PW": {"file": str(secret)}}
    first = make_runtime(owner="first", attempts_dir=attempts, lease=timedelta(seconds=1))
    first.start()
    run_id = start(first, definition)
    wait_for(lambda: lines(log) == ["start 1"])
    first.close(timeout=30)
    second = make_runtime(owner="second", attempts_dir=attempts)
    second.start()
    release.touch()

    assert second.wait_settled(run_id, 30).status == "completed"
    [done] = [e for e in second.get_events(run_id) if e.type == "effect_succeeded"]
    assert done.payload["output"]["stdout"] == "pw=[secret PW]\n"


@pytest.mark.timeout(60)
def test_a_supervisor_killed_under_a_watching_runtime_makes_the_step_ambiguous_at_once(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    log, release, attempts = tmp_path / "log", tmp_path / "release", tmp_path / "attempts"
    definition = held(log, release)
    step = definition["steps"][0]
    step["argv"] = ["sh", "-c", f"echo printed; {step['argv'][2]}"]
    runtime = make_runtime(owner="only", attempts_dir=attempts)
    runtime.start()
    try:
        run_id = start(runtime, definition)
        wait_for(lambda: lines(log) == ["start 1"])
        [spawned] = attempts.glob("*/*/spawned")
        wait_for(lambda: any(spawned.parent.glob("stdout.*")))
        os.kill(int(json.loads(spawned.read_text())["supervisor_pid"]), signal.SIGKILL)

        def ambiguous() -> Any:
            events = runtime.get_events(run_id)
            return next((e for e in events if e.type == "effect_ambiguous"), None)

        wait_for(lambda: ambiguous() is not None)
        event = ambiguous()
        # The orphaned command still waits for its release: nobody waited for it.
        assert lines(log) == ["start 1"]
        assert event.payload["output"]["stdout"] == "printed\n"
    finally:
        release.touch()
        runtime.close(timeout=30)
