"""The store's error boundary: every driver error becomes a `triggers` error here.

procrastinate's connector is the model. A unique violation of the ledger's
occurrence identity is `DuplicateOccurrenceError`; a missing table or column is
`SchemaBehindError` (exit 78, run `triggers db upgrade`); a database that cannot
serve (unreachable, locked, connection lost, no pooled connection free in time) is
`StoreUnavailableError` (exit 75, worth retrying); anything else the driver raises
is one `StoreError` (exit 1). Errors of our own code (a `StatementError` wrapping a
naive datetime, say) are bugs and pass through.
"""

from __future__ import annotations

import re
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import TYPE_CHECKING

from triggers.errors import (
    DuplicateOccurrenceError,
    SchemaBehindError,
    StoreError,
    StoreUnavailableError,
    TriggersError,
)

if TYPE_CHECKING:
    from sqlalchemy import exc as sa_exc

# SQLite names the columns of a failed unique constraint, not the constraint.
_SQLITE_UNIQUE = re.compile(r"UNIQUE constraint failed: (.+)")
_PG_UNDEFINED = frozenset({"42P01", "42703"})  # undefined_table, undefined_column
_PG_UNIQUE = "23505"


@cache
def _occurrence_keys() -> frozenset[str]:
    """The constraints that make an occurrence's ledger row unique."""
    import sqlalchemy as sa  # noqa: PLC0415 (a writer's error: loaded already)

    from triggers.store.schema import fires  # noqa: PLC0415

    return frozenset(
        str(constraint.name)
        for constraint in fires.constraints
        if isinstance(constraint, sa.UniqueConstraint)
    )


@cache
def _unique_by_columns() -> dict[tuple[str, tuple[str, ...]], str]:
    import sqlalchemy as sa  # noqa: PLC0415

    from triggers.store.schema import metadata  # noqa: PLC0415

    return {
        (table.name, tuple(column.name for column in constraint.columns)): str(constraint.name)
        for table in metadata.sorted_tables
        for constraint in table.constraints
        if isinstance(constraint, sa.UniqueConstraint | sa.PrimaryKeyConstraint)
    }


@contextmanager
def translated() -> Iterator[None]:
    """Run the body with driver errors translated (see the module doc)."""
    try:
        yield
    except sqlite3.Error as exc:  # the read seam's `sqlite3` (`looms_runtime.dbapi`)
        raise sqlite_error(exc) from exc
    except Exception as exc:
        mapped = _sqlalchemy_error(exc)
        if mapped is None:
            raise
        raise mapped from exc


def sqlite_error(exc: sqlite3.Error) -> TriggersError:
    """What an error of `sqlite3` means, in the words SQLAlchemy's would give it."""
    detail = str(exc).strip()
    if isinstance(exc, sqlite3.OperationalError):
        if "no such table" in detail or "no such column" in detail:
            return SchemaBehindError(
                f"the database schema is incomplete ({detail}); run `triggers db upgrade`"
            )
        return StoreUnavailableError(f"database unavailable: {detail}")
    if isinstance(exc, sqlite3.IntegrityError):
        return StoreError(f"the database refused the write: {detail}")
    return StoreError(f"database error: {type(exc).__name__}: {detail}")


def _sqlalchemy_error(exc: Exception) -> TriggersError | None:
    """SQLAlchemy's error `exc` translated; None for any other (an error can be one of
    SQLAlchemy's only once it is loaded, so this never loads it)."""
    if "sqlalchemy" not in sys.modules:
        return None
    from sqlalchemy import exc as sa_exc  # noqa: PLC0415

    if isinstance(exc, sa_exc.DBAPIError):
        return _translate(exc)
    if isinstance(exc, sa_exc.TimeoutError):
        # The pool had no connection to give within its timeout: every one is busy.
        return StoreUnavailableError(
            "database unavailable: no pooled connection became free in time"
        )
    return None


def _translate(exc: sa_exc.DBAPIError) -> TriggersError:
    from sqlalchemy import exc as sa_exc  # noqa: PLC0415

    detail = str(exc.orig).strip()
    if exc.connection_invalidated:
        return StoreUnavailableError(f"database connection lost: {detail}")
    if _schema_missing(exc, detail):
        return SchemaBehindError(
            f"the database schema is incomplete ({detail}); run `triggers db upgrade`"
        )
    if isinstance(exc, sa_exc.IntegrityError):
        constraint = _constraint(exc, detail)
        if constraint in _occurrence_keys() and _is_unique_violation(exc, detail):
            return DuplicateOccurrenceError(
                "the ledger already holds this occurrence: another writer recorded it",
                constraint=constraint,
            )
        return StoreError(f"the database refused the write: {detail}", constraint=constraint)
    if isinstance(exc, sa_exc.OperationalError):
        return StoreUnavailableError(f"database unavailable: {detail}")
    return StoreError(f"database error: {type(exc.orig).__name__}: {detail}")


def _schema_missing(exc: sa_exc.DBAPIError, detail: str) -> bool:
    from sqlalchemy import exc as sa_exc  # noqa: PLC0415

    if getattr(exc.orig, "sqlstate", None) in _PG_UNDEFINED:
        return True
    # SQLite reports a missing table or column as an operational error.
    return isinstance(exc, sa_exc.OperationalError) and (
        "no such table" in detail or "no such column" in detail
    )


def _is_unique_violation(exc: sa_exc.IntegrityError, detail: str) -> bool:
    return getattr(exc.orig, "sqlstate", None) == _PG_UNIQUE or bool(_SQLITE_UNIQUE.search(detail))


def _constraint(exc: sa_exc.IntegrityError, detail: str) -> str | None:
    diag = getattr(exc.orig, "diag", None)
    name = getattr(diag, "constraint_name", None)
    if name:
        return str(name)
    found = _SQLITE_UNIQUE.search(detail)
    if found is None:
        return None
    # SQLite lists the columns as table.column, comma-separated.
    qualified = [part.strip().partition(".") for part in found.group(1).split(",")]
    table = qualified[0][0]
    return _unique_by_columns().get((table, tuple(column for _, _, column in qualified)))
