"""What happens to an attempt that outlives its cancel's grace, and to its late result.

A Python call cannot be interrupted and a request or command may hang past its
kill: when the grace a cancel gave is over, the run does not wait for the attempt
any longer. Its effect is recorded `cancelled` (abandoned), so the run settles;
the result the attempt reports later is appended as `effect_outcome_late`, which
the fold keeps for the record and never applies.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from looms_runtime._engine.flow_host import FlowHost
from looms_runtime._history.events import EventType, NewEvent, new_event
from looms_runtime._history.fold import RunState
from looms_runtime._history.outcome import EffectResult
from looms_runtime._history.planner import late_outcome
from looms_runtime._store.committer import Committer
from looms_runtime._store.driver import driver_errors
from looms_runtime._store.reads import load_header
from looms_runtime._store.rows import AppendJob
from looms_runtime._workers.actors import Op, Slot
from looms_runtime.db import Database
from looms_runtime.errors import LoomsError

log = structlog.get_logger()

COMMAND_KILL_MARGIN_MS = 5000
"""A command gets SIGKILL when its grace ends; this long after, it is abandoned too."""


def abandon_after_ms(kind: str | None, grace_s: float) -> int:
    """How long after a cancel an attempt of this kind is given up."""
    margin = COMMAND_KILL_MARGIN_MS if kind == "command" else 0
    return round(grace_s * 1000) + margin


def abandoned(state: RunState, grace_s: float) -> tuple[NewEvent, ...]:
    """`effect_cancelled` for every attempt still dispatched when the grace is over."""
    return tuple(
        new_event(
            EventType.EFFECT_CANCELLED,
            effect_id=effect.effect_id,
            attempt=effect.attempt,
            error=f"abandoned: still running {grace_s:g}s after the cancel",
            output=None,
        )
        for effect in state.effects.values()
        if effect.status == "dispatched"
    )


class LateOutcomes:
    """Operations that reach a run after it settled (or left this owner)."""

    def __init__(
        self,
        *,
        db: Database,
        committer: Committer,
        owner: str,
        clock_ms: Callable[[], int],
        host: FlowHost,
    ) -> None:
        self._db = db
        self._committer = committer
        self._owner = owner
        self._clock_ms = clock_ms
        self._host = host

    def drop(self, slot: Slot, op: Op) -> None:
        """Forget the run's working copy after a failure to drive it (it is loaded again)."""
        slot.run = None
        slot.unflushed = None
        self._host.abandon(slot)
        if op.kind == "outcome" and op.result is not None:
            slot.attempts.pop(op.result.effect_id, None)
            log.error("effect_outcome_lost", effect_id=op.result.effect_id)
        elif op.kind == "flow" and op.ask is not None:
            self._host.refuse(op.ask)

    def orphan(self, slot: Slot, op: Op) -> None:
        """Settle the bookkeeping of `op` and keep any result it carries as a late one."""
        late: list[EffectResult] = []
        if op.kind == "outcome" and op.result is not None:
            slot.attempts.pop(op.result.effect_id, None)
            late.append(op.result)
        elif op.kind == "flow":
            ask = op.ask
            if slot.flow is ask.session:
                self._host.end(slot)
            self._host.refuse(ask)
            late.extend(r for r in (ask.outcome, getattr(ask.move, "result", None)) if r)
            late.extend(branch.result for branch in getattr(ask.move, "results", ()))
        for result in late:
            record_late(
                self._db,
                self._committer,
                slot.run_id,
                result,
                owner=self._owner,
                now_ms=self._clock_ms,
            )


def record_late(
    db: Database,
    committer: Committer,
    run_id: str,
    result: EffectResult,
    *,
    owner: str,
    now_ms: Callable[[], int],
) -> None:
    """Append a late result to a settled run we owned; anything else only logs it."""
    try:
        with driver_errors(), db.read() as conn:
            header = load_header(conn, run_id)
        if header is None or header.status in ("active", "parked") or header.lease_owner != owner:
            log.warning("effect_outcome_discarded", effect_id=result.effect_id)
            return
        job = AppendJob(
            run_id=run_id,
            expected_seq=header.last_seq,
            lease_epoch=header.lease_epoch,
            events=(late_outcome(result),),
            now_ms=now_ms(),
            status=header.status,
            next_wake_at=None,
            error=header.error,
        )
        committer.submit(job).result()
    except LoomsError as exc:
        log.warning("effect_outcome_late_lost", effect_id=result.effect_id, error=exc.message)
        return
    log.info("effect_outcome_late", effect_id=result.effect_id, ok=result.ok)
