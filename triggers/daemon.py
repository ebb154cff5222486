"""The daemon: build everything from Settings, handle signals, run the loop.

SIGTERM/SIGINT stop claiming, finish in-flight launches within the shutdown
grace, detach the monitors (runs stay durable) and exit 0. SIGHUP re-applies
the declarations file; a file that fails validation is refused and the last
good declarations stay in force. Under systemd (`Type=notify`) the daemon says
READY, RELOADING around a reload, STATUS with live facts, WATCHDOG while the
scheduler keeps its schedule, and STOPPING (`triggers.notify`).
"""

from __future__ import annotations

import gc
import math
import os
import signal
import sys
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING

import structlog

from looms_runtime import Runtime
from looms_runtime.db import Database
from looms_runtime.host import ProcessId, forbid_inspection
from triggers import __version__, actions
from triggers.actions import local_actor
from triggers.addresses import parse_address
from triggers.clock import Clock, SystemClock
from triggers.declarations import parse_declarations, read_declarations_text, text_digest
from triggers.delivery import AlertSender, HeartbeatPinger, SenderOptions, SmtpServer
from triggers.errors import ConfigError, DeclarationError, StoreError, TriggersError
from triggers.file_modes import private_directory, private_sqlite_files
from triggers.inspection import pool_views, process_gone
from triggers.metrics import Metrics
from triggers.notify import Notifier, status_line
from triggers.probes import MetricsServer, Probes
from triggers.runner.flows import runtime_flows
from triggers.runner.looms import LoomsRunner
from triggers.runner.runs import RunControls, RunReads
from triggers.scheduler.engine import Scheduler
from triggers.scheduler.health import summarize, trigger_gauges
from triggers.settings import Settings, step_environment
from triggers.store import database as store_database
from triggers.store.protocol import Heartbeat
from triggers.store.sql import SqlTriggerStore
from triggers.store.sql_alerts import SqlAlertOutbox
from triggers.store.sql_audit import SqlAuditLog

if TYPE_CHECKING:
    from triggers.api import ApiServer, ApiServices

log = structlog.get_logger()


@dataclass(slots=True)
class Backend:
    """The database, the trigger store and the runtime of one process."""

    db: Database
    store: SqlTriggerStore
    runtime: Runtime
    runner: LoomsRunner

    def close(self) -> None:
        self.db.dispose()


@dataclass(slots=True)
class Listeners:
    """The daemon's HTTP listeners: the API's and the metrics' (None when off)."""

    api: ApiServer | None = None
    metrics: MetricsServer | None = None

    def stop(self) -> None:
        if self.api is not None:
            self.api.stop()
        if self.metrics is not None:
            self.metrics.stop()


def open_database(
    settings: Settings, *, migrate_empty: bool = True, background_checkpoints: bool = False
) -> Database:
    """Connect and check the schema (an empty database is migrated).

    Raises:
        SchemaBehindError: the schema is behind (exit 78).
        StoreUnavailableError: the database cannot be reached (exit 75).
    """
    return store_database.open_database(
        settings.database_location(),
        create=migrate_empty,
        sqlite_synchronous=settings.sqlite_synchronous,
        background_checkpoints=background_checkpoints,
    )


def open_backend(
    settings: Settings, *, owner: str, clock: Clock | None = None, daemon: bool = False
) -> Backend:
    """The store and an unstarted runtime on one database.

    The runtime records every instant on `clock` (default: the system clock), the
    clock the caller's scheduler runs on: one clock per process.
    """
    attempts_dir = None
    if daemon:
        # Command attempts' records are trusted: no other user may write beside them.
        state = settings.resolved_state_directory()
        attempts_dir = state / "attempts"
        fixed = private_directory(state, what="state directory")
        fixed += private_directory(attempts_dir, what="attempts directory")
        sqlite_path = settings.database_location().sqlite_path
        if sqlite_path is not None:
            fixed += private_sqlite_files(sqlite_path, create=False)
        for path, was in fixed:
            log.warning("file_mode_fixed", path=str(path), was=was)
    db = open_database(settings, background_checkpoints=daemon)
    clock = clock or SystemClock()
    store = SqlTriggerStore(db)
    runner = LoomsRunner(ledger=store, clock=clock)
    runtime = Runtime(
        db,
        owner=owner,
        clock=clock.now,
        env_prefix="TRIGGERS_",
        # Steps, the supervisor and the worker processes never see the daemon's settings.
        step_environment=step_environment(os.environ),
        workers=settings.workers,
        # Python steps and flows run outside the daemon: its claims never wait on them.
        worker_processes=settings.worker_processes if daemon else 0,
        worker_max_rss_bytes=settings.worker_max_rss,
        worker_max_tasks=settings.worker_max_tasks,
        lease=settings.owner_lease,
        on_settled=runner.notify,
        transition_hook=runner.record_changes,
        retention=settings.run_retention if daemon else None,
        trim_events=settings.trim_events,
        # Command steps outlive the daemon under their supervisors; the next daemon
        # on this host finds them here.
        attempts_dir=attempts_dir,
        # Every runtime line about a trigger's run names the trigger.
        log_attributes=("trigger_id",),
    )
    runner.attach(runtime)
    return Backend(db=db, store=store, runtime=runtime, runner=runner)


class LocalHost:
    """This host's facts for the scheduler: its boot, this process, and dead processes."""

    def __init__(self) -> None:
        self._process = ProcessId.current()

    @property
    def boot_id(self) -> str | None:
        return self._process.boot or None

    @property
    def process_start(self) -> int | None:
        return self._process.started

    def gone(self, beat: Heartbeat) -> bool:
        return process_gone(beat)


def owner_id(host: str) -> str:
    """A daemon's identity in leases and heartbeats: host, pid and a per-start suffix."""
    return f"{host}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Daemon:
    """One `triggers run` process."""

    def __init__(self, settings: Settings, *, clock: Clock | None = None) -> None:
        self._settings = settings
        self._clock = clock or SystemClock()
        self._owner = owner_id(settings.host)
        self._reload = threading.Event()
        self._stop = threading.Event()
        self._scheduler_ref: Scheduler | None = None
        self._events = threading.Event()
        self._notifier = Notifier(socket_path=None, watchdog=None)
        self.metrics = Metrics(version=__version__)
        self._last_error: str | None = None
        """Why the last apply of the declarations failed; None once one succeeds."""
        self._stalled = False
        self._status_at: float | None = None
        self._api: ApiServer | None = None

    def run(self, *, stop_asked: Sequence[int] = ()) -> int:
        """Run until stopped; `stop_asked` holds stop signals that came before `run`."""
        settings = self._settings
        # Threads hand the interpreter over every millisecond rather than every five,
        # so a batch ready to launch on one thread does not wait behind another's work
        # (measured: 1000 every-second triggers, launch latency p50 204 -> 149 ms).
        sys.setswitchinterval(0.001)
        # A step runs as this user: it must not read this process's environment (the
        # database URL, the SMTP password) or memory through /proc.
        forbid_inspection()
        self._notifier = Notifier.from_environment()
        # First, so that a SIGTERM during start-up still ends in a clean exit.
        self._install_signals()
        if stop_asked:
            self.stop()
        # A bad token file or an address in use stops the start before the database.
        listeners = self._bind()
        try:
            backend = open_backend(settings, owner=self._owner, clock=self._clock, daemon=True)
        except BaseException:
            listeners.stop()
            raise
        try:
            self._apply(backend, initial=True)
            if self._stop.is_set():
                log.info("daemon_stopped", owner=self._owner, during="start-up")
                return 0
            backend.runtime.start()
            scheduler = self._scheduler(backend)
            self._scheduler_ref = scheduler
            self._watch(backend, scheduler)
            alerts = self._sender(backend)
            scheduler.on_settlements(alerts.wake)
            worker = threading.Thread(target=scheduler.run, name="scheduler")
            worker.start()
            try:
                # The first tick claims what came due while no daemon ran before
                # anything slow starts (the web framework's import, the sender): a
                # late start must not turn a short job's next occurrence into an
                # overlap. The wait is bounded; a stop ends it.
                self._await_tick(scheduler, worker, after=0)
                self._start_beside(backend, scheduler, listeners, alerts)
            except BaseException:
                self.stop()
                scheduler.stop()
                worker.join()
                raise
            log.info(
                "daemon_started",
                owner=self._owner,
                version=__version__,
                database=settings.redacted_database_url(),
                config=str(settings.config),
            )
            # Ready once the first tick has read the triggers, so the status is true.
            self._await_tick(scheduler, worker, after=0)
            # What start-up made (modules, declarations, schedules, the first page of
            # triggers) lives as long as the daemon: frozen, no later collection scans
            # it, so a full collection no longer pauses every thread for tens of ms.
            gc.freeze()
            self._notifier.ready(self._status(scheduler))
            self._supervise(backend, scheduler, worker)
        finally:
            listeners.stop()  # before the runtime closes: no request meets a closed one
            backend.runtime.close()
            backend.close()
            self._notifier.close()
        log.info("daemon_stopped", owner=self._owner)
        return 0

    def _start_beside(
        self, backend: Backend, scheduler: Scheduler, listeners: Listeners, alerts: AlertSender
    ) -> None:
        """What runs beside the scheduler: the probes, the API, the sender, the pinger."""
        settings = self._settings
        probes = self._probes(backend)
        if listeners.metrics is not None:
            listeners.metrics.start(probes)
        if listeners.api is not None:
            listeners.api.start(self._api_services(backend, scheduler, probes))
            self._api = listeners.api
        threading.Thread(target=alerts.run, args=(self._stop,), name="alerts", daemon=True).start()
        if settings.heartbeat_url:
            pinger = HeartbeatPinger(
                settings.heartbeat_url,
                interval=settings.heartbeat_url_interval,
                clock=self._clock,
                healthy=lambda: scheduler.progress.stalled_for() < _STALL_LIMIT_S,
            )
            threading.Thread(
                target=pinger.run, args=(self._stop,), name="heartbeat-url", daemon=True
            ).start()

    def stop(self) -> None:
        """Ask `run` to stop as SIGTERM does (any thread, signal handlers included)."""
        self._stop.set()
        self._events.set()

    def _scheduler(self, backend: Backend) -> Scheduler:
        options = self._settings.scheduler_options(owner=self._owner, version=__version__)
        return Scheduler(
            store=backend.store,
            runner=backend.runner,
            clock=self._clock,
            options=options,
            metrics=self.metrics,
            host=LocalHost(),
        )

    def _sender(self, backend: Backend) -> AlertSender:
        settings = self._settings
        smtp = SmtpServer.of(settings)
        options = SenderOptions(
            attempts=settings.alert_attempts,
            backoff=settings.alert_backoff,
            max_backoff=settings.alert_max_backoff,
            retention=settings.fire_retention,
        )
        outbox = SqlAlertOutbox(backend.db)
        self.metrics.watch_alerts(outbox.counts)
        return AlertSender(
            outbox,
            clock=self._clock,
            owner=self._owner,
            smtp=smtp,
            options=options,
            metrics=self.metrics,
        )

    def _watch(self, backend: Backend, scheduler: Scheduler) -> None:
        """Point the scrape-time metrics at the scheduler's triggers and the runtime."""
        runs = RunReads(backend.runtime)

        def parked() -> float:
            try:
                return float(runs.count_runs(status="parked"))
            except TriggersError:
                return math.nan  # unknown this scrape; not zero

        self.metrics.watch_triggers(
            lambda: trigger_gauges(scheduler.entries), last_settled=backend.store.last_settled
        )
        self.metrics.watch_parked(parked)

        def pools() -> list[tuple[str, int, int]]:
            # A copy: the loop's thread may add or drop entries meanwhile.
            triggers = [entry.trigger for entry in list(scheduler.entries.values())]
            return [
                (pool.name, pool.slots, pool.active) for pool in pool_views(backend.store, triggers)
            ]

        self.metrics.watch_pools(pools)

    def _supervise(self, backend: Backend, scheduler: Scheduler, worker: threading.Thread) -> None:
        watchdog = self._notifier.watchdog
        # Pings at half the interval at most, as sd_watchdog_enabled(3) advises.
        interval = min(watchdog.total_seconds() / 2, 1.0) if watchdog else 1.0
        while worker.is_alive():
            self._events.wait(timeout=interval)
            self._events.clear()
            if self._stop.is_set():
                self._notifier.stopping()
                log.info("daemon_stopping", owner=self._owner)
                scheduler.stop()
                worker.join()
                return
            if self._reload.is_set():
                self._reload.clear()
                self._notifier.reloading()
                self._apply(backend, initial=False)
                # New code deployed with the file: the workers import it afresh.
                backend.runtime.refresh_workers()
                if self._api is not None:
                    self._api.reload_tokens()
                ticks = scheduler.progress.ticks
                scheduler.refresh_soon()
                self._await_tick(scheduler, worker, after=ticks)
                self._notifier.ready(self._status(scheduler))
            self._keep_alive(scheduler)

    def _await_tick(self, scheduler: Scheduler, worker: threading.Thread, *, after: int) -> None:
        """Wait (briefly, interruptibly) for the scheduler to finish a tick after `after`."""
        for _ in range(int(_TICK_WAIT_S / 0.05)):
            if scheduler.progress.wait_for_tick(after=after, timeout=0.05):
                return
            if self._stop.is_set() or not worker.is_alive():
                return

    def _keep_alive(self, scheduler: Scheduler) -> None:
        """Feed the watchdog while the scheduler keeps its schedule; refresh `STATUS=`."""
        watchdog = self._notifier.watchdog
        limit = watchdog.total_seconds() if watchdog else _STALL_LIMIT_S
        stalled_s = scheduler.progress.stalled_for()
        stalled = stalled_s >= limit
        if stalled != self._stalled:
            self._stalled = stalled
            self._status_at = None  # say so now
            if stalled:
                # No more WATCHDOG=1: systemd restarts the daemon if this goes on.
                log.error("scheduler_stalled", stalled_s=round(stalled_s, 1), limit_s=limit)
            else:
                log.warning("scheduler_recovered")
        now = self._clock.monotonic()
        if self._notifier.enabled and (
            self._status_at is None or now - self._status_at >= _STATUS_EVERY_S
        ):
            self._status_at = now
            self._notifier.status(self._status(scheduler, stalled_s if stalled else None))
        if watchdog and not stalled:
            self._notifier.ping()

    def _status(self, scheduler: Scheduler, stalled_s: float | None = None) -> str:
        return status_line(
            summarize(scheduler.entries), error=self._last_error, stalled_s=stalled_s
        )

    def _apply(self, backend: Backend, *, initial: bool) -> None:
        path = self._settings.config
        if path is None:
            return
        try:
            text = read_declarations_text(path)
            if backend.store.applied_digest() == text_digest(text):
                # Parsing and validating ten thousand triggers takes seconds; a daemon
                # restarted on the file already in force starts ticking at once.
                log.info("declarations_unchanged", config=str(path))
                self._applied("unchanged")
                return
            declarations = parse_declarations(text, source=str(path))
            result = actions.apply(
                backend.store,
                SqlAuditLog(backend.db),
                runtime_flows(backend.runtime),
                declarations,
                now=self._clock.now(),
                actor=local_actor(self._settings.host),
                note=f"applied by the daemon {self._owner} at {'start' if initial else 'reload'}",
                record_unchanged=False,
            ).result
        except DeclarationError as exc:
            stored = backend.store.list_triggers()
            problems = exc.details.get("problems")
            log.error(
                "declarations_refused", config=str(path), problems=problems, keeping=len(stored)
            )
            count = len(problems) if isinstance(problems, list) else 1
            self._applied(
                "refused", error=f"{path} refused ({count} problems); running the last good ones"
            )
            if initial and not stored:
                raise ConfigError(
                    f"{path} is invalid and the store holds no earlier declarations:\n{exc}",
                    problems=problems,
                ) from exc
            return
        except StoreError as exc:
            self.metrics.store_error("apply")
            log.error("declarations_not_applied", config=str(path), error=str(exc))
            self._applied("failed", error=f"{path} not applied: {exc}")
            if initial:
                raise
            return
        except Exception as exc:
            # A reload must never take a running daemon down: the last good
            # declarations stay in force, and the next SIGHUP tries again.
            if initial:
                raise
            log.exception("declarations_not_applied", config=str(path))
            self._applied("failed", error=f"{path} not applied: {exc}")
            return
        self._applied("applied")
        log.info(
            "declarations_applied",
            config=str(path),
            created=len(result.created),
            updated=len(result.updated),
            unchanged=len(result.unchanged),
            retired=len(result.retired),
        )

    def _applied(self, result: str, *, error: str | None = None) -> None:
        self._last_error = error
        self.metrics.reloaded(result, at=self._clock.now())

    def _install_signals(self) -> None:
        def stop(signum: int, _frame: FrameType | None) -> None:
            self.stop()

        def reload(signum: int, _frame: FrameType | None) -> None:
            self._reload.set()
            self._events.set()

        def nudge(signum: int, _frame: FrameType | None) -> None:
            # `triggers fire` / `backfill` on this host: launch what they claimed now,
            # not at the next poll.
            if self._scheduler_ref is not None:
                self._scheduler_ref.pending.want()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGHUP, reload)
        signal.signal(signal.SIGUSR1, nudge)

    def _bind(self) -> Listeners:
        """The API's and the metrics' sockets, bound, not serving yet. Raises ConfigError."""
        listeners = Listeners(api=self._api_server())
        try:
            listeners.metrics = self._metrics_server()
        except BaseException:
            listeners.stop()
            raise
        return listeners

    def _api_server(self) -> ApiServer | None:
        """The HTTP API's server, bound (None when off). Raises ConfigError (exit 78)."""
        if self._settings.api_address is None:
            return None
        # The web framework loads only in a daemon that serves the API.
        from triggers.api._server import ApiServer  # noqa: PLC0415

        return ApiServer.bound(self._settings)

    def _api_services(self, backend: Backend, scheduler: Scheduler, probes: Probes) -> ApiServices:
        from triggers.api._context import ApiServices  # noqa: PLC0415

        return ApiServices(
            store=backend.store,
            audit=SqlAuditLog(backend.db),
            runs=RunControls(backend.runtime),
            clock=self._clock,
            host=self._settings.host,
            owner=f"api:{self._owner}",
            # What the API claims launches at once, as a SIGUSR1 from `triggers fire` does.
            wake=scheduler.pending.want,
            soonest=scheduler.soonest,
            poll_interval=self._settings.poll_interval,
            database=self._settings.redacted_database_url(),
            alerts=SqlAlertOutbox(backend.db).list,
            probes=probes,
        )

    def _probes(self, backend: Backend) -> Probes:
        """`/healthz` and `/readyz`, on the signals the metrics show."""
        metrics = self.metrics
        return Probes(
            clock=self._clock,
            poll_interval=self._settings.poll_interval,
            last_tick=lambda: metrics.last_tick_at,
            last_apply=lambda: metrics.last_reload,
            ping_store=backend.store.applied_digest,
        )

    def _metrics_server(self) -> MetricsServer | None:
        """The metrics listener, bound (None when off). Raises ConfigError (exit 78)."""
        address = self._settings.metrics_address
        if not address:
            return None
        # Settings checked its form: what is left to fail is the bind (ConfigError).
        return MetricsServer(parse_address(address), registry=self.metrics.registry)


_TICK_WAIT_S = 10.0
"""How long READY waits for the scheduler's first tick (or the tick after a reload)."""
_STALL_LIMIT_S = 60.0
"""Without a watchdog, a scheduler this far behind its schedule is reported stalled."""
_STATUS_EVERY_S = 10.0
"""How often `STATUS=` is refreshed (a summary reads every trigger the loop holds)."""
