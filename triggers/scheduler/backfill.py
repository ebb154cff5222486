"""Planning a backfill: which occurrences of a past range to claim, and how.

Pure: given the trigger, its compiled schedule, the occurrences of the range and
the ledger rows that cover it, decide for each occurrence whether it is claimed
(fresh, or carved out of the `missed`/`skipped` row that accounted for it), left
alone because it was already decided, or left to the scheduler. Carving needs
schedule math the store cannot do, so the pieces a row splits into are counted
here and handed to the store with the claims.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from triggers.model import Action, FireRecord, Outcome, Overlap, Reason, Trigger, idempotency_key
from triggers.scheduler.calendars import compile_calendars
from triggers.scheduler.occurrences import CompiledSchedule, occurrence_span
from triggers.store.protocol import Claim, ClaimRequest, ClaimResult, RangePiece, RangeSplit

BACKFILL_CAP = 1000
"""The most occurrences one backfill dispatches unless told otherwise (`--max`)."""

_TICK = timedelta(microseconds=1)  # turns an inclusive bound into the exclusive one spans take
_CARVABLE = frozenset({Outcome.MISSED, Outcome.SKIPPED})


class BackfillStatus(enum.StrEnum):
    """What a backfill did with one occurrence."""

    LAUNCHING = "launching"  # claimed: the daemon launches it at its next pending pass
    BUFFERED = "buffered"  # waits for the runs ahead of it, then launches in order
    SKIPPED = "skipped"  # the overlap policy skipped it (see the reason)
    SUPERSEDED = "superseded"  # a newer occurrence of the backfill replaced it
    ALREADY_DECIDED = "already_decided"  # its ledger row launched (or is pending) already
    UNDECIDED = "undecided"  # after the trigger's watermark: the scheduler decides it


@dataclass(frozen=True, slots=True, kw_only=True)
class BackfillItem:
    """One occurrence of a backfill and what became of it."""

    occurrence_at: datetime
    idempotency_key: str
    status: BackfillStatus
    reason: Reason | None = None
    previous: Outcome | None = None
    """The outcome it had before: the row it was carved out of, or the one that decided it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BackfillResult:
    """A backfill's range and every occurrence in it, in order."""

    trigger_id: str
    start_at: datetime
    end_at: datetime
    overlap: Overlap
    items: list[BackfillItem]

    def counts(self) -> dict[str, int]:
        """Occurrences by status."""
        found = Counter(item.status.value for item in self.items)
        return {status.value: found.get(status.value, 0) for status in BackfillStatus}


@dataclass(slots=True)
class BackfillPlan:
    """The claims and range splits of one attempt, and the occurrences left alone."""

    requests: list[ClaimRequest] = field(default_factory=list)
    splits: list[RangeSplit] = field(default_factory=list)
    carved_from: dict[datetime, Outcome] = field(default_factory=dict)
    left: dict[datetime, BackfillItem] = field(default_factory=dict)


def plan_backfill(
    trigger: Trigger,
    schedule: CompiledSchedule,
    occurrences: Sequence[datetime],
    rows: Sequence[FireRecord],
    *,
    overlap: Overlap,
) -> BackfillPlan:
    """Plan a backfill of `occurrences` (ascending) given the scheduled `rows` covering them."""
    plan = BackfillPlan()
    own = {row.occurrence_at: row for row in rows}
    ranges = [row for row in rows if row.last_occurrence_at is not None]
    carve: dict[datetime, tuple[FireRecord, list[datetime]]] = {}
    claim: list[datetime] = []
    for at in occurrences:
        row = own.get(at) or next((r for r in ranges if r.occurrence_at < at <= _last(r)), None)
        if row is None:
            if at > trigger.watermark_at:
                plan.left[at] = _item(trigger, at, BackfillStatus.UNDECIDED)
            else:  # owed nothing then (before the trigger existed), or pruned since
                claim.append(at)
        elif row.outcome in _CARVABLE:
            carve.setdefault(row.occurrence_at, (row, []))[1].append(at)
        else:
            plan.left[at] = _item(trigger, at, BackfillStatus.ALREADY_DECIDED, row.outcome)
    for row, targets in carve.values():
        split = _split(schedule, row, targets)
        if split is None:
            # The row was recorded under another schedule (an edited trigger): its
            # count cannot be divided with this one, so it stays as it is.
            for at in targets:
                plan.left[at] = _item(trigger, at, BackfillStatus.ALREADY_DECIDED, row.outcome)
            continue
        plan.splits.append(split)
        for at in targets:
            plan.carved_from[at] = row.outcome
        claim += targets
    calendars = compile_calendars(trigger.spec)
    plan.requests = [
        ClaimRequest(
            trigger_id=trigger.id,
            occurrence_at=at,
            expected_revision=trigger.revision,
            kind="backfill",
            overlap=overlap,
            excluded_by=None if calendars is None else calendars.exclusion(at),
        )
        for at in sorted(claim)
    ]
    return plan


def backfill_items(
    trigger: Trigger, plan: BackfillPlan, results: Sequence[ClaimResult]
) -> list[BackfillItem]:
    """Every occurrence of the plan, in order, with what its claim decided."""
    items = dict(plan.left)
    for request, result in zip(plan.requests, results, strict=True):
        if isinstance(result, Exception):
            raise result
        items[request.occurrence_at] = _claimed(trigger, plan, result)
    return [items[at] for at in sorted(items)]


def _claimed(trigger: Trigger, plan: BackfillPlan, claim: Claim) -> BackfillItem:
    at = claim.occurrence_at
    previous = plan.carved_from.get(at)
    match claim.action:
        case Action.FIRE | Action.SUPERSEDE:
            status = BackfillStatus.LAUNCHING
        case Action.BUFFER:
            status = BackfillStatus.BUFFERED
        case Action.SKIP:
            status = BackfillStatus.SKIPPED
        case Action.SUPERSEDED:
            status = BackfillStatus.SUPERSEDED
        case Action.IGNORED:
            status = BackfillStatus.UNDECIDED
        case _:
            status = BackfillStatus.ALREADY_DECIDED
    return _item(trigger, at, status, previous, claim.reason)


def _split(
    schedule: CompiledSchedule, row: FireRecord, targets: Sequence[datetime]
) -> RangeSplit | None:
    """The split of `row` around `targets`, or None when the schedule disagrees with it."""
    whole = occurrence_span(schedule, after=row.occurrence_at - _TICK, until=_last(row))
    if whole is None or (whole.first_at, whole.last_at, whole.count) != (
        row.occurrence_at,
        _last(row),
        row.count,
    ):
        return None
    pieces = []
    after = row.occurrence_at - _TICK
    for at in [*sorted(targets), None]:
        until = _last(row) if at is None else at - _TICK
        span = occurrence_span(schedule, after=after, until=until)
        if span is not None:
            pieces.append(
                RangePiece(first_at=span.first_at, last_at=span.last_at, count=span.count)
            )
        if at is not None:
            after = at
    return RangeSplit(
        trigger_id=row.trigger_id,
        first_at=row.occurrence_at,
        last_at=_last(row),
        count=row.count,
        outcome=row.outcome,
        pieces=tuple(pieces),
    )


def _last(row: FireRecord) -> datetime:
    return row.last_occurrence_at or row.occurrence_at


def _item(
    trigger: Trigger,
    at: datetime,
    status: BackfillStatus,
    previous: Outcome | None = None,
    reason: Reason | None = None,
) -> BackfillItem:
    return BackfillItem(
        occurrence_at=at,
        idempotency_key=idempotency_key(trigger.id, at),
        status=status,
        reason=reason,
        previous=previous,
    )
