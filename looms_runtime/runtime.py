"""The embedded durable runtime: the public entry point of `looms_runtime`."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import structlog
from sqlalchemy.engine import Connection

from looms_runtime._clock import duration_ms, monotonic, to_ms, utc_now
from looms_runtime._effects.launch import EffectRunner
from looms_runtime._effects.workers import WorkerLimits
from looms_runtime._engine.drive import Engine
from looms_runtime._engine.jobs import EngineConfig
from looms_runtime._engine.maintenance import Maintenance, Retention
from looms_runtime._engine.recovery import resume
from looms_runtime._operations.requests import RuntimeRequests
from looms_runtime._operations.start import start_batch, start_within
from looms_runtime._store.committer import Committer, TransitionHook
from looms_runtime._store.driver import driver_errors
from looms_runtime._store.loading import Prestarted
from looms_runtime._store.reads import own_active_runs
from looms_runtime._store.registry import FlowRegistry
from looms_runtime._store.retention import purge_settled
from looms_runtime._workers.actors import DRIVE, REFRESH, Actors, Op
from looms_runtime._workers.pool import ThreadPool
from looms_runtime._workers.timers import TimerQueue
from looms_runtime._workers.waiters import SettleWaiters
from looms_runtime.db import Database
from looms_runtime.errors import LoomsError, RuntimeClosedError
from looms_runtime.records import (
    RunHandle,
    RunSettled,
    RunStatusInfo,
    StartRequest,
)

log = structlog.get_logger()
S = TypeVar("S")


class Runtime(RuntimeRequests):
    """Durable runs of registered flows, recorded as event logs in the database.

    Args:
        db: the database handle (shared with the host's own tables).
        owner: this runtime's identity in run leases; unique among live processes.
        env_prefix: prefix of the variables a command step gets (`{prefix}RUN_ID`, ...).
        step_environment: the environment command steps start from (then their own
            `env`, the run's and the runtime's variables), and the whole environment
            of the supervisor and the worker processes, so a step sees nothing of this
            process's environment beyond it. None: this process's environment.
        clock: source of every recorded instant (aware UTC); defaults to the system clock.
        workers: threads that drive runs (effects run on threads of their own).
        snapshot_every: events between snapshots of a run's folded state.
        lease: how long this owner's runs stay its own without a heartbeat.
        max_pending_operations: bound of each run's queue of external requests.
        output_limit_bytes: bytes kept of each stream of a command's output (the tail).
        on_settled: called once a run's final event is durable (a hint: `statuses` is the truth).
        transition_hook: called with a connection INSIDE the transaction that makes a
            run's status change durable (it parks, leaves `parked`, or settles), with
            those changes: what it writes there commits with the runs' own events, so a
            host's record of them (a scheduler's ledger) is never stale. It runs in a
            savepoint; if it raises, its writes are rolled back, the error is logged,
            and the runs' events still commit.
        trim_events: delete the events behind each snapshot (`get_events` then starts
            at the oldest kept event, `replay_to` at the snapshot).
        retention: purge settled runs this long after they settled (hourly, in
            batches); each keeps its header row as a tombstone of its key and status.
        tombstone_retention: delete tombstones this long after their purge (None:
            never; a key whose tombstone is gone may start a new run).
        attempts_dir: where command attempts keep their directories (one per attempt,
            removed once its outcome is in the log). Command steps run under a
            supervisor process that outlives this one; a later runtime on the same
            host with the same directory adopts them, or records what they did. None:
            a temporary directory (attempts then cannot be adopted after a restart).
        log_attributes: names of run attributes (`StartRequest.attributes`) bound to
            every log line about the run, next to its `run_id`: a host that starts
            runs for its own entities (a scheduler's `trigger_id`) finds them by it.
        worker_processes: run Python steps and Python flows' sessions in this many
            worker processes (started when first needed, kept warm, replaced when one
            dies), so that their code never runs in this process; 0: on this
            process's own threads.
        worker_max_rss_bytes: a worker whose resident memory passed this after a task
            is replaced (None: never for that).
        worker_max_tasks: a worker that ran this many tasks is replaced (None: never).
    """

    def __init__(
        self,
        db: Database,
        *,
        owner: str,
        env_prefix: str = "LOOMS_",
        step_environment: Mapping[str, str] | None = None,
        clock: Callable[[], datetime] | None = None,
        workers: int = 16,
        snapshot_every: int = 200,
        lease: timedelta = timedelta(seconds=30),
        max_pending_operations: int = 256,
        output_limit_bytes: int = 65536,
        on_settled: Callable[[RunSettled], None] | None = None,
        trim_events: bool = False,
        retention: timedelta | None = None,
        tombstone_retention: timedelta | None = None,
        attempts_dir: Path | str | None = None,
        transition_hook: TransitionHook | None = None,
        log_attributes: Sequence[str] = (),
        worker_processes: int = 0,
        worker_max_rss_bytes: int | None = None,
        worker_max_tasks: int | None = None,
    ) -> None:
        if not owner:
            raise ValueError("owner must be a non-empty string")
        if worker_processes < 0:
            raise ValueError("worker_processes must be 0 (threads) or more")
        if workers < 1 or max_pending_operations < 1 or lease <= timedelta(0):
            raise ValueError("workers, max_pending_operations and lease must be positive")
        self._db = db
        self._owner = owner
        self._clock = clock or utc_now
        self._flows = FlowRegistry(db)
        self._committer = Committer(db, trim=trim_events, hook=transition_hook)
        self._actors = Actors(
            ThreadPool("looms-worker", workers), max_pending=max_pending_operations
        )
        self._timers = TimerQueue(self._now_ms, lambda run_id: self._actors.submit(run_id, DRIVE))
        limits = None
        if worker_processes:
            limits = WorkerLimits(
                processes=worker_processes,
                max_rss_bytes=worker_max_rss_bytes,
                max_tasks=worker_max_tasks,
            )
        self._runner = EffectRunner(
            attempts_dir=None if attempts_dir is None else Path(attempts_dir),
            workers=limits,
            clock_ms=self._now_ms,
            environment=None if step_environment is None else dict(step_environment),
        )
        self._waiters = SettleWaiters()
        self._state = "new"
        self._engine = Engine(
            db=db,
            config=EngineConfig(
                owner=owner,
                env_prefix=env_prefix,
                output_limit_bytes=output_limit_bytes,
                snapshot_every=snapshot_every,
                log_attributes=tuple(log_attributes),
            ),
            clock_ms=self._now_ms,
            committer=self._committer,
            actors=self._actors,
            timers=self._timers,
            runner=self._runner,
            flows=self._flows,
            on_settled=on_settled,
            settled_notify=self._waiters.notify,
        )
        self._actors.handler = self._engine.handle
        self._maintenance = Maintenance(
            db=db,
            owner=owner,
            clock_ms=self._now_ms,
            lease_ms=duration_ms(lease),
            drive=self._drive_many,
            known=self._actors.known,
            retention=Retention.of(retention, tombstone_retention),
        )

    def _now_ms(self) -> int:
        return to_ms(self._clock())

    def _drive_many(self, run_ids: list[str], refresh: bool) -> None:
        if refresh:  # requests recorded elsewhere: the worker re-reads the run's inbox
            self._actors.submit_many([(run_id, REFRESH) for run_id in run_ids])
        else:
            self._resume(run_ids)

    def _resume(self, run_ids: list[str]) -> None:
        resume(
            self._db,
            self._flows,
            self._actors,
            run_ids,
            owner=self._owner,
            running=lambda: self._state == "started",
        )

    def _check_open(self) -> None:
        if self._state == "closed":
            raise RuntimeClosedError("the runtime is closed")

    def start(self) -> None:
        """Start the background threads and recover.

        Our own unsettled runs and those of owners whose lease lapsed are claimed and
        resumed: timers are re-armed, effects found in flight are marked ambiguous (and
        re-run only when their step is idempotent), completed steps never run again.

        Raises:
            DatabaseUnavailableError: the database cannot be reached.
        """
        self._check_open()
        if self._state == "started":
            return
        claimed = self._maintenance.claim_at_start()
        self._committer.start()
        self._timers.start()
        self._maintenance.start()
        self._state = "started"
        log.info("runtime_started", owner=self._owner, recovered=len(claimed))
        if claimed:
            threading.Thread(
                target=self._resume, args=(claimed,), name="looms-resume", daemon=True
            ).start()

    def close(self, *, timeout: float = 10.0) -> None:
        """Stop taking work; never cancels a run (runs stay durable and resume on the next start).

        Command attempts run on under their supervisors, not waited for: the next
        runtime on this host adopts them. Python and HTTP steps, which run in this
        process, are given `timeout` seconds to report their outcome; one that runs
        longer is found in flight (ambiguous) by the next start. The lease is handed
        back when nothing of ours runs on, so another daemon may resume our runs at once.
        """
        if self._state == "closed":
            return
        deadline = monotonic() + timeout

        def remaining() -> float:
            return max(0.0, deadline - monotonic())

        started = self._state == "started"
        self._state = "closed"
        self._engine.closing = True
        self._maintenance.stop(remaining())
        while self._actors.busy_effects(detachable=False) and remaining() > 0:
            self._waiters.pause(0.05)
        self._timers.stop(remaining())
        self._actors.shutdown(remaining())
        self._runner.close(remaining())
        self._committer.stop(remaining())
        if started and self._actors.busy_effects() == 0:
            # Handing the lease back lets another daemon resume our runs without waiting.
            self._maintenance.release()
        log.info("runtime_closed", owner=self._owner)

    def refresh_workers(self) -> bool:
        """Replace the worker processes when a module one of them imported changed on
        disk (call it after new code was deployed, as a reload does); True when they
        were replaced. Tasks running now finish in their worker first."""
        workers = self._runner.workers
        return workers.refresh() if workers is not None else False

    def register_flow(self, name: str, definition: Mapping[str, Any]) -> str:
        """Store a flow definition under its version (idempotent) and return the version.

        The version is the first 16 hex chars of the sha256 of the definition's
        canonical JSON; a run finishes on the version it started with.

        Raises:
            InvalidFlowError: the definition is invalid (`details["problems"]` says why).
        """
        self._check_open()
        return self._flows.register(name, definition, now_ms=self._now_ms())

    def start_runs(self, requests: Sequence[StartRequest]) -> list[RunHandle | LoomsError]:
        """Start a batch of runs in one transaction; return once the starts are durable.

        Each request is idempotent by its key: an existing run with the same flow,
        version, input and env is returned with `created=False`. Execution is
        scheduled on the worker pool; this call does not wait for it.

        Returns:
            Per request, in order: its handle, or `StartConflictError` (the key names a
            run with another identity; `KeyPurgedError` when that run was purged by
            retention), `UnknownFlowError` or `InvalidRequestError`.

        Raises:
            DatabaseUnavailableError: the batch could not be committed (none of it is).
        """
        self._check_open()
        return start_batch(
            requests,
            kinds=self._flows.kinds((r.flow, r.version) for r in requests),
            committer=self._committer,
            owner=self._owner,
            now_ms=self._now_ms(),
            seed=self._seed,
        )

    def start_within(
        self, conn: Connection, requests: Sequence[StartRequest]
    ) -> tuple[list[RunHandle | LoomsError], Callable[[], None]]:
        """Start a batch of runs inside the caller's transaction on this runtime's database.

        The runs (with their first attempts dispatched) commit or roll back with the
        caller's own writes, in one commit: a host recording that it launched them (a
        scheduler's ledger) can never disagree with the runtime about whether they
        exist. Call the returned function once that transaction committed: it hands the
        runs to the workers, which start their first attempts at once. (Should the
        caller die first, the stranded-run sweep and recovery find the runs.)

        A run whose flow has nothing to run (no steps) is completed in the same commit,
        its `run_completed` after its `run_started`, and its handle says `completed`: no
        worker touches it, and neither `on_settled` nor `transition_hook` hears of it, for
        the caller records it in the transaction it commits in.

        Returns:
            Per request, as `start_runs`, and the function to call after the commit.
        """
        self._check_open()
        results, ops = start_within(
            conn,
            requests,
            flows=self._flows,
            owner=self._owner,
            now_ms=self._now_ms(),
            marker=self._runner.home.marker(),
        )
        completed = [r.run_id for r in results if isinstance(r, RunHandle) and r.completed]
        return results, lambda: self._seed_started(ops, completed)

    def _seed_started(self, ops: list[tuple[str, Op]], completed: Sequence[str] = ()) -> None:
        """Hand runs just started to their workers: those whose first attempts were
        dispatched with the start start them here and now, the others go to a worker.
        Whoever waits for a run `completed` in its start is woken."""
        for run_id in completed:
            self._waiters.notify(run_id)
        if not ops or self._state != "started":
            return
        here = [(run_id, op) for run_id, op in ops if isinstance(op.seed, Prestarted)]
        with self._runner.gathered():
            self._actors.handle_here(here)
        self._actors.submit_many(
            [(run_id, op) for run_id, op in ops if not isinstance(op.seed, Prestarted)]
        )

    def _seed(self, ops: list[tuple[str, Op]]) -> None:
        if ops and self._state == "started":
            self._actors.submit_many(ops)

    def start_run(self, request: StartRequest) -> RunHandle:
        """Start one run (see `start_runs`).

        Raises:
            StartConflictError: the key names a run with another flow, version, input or env.
            UnknownFlowError: the flow version is not registered.
        """
        result = self.start_runs([request])[0]
        if isinstance(result, LoomsError):
            raise result
        return result

    def rescan_timers(self) -> int:
        """Drive every unsettled run this runtime owns again (re-reading the clock).

        Returns:
            How many runs were driven.
        """
        self._check_open()
        with driver_errors(), self._db.read() as conn:
            run_ids = own_active_runs(conn, owner=self._owner)
        self._resume(run_ids)
        self._timers.poke()
        return len(run_ids)

    def purge_settled(
        self, *, older_than: timedelta, batch_size: int = 500, max_batches: int | None = None
    ) -> int:
        """Purge runs settled more than `older_than` ago, in batches of one transaction each.

        A purged run loses its log and payloads but keeps its header row as a
        tombstone: a start with its key gets `KeyPurgedError`, `statuses` still
        answers its final status, and the other reads say `RunNotFoundError`.

        Returns:
            How many runs were purged.
        """
        self._check_open()
        if batch_size < 1:
            raise ValueError("batch_size must be positive")
        now = self._now_ms()
        cutoff = now - duration_ms(older_than)
        return purge_settled(
            self._db, cutoff_ms=cutoff, now_ms=now, batch_size=batch_size, max_batches=max_batches
        )

    def wait_settled(self, run_id: str, timeout: float) -> RunStatusInfo:
        """Wait up to `timeout` seconds for the run to settle; return its status either way."""
        return self._waiters.wait(run_id, timeout, lambda rid: self.statuses([rid])[rid])
