"""The claim decision, shared by every store so they cannot disagree.

Pure: given the trigger's counters as the claiming transaction sees them, and one
occurrence, say what happens to it. The caller applies the decision to its
counters before deciding the next occurrence of the same batch.
"""

from __future__ import annotations

from dataclasses import dataclass

from triggers.model import Action, Overlap, Reason, Trigger
from triggers.store.protocol import ClaimRequest


@dataclass(slots=True)
class Counters:
    """A trigger's mutable counters inside one claiming transaction."""

    active_count: int
    buffered_count: int
    runs_launched: int

    @classmethod
    def of(cls, trigger: Trigger) -> Counters:
        return cls(trigger.active_count, trigger.buffered_count, trigger.runs_launched)


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    reason: Reason | None = None


def decide(
    trigger: Trigger,
    counters: Counters,
    request: ClaimRequest,
    *,
    active_has_run: bool,
) -> Decision:
    """Decide one occurrence and update `counters` to reflect it.

    `active_has_run` says whether every active occurrence already has a run id: a
    reservation has no run the runtime could cancel, so supersede waits for it.
    """
    decision = _decide(trigger, counters, request, active_has_run=active_has_run)
    if decision.action in (Action.FIRE, Action.SUPERSEDE):
        counters.active_count += 1
        counters.runs_launched += 1
    elif decision.action is Action.BUFFER:
        counters.buffered_count += 1
    return decision


def _decide(
    trigger: Trigger, counters: Counters, request: ClaimRequest, *, active_has_run: bool
) -> Decision:
    spec = trigger.spec
    if trigger.retired:
        return Decision(Action.IGNORED)
    if request.kind == "scheduled":
        # Nothing is recorded here: the scheduler accounts for the occurrences of a
        # paused or disabled trigger as one skipped range, not row by row.
        if not spec.enabled:
            return Decision(Action.IGNORED, Reason.DISABLED)
        if trigger.paused:
            return Decision(Action.IGNORED, Reason.PAUSED)
        if spec.max_runs is not None and counters.runs_launched >= spec.max_runs:
            return Decision(Action.IGNORED, Reason.MAX_RUNS)
    overlap = request.overlap or spec.overlap
    capacity = spec.max_active if overlap is Overlap.ALLOW else 1
    waiting = counters.buffered_count > 0 and overlap in (Overlap.BUFFER, Overlap.BUFFER_ALL)
    if counters.active_count < capacity and not waiting:
        return Decision(Action.FIRE)
    match overlap:
        case Overlap.SKIP | Overlap.ALLOW:
            return Decision(Action.SKIP, Reason.OVERLAP)
        case Overlap.BUFFER:
            # One slot: while it is taken, later occurrences are skipped.
            if counters.buffered_count >= 1:
                return Decision(Action.SKIP, Reason.OVERLAP)
            return Decision(Action.BUFFER, Reason.OVERLAP)
        case Overlap.BUFFER_ALL:
            if counters.buffered_count >= spec.max_buffer:
                return Decision(Action.SKIP, Reason.BUFFER_FULL)
            return Decision(Action.BUFFER, Reason.OVERLAP)
        case Overlap.SUPERSEDE:
            if not active_has_run:
                if counters.buffered_count >= 1:
                    return Decision(Action.SKIP, Reason.OVERLAP)
                return Decision(Action.BUFFER, Reason.OVERLAP)
            return Decision(Action.SUPERSEDE)
