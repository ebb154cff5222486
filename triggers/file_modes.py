"""Who may read the state: the state directory 0700, the SQLite files 0600, whatever the umask.

Step output lives in the database, so a database file readable by others (umask
022 makes it 0644, its `-wal` and `-shm` too) shows every step's output to every
user of the host; a state or attempts directory another user can write to lets them
plant the records the daemon trusts. What is ours is fixed, saying so; what is not
ours and open to others is refused.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from triggers.errors import ConfigError

DIRECTORY_MODE = 0o700
FILE_MODE = 0o600
SQLITE_SUFFIXES = ("", "-wal", "-shm", "-journal")
OPEN_BITS = 0o027
"""What makes an existing file or directory open: write by its group, anything by
others. Reading by its group is an operator's choice (the unit's
`StateDirectoryMode=0750`, for operators in the service's group), and is kept."""


def private_directory(path: Path, *, what: str) -> None:
    """Make `path` (and its parents) 0700 if missing; make it 0700 if it is open.

    Raises:
        ConfigError: it is not ours and another user can write to it, or it cannot
            be made or fixed.
    """
    try:
        path.mkdir(parents=True, exist_ok=True, mode=DIRECTORY_MODE)
        found = path.stat()
    except OSError as exc:
        raise ConfigError(f"cannot make the {what} {path}: {exc.strerror}", path=str(path)) from exc
    mode = stat.S_IMODE(found.st_mode)
    if not mode & OPEN_BITS:
        return
    if found.st_uid != os.geteuid():
        if mode & 0o022:
            raise ConfigError(
                f"the {what} {path} is not this user's and others can write to it "
                f"(mode {mode:o}); make it this user's, mode 700",
                path=str(path),
            )
        return
    try:
        path.chmod(DIRECTORY_MODE)
    except OSError as exc:
        raise ConfigError(f"cannot make the {what} {path} mode 700: {exc.strerror}") from exc
    _fixed(path, mode, DIRECTORY_MODE)


def private_sqlite_files(path: Path, *, create: bool) -> None:
    """Create the database file 0600 when `create` and it is missing (SQLite gives
    its `-wal` and `-shm` the mode of the database file), and make those that are
    open 0600, saying so."""
    if create:
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
        except FileExistsError:
            pass
        except OSError:
            return  # the open that follows says why
    for suffix in SQLITE_SUFFIXES:
        file = path.with_name(path.name + suffix)
        try:
            found = file.stat()
            mode = stat.S_IMODE(found.st_mode)
            if mode & OPEN_BITS and found.st_uid == os.geteuid():
                file.chmod(FILE_MODE)
                _fixed(file, mode, FILE_MODE)
        except OSError:
            continue  # absent, or not ours: SQLite's open says what matters


def _fixed(path: Path, was: int, now: int) -> None:
    # Logging loads only when a mode was fixed: a query's start stays light.
    import structlog  # noqa: PLC0415

    structlog.get_logger().warning(
        "file_mode_fixed", path=str(path), was=f"{was:o}", now=f"{now:o}"
    )
