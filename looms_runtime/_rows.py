"""Row values shared by the store's reads and writes, and the driver-error boundary."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from sqlalchemy import exc as sa_exc

from looms_runtime._events import NewEvent, RecordedEvent
from looms_runtime._planner import InboxItem
from looms_runtime.errors import StoreError, StoreUnavailableError


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

    @property
    def last_seq(self) -> int:
        return self.expected_seq + len(self.events)


@contextmanager
def driver_errors() -> Iterator[None]:
    """Turn driver errors into `StoreError`s at the runtime's boundary."""
    try:
        yield
    except (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.TimeoutError) as exc:
        raise StoreUnavailableError(f"database unavailable: {exc.__class__.__name__}") from exc
    except sa_exc.DBAPIError as exc:
        if exc.connection_invalidated:
            raise StoreUnavailableError("database connection lost") from exc
        raise StoreError(f"database error: {exc.__class__.__name__}: {exc.orig}") from exc
    except sa_exc.SQLAlchemyError as exc:
        raise StoreError(f"database error: {exc}") from exc
