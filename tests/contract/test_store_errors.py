"""Driver errors end at the store's boundary, on SQLite and PostgreSQL.

A unique violation of the ledger's occurrence identity is a named error; what else
the database refuses is one `StoreError` (exit 1); a database that cannot serve is
`StoreUnavailableError` (exit 75, worth retrying). Nothing SQLAlchemy raises escapes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, cast

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from looms_runtime.db import Database
from tests.factories import spec
from triggers.clock import utc
from triggers.errors import (
    DuplicateOccurrenceError,
    ExitCode,
    SchemaBehindError,
    StoreError,
    StoreUnavailableError,
)
from triggers.store.protocol import ClaimRequest, Heartbeat
from triggers.store.schema import fires
from triggers.store.sql import SqlTriggerStore

T0 = utc(2026, 1, 1)
LEASE = timedelta(minutes=5)


def beat(**changes: Any) -> Heartbeat:
    values: dict[str, Any] = {
        "owner": "daemon-a",
        "host": "h",
        "pid": 1,
        "version": "0",
        "started_at": T0,
        "last_tick_at": T0,
    }
    return Heartbeat(**(values | changes))


def claim_minute(store: SqlTriggerStore, minute: int) -> object:
    at = T0 + timedelta(minutes=minute)
    request = ClaimRequest(trigger_id="a", occurrence_at=at, expected_revision=1)
    return store.claim([request], owner="daemon-a", host="h", now=at, lease=LEASE)


@contextmanager
def driver_raises(db: Database, error: Exception) -> Iterator[None]:
    """The driver raises `error` from its next statement, as a real fault would: the
    exception goes through SQLAlchemy's own wrapping (and its disconnect detection)."""

    def fail(*_args: object) -> None:
        raise error

    event.listen(db.engine, "before_cursor_execute", fail)
    try:
        yield
    finally:
        event.remove(db.engine, "before_cursor_execute", fail)


def test_ledger_unique_violation_is_a_duplicate_occurrence_error(database: Database) -> None:
    store = SqlTriggerStore(database)
    store.apply([spec("a")], now=T0)
    # Another writer recorded the occurrence without moving the watermark past it.
    with database.write() as conn:
        conn.execute(
            fires.insert().values(
                trigger_id="a", occurrence_at=T0 + timedelta(minutes=1), outcome="skipped"
            )
        )

    with pytest.raises(DuplicateOccurrenceError) as caught:
        claim_minute(store, 1)

    assert isinstance(caught.value, StoreError)
    assert caught.value.exit_code is ExitCode.FAILED
    assert caught.value.details["constraint"] == "uq_fires_trigger_id_occurrence_at_manual_key"
    assert isinstance(caught.value.__cause__, sa.exc.IntegrityError)


def test_other_integrity_error_is_a_store_error(database: Database) -> None:
    store = SqlTriggerStore(database)

    # A heartbeat without a host (NOT NULL): a stand-in of the record's fields, typed
    # loosely, as a record read from outside the type checker could be.
    fields = [(f.name, Any) for f in dataclasses.fields(Heartbeat)]
    stand_in = dataclasses.make_dataclass("Headless", fields, kw_only=True)
    headless = cast(Heartbeat, stand_in(**(dataclasses.asdict(beat()) | {"host": None})))
    with pytest.raises(StoreError) as caught:
        store.heartbeat(headless)

    assert type(caught.value) is StoreError
    assert caught.value.exit_code is ExitCode.FAILED
    assert isinstance(caught.value.__cause__, sa.exc.IntegrityError)


def test_interface_error_that_keeps_the_connection_is_a_store_error(database: Database) -> None:
    store = SqlTriggerStore(database)
    dbapi = database.engine.dialect.loaded_dbapi

    with (
        driver_raises(database, dbapi.InterfaceError("bad parameter or other API misuse")),
        pytest.raises(StoreError) as caught,
    ):
        store.heartbeats()

    assert type(caught.value) is StoreError
    assert isinstance(caught.value.__cause__, sa.exc.InterfaceError)
    assert not caught.value.__cause__.connection_invalidated
    assert store.heartbeats() == []  # the connection still serves


def test_exhausted_pool_is_unavailable(database: Database) -> None:
    # One connection, and a caller that waits for it only briefly.
    database.engine.dispose()
    database.engine = sa.create_engine(database.url, pool_size=1, max_overflow=0, pool_timeout=0.05)
    store = SqlTriggerStore(database)

    with database.engine.connect():  # holds the only connection
        with pytest.raises(StoreUnavailableError) as read:
            store.get_trigger("a")
        with pytest.raises(StoreUnavailableError) as write:
            store.heartbeat(beat())

    for caught in (read, write):
        assert caught.value.exit_code is ExitCode.TEMPORARY
        assert isinstance(caught.value.__cause__, sa.exc.TimeoutError)
    assert store.get_trigger("a") is None  # served again once the connection is back


def test_missing_table_is_schema_behind(database: Database) -> None:
    with database.write() as conn:
        conn.execute(sa.text("DROP TABLE heartbeats"))
    store = SqlTriggerStore(database)

    with pytest.raises(SchemaBehindError) as caught:
        store.heartbeats()

    assert caught.value.exit_code is ExitCode.CONFIG
    assert "triggers db upgrade" in caught.value.message


def test_no_sqlalchemy_error_escapes_a_store_method(database: Database) -> None:
    store = SqlTriggerStore(database)
    dbapi = database.engine.dialect.loaded_dbapi
    faults = [dbapi.DataError("value out of range"), dbapi.NotSupportedError("not supported")]

    for fault in faults:
        with driver_raises(database, fault), pytest.raises(StoreError) as caught:
            store.occurrence_counts()
        assert type(caught.value) is StoreError
        assert isinstance(caught.value.__cause__, sa.exc.DBAPIError)
