"""Helpers for testing code built on the runtime: a manual clock and throwaway databases."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from looms_runtime import schema


class ManualClock:
    """A runtime clock that moves only when told to (`advance`, `set`).

    After moving it, call `Runtime.rescan_timers()` so due wakes fire at once
    instead of when the timer thread next looks.
    """

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("ManualClock needs an aware datetime")
        self._now = start.astimezone(UTC)
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, delta: timedelta) -> datetime:
        with self._lock:
            self._now += delta
            return self._now

    def set(self, instant: datetime) -> None:
        with self._lock:
            self._now = instant.astimezone(UTC)


@contextmanager
def temporary_postgres_database(server_url: str, *, create_tables: bool = True) -> Iterator[str]:
    """A fresh PostgreSQL database on the server of `server_url`, dropped afterwards.

    The database is created through an AUTOCOMMIT connection to the URL's own
    database and named `looms_<random>`; with `create_tables` it gets the runtime's
    tables. Yields the new database's URL.
    """
    server = make_url(server_url)
    name = f"looms_{os.urandom(6).hex()}"
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        url = server.set(database=name).render_as_string(hide_password=False)
        if create_tables:
            engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
            schema.for_postgresql()
            schema.metadata.create_all(engine)
            engine.dispose()
        yield url
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()
