"""Group commit: one thread owns the runtime's hot writes and batches them.

Workers of many runs queue their appends (and callers their start batches); the
committer drains whatever is queued into ONE write transaction, commits once, and
resolves every waiter. While a transaction commits, the next batch accumulates, so
the commit rate adapts to the load with no timer and no added latency when idle.

Each append is fenced on its own row, so a lost fence fails that append only. A
transaction that raises (a driver error) is retried job by job, so one poisoned
job cannot fail its neighbours.

A run's status changes (it parks, leaves `parked`, settles) are handed to the
host's transition hook inside the same transaction, so what the host records of
them (a scheduler's ledger) is durable exactly when the run's own events are. The
hook runs in a savepoint: if it fails, its writes are rolled back and logged, and
the runs' events still commit.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

import structlog
from sqlalchemy.engine import Connection

from looms_runtime._store.driver import driver_errors
from looms_runtime._store.rows import AppendJob, StartJob
from looms_runtime._store.starts import insert_runs
from looms_runtime._store.writes import append_many
from looms_runtime.db import Database
from looms_runtime.errors import DatabaseUnavailableError, RuntimeClosedError
from looms_runtime.records import RunTransition

log = structlog.get_logger()

MAX_APPENDS_PER_TRANSACTION = 512
MAX_STARTS_PER_TRANSACTION = 2000

_Item = tuple[AppendJob | StartJob, "Future[Any]"]
TransitionHook = Callable[[Connection, Sequence[RunTransition]], None]
"""Called inside the committing transaction with the status changes it holds."""


class Committer:
    """The runtime's writer thread (see the module docstring)."""

    def __init__(
        self, db: Database, *, trim: bool = False, hook: TransitionHook | None = None
    ) -> None:
        self._db = db
        self._trim = trim
        self._hook = hook
        self._cond = threading.Condition()
        self._queue: deque[_Item] = deque()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="looms-committer", daemon=True)
        self._thread.start()

    def submit(self, job: AppendJob | StartJob) -> Future[Any]:
        """Queue a job; the future gets its result once the transaction holding it commits.

        Without a running committer thread (a runtime that was never started), the job
        is committed on the caller's thread instead; so is a start, which already is a
        batch and is on a scheduler's launch path: handing it to the committer thread
        and back cost a thread switch each way.
        """
        future: Future[Any] = Future()
        with self._cond:
            if self._stopping:
                raise RuntimeClosedError("the runtime is closed")
            if self._thread is not None and not isinstance(job, StartJob):
                self._queue.append((job, future))
                self._cond.notify()
                return future
        self._commit([(job, future)])
        return future

    def stop(self, timeout_s: float) -> None:
        """Commit what is queued, then end the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopping:
                    self._cond.wait()
                if not self._queue:
                    return
                batch = self._take()
            self._commit(batch)

    def _take(self) -> list[_Item]:
        if any(isinstance(job, StartJob) for job, _ in self._queue):
            return self._take_starts()
        batch: list[_Item] = []
        appends = starts = 0
        while self._queue:
            job = self._queue[0][0]
            if isinstance(job, AppendJob):
                if appends >= MAX_APPENDS_PER_TRANSACTION:
                    break
                appends += 1
            else:
                if starts and starts + len(job.runs) > MAX_STARTS_PER_TRANSACTION:
                    break
                starts += len(job.runs)
            batch.append(self._queue.popleft())
        return batch

    def _take_starts(self) -> list[_Item]:
        """Starts go first, in a transaction of their own: a launch waits for no append."""
        batch: list[_Item] = []
        rest: deque[_Item] = deque()
        starts = 0
        for item in self._queue:
            job = item[0]
            if isinstance(job, StartJob) and (
                not starts or starts + len(job.runs) <= MAX_STARTS_PER_TRANSACTION
            ):
                batch.append(item)
                starts += len(job.runs)
            else:
                rest.append(item)
        self._queue = rest
        return batch

    def _commit(self, batch: Sequence[_Item]) -> None:
        urgent = any(isinstance(job, StartJob) for job, _ in batch)
        try:
            with driver_errors(), self._db.write(urgent=urgent) as conn:
                results = _execute(conn, [job for job, _ in batch], trim=self._trim)
                self._transitions(conn, [job for job, _ in batch], results)
        except DatabaseUnavailableError as exc:
            # The database itself failed: every job would fail alone too, and retrying
            # each would hold the writer for a connect timeout per job.
            for _, future in batch:
                future.set_exception(exc)
            return
        except Exception as exc:  # noqa: BLE001 - every waiter must be answered
            if len(batch) > 1:
                log.warning("group_commit_split", jobs=len(batch), error=repr(exc))
                for item in batch:
                    self._commit([item])
                return
            batch[0][1].set_exception(exc)
            return
        for (_, future), result in zip(batch, results, strict=True):
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)

    def _transitions(
        self, conn: Connection, jobs: Sequence[AppendJob | StartJob], results: Sequence[Any]
    ) -> None:
        if self._hook is None:
            return
        changed = [
            job.transition
            for job, result in zip(jobs, results, strict=True)
            if isinstance(job, AppendJob)
            and job.transition is not None
            and not isinstance(result, BaseException)
        ]
        if not changed:
            return
        savepoint = conn.begin_nested()
        try:
            self._hook(conn, changed)
        except Exception as exc:  # noqa: BLE001 - the host's failure must not lose the runs'
            savepoint.rollback()
            log.error("transition_hook_failed", runs=len(changed), error=repr(exc))
            return
        savepoint.commit()


def _execute(conn: Connection, jobs: Sequence[AppendJob | StartJob], *, trim: bool) -> list[Any]:
    """Run a batch inside one transaction; results come back in job order."""
    results: list[Any] = [None] * len(jobs)
    starts = [(i, job) for i, job in enumerate(jobs) if isinstance(job, StartJob)]
    if starts:
        found = iter(insert_runs(conn, [run for _, job in starts for run in job.runs]))
        for i, job in starts:
            results[i] = [next(found) for _ in job.runs]
    appends = [(i, job) for i, job in enumerate(jobs) if isinstance(job, AppendJob)]
    if appends:
        for (i, _), outcome in zip(
            appends, append_many(conn, [job for _, job in appends], trim=trim), strict=True
        ):
            results[i] = outcome
    return results
