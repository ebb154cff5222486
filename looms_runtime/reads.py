"""Reading runs without a runtime: for a process that only looks at them (`triggers
status`, `triggers runs list`), so it never loads the engine, the effects or the
workers that running flows takes.

`RunReader` answers exactly what `Runtime` answers through the same methods
(`RuntimeReads`); it holds no lease, starts no thread and writes nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from looms_runtime._operations.reads import RuntimeReads

if TYPE_CHECKING:
    from looms_runtime.db import Database
    from looms_runtime.dbapi import ReadSource

__all__ = ["RunReader"]


class RunReader(RuntimeReads):
    """The runtime's reads (statuses, inspection, listings, the event log) on `db`.

    Only `inspect_run` and `replay_to` fold a run; they load the fold, which logs a
    snapshot it cannot use (`snapshot_ignored`), so a caller that keeps stdout for its
    results configures logging before calling them."""

    def __init__(self, db: Database | ReadSource) -> None:
        self._db = db
