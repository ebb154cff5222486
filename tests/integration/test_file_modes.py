"""The state directory 0700 and the SQLite files 0600, whatever the umask.

With umask 022 the database, its `-wal` and `-shm` were 0644 and the state directory
0755: every user of the host could read every step's output from them.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from structlog.testing import capture_logs

from looms_runtime._effects.attempts import RESULT, read_result
from triggers.errors import ConfigError
from triggers.file_modes import private_directory
from triggers.locations import DatabaseLocation
from triggers.store.database import open_database

NOBODY = 65534


@pytest.fixture(autouse=True)
def _umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    yield
    os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _embedded(path: Path) -> DatabaseLocation:
    return DatabaseLocation(url=f"sqlite:///{path}", source="test", sqlite_path=path, embedded=True)


def test_a_new_state_directory_and_database_are_private_under_umask_022(tmp_path: Path) -> None:
    path = tmp_path / "state" / "triggers.sqlite"
    db = open_database(_embedded(path), create=True)
    try:
        with db.engine.begin() as conn:  # a write, so the -wal and -shm exist
            conn.execute(sa.text("CREATE TABLE probe (x INTEGER)"))
        files = [path.with_name(path.name + s) for s in ("", "-wal", "-shm")]
        assert all(f.exists() for f in files)
        assert {f.name: _mode(f) for f in files} == {f.name: 0o600 for f in files}
        assert _mode(path.parent) == 0o700
    finally:
        db.dispose()


def test_an_open_state_directory_and_database_are_fixed_saying_so(tmp_path: Path) -> None:
    path = tmp_path / "state" / "triggers.sqlite"
    open_database(_embedded(path), create=True).dispose()
    path.parent.chmod(0o777)
    path.chmod(0o644)
    with capture_logs() as logs:
        open_database(_embedded(path)).dispose()
    assert (_mode(path.parent), _mode(path)) == (0o700, 0o600)
    fixed = {(e["path"], e["was"]) for e in logs if e["event"] == "file_mode_fixed"}
    assert fixed == {(str(path.parent), "777"), (str(path), "644")}


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_another_users_writable_directory_is_refused(tmp_path: Path) -> None:
    attempts = tmp_path / "attempts"
    attempts.mkdir(mode=0o777)
    attempts.chmod(0o777)
    os.chown(attempts, NOBODY, NOBODY)
    with pytest.raises(ConfigError, match="not this user's and others can write to it"):
        private_directory(attempts, what="attempts directory")


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_supervisor_record_is_trusted_only_when_it_is_ours(tmp_path: Path) -> None:
    (tmp_path / RESULT).write_text(json.dumps({"exit_code": 0}))
    assert read_result(tmp_path) == {"exit_code": 0}
    os.chown(tmp_path / RESULT, NOBODY, NOBODY)
    assert read_result(tmp_path) is None
