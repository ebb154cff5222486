"""Opening the database a location names, with the rules of who may create what.

Only the daemon, `triggers apply` and `triggers db upgrade` open with `create`:
the embedded SQLite file's directory is made and an empty database migrated.
Every other command opens an existing database with a current schema or says
why it cannot (exit 78), so a command that only reads never leaves a database
file, or a migrated PostgreSQL database, behind.
"""

from __future__ import annotations

from looms_runtime.db import Database
from triggers.errors import TriggersError
from triggers.locations import DatabaseLocation
from triggers.store.migrate import ensure_schema
from triggers.store.reading import NO_DAEMON_YET, check_sqlite_path

__all__ = ["NO_DAEMON_YET", "Database", "open_database"]
"""`Database` too: the CLI names the database it opens through the store, not the runtime."""


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
    check_sqlite_path(location, create=create)
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
