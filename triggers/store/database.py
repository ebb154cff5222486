"""Opening the database a location names, with the rules of who may create what.

Only the daemon, `triggers apply` and `triggers db upgrade` open with `create`:
the embedded SQLite file's directory is made and an empty database migrated.
Every other command opens an existing database with a current schema or says
why it cannot (exit 78), so a command that only reads never leaves a database
file, or a migrated PostgreSQL database, behind.
"""

from __future__ import annotations

import os

from looms_runtime.db import Database
from triggers.errors import ConfigError, DatabaseMissingError, TriggersError
from triggers.file_modes import private_directory, private_sqlite_files
from triggers.locations import DatabaseLocation
from triggers.store.migrate import ensure_schema

__all__ = ["NO_DAEMON_YET", "Database", "open_database"]
"""`Database` too: the CLI names the database it opens through the store, not the runtime."""

NO_DAEMON_YET = (
    "no daemon has used it yet; start the daemon (`triggers run`), "
    "or create it with `triggers db upgrade`"
)


def open_database(
    location: DatabaseLocation,
    *,
    create: bool = False,
    sqlite_synchronous: str = "FULL",
    background_checkpoints: bool = False,
) -> Database:
    """Connect to the database at `location` and check its schema.

    Raises:
        DatabaseMissingError: there is no database there (or no schema in it) and
            `create` is False.
        ConfigError: an SQLite file in a directory that does not exist, or one that
            cannot be read; a refused login; a schema newer than this release.
        SchemaBehindError: the schema is behind (run `triggers db upgrade`).
        StoreUnavailableError: the database cannot be reached (exit 75).
    """
    _check_sqlite_path(location, create=create)
    db = Database(
        location.url,
        sqlite_synchronous=sqlite_synchronous,
        checkpoint_interval_s=1.0 if background_checkpoints else None,
    )
    try:
        ensure_schema(db, migrate_empty=create)
    except TriggersError:
        db.dispose()
        raise
    return db


def _check_sqlite_path(location: DatabaseLocation, *, create: bool) -> None:
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
