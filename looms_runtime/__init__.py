"""looms_runtime: an embedded, event-sourced durable runtime for flows of steps.

Each run is an append-only event log in SQL (SQLite or PostgreSQL) with a header row
and snapshots of its folded state. Effects are two-phase (dispatched, then an
outcome), so a crash never silently runs a step twice: a step in flight at a crash
is ambiguous and re-runs only when it is declared idempotent. Durable Python flows
are written against `looms_runtime.flow` (see docs/runtime.md).
"""

from looms_runtime.db import Database
from looms_runtime.errors import (
    CorruptHistoryError,
    DatabaseError,
    DatabaseUnavailableError,
    DuplicateEffectDispatchError,
    EffectNotRetryableError,
    FencedError,
    HistoryTrimmedError,
    InvalidFlowError,
    InvalidRequestError,
    KeyPurgedError,
    LoomsError,
    MaxWakeIterationsError,
    NondeterminismError,
    OperationError,
    RegistryError,
    ReplayError,
    RunNotFoundError,
    RunOverloadedError,
    RuntimeClosedError,
    SignalConflictError,
    StartConflictError,
    UnknownEventTypeError,
    UnknownEventVersionError,
    UnknownFlowError,
)
from looms_runtime.flow import (
    FlowContext,
    NonRetryableError,
    Retry,
    StepFailedError,
    WaitTimeoutError,
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
    RunTransition,
    SettledStatus,
    StartRequest,
    StepContext,
)
from looms_runtime.runtime import Runtime

__all__ = [
    "CorruptHistoryError",
    "Database",
    "DatabaseError",
    "DatabaseUnavailableError",
    "DuplicateEffectDispatchError",
    "EffectInfo",
    "EffectNotRetryableError",
    "Event",
    "FencedError",
    "FlowContext",
    "HistoryTrimmedError",
    "InvalidFlowError",
    "InvalidRequestError",
    "KeyPurgedError",
    "LoomsError",
    "MaxWakeIterationsError",
    "NonRetryableError",
    "NondeterminismError",
    "OperationError",
    "PublicStatus",
    "RegistryError",
    "ReplayError",
    "Retry",
    "RunHandle",
    "RunInfo",
    "RunNotFoundError",
    "RunOverloadedError",
    "RunSettled",
    "RunStatusInfo",
    "RunSummary",
    "RunTransition",
    "Runtime",
    "RuntimeClosedError",
    "SettledStatus",
    "SignalConflictError",
    "StartConflictError",
    "StartRequest",
    "StepContext",
    "StepFailedError",
    "UnknownEventTypeError",
    "UnknownEventVersionError",
    "UnknownFlowError",
    "WaitTimeoutError",
]
