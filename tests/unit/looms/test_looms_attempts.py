"""What an attempt directory proves about a dispatched command attempt."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import pytest

from looms_runtime._effects import attempts

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


def test_a_held_lock_means_the_attempt_still_runs(home: attempts.Home, path: Path) -> None:
    fd = attempts.claim(path)  # held, as by a live supervisor
    try:
        (path / "spawned").write_text(json.dumps({"supervisor_pid": 4242, "pid": 4243}))

        assert probe(home, path) == attempts.Running(4242)
    finally:
        os.close(fd)


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

    attempts.discard(path)

    assert not path.parent.exists()


def test_a_restart_never_takes_an_attempt_that_was_spawned(path: Path) -> None:
    os.close(attempts.claim(path))
    (path / "spawned").touch()

    with pytest.raises(attempts.AttemptTaken):
        attempts.claim(path, restart=True)
