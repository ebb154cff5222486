"""One worker process as its pool sees it: started, read, stopped; and the tasks it holds.

The process (`_engine/worker_main.py`) runs the tasks it is sent one after the
other, in the order it got them; `queue` holds them in that order, the first one
running, the others sent ahead (see `workers.py`). Its messages are read by a
thread of its own here and handed to the pool (`on_message`); when its socket
closes the pool hears of it once (`on_death`).
"""

from __future__ import annotations

import collections
import contextlib
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

from looms_runtime._cancel import CancelToken
from looms_runtime._effects.worker_wire import Wire, WireClosed

WORKER_MODULE = "looms_runtime._engine.worker_main"
STOP_GRACE_S = 2.0
"""How long a retired worker has to exit after `stop` before it is killed."""


class Task:
    """One task for a worker: a Python step's attempt (`call`) or a flow's `session`.

    `outcome` is set once, then `done`: `("result", EffectResult, facts)`, `("ended",
    facts)`, `("died", how)` (its worker died while it ran), `("stopped",)` (its
    worker was killed for it: a time limit, a cancel's grace) or `("unstarted", why)`.
    """

    __slots__ = (
        "abandon_at",
        "done",
        "id",
        "kind",
        "message",
        "on_ask",
        "on_done",
        "outcome",
        "revoking",
        "started_at",
        "timeout_s",
        "token",
        "unasked",
    )

    def __init__(self, task_id: int, message: tuple[Any, ...], token: CancelToken) -> None:
        self.id = task_id
        self.kind = str(message[0])
        self.message = message
        self.token = token
        self.timeout_s: float | None = None
        self.abandon_at: float | None = None
        """When a cancelled task that still runs is stopped (monotonic)."""
        self.on_done: Callable[[Task], None] | None = None
        """Called once with the task when its outcome is set (a step's attempt)."""
        self.done = threading.Event()
        self.outcome: tuple[Any, ...] | None = None
        self.started_at: float | None = None
        """When its worker began it (monotonic); None while it waits."""
        self.revoking = False
        self.on_ask: Callable[..., None] | None = None
        self.unasked: Any = None
        """A session's last step's success, not yet part of an ask."""

    def finish(self, outcome: tuple[Any, ...]) -> bool:
        """Set the outcome unless one was set; True when this call set it."""
        if self.outcome is not None:
            return False
        self.outcome = outcome
        self.done.set()
        if self.on_done is not None:
            self.on_done(self)
        return True


class WorkerProcess:
    """One worker process: its two sockets, its reader thread, the tasks it holds."""

    def __init__(
        self,
        index: int,
        generation: int,
        *,
        on_message: Callable[[WorkerProcess, tuple[Any, ...]], None],
        on_death: Callable[[WorkerProcess], None],
        environment: dict[str, str] | None = None,
    ) -> None:
        tasks, tasks_there = socket.socketpair()
        control, control_there = socket.socketpair()
        there = (tasks_there.fileno(), control_there.fileno())
        try:
            self.proc = subprocess.Popen(  # noqa: S603 - this interpreter, our own module
                [sys.executable, "-m", WORKER_MODULE, *map(str, there)],
                pass_fds=there,
                stdin=subprocess.DEVNULL,
                env=environment,
            )
        finally:
            tasks_there.close()
            control_there.close()
        self.wire = Wire(tasks)
        self.control = Wire(control)
        self.index = index
        self.generation = generation
        self.tasks = 0
        """Tasks it was given, over its life."""
        self.queue: collections.deque[Task] = collections.deque()
        self.retiring = ""
        """Why it takes no more tasks (it stops once its queue is empty)."""
        self.stopping = False
        self._on_message = on_message
        self._on_death = on_death
        try:
            self.wire.send("hello", list(sys.path))
            ready = self.wire.receive()[0] == "ready"
        except WireClosed:
            ready = False
        if not ready:
            self.kill()
            raise WireClosed("the worker process did not start")

    def start_reading(self) -> None:
        threading.Thread(target=self._read, name=f"looms-worker-{self.index}", daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                message = self.wire.receive()
            except WireClosed:
                self._on_death(self)
                return
            self._on_message(self, message)

    def send(self, *message: Any) -> None:
        """Raises: WireClosed: the process is gone."""
        self.wire.send(*message)

    def signal(self, *message: Any) -> None:
        """A message on the control socket (read while a task runs); lost if it is gone."""
        with contextlib.suppress(WireClosed):
            self.control.send(*message)

    def death(self) -> str:
        """How the process ended (it closed its socket): waits a moment for its status."""
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            return "it stopped answering and was killed"
        if code < 0:
            return f"killed by {signal.Signals(-code).name}"
        return f"exit code {code}"

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        self._close()

    def stop(self) -> None:
        """Ask the process to exit; kill it when it does not within the grace."""
        self.stopping = True
        with contextlib.suppress(WireClosed):
            self.wire.send("stop")
        try:
            self.proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            self.kill()
        self._close()

    def _close(self) -> None:
        self.wire.close()
        self.control.close()
