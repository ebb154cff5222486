"""Fixtures of the runtime's suites: a fresh database per test, SQLite and PostgreSQL.

Tables come from `looms_runtime.schema.metadata.create_all`. PostgreSQL comes from the
server named by `TRIGGERS_TEST_PG_URL`; each test creates and drops its own
`looms_<random>` database. Without it the PostgreSQL cases skip, saying why, unless
`CI=true`, where a missing or unreachable server fails them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from looms_runtime import Database, Runtime, schema
from looms_runtime.testing import temporary_postgres_database

PG_ENV = "TRIGGERS_TEST_PG_URL"
# The suite's root conftest takes TRIGGERS_* out of the environment (keeping this one).
PG_URL: str | None = os.environ.get(PG_ENV) or getattr(
    sys.modules.get("tests.conftest"), "PG_URL", None
)

MakeRuntime = Callable[..., Runtime]


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
        pytest.fail(f"{reason} (CI=true: PostgreSQL is required)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def looms_pg_server() -> str:
    if not PG_URL:
        _unavailable(f"{PG_ENV} is not set; PostgreSQL cases need a server URL")
    assert PG_URL is not None
    engine = sa.create_engine(PG_URL, poolclass=sa.pool.NullPool)
    try:
        with engine.connect():
            pass
    except sa.exc.OperationalError as exc:
        _unavailable(f"PostgreSQL at {PG_ENV} is unreachable: {exc.orig}")
    finally:
        engine.dispose()
    return PG_URL


@pytest.fixture
def looms_sqlite_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'looms.sqlite'}"
    engine = sa.create_engine(url)
    schema.metadata.create_all(engine)
    engine.dispose()
    return url


@pytest.fixture
def looms_postgres_url(looms_pg_server: str) -> Iterator[str]:
    with temporary_postgres_database(looms_pg_server) as url:
        yield url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def looms_db_url(request: pytest.FixtureRequest) -> str:
    url: str = request.getfixturevalue(f"looms_{request.param}_url")
    return url


@pytest.fixture
def looms_db(looms_db_url: str) -> Iterator[Database]:
    database = Database(looms_db_url)
    yield database
    leaked = database.checked_out()
    database.dispose()
    assert leaked == 0, f"{leaked} connections were not returned to the pool"


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
