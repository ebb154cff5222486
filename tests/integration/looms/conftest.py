"""The runtime's fixtures (see `fixtures.py`), for the integration suite."""

from tests.contract.looms.fixtures import (
    looms_db,
    looms_db_url,
    looms_pg_server,
    looms_postgres_url,
    looms_sqlite_url,
    make_runtime,
)

__all__ = [
    "looms_db",
    "looms_db_url",
    "looms_pg_server",
    "looms_postgres_url",
    "looms_sqlite_url",
    "make_runtime",
]
