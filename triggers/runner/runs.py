"""The runtime's runs as the CLI and the API reach them, through the one error door.

`RunReads` answers what the runtime's reads answer (a `RunReader` for a process that
only looks, the daemon's `Runtime` in the API); `RunControls` adds an operator's
requests (cancel, retry, signal). Every `LoomsError` leaves as a `triggers` error
(`triggers.runner.door`). Nothing here loads the runtime's engine: a `triggers runs
list` stays as light as the reader it wraps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from looms_runtime.records import Event, RunInfo, RunStatusInfo, RunSummary
from triggers.runner.door import runtime_door

if TYPE_CHECKING:
    from looms_runtime import Runtime
    from looms_runtime.db import Database
    from looms_runtime.dbapi import ReadSource
    from looms_runtime.reads import RunReader

__all__ = ["Event", "RunControls", "RunInfo", "RunReads", "RunStatusInfo", "RunSummary"]
"""The runtime's records are named here too: the edges read them, never importing it."""


class RunReads:
    """The runtime's reads of runs (statuses, inspection, listings, the event log).

    Raises (every method): UnknownRunError for an unknown run id, RunRequestError for
    a request that can never succeed, RunnerUnavailableError when the database does
    not answer; any other failure a RunnerError."""

    def __init__(self, source: Runtime | RunReader) -> None:
        self._source = source

    @classmethod
    def of_database(cls, db: Database | ReadSource) -> RunReads:
        """The reads of the runs in `db`, without a runtime (no engine is loaded)."""
        from looms_runtime.reads import RunReader  # noqa: PLC0415 (the reader alone)

        return cls(RunReader(db))

    def statuses(self, run_ids: Sequence[str]) -> dict[str, RunStatusInfo]:
        with runtime_door():
            return self._source.statuses(run_ids)

    def inspect_run(self, run_id: str) -> RunInfo:
        with runtime_door():
            return self._source.inspect_run(run_id)

    def list_runs(self, *, status: str | None = None, limit: int = 100) -> list[RunSummary]:
        with runtime_door():
            return self._source.list_runs(status=status, limit=limit)

    def count_runs(self, *, status: str) -> int:
        with runtime_door():
            return self._source.count_runs(status=status)

    def get_events(
        self, run_id: str, *, from_seq: int = 1, limit: int | None = None
    ) -> list[Event]:
        with runtime_door():
            return self._source.get_events(run_id, from_seq=from_seq, limit=limit)


class RunControls(RunReads):
    """The reads and an operator's requests on a run, on a `Runtime`.

    Raises (besides the reads' errors): RunConflictError when the run's state refuses
    the request (a step that is not stuck, a signal key reused), RunnerUnavailableError
    when a run's queue is full or the runtime is closing."""

    def __init__(self, runtime: Runtime) -> None:
        super().__init__(runtime)
        self._runtime = runtime

    def cancel(self, run_id: str, *, reason: str) -> RunStatusInfo:
        with runtime_door():
            return self._runtime.cancel(run_id, reason=reason)

    def retry_effect(self, run_id: str, effect_id: str) -> RunStatusInfo:
        with runtime_door():
            return self._runtime.retry_effect(run_id, effect_id)

    def signal(
        self, run_id: str, name: str, payload: object, *, idempotency_key: str | None = None
    ) -> RunStatusInfo:
        with runtime_door():
            return self._runtime.signal(run_id, name, payload, idempotency_key=idempotency_key)
