"""One database handle for SQLite and PostgreSQL, with short write transactions.

SQLite allows one writer at a time. Two writers in one process would meet in
SQLite's busy handler, which sleeps in steps of up to 100 ms: a latency cliff for
a scheduler that promises millisecond launches. So every write transaction of a
process goes through one in-process lock first (and `BEGIN IMMEDIATE`, so the
file lock is taken at BEGIN and two transactions cannot both read "free"); other
processes (a CLI command beside the daemon) still wait in `busy_timeout`.
Reads use deferred transactions, which WAL lets run beside the writer.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine, make_url

_WRITE = "looms_write"
# The background checkpoint waits for this many write transactions, or this many of its
# intervals, whichever comes first.
_CHECKPOINT_WRITES = 32
_CHECKPOINT_EVERY = 10


class Database:
    """An engine plus the write discipline of its backend.

    Args:
        url: a SQLAlchemy URL (`sqlite:///path`, `postgresql+psycopg://...`).
        sqlite_synchronous: `FULL` (default: a committed event survives power loss)
            or `NORMAL` (survives a process crash only; faster).
        busy_timeout_ms: how long a SQLite writer waits for another process.
        pool_size: connections kept open.
        checkpoint_interval_s: SQLite only: checkpoint the WAL from a background
            thread this often, instead of inside whichever commit crosses the
            automatic threshold (a latency spike on a scheduler's launch path).
    """

    def __init__(
        self,
        url: str,
        *,
        sqlite_synchronous: str = "FULL",
        busy_timeout_ms: int = 10_000,
        pool_size: int = 8,
        connect_timeout_s: float = 10.0,
        checkpoint_interval_s: float | None = None,
    ) -> None:
        parsed = make_url(url)
        self.url = parsed
        self.is_sqlite = parsed.get_backend_name() == "sqlite"
        self._write_lock = _PriorityLock()
        self._stop = threading.Event()
        self._writes = 0  # write transactions begun: the checkpointer skips when idle
        self._shared = threading.local()  # this thread's `shared_read` connection
        self._checkpointer: threading.Thread | None = None
        if self.is_sqlite:
            background = checkpoint_interval_s is not None and parsed.database not in (
                None,
                "",
                ":memory:",
            )
            self.engine = _sqlite_engine(
                parsed,
                synchronous=sqlite_synchronous,
                busy_timeout_ms=busy_timeout_ms,
                pool_size=pool_size,
                auto_checkpoint=not background,
            )
            if background and checkpoint_interval_s is not None:
                self._checkpointer = threading.Thread(
                    target=self._checkpoint_loop,
                    args=(checkpoint_interval_s,),
                    name="wal-checkpoint",
                    daemon=True,
                )
                self._checkpointer.start()
        else:
            self.engine = sa.create_engine(
                parsed,
                pool_size=pool_size,
                max_overflow=pool_size * 2,
                pool_pre_ping=True,
                connect_args={"connect_timeout": int(connect_timeout_s)},
            )

    @property
    def dialect(self) -> str:
        return self.url.get_backend_name()

    @contextmanager
    def write(self, *, urgent: bool = False) -> Iterator[Connection]:
        """A write transaction: committed on normal exit, rolled back on an exception.

        `urgent` writers (a scheduler's claims, run starts) go ahead of others that
        are waiting for this process's write lock: a launch should not queue behind
        the bookkeeping of runs that already finished.
        """
        joined: Connection | None = getattr(self._shared, "writer", None)
        if joined is not None:
            yield joined  # inside `shared_write` on this thread: its transaction
            return
        self._write_lock.acquire(urgent=urgent)
        try:
            self._writes += 1
            with self.engine.connect() as conn:
                writer = conn.execution_options(**{_WRITE: True})
                with writer.begin():
                    yield writer
        finally:
            self._write_lock.release()

    @contextmanager
    def shared_write(self) -> Iterator[None]:
        """Every `write` (and `read`) inside, on this thread, joins one write
        transaction: committed together when the block ends, rolled back together on
        an exception (an operator's action and its audit entry). Nested: the outer one."""
        if getattr(self._shared, "writer", None) is not None:
            yield
            return
        with self.write() as conn:
            self._shared.writer = conn
            try:
                yield
            finally:
                self._shared.writer = None

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A read transaction (a consistent snapshot on both backends); inside
        `shared_read` on the same thread, that one's."""
        shared: Connection | None = getattr(self._shared, "writer", None) or getattr(
            self._shared, "conn", None
        )
        if shared is not None:
            yield shared  # a shared write's (it sees its own writes), or a shared read's
            return
        with self.engine.connect() as conn:
            reader = conn
            if not self.is_sqlite:
                # PostgreSQL's default READ COMMITTED gives every statement its own
                # snapshot; REPEATABLE READ holds one for the transaction, and a
                # read-only transaction never fails to serialize under it.
                reader = conn.execution_options(isolation_level="REPEATABLE READ")
            with reader.begin():
                yield reader

    @contextmanager
    def shared_read(self) -> Iterator[None]:
        """Every `read` inside, on this thread, joins one read transaction: one
        connection checked out, one BEGIN and one end, one snapshot (on PostgreSQL each
        read is otherwise its own transaction: a checkout's ping, BEGIN, the query, the
        end). Writes inside are their own transactions, and reads after them inside it
        do not see them. Nested: the outer one."""
        if getattr(self._shared, "conn", None) is not None:
            yield
            return
        with self.read() as conn:
            self._shared.conn = conn
            try:
                yield
            finally:
                self._shared.conn = None

    def dispose(self) -> None:
        self._stop.set()
        if self._checkpointer is not None:
            self._checkpointer.join(timeout=5)
            self._checkpointer = None
        self.engine.dispose()

    def _checkpoint_loop(self, interval_s: float) -> None:
        checkpointed, waited = -1, 0
        while not self._stop.wait(interval_s):
            # Nothing written since the last checkpoint: nothing of ours to move. (Other
            # processes' connections keep SQLite's automatic checkpoint.) A trickle of
            # writes (an idle daemon's heartbeats) is moved every few intervals, a burst
            # at the next one: each checkpoint syncs the database file.
            waited += 1
            written = self._writes - checkpointed
            if not written or (written < _CHECKPOINT_WRITES and waited < _CHECKPOINT_EVERY):
                continue
            checkpointed, waited = self._writes, 0
            try:
                with self.engine.connect() as conn:
                    # PASSIVE never waits for (or blocks) readers and writers.
                    conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)")
            except sa.exc.SQLAlchemyError as exc:
                # Imported here: a short-lived command reading the database never logs.
                import structlog  # noqa: PLC0415

                structlog.get_logger().warning("wal_checkpoint_failed", error=str(exc))

    def checked_out(self) -> int:
        """Connections currently checked out of the pool (tests assert none leak)."""
        pool: Any = self.engine.pool
        return int(pool.checkedout()) if hasattr(pool, "checkedout") else 0


class _PriorityLock:
    """A re-entrant lock taken in turn: urgent acquirers before the others waiting,
    each kind in the order it came.

    In turn, not by whoever grabs it first: a thread that releases and at once
    acquires again (the runtime's committer working off a backlog) would otherwise
    take it back before a waiting thread wakes, and starve it; so a scheduler's
    heartbeat at its stop waited minutes behind a committer that had a backlog."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._owner: int | None = None
        self._depth = 0
        self._lines: dict[bool, collections.deque[int]] = {
            True: collections.deque(),
            False: collections.deque(),
        }

    def acquire(self, *, urgent: bool) -> None:
        me = threading.get_ident()
        urgent_line, line = self._lines[True], self._lines[urgent]
        with self._cond:
            if self._owner == me:
                self._depth += 1
                return
            if self._owner is not None or line or (not urgent and urgent_line):
                line.append(me)
                try:
                    while self._owner is not None or line[0] != me or (not urgent and urgent_line):
                        self._cond.wait()
                    line.popleft()
                    self._owner, self._depth = me, 1
                except BaseException:
                    if me in line:
                        line.remove(me)
                    if self._owner == me:
                        self._owner, self._depth = None, 0
                    self._cond.notify_all()  # the next in line may be first now
                    raise
                return
            self._owner = me
            self._depth = 1

    def release(self) -> None:
        with self._cond:
            self._depth -= 1
            if self._depth == 0:
                self._owner = None
                self._cond.notify_all()


def _sqlite_engine(
    url: sa.URL, *, synchronous: str, busy_timeout_ms: int, pool_size: int, auto_checkpoint: bool
) -> Engine:
    if synchronous.upper() not in {"FULL", "NORMAL", "EXTRA"}:
        raise ValueError(f"sqlite synchronous must be FULL, NORMAL or EXTRA, not {synchronous!r}")
    engine = sa.create_engine(
        url,
        # The driver's own transaction handling is switched off; BEGIN is ours.
        connect_args={
            "check_same_thread": False,
            "isolation_level": None,
            "timeout": busy_timeout_ms / 1000,
        },
        pool_size=pool_size,
        max_overflow=pool_size * 2,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        cursor = dbapi_conn.cursor()
        if url.database not in (None, "", ":memory:"):
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA synchronous={synchronous.upper()}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        if not auto_checkpoint:
            cursor.execute("PRAGMA wal_autocheckpoint=0")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        if conn.get_execution_options().get(_WRITE):
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            conn.exec_driver_sql("BEGIN")

    return engine


def copy_rows(
    conn: Connection, table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]
) -> int:
    """Insert `rows` (values in `columns` order, as the driver takes them; JSON as its
    text) into `table` by COPY, in `conn`'s transaction: PostgreSQL only, for rows that
    cannot conflict. A third of the time of psycopg's pipelined `executemany`.

    Its errors are SQLAlchemy's, as those of an execution through `conn` would be: a
    lost server invalidates the connection, and every caller maps them as it maps the
    rest. Returns the number of rows copied.
    """
    import psycopg  # noqa: PLC0415 (PostgreSQL only)

    statement = f"COPY {table} ({', '.join(columns)}) FROM STDIN"
    driver = conn.connection.driver_connection
    assert driver is not None  # noqa: S101 (a live connection of the pool)
    try:
        with driver.cursor() as cursor:
            with cursor.copy(statement) as copy:
                for row in rows:
                    copy.write_row(row)
            return int(cursor.rowcount)
    except psycopg.Error as exc:
        lost = conn.dialect.is_disconnect(exc, driver, None)  # type: ignore[arg-type]  # the DB-API error of this dialect
        if lost:
            conn.invalidate(exc)
        raise sa.exc.DBAPIError.instance(
            statement, None, exc, psycopg.Error, connection_invalidated=lost, dialect=conn.dialect
        ) from exc
