"""`triggers audit`: the fire ledger checked against the runtime, read-only.

What must hold, and is checked here:

- every `launched` row names a run the runtime holds active, and every `completed`,
  `failed` or `cancelled` row a run that settled so (a `superseded` row a settled
  run, whatever it settled as: the cancel may have come after it finished);
- no run of a trigger without its ledger row (a run the runtime started for an
  occurrence whose row still says `launching` is a launch record lost);
- no occurrence twice: a range row (`missed`, `skipped`) holds no occurrence that
  another row of the trigger holds, and ranges do not overlap;
- each trigger's counters equal the ledger (`active_count` = its `launching` and
  `launched` rows, `buffered_count` = its `buffered` rows).

Runs older than the ledger's retention may have lost their rows to pruning; they
are not findings.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from triggers.clock import iso
from triggers.model import FireRecord, Outcome, Trigger
from triggers.store.protocol import HistoryQuery, TriggerReads

_RUN_STATE = {
    Outcome.LAUNCHED: {"active"},
    Outcome.COMPLETED: {"completed"},
    Outcome.FAILED: {"failed"},
    Outcome.CANCELLED: {"cancelled"},
    Outcome.SUPERSEDED: {"completed", "failed", "cancelled"},
}
_LEDGER_LIMIT = 10_000_000


@dataclass(frozen=True, slots=True, kw_only=True)
class RunFact:
    """What the runtime says of one run of a trigger."""

    run_id: str
    trigger_id: str | None
    idempotency_key: str | None
    status: str
    created_at: datetime
    settled_at: datetime | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    """One way in which the ledger and the runtime disagree."""

    check: str
    trigger_id: str | None
    message: str
    run_id: str | None = None
    occurrence: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditReport:
    """What an audit looked at, and what it found."""

    rows: int
    runs: int
    triggers: int
    findings: list[Finding]

    @property
    def clean(self) -> bool:
        return not self.findings


def audit(
    store: TriggerReads,
    runs: Sequence[RunFact],
    statuses: Callable[[list[str]], Mapping[str, str]],
    *,
    now: datetime,
    fire_retention: timedelta,
) -> AuditReport:
    """Check the whole ledger against the runtime.

    `runs` are the runs the runtime holds (purged ones aside); `statuses` answers the
    public status of any run ids (a purged run's from its tombstone, `missing` when
    the runtime never had it).
    """
    rows = store.history(HistoryQuery(limit=_LEDGER_LIMIT))
    stored = [t for t in store.list_triggers() if isinstance(t, Trigger)]
    named = sorted({row.run_id for row in rows if row.run_id})
    findings = [
        *_row_states(rows, statuses(named) if named else {}),
        *_unrecorded_runs(rows, runs, now=now, fire_retention=fire_retention),
        *_twice(rows),
        *_counters(rows, stored),
    ]
    return AuditReport(rows=len(rows), runs=len(runs), triggers=len(stored), findings=findings)


def _row_states(rows: Iterable[FireRecord], statuses: Mapping[str, str]) -> Iterable[Finding]:
    for row in rows:
        expected = _RUN_STATE.get(row.outcome)
        if expected is None or row.run_id is None:
            continue
        status = statuses.get(row.run_id, "missing")
        if status not in expected:
            yield Finding(
                check="run_state",
                trigger_id=row.trigger_id,
                run_id=row.run_id,
                occurrence=iso(row.occurrence_at),
                message=f"the ledger says {row.outcome.value}, the runtime says {status}",
            )


def _unrecorded_runs(
    rows: Sequence[FireRecord],
    runs: Iterable[RunFact],
    *,
    now: datetime,
    fire_retention: timedelta,
) -> Iterable[Finding]:
    recorded = {row.run_id for row in rows if row.run_id}
    launching = {
        row.idempotency_key: row
        for row in rows
        if row.outcome is Outcome.LAUNCHING and row.idempotency_key
    }
    for run in runs:
        if run.trigger_id is None or run.run_id in recorded:
            continue
        pending = launching.get(run.idempotency_key or "")
        if pending is not None:
            yield Finding(
                check="launch_unrecorded",
                trigger_id=run.trigger_id,
                run_id=run.run_id,
                occurrence=iso(pending.occurrence_at),
                message=f"the run is {run.status}; its ledger row still says launching",
            )
            continue
        if run.status != "active" and run.settled_at and now - run.settled_at > fire_retention:
            continue  # its row may have been pruned
        yield Finding(
            check="run_without_row",
            trigger_id=run.trigger_id,
            run_id=run.run_id,
            message=f"the runtime holds a {run.status} run (key {run.idempotency_key}) "
            "that no ledger row names",
        )


def _twice(rows: Iterable[FireRecord]) -> Iterable[Finding]:
    by_trigger: dict[str, list[FireRecord]] = defaultdict(list)
    for row in rows:
        if not row.manual_key:
            by_trigger[row.trigger_id].append(row)
    for trigger_id, own in by_trigger.items():
        own.sort(key=lambda row: (row.occurrence_at, row.last_occurrence_at or row.occurrence_at))
        reach: FireRecord | None = None
        for row in own:
            end = row.last_occurrence_at or row.occurrence_at
            if reach is not None and row.occurrence_at <= (
                reach.last_occurrence_at or reach.occurrence_at
            ):
                yield Finding(
                    check="occurrence_twice",
                    trigger_id=trigger_id,
                    occurrence=iso(row.occurrence_at),
                    message=f"{row.outcome.value} row at {iso(row.occurrence_at)} lies inside "
                    f"the {reach.outcome.value} row from {iso(reach.occurrence_at)} to "
                    f"{iso(reach.last_occurrence_at or reach.occurrence_at)}",
                )
            if reach is None or end > (reach.last_occurrence_at or reach.occurrence_at):
                reach = row


def _counters(rows: Iterable[FireRecord], stored: Iterable[Trigger]) -> Iterable[Finding]:
    active: Counter[str] = Counter()
    buffered: Counter[str] = Counter()
    for row in rows:
        if row.outcome in (Outcome.LAUNCHING, Outcome.LAUNCHED):
            active[row.trigger_id] += 1
        elif row.outcome is Outcome.BUFFERED:
            buffered[row.trigger_id] += 1
    for trigger in stored:
        for name, counted, kept in (
            ("active_count", active[trigger.id], trigger.active_count),
            ("buffered_count", buffered[trigger.id], trigger.buffered_count),
        ):
            if counted != kept:
                yield Finding(
                    check="counters",
                    trigger_id=trigger.id,
                    message=f"{name} is {kept}, the ledger holds {counted}",
                )
