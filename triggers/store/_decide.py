"""The claim's decisions, shared by every store so they cannot disagree.

Pure: given a trigger's counters as the deciding transaction sees them, say what
happens to one new occurrence (`decide`; the occurrences waiting in a buffer are
`_buffers.py`'s). The caller applies each decision to its counters before
deciding the next occurrence of the same trigger.

Occurrences an operator asked for (a manual fire, a backfill) are bounded by the
operator's request, not by `max_buffer`: once buffered they wait their turn in
order and are never dropped by a later policy. The trigger's own occurrences are
resolved by its policy at the time they are processed, so a policy change
applies to those still buffered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from triggers.errors import (
    RevisionMismatchError,
    StoreError,
    TriggersError,
    UnknownTriggerError,
)
from triggers.model import Action, Overlap, Reason, Trigger, TriggerSpec
from triggers.store.protocol import ClaimRequest


class TriggerView(Protocol):
    """What a decision reads of a trigger: a stored snapshot (`Trigger`), or the row
    itself in a store that holds its rows as objects (the memory store)."""

    @property
    def spec(self) -> TriggerSpec: ...
    @property
    def revision(self) -> int: ...
    @property
    def paused(self) -> bool: ...
    @property
    def retired(self) -> bool: ...
    @property
    def watermark_at(self) -> datetime: ...
    @property
    def active_count(self) -> int: ...
    @property
    def buffered_count(self) -> int: ...
    @property
    def runs_launched(self) -> int: ...
    @property
    def blocked_by(self) -> str | None: ...


class StoredTrigger(TriggerView, Protocol):
    """A trigger's whole stored state: what a snapshot (`Trigger`) is made of."""

    @property
    def pause_note(self) -> str | None: ...
    @property
    def paused_at(self) -> datetime | None: ...
    @property
    def created_at(self) -> datetime: ...
    @property
    def updated_at(self) -> datetime: ...


@dataclass(slots=True)
class Counters:
    """A trigger's mutable counters inside one deciding transaction."""

    active_count: int
    buffered_count: int
    runs_launched: int

    @classmethod
    def of(cls, trigger: TriggerView) -> Counters:
        return cls(trigger.active_count, trigger.buffered_count, trigger.runs_launched)

    def applied(self, trigger: StoredTrigger, *, watermark_at: datetime) -> Trigger:
        """`trigger` as the transaction leaves it: these counters and `watermark_at`.

        As `dataclasses.replace` would, at a fraction of its cost (every claim, for
        every trigger of its batch)."""
        return Trigger(
            spec=trigger.spec,
            revision=trigger.revision,
            paused=trigger.paused,
            pause_note=trigger.pause_note,
            paused_at=trigger.paused_at,
            retired=trigger.retired,
            watermark_at=watermark_at,
            active_count=self.active_count,
            buffered_count=self.buffered_count,
            runs_launched=self.runs_launched,
            blocked_by=trigger.blocked_by,
            created_at=trigger.created_at,
            updated_at=trigger.updated_at,
        )


def refusal(request: ClaimRequest, trigger: TriggerView | StoreError | None) -> TriggersError:
    """Why a request is not decided at all: its trigger is unknown, unreadable (the
    row's decoding error), or at another revision than the request was computed from."""
    if trigger is None:
        return UnknownTriggerError(
            f"no trigger {request.trigger_id!r}", trigger_id=request.trigger_id
        )
    if isinstance(trigger, StoreError):
        return trigger
    return RevisionMismatchError(
        f"trigger {request.trigger_id!r} is at revision {trigger.revision}, "
        f"not {request.expected_revision}",
        trigger_id=request.trigger_id,
        revision=trigger.revision,
        expected_revision=request.expected_revision,
    )


def decided_before(request: ClaimRequest, trigger: TriggerView) -> bool:
    """A scheduled occurrence at or before the watermark: decided already."""
    return request.kind == "scheduled" and request.occurrence_at <= trigger.watermark_at


def overlap_of(request: ClaimRequest, trigger: TriggerView) -> Overlap:
    """The policy a request meets: an operator's override, else the trigger's."""
    return request.overlap or trigger.spec.overlap


def may_supersede(
    request: ClaimRequest,
    trigger: TriggerView,
    *,
    existing: set[tuple[str, datetime, str]],
    covered: set[tuple[str, datetime]],
) -> bool:
    """Whether `request` is one the policy decides under `supersede` (not refused, not
    decided or held already, not covered by a range, not blocked): of a trigger's
    requests in a batch, the newest such supersedes the others."""
    return not (
        trigger.retired
        or trigger.revision != request.expected_revision
        or overlap_of(request, trigger) is not Overlap.SUPERSEDE
        or decided_before(request, trigger)
        or (request.trigger_id, request.occurrence_at, request.manual_key) in existing
        or (request.trigger_id, request.occurrence_at) in covered
        or excluded(request)
        or unmet(request)
        or (request.kind == "backfill" and request.occurrence_at > trigger.watermark_at)
        or (
            request.kind == "scheduled"
            and blocks_new_claims(trigger, Counters.of(trigger)) is not None
        )
    )


def superseding_triggers(
    requests: Sequence[ClaimRequest], stored: Mapping[str, TriggerView | StoreError]
) -> set[str]:
    """The requests' triggers with an active run that a `supersede` decision may replace
    (the policy's, or an operator's override): the ones whose active runs it reads."""
    overridden = {r.trigger_id for r in requests if r.overlap is Overlap.SUPERSEDE}
    return {
        trigger_id
        for trigger_id, trigger in stored.items()
        if not isinstance(trigger, StoreError)
        and trigger.active_count > 0
        and (trigger.spec.overlap is Overlap.SUPERSEDE or trigger_id in overridden)
    }


def newest_superseding(
    requests: Sequence[ClaimRequest],
    stored: Mapping[str, TriggerView | StoreError],
    *,
    existing: set[tuple[str, datetime, str]],
    covered: set[tuple[str, datetime]],
) -> dict[str, int]:
    """By trigger, the index of its newest request the policy decides under `supersede`:
    the older ones of the batch are superseded by it without ever starting."""
    newest: dict[str, int] = {}
    for index, request in enumerate(requests):
        trigger = stored.get(request.trigger_id)
        if not isinstance(trigger, StoreError | None) and may_supersede(
            request, trigger, existing=existing, covered=covered
        ):
            newest[request.trigger_id] = index
    return newest


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    reason: Reason | None = None


# The decisions are values: the common ones are made once, not for every occurrence.
_FIRE = Decision(Action.FIRE)
_IGNORED = Decision(Action.IGNORED)
_SKIP_OVERLAP = Decision(Action.SKIP, Reason.OVERLAP)
_BUFFER_OVERLAP = Decision(Action.BUFFER, Reason.OVERLAP)
_SKIP_CALENDAR = Decision(Action.SKIP, Reason.CALENDAR)
_SKIP_POOL_FULL = Decision(Action.SKIP, Reason.POOL_FULL)
_SKIP_REQUIREMENT = Decision(Action.SKIP, Reason.REQUIREMENT)


def excluded(request: ClaimRequest) -> bool:
    """A calendar of the trigger leaves the occurrence out. An operator's manual fire
    is never excluded: someone asked for it now."""
    return request.excluded_by is not None and request.kind != "manual"


def unmet(request: ClaimRequest) -> bool:
    """The trigger's `requires:` is not met for this scheduled occurrence."""
    return request.unmet is not None and request.kind == "scheduled"


def capacity(overlap: Overlap, max_active: int) -> int:
    """How many runs of a trigger may be active at once under `overlap`."""
    return max_active if overlap is Overlap.ALLOW else 1


def blocks_new_claims(trigger: TriggerView, counters: Counters) -> Reason | None:
    """Why the trigger takes no scheduled claim now, or None when it takes them."""
    spec = trigger.spec
    if not spec.enabled:
        return Reason.DISABLED
    if trigger.paused:
        return Reason.PAUSED
    if spec.max_runs is not None and counters.runs_launched >= spec.max_runs:
        return Reason.MAX_RUNS
    return None


def decide(
    trigger: TriggerView,
    counters: Counters,
    request: ClaimRequest,
    *,
    active_has_run: bool,
    replaced: bool = False,
    pool_room: int | None = None,
) -> Decision:
    """Decide one occurrence and update `counters` to reflect it.

    `active_has_run` says whether every active occurrence already has a run id: a
    reservation has no run the runtime could cancel, so supersede buffers behind
    it. `replaced` says that a newer occurrence of the same batch supersedes this
    one, which is then recorded `superseded` without ever starting. `pool_room` is
    what the trigger's pool has left (its slots less its active runs and the
    occurrences waiting for one; None: no pool): with none left, an occurrence its
    trigger has room for follows the policy with reason `pool_full`.
    """
    decision = blocked(
        trigger,
        _decide(
            trigger,
            counters,
            request,
            active_has_run=active_has_run,
            replaced=replaced,
            pool_room=pool_room,
        ),
    )
    if decision.action in (Action.FIRE, Action.SUPERSEDE):
        counters.active_count += 1
        # `max_runs` counts the trigger's own launches; an operator's are extra.
        if request.kind == "scheduled":
            counters.runs_launched += 1
    elif decision.action is Action.BUFFER:
        counters.buffered_count += 1
    return decision


def blocked(trigger: TriggerView, decision: Decision) -> Decision:
    """An occurrence that cannot launch because of an active run is `blocked` when that
    run waits for an operator: nothing launches until someone acts, and the ledger says so."""
    if (
        trigger.blocked_by is not None
        and decision.action is Action.SKIP
        and decision.reason in (Reason.OVERLAP, Reason.BUFFER_FULL)
    ):
        return Decision(Action.SKIP, Reason.BLOCKED)
    return decision


def _decide(
    trigger: TriggerView,
    counters: Counters,
    request: ClaimRequest,
    *,
    active_has_run: bool,
    replaced: bool,
    pool_room: int | None,
) -> Decision:
    spec = trigger.spec
    if trigger.retired:
        return _IGNORED
    if request.kind == "scheduled":
        # Nothing is recorded here: the scheduler accounts for the occurrences of a
        # paused or disabled trigger as one skipped range, not row by row.
        blocked = blocks_new_claims(trigger, counters)
        if blocked is not None:
            return Decision(Action.IGNORED, blocked)
    if excluded(request):
        # Before the overlap policy: an excluded day takes no run slot, no buffer
        # place, and is not superseded by a newer occurrence (it never would have run).
        return _SKIP_CALENDAR
    if unmet(request):
        # As a calendar: an occurrence whose requirement is unmet never would have run.
        return _SKIP_REQUIREMENT
    overlap = request.overlap or spec.overlap
    if replaced:
        return Decision(Action.SUPERSEDED, Reason.OVERLAP)
    if request.overlap is Overlap.ALLOW:
        # An operator asking for `allow` wants this run alongside the others: the
        # trigger's `max_active` bounds its own occurrences, not this request. Its
        # pool bounds every run.
        return _SKIP_POOL_FULL if pool_room is not None and pool_room <= 0 else _FIRE
    own = max(0, capacity(overlap, spec.max_active) - counters.active_count)
    free = own if pool_room is None else min(own, max(0, pool_room))
    queued = counters.buffered_count if overlap in (Overlap.BUFFER, Overlap.BUFFER_ALL) else 0
    if free and not queued:
        return _FIRE
    # Older buffered occurrences take the free slots first; this one waits behind
    # whatever is left of the buffer after that.
    decision = _by_policy(
        trigger, request, overlap, ahead=max(0, queued - free), active_has_run=active_has_run
    )
    if own > free and decision.reason is Reason.OVERLAP:
        # The trigger had room; its pool had none.
        return Decision(decision.action, Reason.POOL_FULL)
    return decision


def _by_policy(
    trigger: TriggerView,
    request: ClaimRequest,
    overlap: Overlap,
    *,
    ahead: int,
    active_has_run: bool,
) -> Decision:
    """An occurrence that cannot launch freely, `ahead` others waiting before it."""
    spec = trigger.spec
    match overlap:
        case Overlap.SKIP | Overlap.ALLOW:
            return _SKIP_OVERLAP
        case Overlap.BUFFER:
            if ahead >= 1:
                return _SKIP_OVERLAP
            return _BUFFER_OVERLAP
        case Overlap.BUFFER_ALL:
            if request.kind == "scheduled" and ahead >= spec.max_buffer:
                return Decision(Action.SKIP, Reason.BUFFER_FULL)
            return Decision(Action.BUFFER, Reason.OVERLAP)
        case Overlap.SUPERSEDE:
            if active_has_run:
                return Decision(Action.SUPERSEDE)
            # The next pending pass turns the newest of these into a supersede of
            # the run once the reservation has one.
            return Decision(Action.BUFFER, Reason.OVERLAP)
