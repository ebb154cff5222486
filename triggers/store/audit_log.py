"""The audit log contract: what operators did, and every declaration a trigger has had.

Every operator action (apply, pause, resume, fire, backfill, and a run's cancel,
retry or signal) is recorded with its time, the host and OS user it came from,
the operator's note and what it changed. `apply` keeps each new revision's
declaration (in the trigger store's own transaction), so `triggers describe`
can show how a trigger came to be what it is.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol


class ActionKind(enum.StrEnum):
    """What an operator did."""

    APPLY = "apply"
    PAUSE = "pause"
    RESUME = "resume"
    FIRE = "fire"
    BACKFILL = "backfill"
    CANCEL = "cancel"
    RETRY = "retry"
    SIGNAL = "signal"


@dataclass(frozen=True, slots=True, kw_only=True)
class Actor:
    """Who acted: the host and the OS user (with the user `sudo` ran it for)."""

    host: str
    user: str


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditEntry:
    """One operator action, as recorded."""

    at: datetime
    action: ActionKind
    actor: Actor
    trigger_id: str | None = None
    run_id: str | None = None
    note: str | None = None
    changes: Mapping[str, Any] = field(default_factory=dict)
    """What it changed, JSON-ready (an apply's diff, a fire's decision, ...)."""
    id: int | None = None
    """Assigned when recorded."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditQuery:
    """Filters of the audit log, newest first."""

    trigger_id: str | None = None
    run_id: str | None = None
    actions: frozenset[ActionKind] = frozenset()
    since: datetime | None = None
    until: datetime | None = None
    limit: int = 100


@dataclass(frozen=True, slots=True, kw_only=True)
class TriggerRevision:
    """A trigger's declaration as one revision had it."""

    trigger_id: str
    revision: int
    digest: str
    declaration: Mapping[str, Any]
    """The stored form (`TriggerSpec.to_json`)."""
    applied_at: datetime


class AuditLog(Protocol):
    """Durable operator actions and declaration history.

    Database faults surface as `triggers` errors, as in the trigger store."""

    def record(self, entry: AuditEntry) -> AuditEntry:
        """Record one action durably; returns it with its id."""
        ...

    def entries(self, query: AuditQuery) -> list[AuditEntry]:
        """Recorded actions, newest first."""
        ...

    def revisions(self, trigger_id: str, *, limit: int = 20) -> Sequence[TriggerRevision]:
        """The trigger's declarations, newest revision first."""
        ...
