"""A dependent trigger's occurrences: one per settled run of its upstream, shared by
every store so they cannot disagree.

Written in the transaction that records the upstream run's settlement, so a run that
settled has given its dependents their occurrences, whatever happens next, and a
run settles once (only a `launched` row settles), so it gives them once. The row is
`buffered` under the key `{trigger}:after:{upstream run id}` (unique in the ledger,
a second fence); the pending pass launches it, or drops it, by the dependent's
overlap policy like any of its own occurrences.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from triggers.model import AfterSchedule, Outcome, Trigger, idempotency_key, upstream_key
from triggers.store._fire_row import FireRow, cut


@dataclass(frozen=True, slots=True, kw_only=True)
class SettledRun:
    """An upstream run whose settlement was just recorded."""

    trigger_id: str
    run_id: str
    outcome: str


def dependent_rows(
    settled: Sequence[SettledRun], dependents: Iterable[Trigger], now: datetime
) -> list[FireRow]:
    """The ledger rows `settled` gives `dependents` (stored triggers whose `after:`
    names one of their triggers): one per dependent and matching run, its occurrence
    the settlement's instant. A retired dependent is given none."""
    at = cut(now)
    rows: list[FireRow] = []
    by_upstream: dict[str, list[Trigger]] = {}
    for trigger in dependents:
        schedule = trigger.spec.schedule
        if isinstance(schedule, AfterSchedule) and not trigger.retired:
            by_upstream.setdefault(schedule.upstream, []).append(trigger)
    for run in settled:
        for trigger in by_upstream.get(run.trigger_id, ()):
            schedule = trigger.spec.schedule
            assert isinstance(schedule, AfterSchedule)  # noqa: S101 (filtered above)
            if not schedule.matches(run.outcome):
                continue
            key = upstream_key(run.run_id)
            rows.append(
                FireRow(
                    trigger_id=trigger.id,
                    occurrence_at=at,
                    outcome=Outcome.BUFFERED,
                    manual_key=key,
                    idempotency_key=idempotency_key(trigger.id, at, key),
                    kind="after",
                    revision=trigger.revision,
                    claimed_at=at,
                )
            )
    return rows
