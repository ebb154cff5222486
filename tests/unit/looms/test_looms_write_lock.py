"""The database's write lock: taken in turn, urgent acquirers first."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from looms_runtime.db import _PriorityLock

DEADLINE_S = 30.0


def _until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.001)


def _waiting(lock: _PriorityLock, *, urgent: bool, count: int = 1) -> Callable[[], bool]:
    return lambda: len(lock._lines[urgent]) >= count


def test_a_thread_that_releases_and_acquires_again_waits_its_turn() -> None:
    # The committer's pattern under a backlog: release, acquire at once, again and
    # again. A thread already waiting must get the lock at the next release.
    lock = _PriorityLock()
    order: list[str] = []
    lock.acquire(urgent=False)

    def wait_then_take() -> None:
        lock.acquire(urgent=False)
        order.append("waiter")
        lock.release()

    waiter = threading.Thread(target=wait_then_take, daemon=True)
    waiter.start()
    _until(_waiting(lock, urgent=False))
    for _ in range(50):
        lock.release()
        lock.acquire(urgent=False)
        order.append("busy")
    lock.release()
    waiter.join(DEADLINE_S)
    assert order[0] == "waiter", order[:5]


def test_urgent_acquirers_go_before_the_others_each_kind_in_order() -> None:
    lock = _PriorityLock()
    order: list[str] = []

    def take(name: str, *, urgent: bool) -> threading.Thread:
        def run() -> None:
            lock.acquire(urgent=urgent)
            order.append(name)
            lock.release()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    lock.acquire(urgent=False)
    threads = [take("plain-1", urgent=False)]
    _until(_waiting(lock, urgent=False, count=1))
    threads.append(take("plain-2", urgent=False))
    _until(_waiting(lock, urgent=False, count=2))
    threads.append(take("urgent-1", urgent=True))
    _until(_waiting(lock, urgent=True, count=1))
    threads.append(take("urgent-2", urgent=True))
    _until(_waiting(lock, urgent=True, count=2))
    lock.release()
    for thread in threads:
        thread.join(DEADLINE_S)
    assert order == ["urgent-1", "urgent-2", "plain-1", "plain-2"]


def test_the_lock_is_reentrant_and_free_once_released_as_often() -> None:
    lock = _PriorityLock()
    lock.acquire(urgent=False)
    lock.acquire(urgent=True)
    lock.release()

    def take() -> None:
        lock.acquire(urgent=False)
        lock.release()

    other = threading.Thread(target=take, daemon=True)
    other.start()
    _until(_waiting(lock, urgent=False))
    assert other.is_alive()  # still held once
    lock.release()
    other.join(DEADLINE_S)
    assert not other.is_alive()
