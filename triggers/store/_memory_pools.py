"""Pools on the memory store: a pool's use counted from its tables, as the SQL store
counts it from the ledger (`_sql_pools.py`)."""

from __future__ import annotations

from collections.abc import Collection

from triggers.model import Outcome, Reason
from triggers.store._memory_rows import Tables
from triggers.store.protocol import PoolUse


def pool_use(tables: Tables, names: Collection[str]) -> dict[str, PoolUse]:
    """Each pool's active and waiting rows (see `PoolUse`); the caller holds the lock."""
    counts: dict[str, list[int]] = {name: [0, 0] for name in names}
    if not counts:
        return {}
    rows = tables.triggers
    for row in tables.with_outcome(Outcome.LAUNCHING, Outcome.LAUNCHED, Outcome.BUFFERED):
        trigger = rows.get(row.trigger_id)
        pool = None if trigger is None else trigger.spec.pool
        if trigger is None or pool is None or pool.name not in counts:
            continue
        if row.outcome is not Outcome.BUFFERED:
            counts[pool.name][0] += 1
        elif (
            row.reason is Reason.POOL_FULL
            and trigger.spec.enabled
            and not trigger.paused
            and not trigger.retired
            and trigger.blocked_by is None
        ):
            counts[pool.name][1] += 1
    return {name: PoolUse(active=a, waiting=w) for name, (a, w) in counts.items()}
