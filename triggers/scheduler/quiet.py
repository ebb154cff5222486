"""Accounting for the occurrences of a trigger that takes no claims (paused, disabled).

Paused time is not catch-up debt: the occurrences that fell while a trigger was
paused or disabled are recorded as one `skipped` range (reason `paused` or
`disabled`) and never launched. The daemon records them at every poll; `resume`
and `backfill` record them first too, so whoever gets there first writes the
same range, fenced on the watermark.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from triggers.model import Catchup, CatchupPolicy, Outcome, Reason, Trigger
from triggers.scheduler.occurrences import CompiledSchedule, plan_due
from triggers.scheduler.timetable import Entry
from triggers.store.protocol import RangeRecord

_FOREVER = timedelta(days=365 * 200)
# Nothing is dispatched: every occurrence in the span is accounted as one range.
_NOTHING_DUE = Catchup(policy=CatchupPolicy.NONE, window=_FOREVER, grace=timedelta(0))


def quiet_reason(trigger: Trigger) -> Reason | None:
    """Why a trigger's occurrences are skipped wholesale now, or None when they are not."""
    if trigger.retired or trigger.claimable:
        return None
    return Reason.PAUSED if trigger.paused else Reason.DISABLED


def quiet_range(
    trigger: Trigger,
    schedule: CompiledSchedule,
    *,
    after: datetime,
    now: datetime,
    reason: Reason,
    limit: int = 10_000,
) -> RangeRecord | None:
    """The occurrences in (after, now] as one `skipped` range, or None when there are none."""
    plan = plan_due(schedule, watermark_at=after, now=now, catchup=_NOTHING_DUE, limit=limit)
    if not plan.missed:
        return None
    return RangeRecord(
        trigger_id=trigger.id,
        expected_revision=trigger.revision,
        after=after,
        first_at=plan.missed[0].first_at,
        last_at=plan.missed[-1].last_at,
        count=sum(m.count for m in plan.missed),
        outcome=Outcome.SKIPPED,
        reason=reason,
    )


def quiet_ranges(entries: Iterable[Entry], *, now: datetime, limit: int) -> list[RangeRecord]:
    """The `skipped` range of every paused or disabled trigger that has one due."""
    ranges = []
    for entry in entries:
        reason = quiet_reason(entry.trigger)
        if reason is None or entry.schedule is None:
            continue
        found = quiet_range(
            entry.trigger,
            entry.schedule,
            after=entry.watermark_at,
            now=now,
            reason=reason,
            limit=limit,
        )
        if found is not None:
            ranges.append(found)
    return ranges
