"""The trigger store contract: what every implementation (SQL, memory) must do.

The scheduler depends on this module only. Claims are decided and recorded in
batches (one transaction for a batch of the occurrences a tick owes: the scheduler
claims about 128 at a time), because a tick of a thousand every-second triggers
cannot afford a transaction per occurrence.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal, Protocol

from triggers.errors import StoreError, TriggersError
from triggers.model import Action, FireRecord, Outcome, Overlap, Reason, Trigger, TriggerSpec

FireKind = Literal["scheduled", "manual", "backfill", "after"]
"""`after`: a dependent trigger's occurrence, recorded with its upstream run's settlement."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimRequest:
    """One occurrence to decide, computed from the trigger at `expected_revision`."""

    trigger_id: str
    occurrence_at: datetime
    expected_revision: int
    kind: FireKind = "scheduled"
    manual_key: str = ""
    overlap: Overlap | None = None  # a manual fire's override of the trigger's policy
    excluded_by: str | None = None
    """The calendar that leaves this occurrence out, with the day's name (`de-by
    (Allerheiligen)`), as the scheduler found it in the trigger at `expected_revision`:
    the claim records it `skipped` with reason `calendar`."""
    unmet: str | None = None
    """The trigger's `requires:` that this scheduled occurrence does not meet
    (`import completed within 6h`), as the scheduler found it: the claim records it
    `skipped` with reason `requirement`, the requirement in `reason_detail`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Claimed:
    """An occurrence a claim decided: what every outcome of a claim (`Claim`) says.

    `action` is the decision; the variant (`Decided`, `Reserved`, `Launched`,
    `Completed`, `Refused`, `Deferred`) says where the occurrence stands now.
    """

    trigger: Trigger
    """The trigger as the claim's transaction left it (its counters and watermark)."""
    occurrence_at: datetime
    action: Action
    idempotency_key: str
    kind: FireKind = "scheduled"
    manual_key: str = ""
    reason: Reason | None = None

    @property
    def trigger_id(self) -> str:
        return self.trigger.id


@dataclass(frozen=True, slots=True, kw_only=True)
class Decided(Claimed):
    """Nothing to launch: recorded `skipped`, `buffered` or `superseded` (the action
    says which), or nothing recorded (`duplicate`: decided before; `ignored`: the
    trigger takes no claim now)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Reserved(Claimed):
    """A fire or supersede whose run the launcher still has to start: the ledger row
    is `launching` under `reservation`, the lease that entitles this scheduler to
    start it (`record_launched`, `release`, `fail_launch` are fenced on it)."""

    reservation: str
    supersedes_run_id: str | None = None
    """The active run a supersede replaces (cancelled before the new one starts)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Launched(Claimed):
    """A fire whose run started within the claim's own transaction: the row is
    `launched` with `run_id`, in the same commit."""

    run_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Completed(Claimed):
    """A fire whose run started and completed within the claim's own transaction (its
    flow had nothing to run): the row is `completed`; no settlement will follow."""

    run_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Refused(Claimed):
    """A fire whose start within the claim the runner refused for good: the row is
    `failed` with `error`."""

    error: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Deferred(Claimed):
    """A fire whose start within the claim got no answer: the row stays `launching`,
    and the pending pass starts it again, under the same key, from `retry_at`."""

    retry_at: datetime
    error: str


Claim = Decided | Reserved | Launched | Completed | Refused | Deferred
"""One claimed occurrence, by where it stands (see `Claimed`)."""

ClaimResult = Claim | TriggersError

START_RETRY = timedelta(seconds=5)
"""How long a start that got no answer waits before it is tried again (the launcher's
starts, and the starts within a claim): the runtime answers a retry of the same key
with the same run."""


@dataclass(frozen=True, slots=True)
class CompletedRun:
    """A run started within a claim that completed in the same transaction."""

    run_id: str


class StoreTransaction:
    """An open write transaction of a store, handed to a runner that starts runs in it
    (`LaunchWithin`) or records run changes in it (`TriggerStore.record_run_changes`).

    Each store names its own (`SqlTransaction`, the SQL store's connection;
    `MemoryTransaction`); a runner that needs the database checks which it got."""

    __slots__ = ()


StartResult = str | CompletedRun | TriggersError
"""What a start within a claim answered: the run id, the run completed at once, or
the error (a `RunnerRefusedError` refuses it for good)."""

LaunchWithin = Callable[
    [StoreTransaction, Sequence[Claimed]],
    tuple[list[StartResult], Callable[[], None]],
]
"""Starts the runs of fire claims inside the claim's transaction: per claim what the
start answered, and what to call after the commit."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RangeRecord:
    """Consecutive occurrences that did not launch, recorded as one (mergeable) row.

    `after` is the watermark the caller planned from: the store refuses the range
    when the watermark has moved since (another daemon decided those occurrences).
    """

    trigger_id: str
    expected_revision: int
    after: datetime
    first_at: datetime
    last_at: datetime
    count: int
    outcome: Literal[Outcome.MISSED, Outcome.SKIPPED]
    reason: Reason


@dataclass(frozen=True, slots=True, kw_only=True)
class RangePiece:
    """Consecutive occurrences left of a range row once some are carved out of it."""

    first_at: datetime
    last_at: datetime
    count: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RangeSplit:
    """A backfill carving occurrences out of one `missed` or `skipped` ledger row.

    The row, as the caller read it (`first_at`, `last_at`, `count`, `outcome`: the
    fence), is replaced by `pieces`, the occurrences around the carved ones, each
    with its count from the schedule; the carved occurrences are then claimed in
    the same transaction, so each stays accounted for exactly once.
    """

    trigger_id: str
    first_at: datetime
    last_at: datetime
    count: int
    outcome: Outcome
    pieces: tuple[RangePiece, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Launch:
    """A run the runner started for a claim."""

    claim: Reserved
    run_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Settlement:
    """A run that stopped, as the runner reports it."""

    trigger_id: str
    run_id: str
    state: Literal["completed", "failed", "cancelled", "superseded"]
    error: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RunChange:
    """A run of a trigger that changed status in the runtime: it settled, it parked
    (it waits for an operator, and blocks the trigger), or it left `parked`."""

    trigger_id: str
    run_id: str
    state: Literal["completed", "failed", "cancelled", "parked", "active"]
    error: str | None = None
    idempotency_key: str | None = None
    """The occurrence's key: a ledger row still `launching` under it is this run's."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ActiveRun:
    """A ledger row whose run the ledger believes active."""

    trigger_id: str
    occurrence_at: datetime
    manual_key: str
    run_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ApplyResult:
    """What applying a set of declarations changed."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    retired: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryQuery:
    """Filters of the fire ledger, newest first."""

    trigger_id: str | None = None
    outcomes: frozenset[Outcome] = frozenset()
    since: datetime | None = None
    """Rows whose occurrence (a range: its last one) is at or after this instant."""
    until: datetime | None = None
    """Rows whose occurrence (a range: its first one) is at or before this instant."""
    limit: int = 100
    include_manual: bool = True
    """False: only the schedule's occurrences (what a backfill may carve from)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Heartbeat:
    """A daemon's liveness record."""

    owner: str
    host: str
    pid: int
    version: str
    started_at: datetime
    last_tick_at: datetime
    stopped_at: datetime | None = None
    boot_id: str | None = None
    """The boot of the daemon's host and its process's start time there: on the same
    boot, a daemon whose process is gone provably holds nothing any more."""
    process_start: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordedDowntime:
    """A stretch of time in which no daemon ticked on the database."""

    started_at: datetime
    """The last tick of any daemon before it."""
    ended_at: datetime
    """The first heartbeat after it, of the daemon that recorded it (`ended_by`)."""
    ended_by: str


def silence_limit(poll_interval: timedelta) -> timedelta:
    """How long a daemon may go without a heartbeat and still count as alive: it ticks
    at least every poll interval, so three of them, and 5 s of slack."""
    return poll_interval * 3 + timedelta(seconds=5)


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolUse:
    """A pool's use as the ledger holds it: rows of its member triggers."""

    active: int = 0
    """Launching or launched: each takes one of the pool's slots."""
    waiting: int = 0
    """Buffered with reason `pool_full`, of members that may launch (not paused,
    disabled, retired or blocked by a parked run): the occurrences ahead of any new
    one."""


TriggerRow = Trigger | StoreError
"""A listed trigger, or the error that decoding its row raised (isolated per row)."""

ListedState = Literal[
    "all", "enabled", "paused", "blocked", "disabled", "retired", "failing", "running"
]
"""The states the dashboard's list filters by (`triggers.inspection.trigger_state`'s
words, `failing` and `running`); `all`, `failing` and `running` leave retired
triggers out."""
LISTED_STATES: tuple[ListedState, ...] = (
    "all",
    "enabled",
    "paused",
    "blocked",
    "disabled",
    "retired",
    "failing",
    "running",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class TriggerListQuery:
    """A page of the dashboard's trigger list: the triggers a search and a state select,
    by id, after a cursor."""

    search: str = ""
    """A case-insensitive substring of the id or the description (`%` and `_` are
    characters like any other); empty: every trigger."""
    state: ListedState = "all"
    """`retired`: `retired`. `disabled`: not retired, declared `enabled: false`.
    `paused`: enabled, paused. `blocked`: enabled, not paused, held by a parked run
    (`blocked_by`). `enabled`: none of those. `all`: every one not retired. `failing`:
    not retired, and its newest ledger row (by occurrence, then insertion) failed.
    `running`: not retired, with a ledger row `launched` (a run in flight)."""
    after_id: str | None = None
    """The page after this id; None: the first page."""
    limit: int = 50


class TriggerReads(Protocol):
    """What a store answers without writing: the queries of `list`, `history`,
    `status`, `describe` and `next`, and the daemon's reads.

    A read-only implementation (`SqlTriggerReads`) needs no more than this, so a
    command that only reads loads none of the code that claims and records.
    Database faults surface as `triggers` errors only, as `TriggerStore` says.
    """

    def applied_digest(self) -> str | None:
        """The digest of the declarations file last applied (see `apply`), or None."""
        ...

    def list_triggers(
        self,
        *,
        changed_since: datetime | None = None,
        ids: Sequence[str] | None = None,
        after_id: str | None = None,
        limit: int | None = None,
    ) -> list[TriggerRow]:
        """Every stored trigger, retired and disabled ones included, by id; with
        `changed_since`, only those whose row was written at or after it; with `ids`,
        only those of them that exist; with `after_id` and `limit`, a page: the first
        `limit` whose id sorts after `after_id`."""
        ...

    def maybe_dependents(self, trigger_id: str) -> list[Trigger]:
        """The live triggers whose `after:` or `requires:` may name `trigger_id`, by id:
        every one that does, and perhaps others (`dependency_links` tells them apart),
        without reading every trigger."""
        ...

    def find_triggers(self, query: TriggerListQuery) -> list[TriggerRow]:
        """The first `query.limit` triggers by id after `query.after_id` that its search
        and state select, chosen by the store's query (the dashboard's list: a search that
        matches nothing reads no trigger)."""
        ...

    def reading(self) -> AbstractContextManager[None]:
        """Reads made inside (of this store and of the audit log and runs on the same
        database), on this thread, share one read transaction: one connection and one
        snapshot, begun and ended once (a page's dozen reads on PostgreSQL, not a
        dozen transactions). Writes inside are not part of it, and reads after them
        inside do not see them."""
        ...

    def declared_digests(self) -> dict[str, tuple[str, bool]]:
        """Every stored trigger's declaration digest and whether it is retired, by id,
        decoding no declaration (what an apply compares first)."""
        ...

    def get_trigger(self, trigger_id: str) -> Trigger | None:
        """One trigger, or None."""
        ...

    def active_runs(self) -> list[ActiveRun]:
        """Ledger rows in `launched` state, for the monitor to re-attach to."""
        ...

    def pool_use(self, pools: Collection[str]) -> dict[str, PoolUse]:
        """The use of each of `pools` (by the triggers' stored `pool`), every one of
        them answered (a pool no row names has none)."""
        ...

    def history(self, query: HistoryQuery) -> list[FireRecord]:
        """Ledger rows, newest occurrence first."""
        ...

    def recent_records(
        self, trigger_ids: Sequence[str], *, limit: int
    ) -> dict[str, list[FireRecord]]:
        """Each of `trigger_ids`' newest `limit` ledger rows, newest occurrence first,
        as `history` returns them for the one trigger (a trigger without rows: none),
        read at once (a page of the dashboard's list: one query, on the ledger's index)."""
        ...

    def recent_outcomes(
        self, trigger_ids: Sequence[str], *, limit: int
    ) -> dict[str, list[tuple[datetime, Outcome]]]:
        """`recent_records`' rows reduced to (occurrence, outcome): a sparkline's bars,
        without reading and decoding whole rows."""
        ...

    def triggers_with(self, outcome: Outcome) -> set[str]:
        """The triggers that have a ledger row of `outcome` (read off the ledger's
        outcome index: the dashboard's failing filter looks at those only)."""
        ...

    def last_records(self) -> dict[str, FireRecord]:
        """The ledger row of each trigger's newest occurrence (a range by its last)."""
        ...

    def last_settled(self) -> dict[str, dict[str, datetime]]:
        """For `completed` and `failed`: each trigger's latest `settled_at` of that outcome."""
        ...

    def downtime(self, *, since: datetime, until: datetime) -> list[RecordedDowntime]:
        """Recorded downtime that overlaps `since`..`until`, oldest first."""
        ...

    def watermarks(self, trigger_ids: Collection[str]) -> dict[str, datetime]:
        """The stored watermark of each of `trigger_ids` that exists (no decoding: a
        daemon checks cheaply whether another one decided an occurrence)."""
        ...

    def heartbeats(self) -> list[Heartbeat]:
        """Every daemon's latest heartbeat."""
        ...

    def occurrence_counts(self) -> dict[str, int]:
        """Occurrences by outcome (a range row counts each of its occurrences)."""
        ...


class TriggerStore(TriggerReads, Protocol):
    """Durable triggers, claims and the fire ledger: the reads, and every write.

    Every method that writes takes `now=`: the store never reads a clock.
    Database faults surface as `triggers` errors only, from every method:
    StoreUnavailableError when the database cannot serve (unreachable, locked, no
    pooled connection free in time), SchemaBehindError when a table or column is
    missing, DuplicateOccurrenceError when the ledger already holds an occurrence
    being written, and StoreError for anything else the database refuses.
    """

    def writing(self) -> AbstractContextManager[None]:
        """Writes made inside (of this store and of the audit log on the same
        database), on this thread, are one transaction: an operator's action commits
        with its audit entry or not at all. (The memory store has no transaction to
        share: each write stands.)"""
        ...

    def apply(
        self, specs: Sequence[TriggerSpec], *, now: datetime, source_digest: str | None = None
    ) -> ApplyResult:
        """Upsert every declaration and retire stored triggers missing from `specs`.

        A changed declaration bumps its revision; an unchanged one does not; a new
        trigger's watermark starts at `now` (it owes nothing from before). Pause
        state survives. A retired trigger that reappears is revived. `source_digest`
        (of the file the specs came from) is kept, in the same transaction, for
        `applied_digest`."""
        ...

    def set_paused(
        self, trigger_id: str, *, paused: bool, note: str | None, now: datetime
    ) -> Trigger:
        """Pause or resume new claims. Raises UnknownTriggerError."""
        ...

    def claim(
        self,
        requests: Sequence[ClaimRequest],
        *,
        owner: str,
        host: str,
        now: datetime,
        lease: timedelta,
        splits: Sequence[RangeSplit] = (),
        launch_within: LaunchWithin | None = None,
    ) -> list[ClaimResult]:
        """Decide and record each occurrence (fire, skip, buffer, supersede), atomically.

        Without `launch_within`, a fire or supersede answers `Reserved`: the launcher
        starts its run. With it, fires (not supersedes) start their runs in the claim's
        own transaction and answer by what the start did: `Launched` (the row
        `launched` with its run id), `Completed` (the run completed in its start),
        `Refused` (the row `failed`: refused for good) or `Deferred` (no answer: the
        row stays `launching`, retried from `retry_at`). Every other decision
        answers `Decided`.

        Requests are decided in order, so a later occurrence of a trigger sees the
        run an earlier one of the batch launched. A fire or supersede takes a
        reservation lease before any run exists. When several occurrences of a
        trigger whose policy is `supersede` are due in one batch, only the newest
        is decided by the policy; the earlier ones are `superseded` (reason
        `overlap`) without ever starting. A scheduled claim moves the trigger's
        watermark forward to its occurrence. An occurrence already in the ledger
        (its own row or inside a range row), or a scheduled occurrence at or before
        the trigger's watermark, answers `Action.DUPLICATE` and changes nothing. A
        backfill occurrence after the watermark is the scheduler's to decide: it
        answers `Action.IGNORED`. Only scheduled launches count toward `max_runs`;
        an operator's `allow` override launches whatever `max_active` says, and an
        operator's buffered occurrences are not bounded by `max_buffer`.

        `splits` are applied first, in the same transaction (see RangeSplit).

        Per request, the result is the Claim or the error: RevisionMismatchError
        when the declaration changed since `expected_revision`; UnknownTriggerError.

        Raises:
            LedgerChangedError: a split's row is no longer as the caller read it;
                nothing was written."""
        ...

    def record_ranges(
        self, ranges: Sequence[RangeRecord], *, now: datetime
    ) -> list[TriggersError | None]:
        """Record occurrences that did not launch, merging a range into the trigger's
        open range row of the same outcome and reason; moves the watermark to `last_at`.

        Per range: None, RevisionMismatchError, or WatermarkMovedError."""
        ...

    def record_launched(
        self, launches: Sequence[Launch], *, now: datetime
    ) -> list[FireRecord | StoreError]:
        """Swap each claim's reservation for its run id and mark the row `launched`.

        Per launch: the row, or StaleOwnerError when the reservation expired or
        was taken over (another scheduler now owns the launch)."""
        ...

    def release(self, claim: Reserved, *, retry_at: datetime, error: str | None) -> None:
        """Give a reservation back after a failed or ambiguous start: the occurrence
        stays pending under the same key and is re-taken from `retry_at`."""
        ...

    def fail_launch(self, claim: Reserved, *, error: str, now: datetime) -> None:
        """Record a launch that can never succeed (the runtime refused it) as `failed`."""
        ...

    def take_pending(
        self,
        *,
        owner: str,
        host: str,
        now: datetime,
        lease: timedelta,
        limit: int = 500,
        dead_owners: Sequence[str] = (),
    ) -> list[Reserved]:
        """Re-reserve launches whose lease expired or whose owner is in `dead_owners`
        (daemons known to be gone), and resolve every buffer under its trigger's current
        policy; each launch comes back `Reserved` (a fire, or a supersede of the
        active run). What the policy drops from a buffer is settled with its reason
        (`overlap`, `blocked`, `buffer_full`, `disabled`, `max_runs`), or `superseded`
        by a newer occurrence."""
        ...

    def record_settled(
        self, settlements: Sequence[Settlement], *, now: datetime
    ) -> list[FireRecord | None]:
        """Record runs that stopped (`completed`, `failed`, `cancelled`).

        Idempotent: a row no longer `launched` with that run id is left as is (None).
        A failure pauses a trigger declared `pause_on_failure`, with the error as note."""
        ...

    def record_run_changes(
        self,
        changes: Sequence[RunChange],
        *,
        now: datetime,
        within: StoreTransaction | None = None,
    ) -> None:
        """Record what the runtime says of runs: settlements (as `record_settled`), and
        whether a run blocks its trigger (`parked` sets the trigger's `blocked_by`, any
        other state clears it). A ledger row still `launching` under a change's
        `idempotency_key` (its launch record was lost) is recorded `launched` first.

        `within` is a transaction of the store's own database, handed over by a runner
        that runs on it (the looms runner calls this inside the transaction that makes
        the runs' own events durable, so the ledger and the runtime never disagree,
        as a `SqlTransaction`); None opens one. A transaction of another store is a
        TypeError (a bug, not a database fault)."""
        ...

    def heartbeat(self, beat: Heartbeat, *, down_after: timedelta | None = None) -> None:
        """Record a daemon's liveness.

        With `down_after`, a beat that finds every daemon (this one included) silent
        for longer than that since the latest `last_tick_at` of any records the
        silence as downtime, from that last tick to this beat's `last_tick_at`, in
        the same transaction: a daemon starting after an outage, or resuming after
        its host slept, records the outage once. Without any earlier heartbeat
        nothing is recorded (there is nothing to measure from)."""
        ...

    def prune_downtime(self, *, older_than: datetime) -> int:
        """Delete recorded downtime that ended before `older_than`."""
        ...

    def prune(self, *, older_than: datetime, limit: int = 10_000) -> int:
        """Delete settled rows settled before `older_than`; never active or pending ones."""
        ...

    def prune_heartbeats(self, *, older_than: datetime) -> int:
        """Delete the heartbeats of daemons whose last tick is before `older_than`."""
        ...
