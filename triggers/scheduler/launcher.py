"""Launches claimed occurrences in the background, so the tick never waits on the runner.

A claim already holds its occurrence under a reservation; everything that can go
wrong below is compensated here: a start that fails or answers too late gives
the reservation back (the same idempotency key is retried, and the runtime
answers with the same run, or refuses it as started with the declaration of
the time, and that run is recorded); a start the runtime refuses for good is
recorded `failed`; a launch whose reservation was taken over is left to its new
owner.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence
from datetime import datetime

import structlog

from triggers.clock import Clock, iso
from triggers.errors import RunnerError, RunnerRefusedError, StoreError, TriggersError
from triggers.metrics import Metrics
from triggers.model import Action
from triggers.runner.protocol import AfterCommit, LaunchRequest, RunHandle, Runner
from triggers.scheduler.deadlines import DeadlineRunner
from triggers.scheduler.options import RETRY_SOON
from triggers.store.protocol import (
    START_RETRY,
    Claimed,
    CompletedRun,
    Launch,
    LaunchWithin,
    Reserved,
    Settlement,
    StartResult,
    StoreTransaction,
    TriggerStore,
)

log = structlog.get_logger()

_BATCH = 1000


def launch_request(claim: Claimed) -> LaunchRequest:
    """The runner request for a claim (its `env` is the run environment of docs/yaml.md)."""
    spec = claim.trigger.spec
    return LaunchRequest(
        idempotency_key=claim.idempotency_key,
        flow=spec.flow,
        flow_version=spec.flow_version,
        input=spec.input,
        trigger_id=spec.id,
        occurrence_at=claim.occurrence_at,
    )


def launcher_within(runner: Runner) -> LaunchWithin:
    """The store's `launch_within` for a runner that `starts_within` its database: the
    claims' runs start in the claim's own transaction."""

    def launch(
        tx: StoreTransaction, claims: Sequence[Claimed]
    ) -> tuple[list[StartResult], AfterCommit]:
        results, after_commit = runner.start_within(tx, [launch_request(c) for c in claims])
        found: list[StartResult] = []
        for claim, result in zip(claims, results, strict=True):
            if isinstance(result, RunHandle):
                found.append(CompletedRun(result.run_id) if result.completed else result.run_id)
            elif (named := _named_run(claim, result)) is not None:
                found.append(named)
            else:
                found.append(result)
        return found, after_commit

    return launch


def _named_run(claim: Claimed, error: RunnerError) -> str | None:
    """The run the claim's key already names, when the runtime refused the start for that.

    An earlier attempt whose answer was lost started it, with the declaration of the
    time; the trigger was edited since, so the retry asks for another flow or input.
    That run is still this occurrence's run: recording it keeps it watched and
    counted, where recording the launch `failed` would leave it running unaccounted.
    """
    run_id = error.details.get("run_id")
    if not isinstance(error, RunnerRefusedError) or not isinstance(run_id, str):
        return None
    log.warning(
        "launch_found_earlier_run",
        trigger_id=claim.trigger_id,
        run_id=run_id,
        key=claim.idempotency_key,
        error=str(error),
    )
    return run_id


class Launcher:
    """Worker threads that start runs for claims, in batches, and record them."""

    def __init__(
        self,
        *,
        store: TriggerStore,
        runner: DeadlineRunner,
        clock: Clock,
        on_launched: Callable[[str, str, bool], None],
        on_deferred: Callable[[datetime], None],
        metrics: Metrics,
        workers: int = 2,
    ) -> None:
        self._store = store
        self._runner = runner
        self._clock = clock
        self._on_launched = on_launched
        self._on_deferred = on_deferred
        self._metrics = metrics
        # One item per submit: a tick's claims travel as one batch, so they become
        # one start call and one ledger transaction, not one per claim.
        self._queue: queue.SimpleQueue[list[Reserved] | None] = queue.SimpleQueue()
        self._workers = [
            threading.Thread(target=self._work, name=f"launcher-{n}", daemon=True)
            for n in range(workers)
        ]
        self._closing = threading.Event()
        self._in_flight = 0
        self._idle = threading.Condition()
        self._unrecorded: list[Launch] = []
        # Asked once: through structlog's proxy the question costs more than the rest
        # of a launch's accounting.
        self._log_launches = log.is_enabled_for(logging.INFO)

    def start(self) -> None:
        for worker in self._workers:
            worker.start()

    def submit(self, claims: Sequence[Reserved]) -> None:
        """Launch `claims` on a worker thread; without workers (inline), here and now."""
        if not claims:
            return
        if not self._workers:
            self._launch_batch(list(claims))
            return
        with self._idle:
            self._in_flight += len(claims)
        self._queue.put(list(claims))

    def wait_idle(self, timeout: float) -> bool:
        """Wait until every submitted claim is handled; True when it was."""
        with self._idle:
            return self._idle.wait_for(lambda: self._in_flight == 0, timeout=timeout)

    def close(self, *, grace: float) -> None:
        """Finish in-flight launches within `grace`, then give the rest back."""
        self.wait_idle(grace)
        self._closing.set()
        for _ in self._workers:
            self._queue.put(None)
        for worker in self._workers:
            worker.join(timeout=max(grace, 1.0))
        leftover = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                leftover.extend(item)
        now = self._clock.now()
        for claim in leftover:
            # The next incarnation (or another daemon) takes these right away.
            self._release_now(claim, now)

    def _work(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = first
            while len(batch) < _BATCH:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)  # leave the stop marker for this worker's next turn
                    break
                batch.extend(item)
            try:
                self._launch_batch(batch)
            finally:
                with self._idle:
                    self._in_flight -= len(batch)
                    self._idle.notify_all()

    def _launch_batch(self, batch: list[Reserved]) -> None:
        try:
            self._launch(batch)
        except Exception:
            log.exception("launch_failed", count=len(batch))

    def _launch(self, batch: list[Reserved]) -> None:
        ready = [claim for claim in batch if self._supersede(claim)]
        if not ready:
            return
        started_at = self._clock.now()
        try:
            results: Sequence[RunHandle | RunnerError] = self._runner.start(
                [launch_request(c) for c in ready]
            )
        except RunnerError as exc:
            results = [exc] * len(ready)
        now = self._clock.now()
        self._metrics.launch_duration.observe((now - started_at).total_seconds())
        launches = []
        for claim, result in zip(ready, results, strict=True):
            if isinstance(result, RunHandle):
                launches.append(Launch(claim=claim, run_id=result.run_id))
            elif (named := _named_run(claim, result)) is not None:
                launches.append(Launch(claim=claim, run_id=named))
            else:
                self._compensate(claim, result, now)
        if launches:
            self._record(launches, now)

    def _supersede(self, claim: Reserved) -> bool:
        """Cancel the run a supersede claim replaces; False leaves the claim pending."""
        prior = claim.supersedes_run_id
        if claim.action is not Action.SUPERSEDE or prior is None:
            return True
        bound = structlog.contextvars.bound_contextvars(trigger_id=claim.trigger_id, run_id=prior)
        with bound:
            try:
                self._runner.cancel(prior)
                self._store.record_settled(
                    [Settlement(trigger_id=claim.trigger_id, run_id=prior, state="superseded")],
                    now=self._clock.now(),
                )
            except TriggersError as exc:
                # The prior run keeps its place as the active one, and the replacement
                # stays pending under its key, to be tried again: neither side is lost.
                log.warning("supersede_failed", error=str(exc), error_code=exc.code)
                self._defer(claim, str(exc))
                return False
            self._metrics.fired("superseded")
            log.info("run_superseded", replaced_by=claim.idempotency_key)
        return True

    def _compensate(self, claim: Reserved, error: RunnerError, now: datetime) -> None:
        with structlog.contextvars.bound_contextvars(trigger_id=claim.trigger_id):
            if isinstance(error, RunnerRefusedError):
                log.error("launch_refused", key=claim.idempotency_key, error=str(error))
                self._guarded(lambda: self._store.fail_launch(claim, error=str(error), now=now))
                self._metrics.fired("failed")
                return
            # Unknown outcome: the runtime may hold the run. Retrying the same key
            # later is safe: the runtime answers with the same run.
            log.warning(
                "launch_deferred",
                key=claim.idempotency_key,
                error=str(error),
                error_code=error.code,
            )
            self._defer(claim, str(error))

    def _defer(self, claim: Reserved, error: str) -> None:
        retry_at = self._clock.now() + START_RETRY
        self._guarded(lambda: self._store.release(claim, retry_at=retry_at, error=error))
        self._on_deferred(retry_at)

    def record_unrecorded(self, now: datetime) -> int:
        """Tick thread: record launches whose record failed earlier; returns how many."""
        with self._idle:
            launches, self._unrecorded = self._unrecorded, []
        if launches:
            self._record(launches, now)
        return len(launches)

    def _record(self, launches: list[Launch], now: datetime) -> None:
        try:
            records = self._store.record_launched(launches, now=now)
        except StoreError as exc:
            # The runs exist: recorded as soon as the database answers again, not when
            # their reservations expire (a trigger would look busy all that while).
            self._metrics.store_error("record_launched")
            log.warning("launch_record_failed", count=len(launches), error=str(exc))
            with self._idle:
                self._unrecorded.extend(launches)
            self._on_deferred(self._clock.now() + RETRY_SOON)
            return
        for launch, record in zip(launches, records, strict=True):
            if isinstance(record, TriggersError):
                log.warning(
                    "claim_lost",
                    trigger_id=launch.claim.trigger_id,
                    run_id=launch.run_id,
                    key=launch.claim.idempotency_key,
                    error_code=record.code,
                )
                continue
            self.launched(launch.claim, launch.run_id, now)

    def launched(
        self, claim: Claimed, run_id: str, now: datetime, *, completed: bool = False
    ) -> None:
        """A run is recorded `launched` for the claim (here, or in the claim's own commit),
        or `completed` with it in the claim's commit (a flow with nothing to run)."""
        latency = (now - claim.occurrence_at).total_seconds()
        self._metrics.fire_latency.observe(latency)
        self._metrics.fired("launched")
        trigger_id = claim.trigger.spec.id
        if self._log_launches:  # the values cost more than the call
            log.info(
                "run_launched",
                trigger_id=trigger_id,
                run_id=run_id,
                occurrence_at=iso(claim.occurrence_at),
                latency_ms=round(latency * 1000, 1),
            )
        self._on_launched(trigger_id, run_id, completed)

    def deferred(self, claim: Claimed, retry_at: datetime) -> None:
        """A start within the claim failed without an answer: it is retried from `retry_at`."""
        log.warning("launch_deferred", trigger_id=claim.trigger_id, key=claim.idempotency_key)
        self._on_deferred(retry_at)

    def refused(self, claim: Claimed, error: str) -> None:
        """The runtime refused the claim's start for good (recorded `failed`)."""
        log.error(
            "launch_refused", trigger_id=claim.trigger_id, key=claim.idempotency_key, error=error
        )
        self._metrics.fired("failed")

    def _release_now(self, claim: Reserved, now: datetime) -> None:
        self._guarded(lambda: self._store.release(claim, retry_at=now, error=None))

    def _guarded(self, action: Callable[[], object]) -> None:
        try:
            action()
        except TriggersError as exc:
            self._metrics.store_error("compensate")
            log.warning("compensation_failed", error=str(exc), error_code=exc.code)
