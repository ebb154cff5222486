"""Schema management through Alembic: upgrade, and the check the daemon makes at start."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.exc import OperationalError

from looms_runtime.db import Database
from triggers.errors import ConfigError, SchemaBehindError, StoreUnavailableError

_PACKAGED = Path(__file__).resolve().parent.parent / "_migrations"  # inside an installed wheel
_SOURCE = Path(__file__).resolve().parent.parent.parent / "alembic"  # a source checkout


@dataclass(frozen=True, slots=True, kw_only=True)
class SchemaState:
    """Where a database's schema stands against this release."""

    current: str | None
    head: str
    empty: bool

    @property
    def up_to_date(self) -> bool:
        return self.current == self.head


def alembic_config() -> Config:
    """An Alembic config pointing at this release's migrations."""
    location = _PACKAGED if _PACKAGED.is_dir() else _SOURCE
    if not (location / "env.py").is_file():
        raise ConfigError(f"migrations not found (looked in {_PACKAGED} and {_SOURCE})")
    config = Config()
    config.set_main_option("script_location", str(location))
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise ConfigError("this release has no migrations")
    return head


def schema_state(db: Database) -> SchemaState:
    """Read the database's Alembic revision. Raises StoreUnavailableError."""
    try:
        with db.engine.connect() as conn:
            current = MigrationContext.configure(conn).get_current_revision()
            empty = not sa.inspect(conn).get_table_names()
    except OperationalError as exc:
        raise StoreUnavailableError(f"database unavailable: {exc.orig}") from exc
    return SchemaState(current=current, head=head_revision(), empty=empty)


def upgrade(db: Database, revision: str = "head") -> SchemaState:
    """Apply migrations up to `revision` in-process."""
    config = alembic_config()
    try:
        with db.write() as conn:
            config.attributes["connection"] = conn
            command.upgrade(config, revision)
    except OperationalError as exc:
        raise StoreUnavailableError(f"database unavailable: {exc.orig}") from exc
    return schema_state(db)


def downgrade(db: Database, revision: str) -> None:
    config = alembic_config()
    with db.write() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, revision)


def ensure_schema(db: Database, *, migrate_empty: bool = True) -> SchemaState:
    """Make sure the schema is current: migrate an empty database, refuse one behind.

    Raises:
        SchemaBehindError: the database holds an older schema (exit 78, run the upgrade).
        ConfigError: the database holds a schema newer than this release.
    """
    state = schema_state(db)
    if state.up_to_date:
        return state
    if state.current is None and state.empty and migrate_empty:
        return upgrade(db)
    if state.current is None:
        raise SchemaBehindError(
            "the database has tables but no triggers schema version; "
            "run `triggers db upgrade` to create the schema",
            current=None,
            head=state.head,
        )
    known = {rev.revision for rev in ScriptDirectory.from_config(alembic_config()).walk_revisions()}
    if state.current not in known:
        raise ConfigError(
            f"the database schema ({state.current}) is newer than this release ({state.head}); "
            "upgrade triggers",
            current=state.current,
            head=state.head,
        )
    raise SchemaBehindError(
        f"the database schema is behind ({state.current}, this release needs {state.head}); "
        "run `triggers db upgrade`",
        current=state.current,
        head=state.head,
    )
