"""Worker processes: Python steps and Python flow sessions, outside the runtime's process.

A bounded pool (`WorkerLimits.processes`) of warm processes (each imports a step's
module once, then keeps it), started when first needed. Each runs one task at a time:
an attempt of a Python step (`run_step`) or a Python flow's session (`run_session`);
the effect thread that hands a task over waits for its outcome, its cancel and its
time limit. A process is replaced when it dies, when its resident memory passed
`max_rss_bytes` or it ran `max_tasks` tasks (checked after each task), when a task
left threads of its own running, and, after `refresh`, when a module it imported
changed on disk.

Tasks go to an idle worker, or start a new one under the bound. When every worker is
busy, a step's attempt is sent ahead to a worker running steps (one at most behind
the one it runs, `SEND_AHEAD`): it then starts the moment the previous one ends,
with no round trip through this process in between, which is what a burst of a
hundred steps needs. Should a worker go idle while another holds a step sent ahead,
that step is taken back (`revoke`: the worker gives it back unless it started it)
and runs on the idle one, so a long step never holds up one queued behind it.
Sessions go only to idle workers, and nothing is sent ahead behind them.

What a dead worker means for its task:

- a Python step's attempt is ambiguous (`EffectResult.ambiguous`): it may have done
  its side effects before it died, so it is re-run when idempotent, else its run
  parks, as after a crash of the daemon; a step sent ahead that had not started is
  sent again, elsewhere;
- a flow session's end is reported as a crash (`on_crash`), which the engine turns
  into the same ambiguity for the steps the session had in flight.

A step that runs past its time limit, or past its cancel's grace, has its process
killed: unlike a call on the runtime's own threads, it does stop.
"""

from __future__ import annotations

import collections
import functools
import itertools
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from looms_runtime._cancel import CancelToken
from looms_runtime._clock import monotonic
from looms_runtime._effects.context import EffectContext
from looms_runtime._effects.worker_process import Task, WorkerProcess
from looms_runtime._effects.worker_wire import WireClosed
from looms_runtime._history.definitions import PythonStep
from looms_runtime._history.outcome import EffectResult

log = structlog.get_logger()

SEND_AHEAD = 64
"""Steps sent to a busy worker beyond the one it runs."""
POLL_S = 0.5
"""How often a waiting effect thread looks at its time limit and cancel."""

AskHandler = Callable[[Any, Any, tuple[Any, ...], "Future[Any] | None"], None]
"""`(move, outcome, values, reply)`: a session's ask, with the future its reply goes in."""
CrashHandler = Callable[[str, "EffectResult | None"], None]
"""`(how, outcome)`: the session's worker died; `outcome` is the success of the step it
ran last if that was not yet part of an ask."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StepCall:
    """One attempt of a Python step for the pool, and where its result goes."""

    step: PythonStep
    ctx: EffectContext
    token: CancelToken
    timeout_s: float | None
    on_done: Callable[[EffectResult], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerLimits:
    """How many worker processes, and when one is replaced."""

    processes: int
    max_rss_bytes: int | None = None
    max_tasks: int | None = None


class WorkerPool:
    """See the module docstring."""

    def __init__(
        self,
        limits: WorkerLimits,
        *,
        clock_ms: Callable[[], int],
        environment: dict[str, str] | None = None,
    ) -> None:
        self._environment = environment
        """The worker processes' environment (None: ours): what Python steps see."""
        if limits.processes < 1:
            raise ValueError("a worker pool needs at least one process")
        self.limits = limits
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._workers: list[WorkerProcess] = []
        self._pending: collections.deque[Task] = collections.deque()
        self._starting = 0
        self._started = 0
        self._generation = 0
        self._modules: dict[str, int] = {}
        self._ids = itertools.count(1)
        self._closed = False
        self._watching: set[Task] = set()
        """Steps with a time limit or a cancel's grace to watch."""
        self._wake = threading.Condition(self._lock)
        threading.Thread(target=self._watch, name="looms-worker-clock", daemon=True).start()

    # -- tasks ----------------------------------------------------------------------

    def start_steps(self, steps: list[StepCall]) -> None:
        """Start attempts of Python steps (a tick's, together); each one's `on_done` gets
        its result on a thread of the pool's (see the module doc)."""
        tasks = []
        for call in steps:
            task_id = next(self._ids)
            task = Task(task_id, ("call", task_id, call.step, call.ctx), call.token)
            task.timeout_s = call.timeout_s
            task.on_done = functools.partial(self._step_done, call)
            tasks.append(task)
        with self._lock:
            if not self._closed:
                self._pending.extend(tasks)
                self._dispatch()
                self._watching.update(t for t in tasks if t.timeout_s is not None)
                self._wake.notify()
        if self._closed:
            for task in tasks:
                task.finish(("unstarted", "the runtime closed"))
            return
        for call, task in zip(steps, tasks, strict=True):
            call.token.on_cancel(functools.partial(self._cancel, task))

    def _step_done(self, call: StepCall, task: Task) -> None:
        ids: dict[str, Any] = {"effect_id": call.ctx.effect_id, "attempt": call.ctx.attempt}
        call.token.close()
        call.on_done(self._step_result(task, ids))

    def _step_result(self, task: Task, ids: dict[str, Any]) -> EffectResult:
        outcome = task.outcome
        assert outcome is not None  # noqa: S101 - done is set with it
        kind = outcome[0]
        if kind == "result":
            result: EffectResult = outcome[1]
            return result
        if kind == "died":
            log.warning("worker_died", how=outcome[1], task="step", **ids)
            error = f"the worker process running the step died ({outcome[1]})"
            return EffectResult(**ids, ok=False, error=error, ambiguous=True)
        if kind == "timed_out":
            error = f"timed out after {task.timeout_s:g}s (its worker process was stopped)"
            return EffectResult(**ids, ok=False, error=error)
        if kind == "abandoned":
            error = "cancelled: still running when the grace ended, its worker was stopped"
            return EffectResult(**ids, ok=False, error=error, cancelled=True)
        cancelled = task.token.cancelled
        error = "cancelled before it started" if cancelled else f"not started: {outcome[-1]}"
        return EffectResult(**ids, ok=False, error=error, cancelled=cancelled)

    def _watch(self) -> None:
        """The pool's clock: stops the steps that ran past their limit, or past their
        cancel's grace, by killing their workers."""
        while True:
            with self._lock:
                if self._closed:
                    return
                now = monotonic()
                due: list[tuple[Task, str]] = []
                wait = POLL_S * 4
                for task in list(self._watching):
                    if task.outcome is not None:
                        self._watching.discard(task)
                        continue
                    marks = []
                    if task.started_at is not None and task.timeout_s is not None:
                        marks.append((task.started_at + task.timeout_s, "timed_out"))
                    if task.abandon_at is not None:
                        marks.append((task.abandon_at, "abandoned"))
                    for at, why in marks:
                        if now >= at:
                            due.append((task, why))
                        else:
                            wait = min(wait, at - now)
                if not due:
                    self._wake.wait(wait)
                    continue
            for task, why in due:
                self._stop(task, why)

    def run_session(
        self,
        spec: dict[str, Any],
        token: CancelToken,
        *,
        on_ask: AskHandler,
        on_crash: CrashHandler,
    ) -> None:
        """Run a Python flow's session in a worker until it ends.

        Each of its asks goes to `on_ask` (on the worker's reader thread), with the
        future its reply is sent back from; a worker that dies meanwhile is reported
        to `on_crash`.
        """
        task_id = next(self._ids)
        task = Task(task_id, ("session", task_id, spec), token)
        task.on_ask = on_ask
        self._submit(task)
        token.on_cancel(lambda: self._cancel(task))
        task.done.wait()
        outcome = task.outcome
        assert outcome is not None  # noqa: S101 - done is set with it
        if outcome[0] == "died":
            log.warning("worker_died", how=outcome[1], task="flow session")
            on_crash(f"the worker process running the flow died ({outcome[1]})", task.unasked)
        elif outcome[0] != "ended":
            on_crash(f"the flow's session did not start: {outcome[-1]}", None)

    # -- routing --------------------------------------------------------------------

    def _submit(self, task: Task) -> None:
        with self._lock:
            closed = self._closed
            if not closed:
                self._pending.append(task)
                self._dispatch()
        if closed:
            task.finish(("unstarted", "the runtime closed"))

    def _cancel(self, task: Task) -> None:
        """A cancel: a waiting task ends unstarted; one sent on hears of it there, and
        is stopped if it still runs when the grace ends."""
        with self._lock:
            waiting = task in self._pending
            if waiting:
                self._pending.remove(task)
            worker = next((w for w in self._workers if task in w.queue), None)
            if worker is not None and task.kind == "call":
                task.abandon_at = monotonic() + task.token.grace_s
                self._watching.add(task)
                self._wake.notify()
        if waiting:
            task.finish(("unstarted", "cancelled"))
        elif worker is not None:
            worker.signal("cancel", task.id, task.token.grace_s)

    def _stop(self, task: Task, why: str) -> None:
        """End a step that runs too long by killing its worker (`why`: its outcome)."""
        with self._lock:
            self._watching.discard(task)
            worker = next((w for w in self._workers if w.queue and w.queue[0] is task), None)
            if worker is None or task.outcome is not None:
                return
            # Its reader sees the socket close: the rest of its queue moves on.
            worker.retiring = worker.retiring or why
        if task.finish((why,)):
            worker.kill()

    def _on_message(self, worker: WorkerProcess, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind in ("result", "ended"):
            self._finished(worker, message)
        elif kind == "revoked":
            with self._lock:
                task = next((t for t in worker.queue if t.id == message[1]), None)
                if task is not None:
                    worker.queue.remove(task)
                    task.revoking = False
                    self._pending.appendleft(task)
                    self._dispatch()
        else:
            self._session_message(worker, message)

    def _session_message(self, worker: WorkerProcess, message: tuple[Any, ...]) -> None:
        with self._lock:
            task = worker.queue[0] if worker.queue else None
        if task is None or task.kind != "session":
            return
        kind = message[0]
        if kind == "clock?":
            _send(worker, "clock", self._clock_ms())
        elif kind == "outcome":
            task.unasked = message[2]
        elif kind == "ask" and task.on_ask is not None:
            _, _, wants, move, outcome, values = message
            task.unasked = None
            reply: Future[Any] | None = None
            if wants:
                reply = Future()
                reply.add_done_callback(
                    lambda done: task.outcome is None and _send(worker, "reply", done.result())
                )
            task.on_ask(move, outcome, values, reply)

    def _finished(self, worker: WorkerProcess, message: tuple[Any, ...]) -> None:
        facts: dict[str, Any] = message[-1]
        with self._lock:
            task = worker.queue.popleft() if worker.queue else None
            if worker.queue:
                worker.queue[0].started_at = monotonic()
            for path, mtime in facts.get("modules", {}).items():
                self._modules.setdefault(path, mtime)
            why = self._retire_why(worker, facts)
            if why and not worker.retiring:
                worker.retiring = why
                log.info("worker_recycled", worker=worker.index, why=why)
            done = bool(worker.retiring) and not worker.queue
            if done:
                self._workers.remove(worker)
            self._dispatch()
        if task is not None:
            task.finish(tuple(message[:1]) + tuple(message[2:]))
        if done:
            worker.stop()

    def _on_death(self, worker: WorkerProcess) -> None:
        how = "" if worker.stopping else worker.death()
        with self._lock:
            if worker in self._workers:
                self._workers.remove(worker)
            running = worker.queue.popleft() if worker.queue else None
            # The rest never started (a worker runs its queue in order): sent again.
            for task in reversed(worker.queue):
                task.started_at = None
                task.revoking = False
                self._pending.appendleft(task)
            worker.queue.clear()
            if running is not None and running.outcome is None and how:
                log.warning("worker_died", worker=worker.index, how=how)
            self._dispatch()
        if running is not None:
            running.finish(("died", how or "it was stopped"))
        worker.kill()

    # -- placing tasks (under the lock) ---------------------------------------------

    def _dispatch(self) -> None:
        """Place waiting tasks; the steps placed on one worker go in one message."""
        placed: dict[WorkerProcess, list[Task]] = {}
        while self._pending and not self._closed:
            task = self._pending[0]
            worker = self._place(task)
            if worker is None:
                if len(self._workers) + self._starting < self.limits.processes:
                    self._starting += 1
                    threading.Thread(target=self._spawn, name="looms-worker-start").start()
                break
            self._pending.popleft()
            worker.queue.append(task)
            worker.tasks += 1
            if len(worker.queue) == 1:
                task.started_at = monotonic()
            placed.setdefault(worker, []).append(task)
        for worker, tasks in placed.items():
            message = (
                tasks[0].message
                if len(tasks) == 1
                else ("calls", [task.message[1:] for task in tasks])
            )
            try:
                worker.send(*message)
            except WireClosed:
                for task in reversed(tasks):
                    worker.queue.remove(task)
                    task.started_at = None
                    self._pending.appendleft(task)
                worker.retiring = worker.retiring or "its socket closed"
        self._take_back()

    def _place(self, task: Task) -> WorkerProcess | None:
        """An idle worker; None to start a new one; else, for a step, a busy worker of
        steps with room to hold it."""
        usable = [w for w in self._workers if not w.retiring]
        idle = next((w for w in usable if not w.queue), None)
        if idle is not None:
            return idle
        if task.kind != "call" or len(self._workers) + self._starting < self.limits.processes:
            return None
        ahead = [
            w
            for w in usable
            if len(w.queue) <= SEND_AHEAD and all(t.kind == "call" for t in w.queue)
        ]
        return min(ahead, key=lambda w: len(w.queue), default=None)

    def _take_back(self) -> None:
        """With nothing waiting and a worker idle, take back a step sent ahead elsewhere."""
        if self._pending:
            return
        idle = [w for w in self._workers if not w.queue and not w.retiring]
        for _ in idle:
            holding = [w for w in self._workers if len(w.queue) > 1]
            candidates = [t for w in holding for t in list(w.queue)[1:] if not t.revoking]
            if not candidates:
                return
            task = candidates[0]
            task.revoking = True
            owner = next(w for w in holding if task in w.queue)
            owner.signal("revoke", task.id)

    def _spawn(self) -> None:
        with self._lock:
            index, generation = self._started, self._generation
            self._started += 1
        try:
            # Not under the lock: a process takes a while to import what it runs.
            worker = WorkerProcess(
                index,
                generation,
                on_message=self._on_message,
                on_death=self._on_death,
                environment=self._environment,
            )
        except (OSError, WireClosed) as exc:
            log.error("worker_not_started", worker=index, error=str(exc))
            self._start_failed(f"the worker process could not start: {exc}")
            return
        worker.start_reading()
        log.debug("worker_started", worker=index, pid=worker.proc.pid)
        with self._lock:
            self._starting -= 1
            if self._closed:
                closed = True
            else:
                closed = False
                self._workers.append(worker)
                self._dispatch()
        if closed:
            worker.stop()

    def _start_failed(self, why: str) -> None:
        with self._lock:
            self._starting -= 1
            # With no worker to run them, the waiting tasks end now, unstarted.
            stranded = [] if self._workers or self._starting else list(self._pending)
            if stranded:
                self._pending.clear()
        for task in stranded:
            task.finish(("unstarted", why))

    def _retire_why(self, worker: WorkerProcess, facts: dict[str, Any]) -> str:
        limits = self.limits
        rss = int(facts.get("rss_bytes", 0))
        if limits.max_rss_bytes is not None and rss > limits.max_rss_bytes:
            over = limits.max_rss_bytes
            return f"resident memory {rss >> 20} MiB, over its {over >> 20} MiB"
        if limits.max_tasks is not None and worker.tasks >= limits.max_tasks:
            return f"ran {worker.tasks} tasks"
        if facts.get("stray_threads"):
            return f"a task left {facts['stray_threads']} thread(s) running"
        if worker.generation != self._generation:
            return "a module it imported changed"
        return ""

    # -- the whole pool -------------------------------------------------------------

    def refresh(self) -> bool:
        """Replace every worker when a module one imported changed on disk (a reload of
        the declarations); True when they are replaced. Running tasks finish first."""
        with self._lock:
            modules = dict(self._modules)
        changed = [path for path, mtime in modules.items() if _mtime(path) != mtime]
        if not changed:
            return False
        with self._lock:
            self._generation += 1
            self._modules.clear()
            idle = [w for w in self._workers if not w.queue]
            for worker in self._workers:
                worker.retiring = "a module it imported changed"
            for worker in idle:
                self._workers.remove(worker)
        log.info("workers_refreshed", changed=sorted(changed)[:10], stopped=len(idle))
        for worker in idle:
            worker.stop()
        return True

    def close(self) -> None:
        """Stop every worker (those still running a task are killed: it is in flight)."""
        with self._lock:
            self._closed = True
            self._wake.notify_all()
            workers, self._workers = self._workers, []
            pending, self._pending = list(self._pending), collections.deque()
        for task in pending:
            task.finish(("unstarted", "the runtime closed"))
        for worker in workers:
            if worker.queue:
                worker.kill()
            else:
                worker.stop()


def _send(worker: WorkerProcess, *message: Any) -> bool:
    try:
        worker.send(*message)
    except WireClosed:
        return False
    return True


def _mtime(path: str) -> int | None:
    try:
        return Path(path).stat().st_mtime_ns
    except OSError:
        return None
