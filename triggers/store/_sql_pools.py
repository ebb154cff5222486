"""Pools on the SQL store: the lock a claim takes on a pool, and its use counted from
the ledger (the members' active rows), never kept in a counter.

A slot is a live ledger row: `launching` or `launched` of a trigger whose `pool`
column names the pool. It frees when the row settles, and a crashed daemon's
rows stay active while another daemon takes them over, so nothing is handed
back by hand and nothing can leak.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from triggers.store._read_sql import pool_use


def pool_lock_key(name: str) -> int:
    """The PostgreSQL advisory lock of a pool: a signed 64-bit number from its name."""
    digest = hashlib.sha256(f"triggers.pool:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def lock_pools(conn: Connection, names: Collection[str]) -> None:
    """Take the pools' locks for the transaction, in name order (after the trigger
    rows, as every path that takes them does, so no two can deadlock).

    On PostgreSQL a transaction-level advisory lock: two daemons deciding members
    of one pool take turns, and the second counts the first's committed rows
    (READ COMMITTED reads anew at each statement). SQLite needs none: every
    write transaction holds the database's write lock from its BEGIN."""
    if conn.dialect.name != "postgresql":
        return
    for name in sorted(set(names)):
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(pool_lock_key(name))))


__all__ = ["lock_pools", "pool_lock_key", "pool_use"]
