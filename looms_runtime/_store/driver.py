"""The boundary between the database driver and the runtime: every driver error is mapped.

Two drivers reach it: SQLAlchemy's (every write, and reads on an engine) and Python's
`sqlite3` under the read seam (`looms_runtime.dbapi.SqliteReads`), mapped alike.
SQLAlchemy is not imported here: an error can only be one of its own once it is loaded.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from looms_runtime.errors import DatabaseError, DatabaseUnavailableError


@contextmanager
def driver_errors() -> Iterator[None]:
    """Turn driver errors into `DatabaseError`s at the runtime's boundary."""
    try:
        yield
    except (sqlite3.OperationalError, sqlite3.InterfaceError) as exc:
        raise DatabaseUnavailableError(f"database unavailable: {exc.__class__.__name__}") from exc
    except sqlite3.Error as exc:
        raise DatabaseError(f"database error: {exc.__class__.__name__}: {exc}") from exc
    except Exception as exc:
        mapped = _sqlalchemy_error(exc)
        if mapped is None:
            raise
        raise mapped from exc


def _sqlalchemy_error(exc: Exception) -> DatabaseError | None:
    if "sqlalchemy" not in sys.modules:
        return None
    from sqlalchemy import exc as sa_exc  # noqa: PLC0415 (loaded already)

    if isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError | sa_exc.TimeoutError):
        return DatabaseUnavailableError(f"database unavailable: {exc.__class__.__name__}")
    if isinstance(exc, sa_exc.DBAPIError):
        if exc.connection_invalidated:
            return DatabaseUnavailableError("database connection lost")
        return DatabaseError(f"database error: {exc.__class__.__name__}: {exc.orig}")
    if isinstance(exc, sa_exc.SQLAlchemyError):
        return DatabaseError(f"database error: {exc}")
    return None
