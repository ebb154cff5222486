"""Schema management through Alembic: upgrade, and the check every process makes first.

Alembic is imported only when a migration runs or a schema is not current: a
command that reads an up-to-date database checks its revision with one query
against `SCHEMA_HEAD`, which a test keeps equal to the newest migration.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.exc import OperationalError

from looms_runtime.db import Database
from triggers.errors import (
    ConfigError,
    DatabaseMissingError,
    StoreUnavailableError,
    TriggersError,
)
from triggers.store._schema_version import (
    PACKAGED,
    SCHEMA_HEAD,
    SOURCE,
    behind,
    newer,
    no_schema,
    no_version,
)

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = [
    "SCHEMA_HEAD",
    "SchemaState",
    "alembic_config",
    "connection_error",
    "current_revision",
    "downgrade",
    "ensure_schema",
    "head_revision",
    "schema_state",
    "upgrade",
]

_PACKAGED = PACKAGED
_SOURCE = SOURCE
_PG_NO_DATABASE = "3D000"  # invalid_catalog_name
_PG_LOGIN = frozenset({"28000", "28P01"})  # invalid authorization, invalid password
# psycopg reports a refused connection without a SQLSTATE, so the server's words decide.
_NO_DATABASE = re.compile(r'FATAL:\s+database ".*" does not exist')
_LOGIN = re.compile(
    r'FATAL:\s+(role ".*" does not exist|password authentication failed|no pg_hba\.conf entry)'
)


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
    from alembic.config import Config  # noqa: PLC0415

    location = _PACKAGED if _PACKAGED.is_dir() else _SOURCE
    if not (location / "env.py").is_file():
        raise ConfigError(f"migrations not found (looked in {_PACKAGED} and {_SOURCE})")
    config = Config()
    config.set_main_option("script_location", str(location))
    return config


def head_revision() -> str:
    from alembic.script import ScriptDirectory  # noqa: PLC0415

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise ConfigError("this release has no migrations")
    return head


def connection_error(exc: OperationalError) -> TriggersError:
    """What a failure to connect means: no such database and a refused login are
    configuration (exit 78); anything else is worth retrying (75)."""
    orig = exc.orig
    detail = " ".join(str(orig).split()) or type(orig).__name__
    sqlstate = getattr(orig, "sqlstate", None)
    if sqlstate == _PG_NO_DATABASE or _NO_DATABASE.search(detail):
        return DatabaseMissingError(
            f"{detail}; create it (for example `createdb NAME`), then start the daemon",
            sqlstate=sqlstate,
        )
    if sqlstate in _PG_LOGIN or _LOGIN.search(detail):
        return ConfigError(f"the database refused the login: {detail}", sqlstate=sqlstate)
    return StoreUnavailableError(f"database unavailable: {detail}", sqlstate=sqlstate)


def current_revision(db: Database) -> str | None:
    """The database's Alembic revision in one query; None when it has none.

    Raises:
        StoreUnavailableError, DatabaseMissingError, ConfigError: see `connection_error`.
    """
    version = sa.table("alembic_version", sa.column("version_num"))
    try:
        with db.engine.connect() as conn:
            if not sa.inspect(conn).has_table("alembic_version"):
                return None
            return conn.execute(sa.select(version.c.version_num)).scalar()
    except OperationalError as exc:
        raise connection_error(exc) from exc


def schema_state(db: Database) -> SchemaState:
    """Read the database's Alembic revision. Raises StoreUnavailableError."""
    from alembic.runtime.migration import MigrationContext  # noqa: PLC0415

    try:
        with db.engine.connect() as conn:
            current = MigrationContext.configure(conn).get_current_revision()
            empty = not sa.inspect(conn).get_table_names()
    except OperationalError as exc:
        raise connection_error(exc) from exc
    return SchemaState(current=current, head=head_revision(), empty=empty)


_MIGRATION_LOCK = 0x7472_6967_6765_7273  # "triggers": the advisory lock of migrations


def upgrade(db: Database, revision: str = "head") -> SchemaState:
    """Apply migrations up to `revision` in-process.

    On PostgreSQL, processes migrating one database take turns (a transaction-scoped
    advisory lock): several daemons started at once on an empty database do not race
    to create the same tables; the first migrates, the others then find the schema
    current and migrate nothing. (SQLite's one writer serializes them already.)
    """
    from alembic import command  # noqa: PLC0415

    config = alembic_config()
    try:
        with db.write() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(
                    sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK}
                )
            config.attributes["connection"] = conn
            command.upgrade(config, revision)
    except OperationalError as exc:
        raise connection_error(exc) from exc
    return schema_state(db)


def downgrade(db: Database, revision: str) -> None:
    from alembic import command  # noqa: PLC0415

    config = alembic_config()
    with db.write() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, revision)


def ensure_schema(db: Database, *, migrate_empty: bool = True) -> SchemaState:
    """Make sure the schema is current: migrate an empty database, refuse one behind.

    Raises:
        DatabaseMissingError: the database holds no schema and `migrate_empty` is False.
        SchemaBehindError: the database holds an older schema (exit 78, run the upgrade).
        ConfigError: the database holds a schema newer than this release.
    """
    if current_revision(db) == SCHEMA_HEAD:
        return SchemaState(current=SCHEMA_HEAD, head=SCHEMA_HEAD, empty=False)
    state = schema_state(db)
    if state.up_to_date:
        return state
    if state.current is None and state.empty:
        if migrate_empty:
            return upgrade(db)
        raise no_schema(state.head)
    if state.current is None:
        raise no_version(state.head)
    from alembic.script import ScriptDirectory  # noqa: PLC0415

    known = {rev.revision for rev in ScriptDirectory.from_config(alembic_config()).walk_revisions()}
    if state.current not in known:
        raise newer(state.current, state.head)
    raise behind(state.current, state.head)
