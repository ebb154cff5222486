"""The boundary between the database driver and the runtime: every driver error is mapped."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import exc as sa_exc

from looms_runtime.errors import DatabaseError, DatabaseUnavailableError


@contextmanager
def driver_errors() -> Iterator[None]:
    """Turn driver errors into `DatabaseError`s at the runtime's boundary."""
    try:
        yield
    except (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.TimeoutError) as exc:
        raise DatabaseUnavailableError(f"database unavailable: {exc.__class__.__name__}") from exc
    except sa_exc.DBAPIError as exc:
        if exc.connection_invalidated:
            raise DatabaseUnavailableError("database connection lost") from exc
        raise DatabaseError(f"database error: {exc.__class__.__name__}: {exc.orig}") from exc
    except sa_exc.SQLAlchemyError as exc:
        raise DatabaseError(f"database error: {exc}") from exc
