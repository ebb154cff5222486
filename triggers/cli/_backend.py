"""The database, store, audit log and runtime a command works on, opened on demand.

Every command finds the database the same way (`triggers.locations`: flag,
environment, the service's environment file and state directory, then the
per-user file). Only `apply` (and `run`, `db upgrade`) may create it; every other
command needs a database a daemon has used and says so when there is none.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from triggers.cli._app import options
from triggers.cli._common import clock, quiet_logging
from triggers.locations import DatabaseLocation, Environment, locate_database

if TYPE_CHECKING:
    from looms_runtime import Runtime
    from looms_runtime.db import Database
    from triggers.settings import Settings
    from triggers.store.audit_log import Actor
    from triggers.store.sql import SqlTriggerStore
    from triggers.store.sql_audit import SqlAuditLog


def environment() -> Environment:
    """This invocation's `TRIGGERS_*` values over the service's environment file."""
    if options.environment is None:
        options.environment = Environment.load()
    return options.environment


def location() -> DatabaseLocation:
    """The database this command uses, and what chose it. Raises ConfigError."""
    return locate_database(environment(), url=options.database_url, url_source="--database-url")


def settings(**overrides: Any) -> Settings:
    """Every setting (pydantic: only for the commands that need more than the database)."""
    from triggers.settings import load_settings  # noqa: PLC0415

    found = location()
    # The embedded default stays a state directory (created when missing), not a URL.
    where: dict[str, Any] = (
        {"state_directory": found.sqlite_path.parent}
        if found.embedded and found.sqlite_path is not None
        else {"database_url": found.url}
    )
    return load_settings(
        env_file=environment().env_file, log_format=options.log_format, **where, **overrides
    )


def actor() -> Actor:
    """Who runs this command, for the audit log: the host, and the OS user (and sudo's)."""
    from triggers.actions import local_actor  # noqa: PLC0415

    return local_actor(settings().host)


@dataclass(slots=True)
class Stores:
    """The trigger store and the audit log on one open database."""

    db: Database
    store: SqlTriggerStore

    @property
    def audit(self) -> SqlAuditLog:
        # Built on first use: `list` and `history` never load the audit log's code.
        from triggers.store.sql_audit import SqlAuditLog  # noqa: PLC0415

        return SqlAuditLog(self.db)


@contextmanager
def open_stores(*, create: bool = False) -> Iterator[Stores]:
    """The store and audit log; `create` only for `apply`. Raises DatabaseMissingError."""
    from triggers.store.database import open_database  # noqa: PLC0415
    from triggers.store.sql import SqlTriggerStore  # noqa: PLC0415

    db = open_database(location(), create=create)
    try:
        yield Stores(db=db, store=SqlTriggerStore(db))
    finally:
        db.dispose()


@contextmanager
def open_store() -> Iterator[SqlTriggerStore]:
    """The trigger store of an existing database."""
    with open_stores() as stores:
        yield stores.store


@dataclass(slots=True)
class RuntimeSession:
    """The runtime (never started here) and the audit log on one open database."""

    runtime: Runtime
    audit: SqlAuditLog
    db: Database


@contextmanager
def open_runtime(*, writes: bool = False) -> Iterator[RuntimeSession]:
    """The runtime of an existing database, with the audit log beside it.

    `writes` (cancel, retry, signal) builds it as the daemon does, so whatever the
    daemon records with a run's changes is recorded for the CLI's too."""
    from triggers.store.database import open_database  # noqa: PLC0415
    from triggers.store.sql_audit import SqlAuditLog  # noqa: PLC0415

    quiet_logging()
    owner = f"cli:{os.uname().nodename}:{os.getpid()}"
    db = open_database(location())  # an existing database, or DatabaseMissingError
    if writes:
        db.dispose()
        from triggers.daemon import open_backend  # noqa: PLC0415

        backend = open_backend(settings(), owner=owner, clock=clock)
        try:
            yield RuntimeSession(
                runtime=backend.runtime, audit=SqlAuditLog(backend.db), db=backend.db
            )
        finally:
            backend.close()
        return
    from looms_runtime import Runtime  # noqa: PLC0415

    runtime = Runtime(db, owner=owner, clock=clock.now, env_prefix="TRIGGERS_")
    try:
        yield RuntimeSession(runtime=runtime, audit=SqlAuditLog(db), db=db)
    finally:
        db.dispose()


def open_database_for_upgrade() -> Database:
    """The database for `db upgrade`: created when it is the embedded default."""
    from looms_runtime.db import Database  # noqa: PLC0415
    from triggers.errors import ConfigError  # noqa: PLC0415

    found = location()
    path = found.sqlite_path
    if path is not None and not path.parent.is_dir():
        if not found.embedded:
            raise ConfigError(f"the directory of the SQLite database {path} does not exist")
        path.parent.mkdir(parents=True, exist_ok=True)
    return Database(found.url)
