"""`UpstreamRuns` on the memory store's tables (see `_dependents`)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime

from triggers.model import AFTER_KEY_PREFIX, Outcome
from triggers.store._dependents import SettledRun
from triggers.store._memory_rows import Tables


class MemoryUpstreamRuns:
    """`UpstreamRuns` over `Tables`: one writer at a time already, so nothing to serialize."""

    def __init__(self, tables: Tables) -> None:
        self._tables = tables

    def serialize(self, dependent_ids: Sequence[str]) -> None:
        return

    def settled_runs(self, trigger_ids: Collection[str], since: datetime) -> list[SettledRun]:
        wanted = set(trigger_ids)
        rows = sorted(
            (
                row
                for row in self._tables.with_outcome(
                    Outcome.COMPLETED, Outcome.FAILED, Outcome.CANCELLED
                )
                if row.trigger_id in wanted
                and row.run_id is not None
                and row.settled_at is not None
                and row.settled_at >= since
            ),
            key=lambda row: (row.settled_at, row.id),
        )
        return [
            SettledRun(
                trigger_id=row.trigger_id,
                run_id=row.run_id or "",
                outcome=row.outcome.value,
                settled_at=row.settled_at,
            )
            for row in rows
        ]

    def used_runs(self, dependent_ids: Collection[str], since: datetime) -> dict[str, set[str]]:
        wanted = set(dependent_ids)
        used: dict[str, set[str]] = {}
        for row in self._tables.fires.values():
            if row.trigger_id in wanted and row.kind == "after" and row.occurrence_at >= since:
                runs = used.setdefault(row.trigger_id, set())
                runs.update(row.upstream_runs)
                runs.add(row.manual_key.removeprefix(AFTER_KEY_PREFIX))
        return used
