"""The runtime's thread pools, and effect attempts started together."""

from __future__ import annotations

import threading
from collections.abc import Callable

from looms_runtime._effects.context import EffectContext
from looms_runtime._effects.launch import EffectRunner
from looms_runtime._history.definitions import PythonStep
from looms_runtime._history.outcome import EffectResult
from looms_runtime._workers.pool import ThreadPool

WAIT_S = 10.0


def blocked_tasks(
    count: int, release: threading.Event, started: list[int]
) -> list[Callable[[], None]]:
    lock = threading.Lock()

    def task(n: int) -> None:
        with lock:
            started.append(n)
        release.wait(WAIT_S)

    return [lambda n=n: task(n) for n in range(count)]  # type: ignore[misc]


def wait_until(condition: Callable[[], bool]) -> bool:
    done = threading.Event()
    for _ in range(1000):
        if condition():
            return True
        done.wait(0.01)
    return condition()


def test_a_batch_on_an_unbounded_pool_starts_one_thread_per_task() -> None:
    pool = ThreadPool("t-unbounded", None)
    release = threading.Event()
    started: list[int] = []

    pool.submit_many(blocked_tasks(5, release, started))

    assert wait_until(lambda: len(started) == 5)
    assert pool.busy == 5
    assert len([t for t in threading.enumerate() if t.name.startswith("t-unbounded")]) == 5
    release.set()
    assert pool.shutdown(WAIT_S)


def test_a_batch_on_a_bounded_pool_queues_beyond_its_threads() -> None:
    pool = ThreadPool("t-bounded", 2)
    release = threading.Event()
    started: list[int] = []

    pool.submit_many(blocked_tasks(5, release, started))

    assert wait_until(lambda: len(started) == 2)
    assert len([t for t in threading.enumerate() if t.name.startswith("t-bounded")]) == 2
    release.set()
    assert wait_until(lambda: len(started) == 5)
    assert pool.shutdown(WAIT_S)


def test_a_batch_reuses_idle_threads() -> None:
    pool = ThreadPool("t-idle", None)
    release = threading.Event()
    release.set()
    started: list[int] = []
    pool.submit_many(blocked_tasks(3, release, started))
    assert wait_until(lambda: len(started) == 3 and pool.busy == 0)

    pool.submit_many(blocked_tasks(2, release, started))

    assert wait_until(lambda: len(started) == 5)
    assert len([t for t in threading.enumerate() if t.name.startswith("t-idle")]) == 3
    assert pool.shutdown(WAIT_S)


def context(run_id: str) -> EffectContext:
    return EffectContext(
        run_id=run_id,
        effect_id="mark",
        step_id="mark",
        attempt=1,
        input=None,
        input_json="null",
        run_env={},
        env_prefix="LOOMS_",
        output_limit_bytes=1024,
    )


def test_attempts_launched_in_a_gathered_block_start_when_it_ends() -> None:
    runner = EffectRunner()
    step = PythonStep(id="mark", ref="builtins:len")
    results: list[EffectResult] = []
    done = threading.Semaphore(0)

    def on_done(result: EffectResult) -> None:
        results.append(result)
        done.release()

    with runner.gathered():
        for n in range(3):
            runner.launch(step, context(f"run-{n}"), on_done, timeout_s=None)
        with runner.gathered():  # nested: the outer block starts these too
            runner.launch(step, context("run-3"), on_done, timeout_s=None)
        assert not done.acquire(timeout=0.2)  # held until the block ends
        assert results == []

    for _ in range(4):
        assert done.acquire(timeout=WAIT_S)
    assert len(results) == 4
    assert all(not result.ok for result in results)  # len(None) raises: each attempt ran
    assert runner.close(WAIT_S)
