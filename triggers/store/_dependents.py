"""A dependent trigger's occurrences, from the settled runs of its upstreams, shared by
every store so they cannot disagree.

Written in the transaction that records the upstream run's settlement, so a run that
settled has given its dependents their occurrences, whatever happens next, and a
run settles once (only a `launched` row settles), so it gives them once. The row is
`buffered` under the key `{trigger}:after:{upstream run id}` (unique in the ledger,
a second fence); the pending pass launches it, or drops it, by the dependent's
overlap policy like any of its own occurrences.

The single-upstream form and `any:` give an occurrence per matching run. `all:`
gives one when the run that settled completes a set: every other upstream has a
matching run settled within `within` that no earlier occurrence of the dependent
used (the oldest such run of each is taken). Its key names the run that completed
the set, so the fence is the same; `upstream_runs` lists the whole set. The stores
serialize the `all:` decisions of one dependent (see `UpstreamRuns`), so two
daemons settling the two halves of a set at once cannot both miss it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from triggers.model import AfterSchedule, Outcome, Trigger, idempotency_key, upstream_key
from triggers.store._fire_row import FireRow, cut


@dataclass(frozen=True, slots=True, kw_only=True)
class SettledRun:
    """An upstream run whose settlement was recorded (just now, or at `settled_at`)."""

    trigger_id: str
    run_id: str
    outcome: str
    settled_at: datetime | None = None


class UpstreamRuns(Protocol):
    """What an `all:` decision reads from a store, in the settlement's transaction."""

    def serialize(self, dependent_ids: Sequence[str]) -> None:
        """Take turns with every other transaction deciding `all:` occurrences of
        these dependents (until this transaction ends); after it, reads see what
        those transactions committed."""

    def settled_runs(self, trigger_ids: Collection[str], since: datetime) -> list[SettledRun]:
        """The runs of `trigger_ids` settled (completed, failed, cancelled) at or after
        `since`, this transaction's included, oldest settlement first."""

    def used_runs(self, dependent_ids: Collection[str], since: datetime) -> dict[str, set[str]]:
        """By dependent: the upstream runs its occurrences at or after `since` used."""


def dependent_rows(
    settled: Sequence[SettledRun],
    dependents: Iterable[Trigger],
    now: datetime,
    runs: UpstreamRuns,
) -> list[FireRow]:
    """The ledger rows `settled` gives `dependents` (stored triggers whose `after:`
    names one of their triggers), each occurring at the settlement's instant. A
    retired dependent is given none."""
    at = cut(now)
    rows: list[FireRow] = []
    sets: list[tuple[Trigger, AfterSchedule]] = []
    for trigger in sorted(dependents, key=lambda t: t.id):
        schedule = trigger.spec.schedule
        if not isinstance(schedule, AfterSchedule) or trigger.retired:
            continue
        matching = [run for run in settled if schedule.matches(run.trigger_id, run.outcome)]
        if schedule.join == "all":
            if matching:
                sets.append((trigger, schedule))
            continue
        rows.extend(_row(trigger, run.run_id, at) for run in matching)
    if sets:
        rows.extend(_set_rows(settled, sets, at, runs))
    return rows


def _set_rows(
    settled: Sequence[SettledRun],
    sets: Sequence[tuple[Trigger, AfterSchedule]],
    at: datetime,
    runs: UpstreamRuns,
) -> list[FireRow]:
    """The `all:` occurrences the settled runs complete."""
    runs.serialize([trigger.id for trigger, _ in sets])
    since = min(at - (schedule.within or timedelta(0)) for _, schedule in sets)
    upstreams = {upstream.trigger for _, schedule in sets for upstream in schedule.upstreams}
    candidates = runs.settled_runs(upstreams, since)
    used = runs.used_runs([trigger.id for trigger, _ in sets], since)
    rows: list[FireRow] = []
    for trigger, schedule in sets:
        taken = used.get(trigger.id, set())
        floor = at - (schedule.within or timedelta(0))
        for run in settled:
            if not schedule.matches(run.trigger_id, run.outcome) or run.run_id in taken:
                continue
            chosen = _complete(schedule, run, candidates, taken, floor)
            if chosen is not None:
                taken.update(chosen)
                rows.append(_row(trigger, run.run_id, at, upstream_runs=chosen))
    return rows


def _complete(
    schedule: AfterSchedule,
    run: SettledRun,
    candidates: Sequence[SettledRun],
    taken: set[str],
    floor: datetime,
) -> tuple[str, ...] | None:
    """The set `run` completes (a run per upstream, in their order), or None."""
    chosen: list[str] = []
    for upstream in schedule.upstreams:
        if upstream.trigger == run.trigger_id and upstream.matches(run.outcome):
            chosen.append(run.run_id)
            continue
        pick = next(
            (
                other.run_id
                for other in candidates
                if other.trigger_id == upstream.trigger
                and upstream.matches(other.outcome)
                and other.run_id not in taken
                and other.run_id != run.run_id
                and (other.settled_at is None or other.settled_at >= floor)
            ),
            None,
        )
        if pick is None:
            return None
        chosen.append(pick)
    return tuple(chosen)


def _row(
    trigger: Trigger, run_id: str, at: datetime, *, upstream_runs: tuple[str, ...] = ()
) -> FireRow:
    key = upstream_key(run_id)
    return FireRow(
        trigger_id=trigger.id,
        occurrence_at=at,
        outcome=Outcome.BUFFERED,
        manual_key=key,
        idempotency_key=idempotency_key(trigger.id, at, key),
        kind="after",
        revision=trigger.revision,
        claimed_at=at,
        upstream_runs=upstream_runs,
    )
