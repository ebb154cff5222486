"""The read seam (`looms_runtime.dbapi`): the store's, the audit log's, the outbox's and
the runtime's reads give the same records on `sqlite3` as on a SQLAlchemy engine, and
opening an SQLite file to read (`triggers.store.reading`) refuses what `open_database`
refuses, in its words."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from looms_runtime.db import Database
from looms_runtime.dbapi import EngineRows, SqliteReads, SqliteRows
from looms_runtime.reads import RunReader
from looms_runtime.schema import events, flows, runs
from tests.factories import spec
from triggers.clock import utc
from triggers.errors import (
    ConfigError,
    DatabaseMissingError,
    SchemaBehindError,
    StoreUnavailableError,
    TriggersError,
)
from triggers.locations import DatabaseLocation
from triggers.model import Outcome
from triggers.store import _read_sql
from triggers.store.audit_log import ActionKind, Actor, AuditEntry, AuditQuery
from triggers.store.database import open_database
from triggers.store.protocol import (
    ClaimRequest,
    Heartbeat,
    HistoryQuery,
    Launch,
    Reserved,
    Settlement,
    TriggerListQuery,
)
from triggers.store.reading import open_for_reading
from triggers.store.schema import alerts, fires, heartbeats, triggers
from triggers.store.sql import SqlTriggerStore
from triggers.store.sql_alerts import SqlAlertOutbox
from triggers.store.sql_audit import SqlAuditLog
from triggers.store.sql_reads import SqlTriggerReads

T0 = utc(2026, 1, 1)


def test_the_column_lists_are_the_tables() -> None:
    assert list(_read_sql.TRIGGER_STATE) == [c.name for c in triggers.c if c.name != "declaration"]
    assert set(_read_sql.FIRE_RECORD) <= {c.name for c in fires.c}
    assert list(_read_sql.HEARTBEAT) == [c.name for c in heartbeats.c]
    assert set(_read_sql.ALERT) == {c.name for c in alerts.c} - {"lease_owner", "lease_expires_at"}


@pytest.fixture
def filled(sqlite_url: str) -> Iterator[tuple[Database, str]]:
    """A migrated SQLite file holding triggers, ledger rows, a heartbeat, an audit entry
    and a run, written through SQLAlchemy as the daemon writes them."""
    db = Database(sqlite_url)
    store = SqlTriggerStore(db)
    store.apply(
        [spec("a", description="Nightly Backup"), spec("b"), spec("c", requires=None)],
        now=T0,
        source_digest="digest-1",
    )
    for minute, trigger_id, state in [(1, "a", "completed"), (2, "a", "failed"), (1, "b", "")]:
        at = T0 + timedelta(minutes=minute)
        [claim] = store.claim(
            [ClaimRequest(trigger_id=trigger_id, occurrence_at=at, expected_revision=1)],
            owner="o",
            host="h",
            now=at,
            lease=timedelta(minutes=5),
        )
        assert isinstance(claim, Reserved), claim
        run_id = f"{trigger_id}-{minute}"
        store.record_launched([Launch(claim=claim, run_id=run_id)], now=at)
        if state:
            store.record_settled(
                [Settlement(trigger_id=trigger_id, run_id=run_id, state=state)],  # type: ignore[arg-type]
                now=at + timedelta(seconds=30),
            )
    store.heartbeat(
        Heartbeat(owner="o", host="h", pid=7, version="1", started_at=T0, last_tick_at=T0)
    )
    SqlAuditLog(db).record(
        AuditEntry(
            at=T0,
            action=ActionKind.PAUSE,
            actor=Actor(host="h", user="u"),
            trigger_id="a",
            note="why",
            changes={"paused": True},
        )
    )
    with db.write() as conn:
        conn.execute(
            flows.insert().values(
                name="noop", version="v", kind="steps", definition={"steps": []}, created_at=1
            )
        )
        conn.execute(
            runs.insert().values(
                run_id="r1",
                flow="noop",
                version="v",
                idempotency_key="k",
                identity_hash="x",
                status="active",
                input={"n": 1},
                env={},
                attributes={"trigger": "b"},
                last_seq=1,
                lease_epoch=0,
                created_at=1000,
                updated_at=1000,
            )
        )
        conn.execute(
            events.insert().values(
                run_id="r1", seq=1, type="run_started", version=1, payload={"a": [1]}, created_at=1
            )
        )
    path = sqlite_url.removeprefix("sqlite:///")
    try:
        yield db, path
    finally:
        db.dispose()


def test_sqlite3_and_sqlalchemy_give_the_same_records(filled: tuple[Database, str]) -> None:
    db, path = filled
    plain = SqliteReads(path)
    try:
        for reads in (SqlTriggerReads(db), SqlTriggerReads(plain)):
            assert reads.list_triggers()  # something to compare
        engine, sqlite = SqlTriggerReads(db), SqlTriggerReads(plain)
        ids = ["a", "b", "c"]
        queries: list[Callable[[SqlTriggerReads], object]] = [
            lambda r: r.applied_digest(),
            lambda r: r.list_triggers(),
            lambda r: r.list_triggers(changed_since=T0, ids=["b", "a"]),
            lambda r: r.list_triggers(after_id="a", limit=1),
            lambda r: r.get_trigger("a"),
            lambda r: r.declared_digests(),
            lambda r: r.maybe_dependents("a"),
            lambda r: r.find_triggers(TriggerListQuery(search="backup", limit=10)),
            lambda r: r.find_triggers(TriggerListQuery(state="failing", limit=10)),
            lambda r: r.find_triggers(TriggerListQuery(state="running", limit=10)),
            lambda r: r.active_runs(),
            lambda r: r.history(HistoryQuery(limit=10)),
            lambda r: r.history(
                HistoryQuery(
                    trigger_id="a", outcomes=frozenset({Outcome.FAILED}), since=T0, limit=5
                )
            ),
            lambda r: r.recent_records(ids, limit=2),
            lambda r: r.recent_outcomes(ids, limit=2),
            lambda r: r.triggers_with(Outcome.LAUNCHED),
            lambda r: r.last_records(),
            lambda r: r.last_settled(),
            lambda r: r.downtime(since=T0, until=T0 + timedelta(days=1)),
            lambda r: r.watermarks(ids),
            lambda r: r.heartbeats(),
            lambda r: r.occurrence_counts(),
            lambda r: r.pool_use(["p"]),
        ]
        for read in queries:
            assert read(engine) == read(sqlite)
        assert engine.history(HistoryQuery(limit=10))  # the ledger rows were read
        audit_engine, audit_sqlite = SqlAuditLog(db), SqlAuditLog(plain)
        query = AuditQuery(trigger_id="a", limit=10)
        assert audit_engine.entries(query) == audit_sqlite.entries(query) != []
        assert audit_engine.revisions("a") == audit_sqlite.revisions("a") != []
        assert SqlAlertOutbox(db).list() == SqlAlertOutbox(plain).list()
        runs_engine, runs_sqlite = RunReader(db), RunReader(plain)
        assert runs_engine.list_runs() == runs_sqlite.list_runs() != []
        assert runs_engine.list_runs(status="active") == runs_sqlite.list_runs(status="active")
        assert runs_engine.count_runs(status="active") == runs_sqlite.count_runs(status="active")
        assert runs_engine.statuses(["r1", "r2"]) == runs_sqlite.statuses(["r1", "r2"])
        assert runs_engine.get_events("r1") == runs_sqlite.get_events("r1") != []
    finally:
        plain.dispose()


def test_the_two_adapters_decode_rows_alike(filled: tuple[Database, str]) -> None:
    db, path = filled
    sql = "SELECT id, occurrence_at, count FROM fires WHERE trigger_id = ? ORDER BY id"
    with db.read() as conn:
        engine = EngineRows(conn)
        through_engine = engine.all(sql, ("a",))
        json_engine = engine.json(engine.all("SELECT input FROM looms_runs")[0][0])
    with sqlite3.connect(path) as conn:
        rows = SqliteRows(conn)
        through_sqlite = rows.all(sql, ("a",))
        json_sqlite = rows.json(rows.all("SELECT input FROM looms_runs")[0][0])
    assert through_engine == through_sqlite
    assert [type(value) for value in through_sqlite[0]] == [int, int, int]
    assert json_engine == json_sqlite == {"n": 1}


def _location(path: Path) -> DatabaseLocation:
    return DatabaseLocation(url=f"sqlite:///{path}", source="test", sqlite_path=path)


def _refusals(path: Path) -> tuple[TriggersError, TriggersError]:
    """What opening `path` to read raises, on sqlite3 and through `open_database`."""
    errors: list[TriggersError] = []
    for opener in (open_for_reading, open_database):
        with pytest.raises(TriggersError) as raised:
            opener(_location(path)).dispose()
        errors.append(raised.value)
    return errors[0], errors[1]


def _same(found: tuple[TriggersError, TriggersError], kind: type[TriggersError]) -> str:
    plain, engine = found
    assert type(plain) is type(engine) is kind
    assert plain.message == engine.message
    assert plain.exit_code == engine.exit_code
    return plain.message


def test_a_missing_file_is_refused_as_open_database_refuses_it(tmp_path: Path) -> None:
    message = _same(_refusals(tmp_path / "none.sqlite"), DatabaseMissingError)
    assert message.startswith("no database at")
    assert not (tmp_path / "none.sqlite").exists()


def test_an_empty_file_holds_no_schema(tmp_path: Path) -> None:
    path = tmp_path / "empty.sqlite"
    sqlite3.connect(path).close()
    assert "holds no triggers schema" in _same(_refusals(path), DatabaseMissingError)


def _with_version(sqlite_url: str, version: str | None) -> Path:
    path = Path(sqlite_url.removeprefix("sqlite:///"))
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM alembic_version")
        if version is not None:
            conn.execute("INSERT INTO alembic_version VALUES (?)", (version,))
    return path


def test_a_newer_schema_is_refused(sqlite_url: str) -> None:
    path = _with_version(sqlite_url, "0099")
    assert "is newer than this release" in _same(_refusals(path), ConfigError)


def test_a_schema_behind_is_refused(sqlite_url: str) -> None:
    path = _with_version(sqlite_url, "0013")
    assert "run `triggers db upgrade`" in _same(_refusals(path), SchemaBehindError)


def test_tables_without_a_version_are_refused(sqlite_url: str) -> None:
    path = _with_version(sqlite_url, None)
    assert "no triggers schema version" in _same(_refusals(path), SchemaBehindError)


def test_a_locked_database_is_unavailable_for_now(sqlite_url: str) -> None:
    path = Path(sqlite_url.removeprefix("sqlite:///"))
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreUnavailableError) as raised:
            open_for_reading(_location(path), busy_timeout_ms=50).dispose()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert raised.value.message == "database unavailable: database is locked"
    assert int(raised.value.exit_code) == 75


def test_reads_on_sqlite3_never_write(filled: tuple[Database, str]) -> None:
    _, path = filled
    source = open_for_reading(_location(Path(path)))
    assert isinstance(source, SqliteReads)
    try:
        with source.read() as rows, pytest.raises(sqlite3.OperationalError, match="readonly"):
            rows.all("DELETE FROM fires")
    finally:
        source.dispose()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM fires").fetchone() == (3,)


def test_a_read_only_source_refuses_a_write_by_name(filled: tuple[Database, str]) -> None:
    _, path = filled
    source = SqliteReads(path)
    try:
        with pytest.raises(TypeError, match="SqliteReads only reads"):
            SqlAuditLog(source).record(
                AuditEntry(at=T0, action=ActionKind.PAUSE, actor=Actor(host="h", user="u"))
            )
    finally:
        source.dispose()


def test_a_read_inside_a_read_joins_it_and_each_thread_has_its_own(
    filled: tuple[Database, str],
) -> None:
    _, path = filled
    source = SqliteReads(path)
    found: list[object] = []
    try:
        with source.read() as outer, source.read() as inner:
            found.append(inner.all("SELECT count(*) FROM fires")[0][0])
            found.append(outer.all("SELECT count(*) FROM fires")[0][0])

            def elsewhere() -> None:
                with source.read() as rows:
                    found.append(rows.all("SELECT count(*) FROM fires")[0][0])

            thread = threading.Thread(target=elsewhere)
            thread.start()
            thread.join(30)
    finally:
        source.dispose()
    assert found == [3, 3, 3]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT id FROM fires WHERE trigger_id LIKE 'a%'",
        "SELECT id FROM fires WHERE trigger_id = 'why?'",
    ],
)
def test_read_sql_that_would_fail_on_postgresql_is_refused_on_sqlite_too(
    filled: tuple[Database, str], sql: str
) -> None:
    _, path = filled
    source = SqliteReads(path)
    try:
        with source.read() as rows, pytest.raises(ValueError, match="read query"):
            rows.all(sql)
    finally:
        source.dispose()


@pytest.mark.parametrize("document", [3, 2.5, "3", True, None, [1, "a"], {"n": 1}])
def test_a_json_column_decodes_bare_numbers_as_sqlalchemy_does(
    tmp_path: Path, document: object
) -> None:
    # SQLite gives a JSON column numeric affinity: the text `3` is stored as 3.
    path = tmp_path / "json.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE j (v JSON)")
        conn.execute("INSERT INTO j (v) VALUES (?)", (json.dumps(document),))
    with sqlite3.connect(path) as conn:
        rows = SqliteRows(conn)
        assert rows.json(rows.all("SELECT v FROM j")[0][0]) == document
