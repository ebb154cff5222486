"""Row values shared by the store's reads and writes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from looms_runtime._history.events import NewEvent, RecordedEvent
from looms_runtime._history.inbox import InboxItem
from looms_runtime.records import RunTransition


@dataclass(frozen=True, slots=True, kw_only=True)
class RunHeader:
    """A `looms_runs` row."""

    run_id: str
    flow: str
    version: str
    idempotency_key: str
    identity_hash: str
    status: str
    input: Any
    env: Mapping[str, str]
    attributes: Mapping[str, Any]
    result: Any
    error: str | None
    last_seq: int
    snapshot_seq: int
    lease_owner: str | None
    lease_epoch: int
    next_wake_at: int | None
    created_at: int
    updated_at: int
    settled_at: int | None
    purged_at: int | None = None
    input_json: str | None = None
    """The canonical text of `input`, when the header was built from it (a run just
    started): an attempt's copy of its input is decoded from it, not encoded again."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotRow:
    seq: int
    state: Mapping[str, Any]
    state_hash: str
    fold_version: str


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadedRecord:
    """Everything a cold load reads of a run, in one read transaction."""

    header: RunHeader
    snapshot: SnapshotRow | None
    events: list[RecordedEvent]
    inbox: list[InboxItem]


class NewRun(NamedTuple):
    """A run to insert with its `run_started` event.

    Values are kept as the canonical texts written to the database, so a batch of
    starts serializes each value once and decodes none of them on the caller's path
    (a tuple: one is built per request of a start batch, and a tuple is the cheapest).
    """

    run_id: str
    flow: str
    version: str
    idempotency_key: str
    identity_hash: str
    owner: str | None
    now_ms: int
    input_json: str
    env_json: str
    attributes_json: str
    started_json: str
    dispatched_json: tuple[str, ...] = ()
    """`effect_dispatched` payloads committed with the start (the run's first attempts),
    as their canonical texts; they follow `run_started` in the log."""
    completion: tuple[tuple[str, int, str], ...] = ()
    """The events that complete the run, committed with its start (its flow has nothing
    to run): type, version and payload text of each; they follow `run_started`."""
    result_json: str = "null"
    """The result of a run completed at its start, as its canonical text."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ExistingRun:
    """The run a start request's key already names (the fields its identity is made of).

    `purged` is set when retention purged the run and only its header (its tombstone) is left.
    """

    run_id: str
    flow: str
    version: str
    identity_hash: str
    input: Any
    env: Mapping[str, str]
    status: str
    lease_owner: str | None
    last_seq: int
    purged: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class StartJob:
    """One batch of starts: inserted in one transaction, idempotent by key."""

    runs: Sequence[NewRun]


@dataclass(slots=True, kw_only=True)
class AppendJob:
    """Events for one run, fenced on the sequence and lease epoch the appender holds.

    An empty `events` only marks inbox requests consumed (requests that no longer apply).
    """

    run_id: str
    expected_seq: int
    lease_epoch: int
    events: Sequence[NewEvent]
    now_ms: int
    status: str
    next_wake_at: int | None
    settled: bool = False
    error: str | None = None
    result: Any = None
    snapshot: SnapshotRow | None = None
    consumed: Sequence[str] = field(default_factory=tuple)
    transition: RunTransition | None = None
    """The status change this append makes durable, for the committer's hook."""

    @property
    def last_seq(self) -> int:
        return self.expected_seq + len(self.events)
