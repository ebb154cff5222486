"""The runtime's reads, for `Runtime` (whose class carries them as its public API)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from looms_runtime._operations.queries import (
    count,
    events_of,
    inspect,
    project,
    read_statuses,
    state_at,
    summaries,
)
from looms_runtime.records import Event, RunInfo, RunStatusInfo, RunSummary

if TYPE_CHECKING:
    from looms_runtime.db import Database
    from looms_runtime.dbapi import ReadSource

S = TypeVar("S")


class RuntimeReads:
    """Reads of the runs in the runtime's database; none of them needs the runtime started."""

    _db: Database | ReadSource

    def statuses(self, run_ids: Sequence[str]) -> dict[str, RunStatusInfo]:
        """The public status of each run; unknown ids are `missing`.

        A run purged by retention still answers its final status (from its tombstone).
        """
        return read_statuses(self._db, run_ids)

    def inspect_run(self, run_id: str) -> RunInfo:
        """A run's header and its outstanding effects (attempt, status, deadline, last error).

        Raises:
            RunNotFoundError: no run has that id.
        """
        return inspect(self._db, run_id)

    def list_runs(self, *, status: str | None = None, limit: int = 100) -> list[RunSummary]:
        """The newest runs first; `status` is a public status or `parked`."""
        return summaries(self._db, status=status, limit=limit)

    def count_runs(self, *, status: str) -> int:
        """How many runs have `status` (a public status or `parked`), purged ones aside."""
        return count(self._db, status=status)

    def get_events(
        self, run_id: str, *, from_seq: int = 1, limit: int | None = None
    ) -> list[Event]:
        """A run's recorded events from `from_seq` on.

        On a log trimmed behind a snapshot (`trim_events`), events before
        `inspect_run(...).first_seq` are gone and the answer starts there.

        Raises:
            RunNotFoundError: no run has that id.
        """
        return events_of(self._db, run_id, from_seq=from_seq, limit=limit)

    def replay_to(self, run_id: str, seq: int) -> dict[str, Any]:
        """The run's folded state right after event `seq` (to debug a history).

        Raises:
            RunNotFoundError: no run has that id.
            HistoryTrimmedError: `seq` lies before the kept snapshot of a trimmed log.
        """
        return state_at(self._db, run_id, seq)

    def project(self, run_id: str, reducer: Callable[[S, Event], S], initial: S) -> S:
        """Fold a run's events through `reducer`, oldest first (a read model of the log).

        Raises:
            RunNotFoundError: no run has that id.
            HistoryTrimmedError: the log was trimmed; a projection needs all of it.
        """
        return project(self.get_events(run_id), run_id, reducer, initial)
