"""The SQL store's transaction handle, as the runners that run on its database see it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from triggers.store.protocol import StoreTransaction

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection


@dataclass(frozen=True, slots=True)
class SqlTransaction(StoreTransaction):
    """An open write transaction of the SQL store's database: the embedded runtime
    starts runs on `connection` within a claim, and hands it back to record run
    changes in the transaction that makes them durable."""

    connection: Connection
