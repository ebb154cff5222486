"""Alembic environment for the trigger store and the looms runtime tables.

The connection comes from `config.attributes["connection"]` when the caller
(the CLI, the daemon, the tests) migrates in-process; otherwise the URL comes
from the triggers settings, never from alembic.ini.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from looms_runtime import schema as looms_schema
from triggers.store import schema as store_schema

target_metadata = [store_schema.metadata, looms_schema.metadata]


def _run(connection: Connection) -> None:
    if connection.dialect.name == "postgresql":
        looms_schema.for_postgresql()
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    from looms_runtime.db import Database  # noqa: PLC0415 (only for the standalone alembic CLI)
    from triggers.settings import Settings  # noqa: PLC0415

    db = Database(Settings().resolved_database_url())
    try:
        with db.engine.connect() as conn:
            _run(conn)
            conn.commit()
    finally:
        db.dispose()


if context.is_offline_mode():
    raise SystemExit("offline migrations are not supported; use `triggers db upgrade`")
run_migrations_online()
