"""Opening a database to read it: on SQLite through `sqlite3`, without SQLAlchemy.

A command that only looks (`list`, `history`, `status`, `describe`, `next`) opens
the database here. An SQLite file is opened read-only through the read seam
(`looms_runtime.dbapi.SqliteReads`) and its schema checked with one query, with the
errors `open_database` gives (no database, a schema behind or newer, a locked or
unreadable file); PostgreSQL goes through `open_database` and its engine. The
store's reads, the audit log's, the alert outbox's listing and the runtime's
`RunReader` all take either.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from looms_runtime.dbapi import SqliteReads
from triggers.errors import ConfigError, DatabaseMissingError
from triggers.file_modes import private_directory, private_sqlite_files
from triggers.locations import DatabaseLocation
from triggers.store._driver_errors import translated
from triggers.store._schema_version import sqlite_schema_problem

if TYPE_CHECKING:
    from looms_runtime.db import Database

__all__ = ["NO_DAEMON_YET", "SqliteReads", "check_sqlite_path", "open_for_reading"]

NO_DAEMON_YET = (
    "no daemon has used it yet; start the daemon (`triggers run`), "
    "or create it with `triggers db upgrade`"
)
BUSY_TIMEOUT_MS = 10_000
"""How long a read waits for a lock another process holds (the store's own wait)."""


def open_for_reading(
    location: DatabaseLocation, *, busy_timeout_ms: int = BUSY_TIMEOUT_MS
) -> SqliteReads | Database:
    """The database at `location`, to read; close it with `dispose()`.

    Raises (as `open_database` does):
        DatabaseMissingError: no database there, or no schema in it.
        ConfigError: a directory that does not exist, a file that cannot be read; a
            schema newer than this release.
        SchemaBehindError: the schema is behind (run `triggers db upgrade`).
        StoreUnavailableError: the database is locked or cannot be reached (exit 75).
    """
    path = location.sqlite_path
    if path is None:
        from triggers.store.database import open_database  # noqa: PLC0415 (PostgreSQL)

        return open_database(location)
    check_sqlite_path(location, create=False)
    source = SqliteReads(str(path), busy_timeout_ms=busy_timeout_ms)
    try:
        with translated(), source.read() as rows:
            problem = sqlite_schema_problem(rows)
    except BaseException:
        source.dispose()
        raise
    if problem is not None:
        source.dispose()
        raise problem
    return source


def check_sqlite_path(location: DatabaseLocation, *, create: bool) -> None:
    """Refuse an SQLite file that is missing (unless `create`) or that this user cannot
    open; make the embedded state directory and the files private."""
    path = location.sqlite_path
    if path is None:
        return
    where = f"{path} ({location.source})"
    if location.embedded and (create or path.parent.is_dir()):
        private_directory(path.parent, what="state directory")
    if path.exists():
        private_sqlite_files(path, create=False)
        if not os.access(path, os.R_OK | os.W_OK):
            raise ConfigError(
                f"cannot open the database {where}: permission denied; run the command "
                "as the service's user, or as root",
                path=str(path),
            )
        return
    if not create:
        missing = "" if path.parent.is_dir() else " (its directory does not exist either)"
        raise DatabaseMissingError(
            f"no database at {where}{missing}: {NO_DAEMON_YET}", path=str(path)
        )
    if not location.embedded and not path.parent.is_dir():
        raise ConfigError(
            f"the directory of the SQLite database {where} does not exist", path=str(path)
        )
    private_sqlite_files(path, create=True)
