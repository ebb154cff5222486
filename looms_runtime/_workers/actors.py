"""Per-run serialization: each run has one mailbox, drained by one worker at a time.

A run is scheduled on the worker pool only while its mailbox holds operations, so an
idle, sleeping or waiting run costs no thread (and, once evicted, no memory). External
requests are bounded per run: a full mailbox is an overload error, never a queue
that grows without limit.
"""

from __future__ import annotations

import functools
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

import structlog

from looms_runtime._cancel import CancelToken
from looms_runtime._history.outcome import EffectResult
from looms_runtime._workers.pool import ThreadPool
from looms_runtime.errors import RunOverloadedError, RuntimeClosedError

log = structlog.get_logger()


class Op(NamedTuple):
    """One operation for a run: drive it (`refresh`: re-read its pending requests
    first), an effect's result, or an ask of the run's Python flow session (a tuple:
    a start batch makes one per run)."""

    kind: Literal["drive", "outcome", "flow"]
    result: EffectResult | None = None
    refresh: bool = False
    seed: Any = None
    ask: Any = None


DRIVE = Op("drive")
REFRESH = Op("drive", refresh=True)


class Attempt(NamedTuple):
    """An effect attempt running now: its cancel token, and its directory when it runs
    under a supervisor."""

    token: CancelToken
    path: Any = None


class Slot:
    """A run's mailbox and the working state its worker keeps between operations."""

    __slots__ = (
        "abandon_at",
        "attempts",
        "discard",
        "flow",
        "flow_crashes",
        "flow_effects",
        "log_fields",
        "ops",
        "reply",
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
        self.attempts: dict[str, Attempt] = {}
        """The run's effect attempts running now, by effect id (a graph runs several)."""
        self.unflushed: Any = None
        self.stash: list[Op] = []
        self.flow: Any = None
        """The run's live Python flow session, if any."""
        self.flow_crashes = 0
        """Sessions of the run whose worker process died with no step of theirs in flight."""
        self.flow_effects: set[str] = set()
        """The effects its session runs now (dispatched, outcome not yet asked): one
        step, or the branches of a `parallel` call."""
        self.reply: Any = None
        """An answer to the session's last ask, sent once the ask's events are durable."""
        self.abandon_at: int | None = None
        """When attempts still running under a cancel are given up (epoch ms)."""
        self.discard: list[Any] = []
        """Attempt directories to remove once the outcome they hold is durable."""
        self.log_fields: dict[str, Any] | None = None
        """The run's attributes bound to its log lines (None: the run is not read yet)."""

    def idle(self) -> bool:
        return (
            not self.ops
            and not self.stash
            and not self.attempts
            and self.unflushed is None
            and self.flow is None
        )

    def running(self) -> bool:
        """Whether something of the run executes now (an attempt, or its flow's code)."""
        return bool(self.attempts) or self.flow is not None

    def in_flight(self) -> tuple[str, ...]:
        """The effects this process runs now for the run (none of them is ambiguous)."""
        return (*self.attempts, *self.flow_effects)

    def tokens(self) -> list[CancelToken]:
        """The cancel tokens of what runs now."""
        found = [attempt.token for attempt in self.attempts.values()]
        if self.flow is not None:
            found.append(self.flow.token)
        return found


class Actors:
    """The mailboxes of the runs this runtime is working on."""

    def __init__(self, pool: ThreadPool, *, max_pending: int) -> None:
        self._pool = pool
        self._max_pending = max_pending
        self._lock = threading.Lock()
        self._slots: dict[str, Slot] = {}
        self._closed = False
        self.handler: Callable[[Slot, Op], None] = lambda slot, op: None

    def submit(self, run_id: str, op: Op, *, external: bool = False) -> bool:
        """Queue `op` for the run and make sure a worker will drain its mailbox.

        Returns False when the operation was dropped (an internal one after `close`).

        Raises:
            RunOverloadedError: an external request finds the run's mailbox full.
            RuntimeClosedError: an external request after `close`.
        """
        with self._lock:
            if self._closed:
                if external:
                    raise RuntimeClosedError("the runtime is closed")
                log.debug("operation_dropped_after_close", run_id=run_id, kind=op.kind)
                return False
            slot = self._slots.get(run_id)
            if slot is None:
                slot = self._slots[run_id] = Slot(run_id)
            if external and len(slot.ops) >= self._max_pending:
                raise RunOverloadedError(
                    "too many pending operations for the run", run_id=run_id, pending=len(slot.ops)
                )
            if op == DRIVE and slot.ops and slot.ops[-1] == DRIVE:
                return True  # a queued drive will see everything this one would
            slot.ops.append(op)
            if slot.scheduled:
                return True
            slot.scheduled = True
        self._pool.submit(lambda: self._drain(slot))
        return True

    def submit_many(self, items: list[tuple[str, Op]]) -> None:
        """`submit` for many runs (internal operations), under one lock acquisition."""
        ready: list[Slot] = []
        with self._lock:
            if self._closed:
                return
            for run_id, op in items:
                slot = self._slots.get(run_id)
                if slot is None:
                    slot = self._slots[run_id] = Slot(run_id)
                slot.ops.append(op)
                if not slot.scheduled:
                    slot.scheduled = True
                    ready.append(slot)
        self._pool.submit_many([functools.partial(self._drain, slot) for slot in ready])

    def handle_here(self, items: list[tuple[str, Op]]) -> None:
        """`submit_many`, but each run's first operation is handled on the calling thread.

        For operations that only start work elsewhere (a new run's first attempts): the
        caller pays no hand-off to a worker. Whatever else is queued for a run by then
        goes to a worker as usual.
        """
        ready: list[tuple[Slot, Op]] = []
        with self._lock:
            if self._closed:
                return
            for run_id, op in items:
                slot = self._slots.get(run_id)
                if slot is None:
                    slot = self._slots[run_id] = Slot(run_id)
                if slot.scheduled or slot.ops:
                    slot.ops.append(op)  # its worker sees to it, in order
                    continue
                slot.scheduled = True
                ready.append((slot, op))
        later: list[Slot] = []
        for slot, op in ready:
            try:
                self.handler(slot, op)
            except Exception:
                log.exception("run_operation_failed", run_id=slot.run_id, kind=op.kind)
            with self._lock:
                if slot.ops:
                    later.append(slot)
                    continue
                slot.scheduled = False
                if slot.idle() and self._slots.get(slot.run_id) is slot:
                    del self._slots[slot.run_id]
        self._pool.submit_many([functools.partial(self._drain, slot) for slot in later])

    def known(self, run_id: str) -> bool:
        """Whether the run has a mailbox here now (queued work, or something in flight)."""
        with self._lock:
            return run_id in self._slots

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

    def tokens(self, run_id: str) -> list[CancelToken]:
        """The cancel tokens of what runs now for the run."""
        with self._lock:
            slot = self._slots.get(run_id)
            return [] if slot is None else slot.tokens()

    def busy_effects(self, *, detachable: bool = True) -> int:
        """Effects running now for this runtime's runs (without `detachable`: only those
        that run in this process and would be lost with it)."""
        with self._lock:
            return sum(
                1
                for slot in self._slots.values()
                for token in slot.tokens()
                if detachable or not token.detachable
            )

    def shutdown(self, timeout_s: float) -> None:
        """Take no more operations; let the workers finish the queued ones."""
        with self._lock:
            self._closed = True
        self._pool.shutdown(timeout_s)
