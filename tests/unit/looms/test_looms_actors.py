"""Per-run mailboxes: serialized, coalesced, and bounded for external requests."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from looms_runtime._history.outcome import EffectResult
from looms_runtime._workers.actors import DRIVE, Actors, Op, Slot
from looms_runtime.errors import RunOverloadedError, RuntimeClosedError


class ManualPool:
    """Holds submitted tasks until the test runs them: no threads."""

    def __init__(self) -> None:
        self.tasks: list[Callable[[], None]] = []

    def submit(self, task: Callable[[], None]) -> None:
        self.tasks.append(task)

    def shutdown(self, timeout_s: float) -> bool:
        return True

    def run_all(self) -> None:
        while self.tasks:
            self.tasks.pop(0)()


def request(n: int) -> Op:
    return Op("outcome", result=EffectResult(effect_id=f"e{n}", attempt=1, ok=True))


def make(max_pending: int = 2) -> tuple[Actors, ManualPool, list[tuple[str, Op]]]:
    pool = ManualPool()
    actors = Actors(pool, max_pending=max_pending)  # type: ignore[arg-type]  # a pool without threads
    handled: list[tuple[str, Op]] = []

    def handle(slot: Slot, op: Op) -> None:
        handled.append((slot.run_id, op))

    actors.handler = handle
    return actors, pool, handled


def test_a_full_mailbox_refuses_external_requests() -> None:
    actors, _, _ = make(max_pending=2)
    actors.submit("r1", request(1), external=True)
    actors.submit("r1", request(2), external=True)

    with pytest.raises(RunOverloadedError) as caught:
        actors.submit("r1", request(3), external=True)

    assert caught.value.details == {"run_id": "r1", "pending": 2}
    actors.submit("r2", request(1), external=True)


def test_each_run_is_scheduled_once_and_drains_in_order() -> None:
    actors, pool, handled = make(max_pending=5)
    actors.submit("r1", request(1), external=True)
    actors.submit("r1", request(2), external=True)
    actors.submit("r2", request(1), external=True)

    assert len(pool.tasks) == 2
    pool.run_all()
    assert [(run, op.result.effect_id if op.result else None) for run, op in handled] == [
        ("r1", "e1"),
        ("r1", "e2"),
        ("r2", "e1"),
    ]


def test_queued_drives_coalesce() -> None:
    actors, pool, handled = make()
    for _ in range(5):
        actors.submit("r1", DRIVE)

    pool.run_all()

    assert handled == [("r1", DRIVE)]


def test_after_shutdown_external_requests_are_refused_and_internal_ones_dropped() -> None:
    actors, pool, handled = make()
    actors.shutdown(0)

    with pytest.raises(RuntimeClosedError):
        actors.submit("r1", request(1), external=True)
    actors.submit("r1", DRIVE)
    pool.run_all()
    assert handled == []
