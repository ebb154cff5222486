"""Column types of the runtime's tables, which a host's tables on the same database share."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa


class JsonType(sa.types.TypeDecorator[Any]):
    """JSON, stored as JSONB on PostgreSQL.

    A decorator rather than `with_variant(JSONB())`: the PostgreSQL dialect is imported
    only when a PostgreSQL database is used, not by every command on SQLite."""

    impl = sa.JSON
    cache_ok = True

    def load_dialect_impl(self, dialect: sa.Dialect) -> sa.types.TypeEngine[Any]:
        if dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import JSONB  # noqa: PLC0415

            return dialect.type_descriptor(JSONB())
        return dialect.type_descriptor(sa.JSON())
