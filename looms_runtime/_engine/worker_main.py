"""A worker process: runs Python steps and Python flow sessions for its runtime.

Started by the runtime's worker pool (`_effects/workers.py`) as
`python -m looms_runtime._engine.worker_main TASKS CONTROL`, two ends of socket pairs.
A thread reads TASKS all the time; the main thread runs the tasks one at a time, in
the order they came:

- `("call", task, step, ctx)`: one attempt of a steps flow's Python step, answered
  `("result", task, EffectResult, facts)`; `("calls", [(task, step, ctx), ...])`
  sends several at once, run in order;
- `("session", task, spec)`: a Python flow's session (`flow_session.FlowSession`),
  whose every ask goes to the runtime as `("ask", task, wants_reply, move, outcome,
  values)`, the flow's thread then reading its `("reply", reply)` when it wants one
  (and a `("clock", ms)` after each `("clock?",)`: `ctx.now()` reads the runtime's
  clock); then `("ended", task, facts)`. A step's success is sent the moment it
  returns too, as `("outcome", task, EffectResult)` (it otherwise rides with the
  next ask);
- `("stop",)`, between tasks.

On CONTROL a thread of its own takes `("cancel", task, grace_s)` (for the running
task, or one sent ahead) and `("revoke", task)`: a task sent ahead that has not
started is given back, `("revoked", task)`, instead of run.
`facts` tell the pool whether to keep the process: its resident memory, the threads
a task left running, the modules it imported. When the runtime's end closes (the
daemon stopped or died) the process exits at once: like a step on the daemon's own
threads, whatever ran here is then in flight, hence ambiguous.
"""

from __future__ import annotations

import collections
import os
import queue
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Any, NoReturn

from looms_runtime._cancel import CancelToken
from looms_runtime._effects.python import run_python
from looms_runtime._effects.worker_wire import Wire, WireClosed
from looms_runtime._engine.flow_asks import FlowAsk
from looms_runtime._engine.flow_session import FlowSession

_PAGE = os.sysconf("SC_PAGE_SIZE")


def resident_bytes() -> int:
    """This process's resident memory now."""
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


class Worker:
    """The worker's loop (see the module docstring)."""

    def __init__(self, wire: Wire, control: Wire) -> None:
        self.wire = wire
        self.control = control
        self._tokens: dict[int, CancelToken] = {}
        self._cancels: dict[int, float] = {}
        """Cancels of tasks sent ahead, for when they start."""
        self._revoked: set[int] = set()
        """Revokes of tasks still on their way in."""
        self._local: collections.deque[tuple[Any, ...]] = collections.deque()
        """The tasks received and not started, in order."""
        self._answers: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        """Replies and clock readings for the running session."""
        self._cond = threading.Condition()
        self._baseline_threads = 0
        self._seen_modules: set[str] = set()
        self._modules_count = 0

    def serve(self) -> None:
        for target, name in ((self._receive, "tasks"), (self._listen, "control")):
            threading.Thread(target=target, name=f"looms-worker-{name}", daemon=True).start()
        self._baseline_threads = threading.active_count()
        while True:
            with self._cond:
                while not self._local:
                    self._cond.wait()
                message = self._local.popleft()
                kind = message[0]
                if kind == "stop":
                    return
                task, token = message[1], CancelToken()
                self._tokens[task] = token
                grace = self._cancels.pop(task, None)
            if grace is not None:
                token.cancel(grace)
            try:
                if kind == "call":
                    result = run_python(message[2], message[3], token, timeout_s=None)
                    self._send("result", task, result, self._facts())
                elif kind == "session":
                    self._session(task, message[2], token)
                    self._send("ended", task, self._facts())
            finally:
                with self._cond:
                    self._tokens.pop(task, None)

    def _receive(self) -> None:
        """Reads TASKS all the time, so that a task sent ahead can be given back."""
        while True:
            try:
                message = self.wire.receive()
            except WireClosed:
                _gone()
            kind = message[0]
            if kind in ("reply", "clock"):
                self._answers.put(message)
                continue
            arrived = [("call", *item) for item in message[1]] if kind == "calls" else [message]
            with self._cond:
                revoked = [m for m in arrived if m[0] != "stop" and m[1] in self._revoked]
                for item in revoked:
                    self._revoked.discard(item[1])
                self._local.extend(m for m in arrived if m not in revoked)
                self._cond.notify()
            for item in revoked:
                self._send("revoked", item[1])

    def _listen(self) -> None:
        while True:
            try:
                message = self.control.receive()
            except WireClosed:
                _gone()
            kind, task = message[0], message[1]
            given_back = False
            with self._cond:
                token = self._tokens.get(task)
                if token is None and kind == "cancel":
                    self._cancels[task] = float(message[2])
                elif token is None and kind == "revoke":
                    waiting = next((m for m in self._local if m[1] == task), None)
                    if waiting is not None:
                        self._local.remove(waiting)
                        given_back = True
                    else:
                        self._revoked.add(task)  # still on its way in
            if token is not None and kind == "cancel":
                token.cancel(float(message[2]))
            if given_back:
                self._send("revoked", task)

    def _session(self, task: int, spec: dict[str, Any], token: CancelToken) -> None:
        session = FlowSession(
            **spec,
            clock_ms=self._clock_ms,
            submit=lambda ask: self._ask(task, ask),
            on_outcome=lambda result: self._send("outcome", task, result),
        )
        # The runtime's cancel reaches the session's own token.
        token.on_cancel(lambda: session.token.cancel(token.grace_s))
        session.run()

    def _ask(self, task: int, ask: FlowAsk) -> bool:
        """On the flow's thread: the runtime's reply comes through `_answers`."""
        wants = ask.reply is not None
        self._send("ask", task, wants, ask.move, ask.outcome, ask.values)
        if ask.reply is not None:
            ask.reply.set_result(self._answer("reply"))
        return True

    def _clock_ms(self) -> int:
        self._send("clock?")
        return int(self._answer("clock"))

    def _answer(self, kind: str) -> Any:
        message = self._answers.get()
        if message is None or message[0] != kind:
            raise RuntimeError(f"the runtime answered {message!r}, not {kind!r}")
        return message[1]

    def _facts(self) -> dict[str, Any]:
        return {
            "rss_bytes": resident_bytes(),
            "stray_threads": max(0, threading.active_count() - self._baseline_threads),
            "modules": self._new_module_files(),
        }

    def _new_module_files(self) -> dict[str, int]:
        """The source files of modules imported since the last task (outside the
        interpreter's own library), with their mtimes then."""
        if len(sys.modules) == self._modules_count:
            return {}  # nothing imported since (modules are seldom removed)
        self._modules_count = len(sys.modules)
        found: dict[str, int] = {}
        for name, module in list(sys.modules.items()):
            if name in self._seen_modules:
                continue
            self._seen_modules.add(name)
            path = getattr(module, "__file__", None)
            if not path or path.startswith(sys.base_prefix) or "site-packages" in path:
                continue
            try:
                found[path] = Path(path).stat().st_mtime_ns
            except OSError:
                continue
        return found

    def _send(self, *message: Any) -> None:
        try:
            self.wire.send(*message)
        except WireClosed:
            _gone()


def _gone() -> NoReturn:
    """The runtime is gone: so is everything this process ran for it."""
    os._exit(0)


def main(argv: list[str]) -> int:
    wire = Wire(socket.socket(fileno=int(argv[1])))
    control = Wire(socket.socket(fileno=int(argv[2])))
    # The daemon's terminal's Ctrl-C is the daemon's to handle; its end closing ends us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        hello = wire.receive()
    except WireClosed:
        return 0
    sys.path[:] = list(hello[1])
    worker = Worker(wire, control)
    wire.send("ready", os.getpid())  # imported: a task's time limit starts with the task
    worker.serve()
    # Threads a task left behind must not keep the process alive.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
