"""A command step across a daemon restart, on the real daemon and the host's supervisor.

A supervisor killed while its command runs is known to be gone as soon as the next
daemon looks (its pid and start time), so the step is decided at once, not when the
orphaned command exits, and keeps what the command printed; a step that ended while
no daemon ran shows when it ended, not when the next daemon recorded it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import textwrap
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from looms_runtime._effects.supervised import process_start
from tests.e2e.conftest import Cli, log_events, stop, wait_for
from triggers.durations import human_duration

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def _config(tmp_path: Path, command: str) -> Path:
    config = tmp_path / "steps.yaml"
    config.write_text(
        textwrap.dedent(
            f"""\
            version: 1
            flows:
              long:
                steps:
                  - id: work
                    run: [sh, -c, {json.dumps(command)}]
            triggers:
              - {{id: long, flow: long, every: 1d}}
            """
        )
    )
    return config


@pytest.fixture
def state(cli: Cli, tmp_path: Path) -> Path:
    """The daemon's own state directory (its attempts and the host's supervisor)."""
    directory = tmp_path / "state"
    cli.env["TRIGGERS_STATE_DIRECTORY"] = str(directory)
    return directory


def _run_id(cli: Cli) -> str | None:
    rows = [row for row in cli.json("history", "long") if row.get("run_id")]
    return str(rows[0]["run_id"]) if rows else None


def _attempt(state: Path) -> Path | None:
    """The one attempt directory once its supervisor recorded who runs it."""
    for spawned in (state / "attempts").glob("*/*/spawned"):
        with contextlib.suppress(OSError, ValueError):
            if json.loads(spawned.read_text()).get("pid"):
                return spawned.parent
    return None


def _alive(pid: int) -> bool:
    return process_start(pid) is not None


def _effect(cli: Cli, run_id: str) -> dict[str, Any]:
    [effect] = cli.json("runs", "show", run_id)["effects"]
    return dict(effect)


def test_a_killed_supervisor_is_known_at_once_and_its_output_is_kept(
    cli: Cli, tmp_path: Path, state: Path
) -> None:
    config = _config(tmp_path, "echo started; sleep 30")
    cli.run("apply", str(config))
    log = tmp_path / "daemon.log"
    daemon = cli.daemon(config, log)
    orphan = None
    try:
        cli.run("fire", "long")
        attempt = wait_for(lambda: _attempt(state), timeout=60, what="the step to start")
        record = json.loads((attempt / "spawned").read_text())
        orphan = int(record["pid"])
        wait_for(
            lambda: "started" in "".join(p.read_text() for p in attempt.glob("stdout.*")),
            timeout=30,
            what="the step's first line in its output file",
        )
        run_id = wait_for(lambda: _run_id(cli), timeout=30, what="the run")

        # The daemon and the host's supervisor die; the command (its own session) lives.
        daemon.send_signal(signal.SIGKILL)
        daemon.wait(timeout=30)
        os.kill(int(record["supervisor_pid"]), signal.SIGKILL)
        wait_for(
            lambda: not _alive(int(record["supervisor_pid"])),
            timeout=30,
            what="the supervisor to be gone",
        )
        assert _alive(orphan)

        daemon = cli.daemon(config, log)
        effect = wait_for(
            lambda: (e := _effect(cli, run_id))["status"] != "dispatched" and e,
            timeout=60,
            what="the restarted daemon to decide the step",
        )
        # Decided while the orphaned `sleep 30` still runs: not by waiting for it.
        assert _alive(orphan), "the step was decided only once its orphaned command exited"

        assert effect["status"] == "ambiguous"
        assert cli.json("runs", "show", run_id)["state"] == "parked"
        assert "started" in effect["last_output"]["stdout"]
        [logged] = cli.json("runs", "logs", run_id)
        assert (logged["outcome"], logged["stdout"]) == ("ambiguous", "started\n")
        text = cli.run("runs", "logs", run_id).stdout
        assert "-- stdout\nstarted\n" in text
        shown = cli.run("runs", "show", run_id).stdout
        assert "stdout of work (attempt 1, last lines):\n  started\n" in shown
        assert f"triggers runs retry {run_id} work: " in shown
        assert f"triggers runs cancel {run_id}: " in shown
        events = [e["event"] for e in log_events(log)]
        assert "effect_outcome_unknown" in events
        assert "effect_adopted" not in events
    finally:
        if orphan is not None:
            with contextlib.suppress(OSError):
                os.killpg(orphan, signal.SIGKILL)
        if daemon.poll() is None:
            stop(daemon)


def test_a_step_that_ended_while_no_daemon_ran_shows_its_real_end(
    cli: Cli, tmp_path: Path, state: Path
) -> None:
    # The step ends once the daemon has stopped (the test says so with a file), however
    # long a loaded machine takes to stop it, and lasts at least 2 s.
    go = tmp_path / "go"
    config = _config(tmp_path, f"sleep 2; while [ ! -e {go} ]; do sleep 0.1; done; echo done")
    cli.run("apply", str(config))
    log = tmp_path / "daemon.log"
    daemon = cli.daemon(config, log)
    try:
        cli.run("fire", "long")
        attempt = wait_for(lambda: _attempt(state), timeout=60, what="the step to start")
        run_id = wait_for(lambda: _run_id(cli), timeout=30, what="the run")
        assert stop(daemon) == 0  # SIGTERM: the step runs on under the supervisor
        go.touch()
        wait_for(
            (attempt / "result.json").exists,
            timeout=60,
            what="the step to end with no daemon running",
        )
        seen_ended = time.time()

        daemon = cli.daemon(config, log)
        [logged] = wait_for(
            lambda: [a for a in cli.json("runs", "logs", run_id) if a["outcome"] != "running"],
            timeout=60,
            what="the restarted daemon to record the step's outcome",
        )
        assert logged["outcome"] == "succeeded"
        ended = datetime.fromisoformat(logged["at"]).timestamp()
        recorded = datetime.fromisoformat(logged["recorded_at"]).timestamp()
        assert ended <= seen_ended < recorded, "the end shown is the restart's"
        assert logged["duration_ms"] >= 2000
        text = cli.run("runs", "logs", run_id).stdout
        took = human_duration(timedelta(milliseconds=logged["duration_ms"]))  # as in history
        assert f"succeeded ({took}) at {logged['at']}" in text
        assert logged["recorded_at"] not in text
        [step] = cli.json("runs", "show", run_id)["steps"]
        assert step["ended_at"] == logged["at"]
    finally:
        if daemon.poll() is None:
            stop(daemon)
        with contextlib.suppress(subprocess.TimeoutExpired):
            daemon.wait(timeout=30)
