"""looms_runtime: an embedded, event-sourced durable runtime for flows of steps.

Each run is an append-only event log in SQL (SQLite or PostgreSQL) with a header row
and snapshots of its folded state. Effects are two-phase (dispatched, then an
outcome), so a crash never silently runs a step twice: a step in flight at a crash
is ambiguous and re-runs only when it is declared idempotent. Durable Python flows
are written against `looms_runtime.flow` (see docs/runtime.md).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from looms_runtime.reads import RunReader
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
        WaitInfo,
    )
    from looms_runtime.runtime import Runtime

# Exported names and the module each lives in. Importing the package imports none of
# them: a command that only needs `looms_runtime.db` does not pay for the engine.
_EXPORTS = {
    "CorruptHistoryError": "looms_runtime.errors",
    "Database": "looms_runtime.db",
    "DatabaseError": "looms_runtime.errors",
    "DatabaseUnavailableError": "looms_runtime.errors",
    "DuplicateEffectDispatchError": "looms_runtime.errors",
    "EffectInfo": "looms_runtime.records",
    "EffectNotRetryableError": "looms_runtime.errors",
    "Event": "looms_runtime.records",
    "FencedError": "looms_runtime.errors",
    "FlowContext": "looms_runtime.flow",
    "HistoryTrimmedError": "looms_runtime.errors",
    "InvalidFlowError": "looms_runtime.errors",
    "InvalidRequestError": "looms_runtime.errors",
    "KeyPurgedError": "looms_runtime.errors",
    "LoomsError": "looms_runtime.errors",
    "MaxWakeIterationsError": "looms_runtime.errors",
    "NonRetryableError": "looms_runtime.flow",
    "NondeterminismError": "looms_runtime.errors",
    "OperationError": "looms_runtime.errors",
    "PublicStatus": "looms_runtime.records",
    "RegistryError": "looms_runtime.errors",
    "ReplayError": "looms_runtime.errors",
    "Retry": "looms_runtime.flow",
    "RunHandle": "looms_runtime.records",
    "RunInfo": "looms_runtime.records",
    "RunNotFoundError": "looms_runtime.errors",
    "RunReader": "looms_runtime.reads",
    "RunOverloadedError": "looms_runtime.errors",
    "RunSettled": "looms_runtime.records",
    "RunStatusInfo": "looms_runtime.records",
    "RunSummary": "looms_runtime.records",
    "RunTransition": "looms_runtime.records",
    "Runtime": "looms_runtime.runtime",
    "RuntimeClosedError": "looms_runtime.errors",
    "SettledStatus": "looms_runtime.records",
    "SignalConflictError": "looms_runtime.errors",
    "StartConflictError": "looms_runtime.errors",
    "StartRequest": "looms_runtime.records",
    "StepContext": "looms_runtime.records",
    "StepFailedError": "looms_runtime.flow",
    "UnknownEventTypeError": "looms_runtime.errors",
    "UnknownEventVersionError": "looms_runtime.errors",
    "UnknownFlowError": "looms_runtime.errors",
    "WaitInfo": "looms_runtime.records",
    "WaitTimeoutError": "looms_runtime.flow",
}

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
    "RunReader",
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
    "WaitInfo",
    "WaitTimeoutError",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return [*globals(), *__all__]
