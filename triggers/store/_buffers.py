"""The buffer decisions, shared by every store's pending pass so they cannot disagree.

Pure: given a trigger and the occurrences waiting in its buffer (oldest first),
say which launch, which wait and which are dropped, under the trigger's policy as
it is now (`resolve_buffer`). The claim's own decisions are `_decide.py`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from triggers.model import Action, Outcome, Overlap, Reason, Trigger
from triggers.store._decide import Decision, blocked, capacity

OWN_KINDS = frozenset({"scheduled", "after"})
"""The ledger kinds of a trigger's own occurrences (its schedule's, or its upstream's
runs'), as opposed to an operator's (manual fires, backfills)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Waiting:
    """A buffered occurrence, as the buffer resolution sees it."""

    occurrence_at: datetime
    operator: bool
    """Asked for by an operator (manual fire, backfill), not produced by the schedule."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Active:
    """An active (launching or launched) occurrence of the trigger."""

    occurrence_at: datetime
    run_id: str | None


@dataclass(slots=True)
class BufferPlan:
    """What to do with each waiting occurrence, by its index in the input."""

    launch: list[tuple[int, str | None]] = field(default_factory=list)
    """Indexes to launch now, each with the run id it supersedes (or None)."""
    drop: list[tuple[int, Outcome, Reason]] = field(default_factory=list)
    keep: list[int] = field(default_factory=list)
    scheduled_launches: int = 0
    pool_full: bool = False
    """The trigger had room, its pool had not: what it keeps waits for a slot (the
    caller records them buffered with reason `pool_full`, so they keep their turn)."""


def resolve_buffer(
    trigger: Trigger,
    waiting: Sequence[Waiting],
    *,
    active: Sequence[Active],
    pool_room: int | None = None,
) -> BufferPlan:
    """Resolve a trigger's buffer, oldest first, under its policy as it is now.

    Order is kept: nothing launches while an older occurrence still waits. A
    retired trigger drops its buffer (`disabled`); a disabled one drops its own
    occurrences; a paused one holds its own occurrences until it resumes, while an
    operator's keep going (they bypass pause). With a free run slot the oldest
    launches. Otherwise, by policy: `skip` and `allow` drop the trigger's own
    occurrences (`overlap`); `buffer` keeps one; `buffer_all` keeps up to
    `max_buffer` (the rest `buffer_full`); `supersede` keeps only the newest (the
    older ones, and any older than an active occurrence, are `superseded`) and
    turns it into a supersede of the active run once that run has an id.

    `pool_room` is the free slots of the trigger's pool (None: no pool): launches
    take them too, and an occurrence its trigger has room for but its pool has not
    waits, or is dropped with reason `pool_full`.
    """
    spec = trigger.spec
    plan = BufferPlan()
    own = max(0, capacity(spec.overlap, spec.max_active) - len(active))
    free = own if pool_room is None else min(own, max(0, pool_room))
    pool_full = plan.pool_full = own > free and not trigger.paused
    runs_left = None if spec.max_runs is None else spec.max_runs - trigger.runs_launched
    newest = _newest_own(waiting, active) if spec.overlap is Overlap.SUPERSEDE else None
    queued = 0  # occurrences kept so far that later ones must wait behind
    for index, item in enumerate(waiting):
        if trigger.retired or (not spec.enabled and not item.operator):
            plan.drop.append((index, Outcome.SKIPPED, Reason.DISABLED))
            continue
        if not item.operator:
            if trigger.paused:
                plan.keep.append(index)
                continue
            if runs_left is not None and runs_left <= 0:
                plan.drop.append((index, Outcome.SKIPPED, Reason.MAX_RUNS))
                continue
            if spec.overlap is Overlap.SUPERSEDE and index != newest:
                plan.drop.append((index, Outcome.SUPERSEDED, Reason.OVERLAP))
                continue
        if free and not queued:
            plan.launch.append((index, None))
            free -= 1
            if not item.operator:
                plan.scheduled_launches += 1
                runs_left = None if runs_left is None else runs_left - 1
            continue
        if item.operator:
            plan.keep.append(index)
            queued += 1
            continue
        decision = blocked(trigger, _waiting_own(spec.overlap, spec.max_buffer, queued, active))
        if decision.action is Action.SKIP:
            reason = decision.reason or Reason.OVERLAP
            if pool_full and reason is Reason.OVERLAP:
                reason = Reason.POOL_FULL
            plan.drop.append((index, Outcome.SKIPPED, reason))
        elif decision.action is Action.BUFFER:
            plan.keep.append(index)
            queued += 1
        else:
            plan.launch.append((index, active[-1].run_id))
            plan.scheduled_launches += 1
            runs_left = None if runs_left is None else runs_left - 1
    return plan


def _waiting_own(
    overlap: Overlap, max_buffer: int, queued: int, active: Sequence[Active]
) -> Decision:
    """Skip, keep buffered or supersede one of the trigger's own occurrences that
    cannot launch freely."""
    match overlap:
        case Overlap.SKIP | Overlap.ALLOW:
            return Decision(Action.SKIP, Reason.OVERLAP)
        case Overlap.BUFFER:
            if queued < min(1, max_buffer):
                return Decision(Action.BUFFER)
            return Decision(Action.SKIP, Reason.OVERLAP)
        case Overlap.BUFFER_ALL:
            if queued < max_buffer:
                return Decision(Action.BUFFER)
            return Decision(Action.SKIP, Reason.BUFFER_FULL)
        case Overlap.SUPERSEDE:
            if not queued and active and all(a.run_id is not None for a in active):
                return Decision(Action.SUPERSEDE)
            return Decision(Action.BUFFER)


def _newest_own(waiting: Sequence[Waiting], active: Sequence[Active]) -> int | None:
    """The index of the newest of the trigger's own waiting occurrences, unless an
    active occurrence is newer still (it already superseded them all)."""
    own = [i for i, item in enumerate(waiting) if not item.operator]
    if not own:
        return None
    newest = max(own, key=lambda i: waiting[i].occurrence_at)
    if any(a.occurrence_at > waiting[newest].occurrence_at for a in active):
        return None
    return newest
