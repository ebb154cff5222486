"""Starts effect attempts (and Python flow sessions) on their own threads.

Command attempts run under the host's supervisor (see `command.py`) with their
directories under the runner's `Home`; the runner also answers what an attempt
dispatched by an earlier owner did (`probe`) and adopts one still running.
"""

from __future__ import annotations

import contextlib
import contextvars
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import structlog

from looms_runtime._cancel import CancelToken
from looms_runtime._effects import attempts
from looms_runtime._effects.command import Detached, adopt, run_command
from looms_runtime._effects.context import EffectContext
from looms_runtime._effects.http import HttpLoop
from looms_runtime._effects.python import run_python
from looms_runtime._effects.supervisor_client import Supervisor
from looms_runtime._effects.workers import StepCall, WorkerLimits, WorkerPool
from looms_runtime._history.definitions import CommandStep, EffectStep, HttpStep, PythonStep
from looms_runtime._history.outcome import EffectResult
from looms_runtime._workers.pool import ThreadPool
from looms_runtime.host import boot_id

log = structlog.get_logger()


class EffectRunner:
    """Runs attempts outside the runs' actors: a long command holds no run worker."""

    def __init__(
        self,
        *,
        attempts_dir: Path | None = None,
        workers: WorkerLimits | None = None,
        clock_ms: Callable[[], int] | None = None,
        environment: dict[str, str] | None = None,
    ) -> None:
        self._environment = environment
        """What command steps start from and helper processes run with (None: ours)."""
        self._pool = ThreadPool("looms-effect", None)
        self.workers: WorkerPool | None = None
        """Where Python steps and flow sessions run; None: on this process's threads."""
        if workers is not None:
            if clock_ms is None:
                raise ValueError("worker processes read the runtime's clock: give clock_ms")
            self.workers = WorkerPool(workers, clock_ms=clock_ms, environment=environment)
        self._http = HttpLoop()
        self._root = attempts_dir
        self._root_made = False
        self._supervisor: Supervisor | None = None
        self._boot = boot_id()
        self._detach = threading.Event()
        self._lock = threading.Lock()
        self._gathering = threading.local()

    @property
    def home(self) -> attempts.Home:
        """Where command attempts of this runtime keep their directories."""
        with self._lock:
            if self._root is None:
                # No state directory given: attempts still run supervised, but a later
                # runtime (with another temporary root) cannot adopt them.
                self._root = Path(tempfile.mkdtemp(prefix="looms-attempts-"))
            if not self._root_made:
                # Before any dispatch names it: a missing root then means it was wiped,
                # and a missing attempt directory that its attempt never started.
                self._root.mkdir(parents=True, exist_ok=True, mode=0o700)
                self._root_made = True
            return attempts.Home(root=self._root, boot=self._boot)

    @property
    def supervisor(self) -> Supervisor:
        """The host's supervisor of this runtime's attempts root (started when first used)."""
        root = self.home.root
        with self._lock:
            if self._supervisor is None:
                self._supervisor = Supervisor(root, environment=self._environment)
            return self._supervisor

    def launch(
        self,
        step: EffectStep,
        ctx: EffectContext,
        on_done: Callable[[EffectResult], None],
        *,
        timeout_s: float | None,
        path: Path | None = None,
        restart: bool = False,
    ) -> CancelToken:
        """Start one attempt; `on_done` gets its result on the effect's thread.

        `timeout_s` is the attempt's own limit (its step's timeout, or less when the
        step's overall deadline comes first). A command attempt runs in `path` (by
        default its directory under `home`); `restart` starts one that a previous
        owner dispatched but provably never started.
        """
        token = CancelToken()
        if isinstance(step, PythonStep) and self.workers is not None:
            # No effect thread: the pool's reader threads report the outcome.
            call = StepCall(step=step, ctx=ctx, token=token, timeout_s=timeout_s, on_done=on_done)
            steps: list[StepCall] | None = getattr(self._gathering, "steps", None)
            if steps is not None:
                steps.append(call)
            else:
                self.workers.start_steps([call])
            return token
        where = path
        if where is None and isinstance(step, CommandStep):
            where = self.home.path(ctx.run_id, ctx.effect_id, ctx.attempt)
        ids = {"effect_id": ctx.effect_id, "attempt": ctx.attempt}
        self._submit(
            lambda: self._run(step, ctx, token, timeout_s, where, restart), ids, token, on_done
        )
        return token

    def adopt(
        self,
        path: Path,
        ids: Mapping[str, Any],
        on_done: Callable[[EffectResult], None],
    ) -> CancelToken:
        """Wait for a command attempt a previous owner started and that still runs."""
        token = CancelToken()
        self._submit(
            lambda: adopt(path, dict(ids), token, detach=self._detach, supervisor=self.supervisor),
            ids,
            token,
            on_done,
        )
        return token

    def probe(self, marker: Mapping[str, str] | None, path: Path) -> attempts.Probe:
        """What a command attempt dispatched earlier did (see `attempts.probe`)."""
        return attempts.probe(dict(marker) if marker else None, path, boot=self._boot)

    def _submit(
        self,
        work: Callable[[], EffectResult],
        ids: Mapping[str, Any],
        token: CancelToken,
        on_done: Callable[[EffectResult], None],
    ) -> None:
        def attempt() -> None:
            try:
                result = work()
            except Detached:
                log.info("effect_detached", **ids)
                return  # the attempt runs on; the next runtime adopts it
            except Exception as exc:
                log.exception("effect_crashed", **ids)
                result = EffectResult(**ids, ok=False, error=repr(exc))
            finally:
                token.close()
            on_done(result)

        # The attempt logs (and a Python step's own structlog lines) carry the run's
        # context: its id and the attributes the runtime binds to its lines.
        context = contextvars.copy_context()
        gathered: list[Callable[[], None]] | None = getattr(self._gathering, "tasks", None)
        if gathered is not None:
            gathered.append(lambda: context.run(attempt))
        else:
            self._pool.submit(lambda: context.run(attempt))

    @contextlib.contextmanager
    def gathered(self) -> Iterator[None]:
        """Attempts this thread launches within the block start together when it ends.

        A batch of new runs is handed to the effect threads at once: one wake-up of
        the pool rather than one per attempt, whose woken threads would otherwise
        contend with the launching thread for the pool's lock and the interpreter.
        """
        if getattr(self._gathering, "tasks", None) is not None:
            yield  # an outer block starts them
            return
        tasks: list[Callable[[], None]] = []
        steps: list[StepCall] = []
        self._gathering.tasks = tasks
        self._gathering.steps = steps
        try:
            yield
        finally:
            del self._gathering.tasks
            del self._gathering.steps
            if steps and self.workers is not None:
                self.workers.start_steps(steps)
            try:
                self._pool.submit_many(tasks)
            except RuntimeError:
                # Closed meanwhile: the attempts stay dispatched, and the next start
                # finds them in flight, as for a process that stopped here.
                log.warning("effects_not_started", attempts=len(tasks), reason="closed")

    def start(self, task: Callable[[], None]) -> None:
        """Run `task` (a Python flow session) on an effect thread, in the caller's log context."""
        context = contextvars.copy_context()
        self._pool.submit(lambda: context.run(task))

    def _run(
        self,
        step: EffectStep,
        ctx: EffectContext,
        token: CancelToken,
        timeout_s: float | None,
        path: Path | None,
        restart: bool,
    ) -> EffectResult:
        if isinstance(step, CommandStep):
            assert path is not None  # noqa: S101 - `launch` gives every command its directory
            return run_command(
                step,
                ctx,
                token,
                timeout_s=timeout_s,
                path=path,
                detach=self._detach,
                supervisor=self.supervisor,
                restart=restart,
                environment=self._environment,
            )
        if isinstance(step, PythonStep):
            return run_python(step, ctx, token, timeout_s=timeout_s)
        if isinstance(step, HttpStep):
            return self._http.run(step, ctx, token, timeout_s=timeout_s)
        raise TypeError(f"no executor for {step.kind} steps")

    def close(self, timeout_s: float) -> bool:
        """Detach from supervised attempts, wait for the others up to `timeout_s`; True
        when none is left."""
        self._detach.set()
        done = self._pool.shutdown(timeout_s)
        self._http.close(timeout_s)
        if self.workers is not None:
            self.workers.close()
        with self._lock:
            supervisor = self._supervisor
        if supervisor is not None:
            supervisor.close()
        return done
