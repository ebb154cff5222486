"""The one fixture stack of the suite: clean settings environment, SQLite and PostgreSQL.

PostgreSQL is real: `TRIGGERS_TEST_PG_URL` names a server (CI sets it). Tests
get their own database, copied from a template and dropped after: the trigger
store's template is migrated with Alembic, the runtime's (`looms_*` fixtures, for
the runtime's own suites) holds only the runtime's tables. Without the variable the
PostgreSQL tests skip with a reason; with `CI=true` an unreachable server fails the
run instead.
"""

from __future__ import annotations

import gc
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from looms_runtime import Runtime
from looms_runtime import schema as looms_schema
from looms_runtime.db import Database
from tests.factories import MakeRuntime
from triggers.store.memory import MemoryTriggerStore
from triggers.store.protocol import TriggerStore
from triggers.store.schema import metadata as store_metadata
from triggers.store.sql import SqlTriggerStore

PG_URL = os.environ.get("TRIGGERS_TEST_PG_URL")
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

# The test run's own variables (`TRIGGERS_TEST_*`: the server's URL, the fault tests'
# options) stay: xdist workers inherit this environment, and settings ignore a name
# they do not declare.
for _name in list(os.environ):
    if _name.startswith("TRIGGERS_") and not _name.startswith("TRIGGERS_TEST_"):
        del os.environ[_name]
# A host's service environment file must not leak into the tests' CLI calls.
os.environ["TRIGGERS_ENV_FILE"] = ""


def _pg_admin() -> sa.Engine:
    if not PG_URL:
        if IN_CI:
            pytest.fail("CI=true but TRIGGERS_TEST_PG_URL is not set: PostgreSQL tests must run")
        pytest.skip(
            "PostgreSQL tests need TRIGGERS_TEST_PG_URL (e.g. postgresql+psycopg://postgres@127.0.0.1:5432/test)"
        )
    engine = sa.create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("select 1"))
    except sa.exc.OperationalError as exc:
        engine.dispose()
        if IN_CI:
            pytest.fail(f"PostgreSQL at {PG_URL} is unreachable: {exc.orig}")
        pytest.skip(f"PostgreSQL at {PG_URL} is unreachable")
    return engine


def _worker() -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


@pytest.fixture(autouse=True)
def _collector_as_found() -> Iterator[None]:
    """Each test leaves the garbage collector as it found it.

    A daemon run in-process freezes what its start-up made (`gc.freeze`) and leaves
    it frozen; without this, a later test in the same worker met a collector with
    hundreds of thousands of frozen objects (and a simulation that leaves frozen what
    the process froze)."""
    enabled, frozen = gc.isenabled(), gc.get_freeze_count()
    yield
    if frozen == 0 and gc.get_freeze_count() > 0:
        gc.unfreeze()
    if enabled and not gc.isenabled():
        gc.enable()


@pytest.fixture(scope="session")
def pg_admin() -> Iterator[sa.Engine]:
    engine = _pg_admin()
    yield engine
    engine.dispose()


def create_pg_database(admin: sa.Engine, *, template: str | None = None) -> str:
    """A fresh database on the test server; returns its URL."""
    name = f"trg_{_worker()}_{uuid.uuid4().hex[:10]}"
    with admin.connect() as conn:
        clause = f" TEMPLATE {template}" if template else ""
        conn.execute(sa.text(f'CREATE DATABASE "{name}"{clause}'))
    assert PG_URL is not None
    return make_url(PG_URL).set(database=name).render_as_string(hide_password=False)


def drop_pg_database(admin: sa.Engine, url: str) -> None:
    name = make_url(url).database
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(scope="session")
def pg_template(pg_admin: sa.Engine) -> Iterator[str]:
    """A migrated database that per-test databases are copied from."""
    from triggers.store.migrate import upgrade

    url = create_pg_database(pg_admin)
    db = Database(url)
    upgrade(db)
    db.dispose()
    yield str(make_url(url).database)
    drop_pg_database(pg_admin, url)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite file that per-test databases are copied from."""
    from triggers.store.migrate import upgrade

    path = tmp_path_factory.mktemp("sqlite-template") / "template.sqlite"
    db = Database(f"sqlite:///{path}")
    upgrade(db)
    with db.engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    db.dispose()
    return path


@pytest.fixture
def sqlite_url(sqlite_template: Path, tmp_path: Path) -> str:
    path = tmp_path / "triggers.sqlite"
    shutil.copyfile(sqlite_template, path)
    return f"sqlite:///{path}"


@pytest.fixture
def postgres_url(pg_admin: sa.Engine, pg_template: str) -> Iterator[str]:
    url = create_pg_database(pg_admin, template=pg_template)
    yield url
    drop_pg_database(pg_admin, url)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest) -> str:
    """A migrated, empty database of each engine."""
    return str(request.getfixturevalue(f"{request.param}_url"))


@pytest.fixture(scope="module")
def shared_postgres_url(pg_admin: sa.Engine, pg_template: str) -> Iterator[str]:
    url = create_pg_database(pg_admin, template=pg_template)
    yield url
    drop_pg_database(pg_admin, url)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def reused_database(request: pytest.FixtureRequest) -> Iterator[Database]:
    """An empty, migrated trigger store of each engine, for tests that only touch its
    tables: on PostgreSQL one database per module (and worker) is emptied before each
    test, since creating a database costs more than most such tests."""
    yield from _emptied_database(request, request.param)


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_store(request: pytest.FixtureRequest) -> Iterator[TriggerStore]:
    """Every trigger store: the memory store, and the SQL store on each engine (as
    `reused_database`), for the contract suites."""
    if request.param == "memory":
        yield MemoryTriggerStore()
        return
    for db in _emptied_database(request, request.param):
        yield SqlTriggerStore(db)


def _emptied_database(request: pytest.FixtureRequest, engine: str) -> Iterator[Database]:
    if engine == "sqlite":
        url = str(request.getfixturevalue("sqlite_url"))
    else:
        url = str(request.getfixturevalue("shared_postgres_url"))
    # NORMAL: these tests are about decisions, not about surviving a power cut.
    db = Database(url, sqlite_synchronous="NORMAL")
    if engine == "postgres":
        names = ", ".join(table.name for table in store_metadata.sorted_tables)
        with db.write() as conn:
            conn.execute(sa.text(f"TRUNCATE {names} RESTART IDENTITY"))
    yield db
    leaked = db.checked_out()
    db.dispose()
    assert leaked == 0, f"{leaked} database connections were not returned to the pool"


@pytest.fixture
def database(database_url: str) -> Iterator[Database]:
    db = Database(database_url)
    yield db
    leaked = db.checked_out()
    db.dispose()
    assert leaked == 0, f"{leaked} database connections were not returned to the pool"


# -- the runtime's own suites: its tables only, no migrations --------------------------


@pytest.fixture(scope="session")
def looms_pg_template(pg_admin: sa.Engine) -> Iterator[str]:
    """A database holding the runtime's tables, that per-test databases are copied from."""
    url = create_pg_database(pg_admin)
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    looms_schema.metadata.create_all(engine)
    engine.dispose()
    yield str(make_url(url).database)
    drop_pg_database(pg_admin, url)


@pytest.fixture
def looms_sqlite_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'looms.sqlite'}"
    engine = sa.create_engine(url)
    looms_schema.metadata.create_all(engine)
    engine.dispose()
    return url


@pytest.fixture
def looms_postgres_url(pg_admin: sa.Engine, looms_pg_template: str) -> Iterator[str]:
    url = create_pg_database(pg_admin, template=looms_pg_template)
    yield url
    drop_pg_database(pg_admin, url)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def looms_db_url(request: pytest.FixtureRequest) -> str:
    """A database of each engine holding the runtime's (empty) tables."""
    return str(request.getfixturevalue(f"looms_{request.param}_url"))


@pytest.fixture
def looms_db(looms_db_url: str) -> Iterator[Database]:
    db = Database(looms_db_url)
    yield db
    leaked = db.checked_out()
    db.dispose()
    assert leaked == 0, f"{leaked} database connections were not returned to the pool"


@pytest.fixture
def make_runtime(looms_db: Database) -> Iterator[MakeRuntime]:
    """Runtimes on the test's database, closed at teardown."""
    made: list[Runtime] = []

    def make(**options: Any) -> Runtime:
        options.setdefault("owner", f"test-{len(made)}")
        runtime = Runtime(looms_db, **options)
        made.append(runtime)
        return runtime

    yield make
    for runtime in reversed(made):
        runtime.close(timeout=5)
