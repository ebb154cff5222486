"""Errors of `looms_runtime`, each with a stable code.

Class tree (codes are never renumbered or reused)::

    LoomsError                          LMS-000
    ├── ReplayError                     LMS-100  determinism and replay
    │   ├── UnknownEventVersionError    LMS-101  an event written by a newer runtime
    │   ├── UnknownEventTypeError       LMS-102  an event type this runtime does not know
    │   ├── CorruptHistoryError         LMS-103  a log that breaks an invariant of the fold
    │   ├── DuplicateEffectDispatchError LMS-104 an attempt dispatched twice
    │   ├── MaxWakeIterationsError      LMS-105  a wake that does not converge
    │   └── NondeterminismError         LMS-106  a flow's replay asked for another call
    ├── DatabaseError                   LMS-200  the runtime's database refused or failed
    │   ├── DatabaseUnavailableError    LMS-201  the database failed or cannot be reached
    │   ├── FencedError                 LMS-202  an append lost its fence (sequence or lease)
    │   └── HistoryTrimmedError         LMS-203  events asked for were trimmed behind a snapshot
    ├── RegistryError                   LMS-300  flow registry
    │   ├── UnknownFlowError            LMS-301  no flow with that name and version
    │   └── InvalidFlowError            LMS-302  a definition failed validation
    └── OperationError                  LMS-400  operations
        ├── StartConflictError          LMS-401  a key reused with another flow or input
        │   └── KeyPurgedError          LMS-408  a key whose run was purged (a tombstone)
        ├── RunOverloadedError          LMS-402  a run's operation queue is full
        ├── RunNotFoundError            LMS-403  no run with that id
        ├── RuntimeClosedError          LMS-404  the runtime is closed
        ├── InvalidRequestError         LMS-405  a request that can never succeed
        ├── EffectNotRetryableError     LMS-406  retry of an effect that is not stuck
        └── SignalConflictError         LMS-407  a signal key reused with another payload
"""

from __future__ import annotations

from typing import ClassVar


class LoomsError(Exception):
    """Base of every error `looms_runtime` raises on purpose.

    Attributes:
        code: the stable `LMS-xxx` code of the class.
        transient: True when the same call may succeed later unchanged.
        details: JSON-safe context (ids, numbers, ISO instants).
    """

    code: ClassVar[str] = "LMS-000"
    transient: ClassVar[bool] = False

    def __init__(self, message: str, **details: object) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def to_dict(self) -> dict[str, object]:
        """The `{"code", "message", "details"}` shape a CLI prints."""
        return {"code": self.code, "message": self.message, "details": self.details}


class ReplayError(LoomsError):
    """A recorded history cannot be folded deterministically."""

    code = "LMS-100"


class UnknownEventVersionError(ReplayError):
    """An event carries a version newer than this runtime understands; upgrade the runtime."""

    code = "LMS-101"


class UnknownEventTypeError(ReplayError):
    """An event's type is not one this runtime knows."""

    code = "LMS-102"


class CorruptHistoryError(ReplayError):
    """A log breaks an invariant of the fold (a gap, an event after settlement, ...)."""

    code = "LMS-103"


class DuplicateEffectDispatchError(ReplayError):
    """An effect attempt would be dispatched a second time; refused."""

    code = "LMS-104"


class MaxWakeIterationsError(ReplayError):
    """One wake of a run planned more steps than allowed; the flow does not converge."""

    code = "LMS-105"


class NondeterminismError(ReplayError):
    """A Python flow's replay asked for another call than its log recorded at that position.

    The flow's code changed in a way its recorded runs cannot replay: give the new
    code a new name (or branch on `ctx.flow_version`), see docs/runtime.md.
    """

    code = "LMS-106"


class DatabaseError(LoomsError):
    """The runtime's database refused or failed an operation."""

    code = "LMS-200"


class DatabaseUnavailableError(DatabaseError):
    """The database raised an error or cannot be reached; the write may be retried."""

    code = "LMS-201"
    transient = True


class FencedError(DatabaseError):
    """An append found another sequence or lease epoch than it expected; reload the run."""

    code = "LMS-202"


class HistoryTrimmedError(DatabaseError):
    """The events a request needs were trimmed behind the run's snapshot."""

    code = "LMS-203"


class RegistryError(LoomsError):
    """The flow registry refused a definition or a lookup."""

    code = "LMS-300"


class UnknownFlowError(RegistryError):
    """No flow is registered under that name and version."""

    code = "LMS-301"


class InvalidFlowError(RegistryError):
    """A flow definition failed validation; `details["problems"]` lists every problem."""

    code = "LMS-302"


class OperationError(LoomsError):
    """A runtime operation was refused."""

    code = "LMS-400"


class StartConflictError(OperationError):
    """The idempotency key names a run with another flow, version, input or env."""

    code = "LMS-401"


class KeyPurgedError(StartConflictError):
    """The idempotency key names a run that retention purged (its header is the tombstone).

    A start with the key would silently run the work again, so it is refused.
    """

    code = "LMS-408"


class RunOverloadedError(OperationError):
    """The run's queue of pending operations is full; retry later."""

    code = "LMS-402"
    transient = True


class RunNotFoundError(OperationError):
    """No run has that id."""

    code = "LMS-403"


class RuntimeClosedError(OperationError):
    """The runtime was closed; it takes no more work."""

    code = "LMS-404"


class InvalidRequestError(OperationError):
    """The request can never succeed as given (not JSON, wrong types, ...)."""

    code = "LMS-405"


class EffectNotRetryableError(OperationError):
    """`retry_effect` named an effect that is not ambiguous, timed out or unknown."""

    code = "LMS-406"


class SignalConflictError(OperationError):
    """A signal's idempotency key was already used with another name or payload."""

    code = "LMS-407"
