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
from dataclasses import dataclass, fields
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from triggers.cli._app import options
from triggers.cli._common import clock, quiet_logging
from triggers.locations import DatabaseLocation, Environment, locate_database

if TYPE_CHECKING:
    from triggers.runner.runs import RunControls, RunReads
    from triggers.settings import Settings
    from triggers.store.audit_log import Actor
    from triggers.store.database import Database
    from triggers.store.reading import SqliteReads
    from triggers.store.sql import SqlTriggerStore
    from triggers.store.sql_audit import SqlAuditLog
    from triggers.store.sql_reads import SqlTriggerReads


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


def poll_interval_setting() -> timedelta:
    """`TRIGGERS_POLL_INTERVAL`, read as `settings().poll_interval` reads it (this
    invocation's environment over the service's environment file, in the grammar of
    `triggers.durations`, else the scheduler's default), without building every
    setting: pydantic would cost `status` a third of its start-up.

    Raises:
        ConfigError: the value is not a duration; the message is `load_settings`'s.
    """
    from triggers.durations import parse_duration  # noqa: PLC0415
    from triggers.errors import ConfigError  # noqa: PLC0415
    from triggers.scheduler.options import SchedulerOptions  # noqa: PLC0415

    value = environment().values.get(_POLL_INTERVAL)
    if value is None:
        [default] = [f.default for f in fields(SchedulerOptions) if f.name == "poll_interval"]
        return cast("timedelta", default)
    try:
        return parse_duration(value)
    except ValueError as exc:
        # The words pydantic gives a validator's ValueError, so both readers agree.
        problems = [f"{_POLL_INTERVAL}: Value error, {exc}"]
        raise ConfigError("invalid settings: " + "; ".join(problems), problems=problems) from exc


_POLL_INTERVAL = "TRIGGERS_POLL_INTERVAL"


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
    """The store and audit log, to change them; `create` only for `apply`.

    Raises DatabaseMissingError."""
    from triggers.store.database import open_database  # noqa: PLC0415
    from triggers.store.sql import SqlTriggerStore  # noqa: PLC0415

    db = open_database(location(), create=create)
    try:
        yield Stores(db=db, store=SqlTriggerStore(db))
    finally:
        db.dispose()


@dataclass(slots=True)
class Reads:
    """What a command that only looks reads, on one open database: the trigger store's
    reads, the audit log and the runtime's runs. Each loads its code on first use, and
    none loads the code that writes (claims, the runtime's engine). On SQLite the
    database is a read-only `sqlite3` connection, and no SQLAlchemy is loaded."""

    db: Database | SqliteReads
    store: SqlTriggerReads

    @property
    def audit(self) -> SqlAuditLog:
        from triggers.store.sql_audit import SqlAuditLog  # noqa: PLC0415

        return SqlAuditLog(self.db)

    @property
    def runs(self) -> RunReads:
        """The runtime's runs, read as `Runtime` reads them, without building one."""
        from triggers.runner.runs import RunReads  # noqa: PLC0415

        return RunReads.of_database(self.db)


@contextmanager
def open_reads() -> Iterator[Reads]:
    """The reads of an existing database. Raises DatabaseMissingError."""
    from triggers.store.reading import open_for_reading  # noqa: PLC0415
    from triggers.store.sql_reads import SqlTriggerReads  # noqa: PLC0415

    db = open_for_reading(location())
    try:
        yield Reads(db=db, store=SqlTriggerReads(db))
    finally:
        db.dispose()


@dataclass(slots=True)
class RuntimeSession:
    """The runtime's runs (the runtime never started here) and the audit log on one
    open database."""

    runs: RunControls
    audit: SqlAuditLog
    db: Database


@contextmanager
def open_runtime() -> Iterator[RuntimeSession]:
    """The runtime of an existing database, to change its runs (cancel, retry, signal),
    with the audit log beside it.

    It is built as the daemon builds it, so whatever the daemon records with a run's
    changes is recorded for the CLI's too. Commands that only read runs use
    `open_reads().runs`."""
    from triggers.daemon import open_backend  # noqa: PLC0415
    from triggers.runner.runs import RunControls  # noqa: PLC0415
    from triggers.store.database import open_database  # noqa: PLC0415
    from triggers.store.sql_audit import SqlAuditLog  # noqa: PLC0415

    quiet_logging()
    owner = f"cli:{os.uname().nodename}:{os.getpid()}"
    open_database(location()).dispose()  # an existing database, or DatabaseMissingError
    backend = open_backend(settings(), owner=owner, clock=clock)
    try:
        yield RuntimeSession(
            runs=RunControls(backend.runtime), audit=SqlAuditLog(backend.db), db=backend.db
        )
    finally:
        backend.close()


def open_database_for_upgrade() -> Database:
    """The database for `db upgrade`: created when it is the embedded default."""
    from triggers.errors import ConfigError  # noqa: PLC0415
    from triggers.file_modes import private_directory, private_sqlite_files  # noqa: PLC0415
    from triggers.store.database import Database  # noqa: PLC0415

    found = location()
    path = found.sqlite_path
    if path is not None:
        if found.embedded:
            private_directory(path.parent, what="state directory")
        elif not path.parent.is_dir():
            raise ConfigError(f"the directory of the SQLite database {path} does not exist")
        private_sqlite_files(path, create=True)
    return Database(found.url)
