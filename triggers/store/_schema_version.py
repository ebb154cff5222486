"""Where a database's schema stands against this release, in words every reader shares.

`SCHEMA_HEAD` is the newest revision in `alembic/versions` (a test keeps them equal).
`triggers.store.migrate` checks a database through SQLAlchemy and Alembic; the read
seam's `sqlite3` (a CLI command that only reads) checks it here, with the same
errors, and imports neither.
"""

from __future__ import annotations

from pathlib import Path

from looms_runtime.dbapi import Rows, scalar
from triggers.errors import ConfigError, DatabaseMissingError, SchemaBehindError, TriggersError

SCHEMA_HEAD = "0014"
"""The newest revision in `alembic/versions` (tests/integration/test_migrations.py checks)."""

PACKAGED = Path(__file__).resolve().parent.parent / "_migrations"  # inside an installed wheel
SOURCE = Path(__file__).resolve().parent.parent.parent / "alembic"  # a source checkout


def no_schema(head: str) -> DatabaseMissingError:
    return DatabaseMissingError(
        "the database holds no triggers schema: no daemon has used it yet; "
        "start the daemon (`triggers run`), or create the schema with `triggers db upgrade`",
        head=head,
    )


def no_version(head: str) -> SchemaBehindError:
    return SchemaBehindError(
        "the database has tables but no triggers schema version; "
        "run `triggers db upgrade` to create the schema",
        current=None,
        head=head,
    )


def newer(current: str, head: str) -> ConfigError:
    return ConfigError(
        f"the database schema ({current}) is newer than this release ({head}); upgrade triggers",
        current=current,
        head=head,
    )


def behind(current: str, head: str) -> SchemaBehindError:
    return SchemaBehindError(
        f"the database schema is behind ({current}, this release needs {head}); "
        "run `triggers db upgrade`",
        current=current,
        head=head,
    )


def known_revisions() -> set[str]:
    """This release's revisions, by the migrations' file names (`0014_name.py`)."""
    location = PACKAGED if PACKAGED.is_dir() else SOURCE
    return {path.name.partition("_")[0] for path in (location / "versions").glob("[0-9]*_*.py")}


def sqlite_schema_problem(rows: Rows) -> TriggersError | None:
    """What keeps an SQLite database from being read by this release, or None."""
    tables = {
        name
        for (name,) in rows.all("SELECT name FROM sqlite_master WHERE type = 'table'")
        if not name.startswith("sqlite_")
    }
    current = (
        scalar(rows, "SELECT version_num FROM alembic_version")
        if "alembic_version" in tables
        else None
    )
    if current == SCHEMA_HEAD:
        return None
    if current is None:
        return no_version(SCHEMA_HEAD) if tables else no_schema(SCHEMA_HEAD)
    if current not in known_revisions():
        return newer(current, SCHEMA_HEAD)
    return behind(current, SCHEMA_HEAD)
