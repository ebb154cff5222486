"""Attempt directories: where a supervised command attempt leaves what it did.

Each command attempt gets `ROOT/<run_id>/<effect>-<attempt>/`. The directory is its
lock: an `flock` on it, taken by the daemon before the supervisor hears of the
attempt and passed to the supervisor and the command, so a free lock proves that
neither still runs. It holds two records, each written once, and the command's output:

- `spawned`: created just before the command is started, so its absence proves that
  the command never ran; once it runs, it holds the supervisor's pid and start time
  and the command's pid (`{"supervisor_pid": .., "supervisor_start": .., "pid": ..,
  "started_at": .., "output_limit_bytes": ..}`);
- `result.json`: the outcome, written when the command ended. It is written in
  place, not synced: a file cut short by a crash does not parse, and reads as no
  outcome, which is what a crash before the write gives too;
- `stdout.N`, `stderr.N`: the tails of the command's output, written as it comes
  (`output.StreamFile`): what reached them is kept when the supervisor is killed.

What to run (argv, environment, input) reaches the supervisor on its socket and is
never written to disk. The root itself holds the host supervisor's socket, lock, pid
and log (`supervisor.py`). The directory is made with `mkdir`, which is the arbiter:
of two processes that would start the same attempt (a zombie owner and its heir),
only the one that made the directory starts it.

`probe` reads what an attempt left, and answers with certainty what can be known:

- `Finished`: the supervisor wrote the outcome;
- `Running`: the lock is held and the supervisor that started the command is alive
  (the same pid with the same start time: a pid reused by another process is gone);
- `NeverStarted`: the attempt was dispatched on this boot, and no command was ever
  started for it (no directory, or no `spawned` marker, and the lock is free);
- `Unknown`: anything else (another host, a reboot, a supervisor killed while its
  command ran, even if the orphaned command still runs): the step is ambiguous,
  with whatever output reached the attempt's files.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from looms_runtime._effects.output import read_stream, stream_files
from looms_runtime._effects.supervised import process_start

DEFAULT_OUTPUT_LIMIT = 65536
"""The tail read back of an attempt whose record names no limit."""


@dataclass(frozen=True, slots=True)
class Finished:
    """The supervisor's outcome record (`result.json`)."""

    result: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Running:
    """The supervisor (or at least its command) is still alive."""

    supervisor_pid: int | None


@dataclass(frozen=True, slots=True)
class NeverStarted:
    """No command was ever started for the attempt: starting it now is safe."""


@dataclass(frozen=True, slots=True)
class Unknown:
    """What the attempt did cannot be known here (`output`: what it left, if anything)."""

    why: str
    output: dict[str, Any] | None = None


Probe = Finished | Running | NeverStarted | Unknown


@dataclass(frozen=True, slots=True)
class Home:
    """Where this runtime keeps attempt directories, and on which boot."""

    root: Path
    boot: str

    def marker(self) -> dict[str, str]:
        """What a dispatch records of where its attempt runs (see `probe`)."""
        return {"boot": self.boot, "root": str(self.root)}

    def path(self, run_id: str, effect_id: str, attempt: int) -> Path:
        return attempt_path(self.root, run_id, effect_id, attempt)


def attempt_path(root: Path, run_id: str, effect_id: str, attempt: int) -> Path:
    return root / quote(run_id, safe="") / f"{quote(effect_id, safe='')}-{attempt}"


class AttemptTaken(Exception):  # noqa: N818 - a condition the caller expects, not a failure
    """Another process made this attempt's directory first: it runs the attempt."""


SPAWNED = "spawned"
RESULT = "result.json"


def claim(path: Path, *, restart: bool = False) -> int:
    """Make the attempt's directory and lock it; returns the locked descriptor.

    With `restart`, a directory left by an owner that never started the command
    (no `spawned` marker, lock free) is taken over.

    Raises:
        AttemptTaken: another process starts (or started) this attempt.
        OSError: the directory cannot be made (disk full, permissions).
    """
    try:
        path.mkdir(mode=0o700)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        return claim(path, restart=restart)
    except FileExistsError:
        if not restart:
            raise AttemptTaken(str(path)) from None
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise AttemptTaken(str(path)) from None
    if restart and (
        _legacy_lock_held(path) or (path / SPAWNED).exists() or (path / RESULT).exists()
    ):
        os.close(fd)
        raise AttemptTaken(str(path))
    return fd


def own_record(file: Path) -> bytes:
    """A record's bytes, when this user owns the file (not through a link).

    Raises:
        OSError: it is missing, a link, or another user's: not to be trusted.
    """
    fd = os.open(file, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if os.fstat(fd).st_uid != os.geteuid():
            raise PermissionError(f"{file} is not this user's")
        with os.fdopen(os.dup(fd), "rb") as stream:
            return stream.read()
    finally:
        os.close(fd)


def read_result(path: Path) -> dict[str, Any] | None:
    try:
        found: Any = json.loads(own_record(path / RESULT))
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def supervisor_pid(path: Path) -> int | None:
    """The pid of the supervisor that started the attempt's command, if it got that far."""
    with contextlib.suppress(KeyError, TypeError, ValueError):
        return int(spawned_record(path)["supervisor_pid"])
    return None


def spawned_record(path: Path) -> dict[str, Any]:
    """What the supervisor wrote in `spawned` (empty when it wrote nothing readable)."""
    for name in (SPAWNED, "status.json"):
        with contextlib.suppress(OSError, ValueError):
            found = json.loads(own_record(path / name))
            if isinstance(found, dict):
                return found
    return {}


def supervisor_gone(path: Path) -> bool:
    """Whether the supervisor that started the attempt's command is known to be gone:
    no process has its pid, or the one that has it started at another time."""
    record = spawned_record(path)
    try:
        pid = int(record["supervisor_pid"])
    except (KeyError, TypeError, ValueError):
        return False  # it did not get as far as saying who it is
    started = process_start(pid)
    if started is None:
        return True
    recorded = record.get("supervisor_start")
    return isinstance(recorded, int) and recorded != started


def left_output(path: Path) -> dict[str, Any] | None:
    """The output a command whose supervisor recorded no outcome left in its files, as
    an outcome's `output` (None: it never started).

    It ended, as far as anyone knows, when it last wrote (or when it started).
    """
    record = spawned_record(path)
    if not record:
        return None
    limit = int(record.get("output_limit_bytes") or DEFAULT_OUTPUT_LIMIT)
    streams = {name: read_stream(path, name, limit) for name in ("stdout", "stderr")}
    started_at = record.get("started_at")
    stamps = [s.modified_ns // 1_000_000 for s in streams.values() if s.modified_ns is not None]
    ended_at = max(stamps) if stamps else started_at
    duration = (
        max(0, ended_at - started_at)
        if isinstance(started_at, int) and isinstance(ended_at, int)
        else None
    )
    return {
        "exit_code": None,
        "signal": None,
        "stdout": streams["stdout"].text,
        "stderr": streams["stderr"].text,
        "stdout_truncated_bytes": streams["stdout"].dropped,
        "stderr_truncated_bytes": streams["stderr"].dropped,
        "duration_ms": duration,
        "timed_out": False,
        "ended_at_ms": ended_at,
    }


def lock_held(path: Path) -> bool:
    """Whether some process (the supervisor, or the command it started) holds the lock."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing our own description releases a lock we took
    return _legacy_lock_held(path)


def _legacy_lock_held(path: Path) -> bool:
    """The lock file of an attempt started by an earlier version (across an upgrade)."""
    try:
        fd = os.open(path / "lock", os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def probe(marker: dict[str, Any] | None, path: Path, *, boot: str) -> Probe:
    """What a dispatched attempt did (see the module docstring).

    `marker` is what its dispatch recorded (`Home.marker`), or None when it ran
    unsupervised.
    """
    if not marker or not boot:
        return Unknown("the attempt was not supervised")
    result = read_result(path)
    if result is not None:
        return Finished(result)
    if marker.get("boot") != boot:
        return Unknown("dispatched on another host or before a reboot")
    if not Path(str(marker.get("root"))).is_dir():
        return Unknown("its attempt directories are gone")
    if not path.is_dir():
        return NeverStarted()
    if lock_held(path) and not supervisor_gone(path):
        return Running(supervisor_pid(path))
    result = read_result(path)  # the supervisor may have finished meanwhile
    if result is not None:
        return Finished(result)
    if not (path / SPAWNED).exists():
        return NeverStarted()
    return Unknown(ORPHANED, output=left_output(path))


ORPHANED = "its supervisor stopped before it recorded an outcome"
"""Why an attempt whose supervisor is gone is ambiguous (its command may still run)."""


def discard(path: Path) -> None:
    """Remove an attempt's directory once its outcome is durable elsewhere (and the
    run's directory when it is left empty)."""
    streams = [file for name in ("stdout", "stderr") for _, file in stream_files(path, name)]
    for file in [path / SPAWNED, path / RESULT, *streams]:
        with contextlib.suppress(FileNotFoundError):
            file.unlink()
    try:
        path.rmdir()
    except FileNotFoundError:
        pass
    except OSError:
        shutil.rmtree(path, ignore_errors=True)  # an earlier version's files, or strays
    with contextlib.suppress(OSError):
        path.parent.rmdir()
