"""Event types of a run's log and the version each is written at.

A reader refuses an event whose version is newer than it knows: folding it as if it
were an older shape would silently compute a wrong state.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol


class EventType(enum.StrEnum):
    """Every event a run's log may hold."""

    RUN_STARTED = "run_started"
    EFFECT_DISPATCHED = "effect_dispatched"
    EFFECT_SUCCEEDED = "effect_succeeded"
    EFFECT_FAILED = "effect_failed"
    EFFECT_AMBIGUOUS = "effect_ambiguous"
    EFFECT_CANCELLED = "effect_cancelled"
    EFFECT_RETRY_REQUESTED = "effect_retry_requested"
    WAIT_STARTED = "wait_started"
    WAIT_FINISHED = "wait_finished"
    CANCEL_REQUESTED = "cancel_requested"
    RUN_PARKED = "run_parked"
    RUN_COMPLETED = "run_completed"
    RUN_FAILED = "run_failed"
    RUN_CANCELLED = "run_cancelled"
    FLOW_VALUE_RECORDED = "flow_value_recorded"
    EFFECT_OUTCOME_LATE = "effect_outcome_late"
    BRANCH_FAILED = "branch_failed"
    PARALLEL_STARTED = "parallel_started"


KNOWN_VERSIONS: Mapping[str, int] = {member.value: 1 for member in EventType}
"""The newest version of each event type this runtime reads (and writes)."""

INFORMATIONAL = frozenset({EventType.EFFECT_OUTCOME_LATE})
"""Events that change no state: kept for the record, allowed even after a run settled
(an attempt abandoned at a cancel may still report once its run is over)."""


class FoldEvent(Protocol):
    """What the fold reads of an event, recorded or about to be."""

    @property
    def type(self) -> str: ...

    @property
    def version(self) -> int: ...

    @property
    def payload(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event decided but not yet appended; its sequence number comes at append."""

    type: str
    payload: Mapping[str, Any]
    version: int = 1


@dataclass(frozen=True, slots=True)
class RecordedEvent:
    """An event read back from the log."""

    seq: int
    type: str
    version: int
    payload: Mapping[str, Any]
    created_at: int


def new_event(event_type: EventType, /, **payload: Any) -> NewEvent:
    """An event of `event_type` at the version this runtime writes."""
    return NewEvent(event_type.value, payload, KNOWN_VERSIONS[event_type.value])
