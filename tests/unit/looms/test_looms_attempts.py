"""What an attempt directory proves about a dispatched command attempt."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any

import pytest

from looms_runtime._effects import attempts
from looms_runtime._effects.supervised import process_start

BOOT = "boot-1"


@pytest.fixture
def home(tmp_path: Path) -> attempts.Home:
    return attempts.Home(root=tmp_path / "attempts", boot=BOOT)


@pytest.fixture
def path(home: attempts.Home) -> Path:
    home.root.mkdir()
    return home.path("run/1", "step a", 2)


def probe(home: attempts.Home, path: Path, *, boot: str = BOOT) -> attempts.Probe:
    return attempts.probe(home.marker(), path, boot=boot)


def test_an_attempt_path_escapes_ids_so_each_attempt_has_its_own_directory(
    home: attempts.Home,
) -> None:
    assert home.path("run/1", "step a", 2) == home.root / "run%2F1" / "step%20a-2"
    assert home.path("run/1", "step a", 3) != home.path("run/1", "step a", 2)


def test_no_directory_on_this_boot_proves_the_command_never_started(
    home: attempts.Home, path: Path
) -> None:
    assert probe(home, path) == attempts.NeverStarted()


def test_a_recorded_outcome_is_finished_whoever_asks(home: attempts.Home, path: Path) -> None:
    fd = attempts.claim(path)
    os.close(fd)
    (path / "result.json").write_text(json.dumps({"ok": True, "output": {"exit_code": 0}}))

    found = probe(home, path, boot="another-boot")

    assert found == attempts.Finished({"ok": True, "output": {"exit_code": 0}})


def spawned(path: Path, *, supervisor_pid: int, start: int | None, **extra: Any) -> None:
    record = {"supervisor_pid": supervisor_pid, "supervisor_start": start, "pid": 1, **extra}
    (path / "spawned").write_text(json.dumps(record))


def no_such_pid() -> int:
    # pid_max is one more than the largest pid the kernel hands out.
    return int(Path("/proc/sys/kernel/pid_max").read_text())


def test_a_held_lock_means_the_attempt_still_runs(home: attempts.Home, path: Path) -> None:
    me = os.getpid()  # a live supervisor: its pid and the start time it recorded
    fd = attempts.claim(path)
    try:
        spawned(path, supervisor_pid=me, start=process_start(me))

        assert probe(home, path) == attempts.Running(me)
    finally:
        os.close(fd)


def test_a_process_start_time_is_stable_and_none_once_the_pid_is_free() -> None:
    me = os.getpid()
    assert isinstance(process_start(me), int)
    assert process_start(me) == process_start(me)
    assert process_start(no_such_pid()) is None


def test_a_held_lock_whose_supervisor_pid_is_free_is_unknown_with_what_it_printed(
    home: attempts.Home, path: Path
) -> None:
    fd = attempts.claim(path)  # held, as by the orphaned command
    try:
        spawned(path, supervisor_pid=no_such_pid(), start=1, output_limit_bytes=1024)
        (path / "stdout.0").write_text("started\n")

        found = probe(home, path)

        assert isinstance(found, attempts.Unknown)
        assert found.why == attempts.ORPHANED
        assert found.output is not None
        assert found.output["stdout"] == "started\n"
    finally:
        os.close(fd)


def test_a_supervisor_pid_reused_by_another_process_is_gone(
    home: attempts.Home, path: Path
) -> None:
    me = os.getpid()
    started = process_start(me)
    assert started is not None
    fd = attempts.claim(path)
    try:
        # The pid lives, but the process that has it started later than the supervisor.
        spawned(path, supervisor_pid=me, start=started - 1)

        assert attempts.supervisor_gone(path)
        assert isinstance(probe(home, path), attempts.Unknown)
    finally:
        os.close(fd)


def test_a_live_supervisor_of_an_earlier_version_without_a_start_time_still_runs(
    home: attempts.Home, path: Path
) -> None:
    me = os.getpid()
    fd = attempts.claim(path)
    try:
        spawned(path, supervisor_pid=me, start=None)

        assert not attempts.supervisor_gone(path)
        assert probe(home, path) == attempts.Running(me)
    finally:
        os.close(fd)


def test_the_output_left_ends_when_it_was_last_written(path: Path) -> None:
    os.close(attempts.claim(path))
    spawned(path, supervisor_pid=no_such_pid(), start=1, started_at=1_000_000)
    (path / "stderr.0").write_text("half done\n")
    os.utime(path / "stderr.0", ns=(1_004_500 * 1_000_000, 1_004_500 * 1_000_000))

    found = attempts.left_output(path)

    assert found is not None
    assert (found["stderr"], found["stdout"]) == ("half done\n", "")
    assert (found["ended_at_ms"], found["duration_ms"]) == (1_004_500, 4_500)


def test_a_free_lock_without_the_spawned_marker_proves_it_never_started(
    home: attempts.Home, path: Path
) -> None:
    os.close(attempts.claim(path))

    assert probe(home, path) == attempts.NeverStarted()


def test_a_free_lock_after_the_command_was_spawned_is_unknown(
    home: attempts.Home, path: Path
) -> None:
    os.close(attempts.claim(path))
    (path / "spawned").touch()

    assert isinstance(probe(home, path), attempts.Unknown)


def test_another_boot_or_an_unsupervised_dispatch_is_unknown(
    home: attempts.Home, path: Path
) -> None:
    assert isinstance(probe(home, path, boot="another-boot"), attempts.Unknown)
    assert isinstance(attempts.probe(None, path, boot=BOOT), attempts.Unknown)


def test_only_one_process_claims_an_attempt(path: Path) -> None:
    fd = attempts.claim(path)
    try:
        with pytest.raises(attempts.AttemptTaken):
            attempts.claim(path)
        with pytest.raises(attempts.AttemptTaken):
            attempts.claim(path, restart=True)  # the lock is held
    finally:
        os.close(fd)


def test_a_restart_takes_over_a_directory_left_before_the_spawn(path: Path) -> None:
    os.close(attempts.claim(path))

    fd = attempts.claim(path, restart=True)
    try:
        assert attempts.lock_held(path)
    finally:
        os.close(fd)
    assert not attempts.lock_held(path)


def test_the_lock_file_of_an_earlier_version_still_counts(path: Path) -> None:
    os.close(attempts.claim(path))
    legacy = os.open(path / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(legacy, fcntl.LOCK_EX)  # a supervisor of the version before runs it
    try:
        assert attempts.lock_held(path)
        with pytest.raises(attempts.AttemptTaken):
            attempts.claim(path, restart=True)
    finally:
        os.close(legacy)
    assert not attempts.lock_held(path)


def test_discarding_removes_the_attempt_and_its_empty_run_directory(path: Path) -> None:
    os.close(attempts.claim(path))
    (path / "spawned").write_text("{}")
    (path / "result.json").write_text("{}")
    (path / "stdout.0").write_text("kept until the outcome was recorded")

    attempts.discard(path)

    assert not path.parent.exists()


def test_a_restart_never_takes_an_attempt_that_was_spawned(path: Path) -> None:
    os.close(attempts.claim(path))
    (path / "spawned").touch()

    with pytest.raises(attempts.AttemptTaken):
        attempts.claim(path, restart=True)
