"""looms_runtime: an embedded, event-sourced durable runtime for flows of steps.

Each run is an append-only event log in SQL (SQLite or PostgreSQL) with a header row
and snapshots of its folded state. Effects are two-phase (dispatched, then an
outcome), so a crash never silently runs a step twice: a step in flight at a crash
is ambiguous and re-runs only when it is declared idempotent.
"""

from looms_runtime.db import Database
from looms_runtime.errors import (
    CorruptHistoryError,
    DuplicateEffectDispatchError,
    EffectNotRetryableError,
    FencedError,
    InvalidFlowError,
    InvalidRequestError,
    LoomsError,
    MaxWakeIterationsError,
    OperationError,
    RegistryError,
    ReplayError,
    RunNotFoundError,
    RunOverloadedError,
    RuntimeClosedError,
    SignalConflictError,
    StartConflictError,
    StoreError,
    StoreUnavailableError,
    UnknownEventTypeError,
    UnknownEventVersionError,
    UnknownFlowError,
)
from looms_runtime.records import (
    EffectInfo,
    Event,
    PublicStatus,
    RunHandle,
    RunInfo,
    RunSettled,
    RunStatusInfo,
    RunSummary,
    SettledStatus,
    StartRequest,
    StepContext,
)
from looms_runtime.runtime import Runtime

__all__ = [
    "CorruptHistoryError",
    "Database",
    "DuplicateEffectDispatchError",
    "EffectInfo",
    "EffectNotRetryableError",
    "Event",
    "FencedError",
    "InvalidFlowError",
    "InvalidRequestError",
    "LoomsError",
    "MaxWakeIterationsError",
    "OperationError",
    "PublicStatus",
    "RegistryError",
    "ReplayError",
    "RunHandle",
    "RunInfo",
    "RunNotFoundError",
    "RunOverloadedError",
    "RunSettled",
    "RunStatusInfo",
    "RunSummary",
    "Runtime",
    "RuntimeClosedError",
    "SettledStatus",
    "SignalConflictError",
    "StartConflictError",
    "StartRequest",
    "StepContext",
    "StoreError",
    "StoreUnavailableError",
    "UnknownEventTypeError",
    "UnknownEventVersionError",
    "UnknownFlowError",
]
