"""Per-run serialization: each run has one mailbox, drained by one worker at a time.

A run is scheduled on the worker pool only while its mailbox holds operations, so an
idle, sleeping or waiting run costs no thread (and, once evicted, no memory). External
requests are bounded per run: a full mailbox is an overload error, never a queue
that grows without limit.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import structlog

from looms_runtime._effects.context import CancelToken
from looms_runtime._effects.result import EffectResult
from looms_runtime._planner import InboxItem
from looms_runtime._threads import ThreadPool
from looms_runtime.errors import RunOverloadedError, RuntimeClosedError

log = structlog.get_logger()


@dataclass(frozen=True, slots=True)
class Op:
    """One operation for a run: drive it (optionally with new requests), or an effect's result."""

    kind: Literal["drive", "outcome"]
    result: EffectResult | None = None
    requests: tuple[InboxItem, ...] = ()
    refresh: bool = False
    seed: Any = None


DRIVE = Op("drive")


class Slot:
    """A run's mailbox and the working state its worker keeps between operations."""

    __slots__ = (
        "in_flight",
        "in_flight_effect",
        "ops",
        "run",
        "run_id",
        "scheduled",
        "stash",
        "unflushed",
    )

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.ops: deque[Op] = deque()
        self.scheduled = False
        self.run: Any = None
        self.in_flight: CancelToken | None = None
        self.in_flight_effect: str | None = None
        self.unflushed: Any = None
        self.stash: list[Op] = []

    def idle(self) -> bool:
        return not self.ops and not self.stash and self.in_flight is None and self.unflushed is None


class Actors:
    """The mailboxes of the runs this runtime is working on."""

    def __init__(self, pool: ThreadPool, *, max_pending: int) -> None:
        self._pool = pool
        self._max_pending = max_pending
        self._lock = threading.Lock()
        self._slots: dict[str, Slot] = {}
        self._closed = False
        self.handler: Callable[[Slot, Op], None] = lambda slot, op: None

    def submit(self, run_id: str, op: Op, *, external: bool = False) -> None:
        """Queue `op` for the run and make sure a worker will drain its mailbox.

        Raises:
            RunOverloadedError: an external request finds the run's mailbox full.
            RuntimeClosedError: an external request after `close`.
        """
        with self._lock:
            if self._closed:
                if external:
                    raise RuntimeClosedError("the runtime is closed")
                log.debug("operation_dropped_after_close", run_id=run_id, kind=op.kind)
                return
            slot = self._slots.get(run_id)
            if slot is None:
                slot = self._slots[run_id] = Slot(run_id)
            if external and len(slot.ops) >= self._max_pending:
                raise RunOverloadedError(
                    "too many pending operations for the run", run_id=run_id, pending=len(slot.ops)
                )
            if op == DRIVE and slot.ops and slot.ops[-1] == DRIVE:
                return  # a queued drive will see everything this one would
            slot.ops.append(op)
            if slot.scheduled:
                return
            slot.scheduled = True
        self._pool.submit(lambda: self._drain(slot))

    def _drain(self, slot: Slot) -> None:
        while True:
            with self._lock:
                if not slot.ops:
                    slot.scheduled = False
                    if slot.idle() and self._slots.get(slot.run_id) is slot:
                        del self._slots[slot.run_id]
                    return
                op = slot.ops.popleft()
            try:
                self.handler(slot, op)
            except Exception:
                log.exception("run_operation_failed", run_id=slot.run_id, kind=op.kind)

    def check_capacity(self, run_id: str) -> None:
        """Refuse early a request the run's mailbox has no room for.

        Raises:
            RunOverloadedError: the mailbox is full.
        """
        with self._lock:
            slot = self._slots.get(run_id)
            if slot is not None and len(slot.ops) >= self._max_pending:
                raise RunOverloadedError(
                    "too many pending operations for the run", run_id=run_id, pending=len(slot.ops)
                )

    def in_flight(self, run_id: str) -> CancelToken | None:
        with self._lock:
            slot = self._slots.get(run_id)
            return None if slot is None else slot.in_flight

    def busy_effects(self) -> int:
        """Effects running now for this runtime's runs."""
        with self._lock:
            return sum(1 for slot in self._slots.values() if slot.in_flight is not None)

    def shutdown(self, timeout_s: float) -> None:
        """Take no more operations; let the workers finish the queued ones."""
        with self._lock:
            self._closed = True
        self._pool.shutdown(timeout_s)
