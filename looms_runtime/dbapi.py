"""The read seam: plain SQL text run over a small DB-API row interface, two adapters.

A read query is one body of SQL (`?` placeholders; a branch only where SQLite and
PostgreSQL differ) and an explicit decoding of its rows (instants are epoch
milliseconds, JSON is text on SQLite and decoded by psycopg on PostgreSQL). It runs
over `Rows`, which either adapter gives:

- `SqliteReads`: Python's `sqlite3`, read-only, for a process that only reads an
  SQLite database (a CLI query command): no SQLAlchemy is imported at all;
- `EngineRows`: a SQLAlchemy connection (`exec_driver_sql`), for PostgreSQL and for
  the processes that hold an engine already (the daemon, the API).

The writes stay on SQLAlchemy Core. This module imports neither SQLAlchemy nor a
driver until an adapter needs it.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Protocol, cast
from urllib.parse import quote

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from looms_runtime.db import Database

Row = tuple[Any, ...]


class Rows(Protocol):
    """One read transaction's connection, as the read queries see it."""

    @property
    def dialect(self) -> str:
        """`sqlite` or `postgresql`: the branch a query takes where they differ."""

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """The rows of `sql` (`?` placeholders bound to `params`), as tuples."""

    def json(self, value: Any) -> Any:
        """A JSON column's value as Python (SQLite holds its text)."""


class ReadSource(Protocol):
    """Where reads come from: read transactions, and one shared by a block."""

    @property
    def dialect(self) -> str: ...

    def read(self) -> Any:  # a context manager of Rows
        """A read transaction (one snapshot)."""

    def shared_read(self) -> Any:  # a context manager
        """Every `read` inside, on this thread, joins one read transaction."""


def scalar(rows: Rows, sql: str, params: Sequence[Any] = ()) -> Any:
    """The first column of the first row, or None."""
    found = rows.all(sql, params)
    return found[0][0] if found else None


def marks(count: int) -> str:
    """`?, ?, ?` for an IN list of `count` values."""
    return ", ".join("?" * count)


def _json_text(value: Any) -> Any:
    """A JSON column's value on SQLite: its text, decoded. A bare number comes back a
    number (the column's numeric affinity stores the text `3` as the integer 3)."""
    if value is None or isinstance(value, int | float):
        return value
    return json.loads(value)


def _json_decoded(value: Any) -> Any:
    return value


class SqliteRows:
    """`Rows` on a `sqlite3` connection."""

    dialect = "sqlite"
    json = staticmethod(_json_text)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return self._conn.execute(_placeholders(sql, "qmark"), tuple(params)).fetchall()


class EngineRows:
    """`Rows` on a SQLAlchemy connection: the driver runs the text as it is written
    (`exec_driver_sql`), only its placeholders adapted to the driver's style."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self.dialect = conn.dialect.name
        self._style = conn.dialect.paramstyle
        self.json = _json_decoded if self.dialect == "postgresql" else _json_text

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        result = self._conn.exec_driver_sql(_placeholders(sql, self._style), tuple(params))
        return [tuple(row) for row in result]


@lru_cache(maxsize=512)
def _placeholders(sql: str, style: str) -> str:
    """`sql` with its `?` placeholders in the driver's `style`.

    Checked alike for every style, so that a query SQLite's tests pass also runs on
    PostgreSQL: no `%` in the text (a LIKE pattern belongs in a parameter), no `?`
    inside a quoted literal (it would be taken for a placeholder there).

    Raises:
        ValueError: the text breaks one of these, or `style` is not supported.
    """
    if "%" in sql:
        raise ValueError(f"a '%' in the text of a read query: {sql!r}")
    if any("?" in literal for literal in sql.split("'")[1::2]):
        raise ValueError(f"a '?' inside a quoted literal of a read query: {sql!r}")
    if style == "qmark":
        return sql
    if style in ("format", "pyformat"):
        return sql.replace("?", "%s")
    raise ValueError(f"unsupported paramstyle {style!r}")


def as_rows(conn: Rows | Connection) -> Rows:
    """`conn` as `Rows`: a SQLAlchemy connection (a writer's, say) is adapted."""
    if hasattr(conn, "exec_driver_sql"):
        return EngineRows(cast("Connection", conn))
    return conn


class EngineReads:
    """`ReadSource` on a `Database` (its read transactions, REPEATABLE READ on PostgreSQL)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self.dialect = db.dialect

    @contextmanager
    def read(self) -> Iterator[Rows]:
        with self._db.read() as conn:
            yield EngineRows(conn)

    def shared_read(self) -> Any:
        return self._db.shared_read()


class SqliteReads:
    """`ReadSource` on an SQLite file through `sqlite3`, opened read-only: it never
    creates the file, and never writes. A locked database waits up to
    `busy_timeout_ms`, as the store's own connections do.

    Raises (from `read`): `sqlite3.Error`; the caller's boundary translates it.
    """

    dialect = "sqlite"

    def __init__(self, path: str, *, busy_timeout_ms: int = 10_000) -> None:
        self.path = path
        self._busy_timeout_ms = busy_timeout_ms
        self._shared = threading.local()
        """Per thread: its connection, and the rows of its shared read."""
        self._opened: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    def _connection(self) -> sqlite3.Connection:
        """This thread's connection (a `sqlite3` connection is not for two threads at once)."""
        conn: sqlite3.Connection | None = getattr(self._shared, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                f"file:{quote(self.path)}?mode=ro",
                uri=True,
                timeout=self._busy_timeout_ms / 1000,
                isolation_level=None,  # BEGIN is ours
                check_same_thread=False,  # closed by `dispose`, from any thread
            )
            conn.execute(f"PRAGMA busy_timeout={int(self._busy_timeout_ms)}")
            self._shared.conn = conn
            with self._lock:
                self._opened.append(conn)
        return conn

    @contextmanager
    def read(self) -> Iterator[Rows]:
        shared: Rows | None = getattr(self._shared, "rows", None)
        if shared is not None:
            yield shared
            return
        conn = self._connection()
        if conn.in_transaction:  # a read inside a read of this thread's: it joins it
            yield SqliteRows(conn)
            return
        conn.execute("BEGIN")
        try:
            yield SqliteRows(conn)
        finally:
            conn.rollback()  # a read: nothing to keep (and none to end once it failed)

    @contextmanager
    def shared_read(self) -> Iterator[None]:
        if getattr(self._shared, "rows", None) is not None:
            yield
            return
        with self.read() as rows:
            self._shared.rows = rows
            try:
                yield
            finally:
                self._shared.rows = None

    def dispose(self) -> None:
        with self._lock:
            opened, self._opened = self._opened, []
        for conn in opened:
            conn.close()
        self._shared = threading.local()


def read_source(db: Database | ReadSource) -> ReadSource:
    """The reads of `db`: a `ReadSource` as it is, a `Database` through its engine."""
    if hasattr(db, "engine"):
        return EngineReads(cast("Database", db))
    return cast("ReadSource", db)


def writer(db: Database | ReadSource) -> Database:
    """`db` as the `Database` a write (or a read of the daemon's own) needs.

    Raises:
        TypeError: `db` only reads (a `SqliteReads`).
    """
    if not hasattr(db, "engine"):
        raise TypeError(f"{type(db).__name__} only reads; writing needs a Database")
    return cast("Database", db)


__all__ = [
    "EngineReads",
    "EngineRows",
    "ReadSource",
    "Row",
    "Rows",
    "SqliteReads",
    "SqliteRows",
    "as_rows",
    "marks",
    "read_source",
    "scalar",
    "writer",
]
