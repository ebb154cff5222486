"""A small pool of reused daemon threads.

Daemon threads, unlike `concurrent.futures` workers, do not hold the interpreter open
at exit: a command still running when the host process ends must not keep it alive
(the run stays durable and is found in flight by the next start).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

import structlog

from looms_runtime._clock import monotonic

log = structlog.get_logger()


class ThreadPool:
    """Runs callables FIFO on at most `max_threads` threads (`None`: as many as needed).

    Idle threads exit after `idle_timeout_s`, so a quiet runtime holds none of them.
    """

    def __init__(self, name: str, max_threads: int | None, *, idle_timeout_s: float = 30.0) -> None:
        self._name = name
        self._max = max_threads
        self._idle_timeout_s = idle_timeout_s
        self._cond = threading.Condition()
        self._tasks: deque[Callable[[], None]] = deque()
        self._threads: set[threading.Thread] = set()
        self._idle = 0
        self._closed = False

    def submit(self, task: Callable[[], None]) -> None:
        """Queue `task`.

        Raises:
            RuntimeError: the pool is shut down.
        """
        with self._cond:
            if self._closed:
                raise RuntimeError(f"thread pool {self._name} is shut down")
            self._tasks.append(task)
            if len(self._tasks) > self._idle and (
                self._max is None or len(self._threads) < self._max
            ):
                thread = threading.Thread(
                    target=self._work, name=f"{self._name}-{len(self._threads)}", daemon=True
                )
                self._threads.add(thread)
                thread.start()
            self._cond.notify()

    def submit_many(self, tasks: list[Callable[[], None]]) -> None:
        """Queue many tasks under one lock, starting the threads they need up to the bound.

        Raises:
            RuntimeError: the pool is shut down.
        """
        if not tasks:
            return
        with self._cond:
            if self._closed:
                raise RuntimeError(f"thread pool {self._name} is shut down")
            self._tasks.extend(tasks)
            # As `submit` would for each: one more thread per task no idle one takes.
            wanted = min(len(tasks), len(self._tasks) - self._idle)
            if self._max is not None:
                wanted = min(wanted, self._max - len(self._threads))
            for _ in range(wanted):
                thread = threading.Thread(
                    target=self._work, name=f"{self._name}-{len(self._threads)}", daemon=True
                )
                self._threads.add(thread)
                thread.start()
            self._cond.notify(len(tasks))

    def _work(self) -> None:
        me = threading.current_thread()
        while True:
            with self._cond:
                while not self._tasks:
                    if self._closed:
                        self._threads.discard(me)
                        return
                    self._idle += 1
                    woken = self._cond.wait(self._idle_timeout_s)
                    self._idle -= 1
                    if not woken and not self._tasks:
                        self._threads.discard(me)
                        return
                task = self._tasks.popleft()
            try:
                task()
            except Exception:
                log.exception("pool_task_failed", pool=self._name)

    def shutdown(self, timeout_s: float) -> bool:
        """Run the queued tasks, then stop; True when every thread ended within the timeout."""
        deadline = monotonic() + timeout_s
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            threads = list(self._threads)
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(max(0.0, deadline - monotonic()))
        return not any(thread.is_alive() for thread in threads)

    @property
    def busy(self) -> int:
        """Threads running a task now."""
        with self._cond:
            return len(self._threads) - self._idle
