"""When a trigger was created, retired and revived, and by which apply.

Nothing new is stored for it: an `apply` records its diff in the audit log (the ids it
added and retired, the changed ones with `revived`), and the trigger's revisions say
which declaration was in force at any instant. This module reads both back, so
`history` and `describe` can say "retired at 01:55:01 by apply (revision 4, by
ops@host)" where the ledger falls silent.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from triggers.clock import iso
from triggers.model import Trigger
from triggers.store.audit_log import ActionKind, AuditEntry, AuditLog, AuditQuery

_PAGE = 200
_SEARCHED = 1000
"""At most this many applies are read back (newest first) per question."""
_REVISIONS = 1000
_FIRST_REVISION = 1
"""A trigger's first declaration is its revision 1 (in every store)."""


class Milestone(enum.StrEnum):
    """A turn in a trigger's life that the ledger cannot show."""

    CREATED = "created"
    RETIRED = "retired"
    REVIVED = "revived"


@dataclass(frozen=True, slots=True, kw_only=True)
class LifeEvent:
    """One milestone, with the apply that made it (None when the audit log no longer
    holds that apply, or never did: a store older than the audit log)."""

    milestone: Milestone
    at: datetime | None
    """None only for a retirement whose apply the audit log no longer holds."""
    revision: int | None
    """The trigger's revision in force from then on (for a retirement: the last one)."""
    applied_by: AuditEntry | None = None

    def to_json(self) -> dict[str, Any]:
        entry = self.applied_by
        return {
            "event": self.milestone.value,
            "at": None if self.at is None else iso(self.at),
            "revision": self.revision,
            "action_id": entry.id if entry else None,
            "host": entry.actor.host if entry else None,
            "user": entry.actor.user if entry else None,
            "note": entry.note if entry else None,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Lifecycle:
    """A trigger's milestones, newest first (always ending with its creation)."""

    trigger_id: str
    events: tuple[LifeEvent, ...]
    retired: bool
    """The trigger row's own word: whether it is retired now."""

    @property
    def retirement(self) -> LifeEvent | None:
        """The retirement in force (None while the trigger is declared)."""
        if not self.retired:
            return None
        return next((e for e in self.events if e.milestone is Milestone.RETIRED), None)

    @property
    def revival(self) -> LifeEvent | None:
        """The latest revival, when the trigger is declared again now."""
        if self.retirement is not None:
            return None
        return next((e for e in self.events if e.milestone is Milestone.REVIVED), None)


def lifecycles(audit: AuditLog, triggers: Sequence[Trigger]) -> dict[str, Lifecycle]:
    """The lifecycle of each trigger, from one read of the applies since the oldest
    of them was created."""
    if not triggers:
        return {}
    ids = {trigger.id for trigger in triggers}
    since = min(trigger.created_at for trigger in triggers)
    found: dict[str, list[tuple[Milestone, AuditEntry]]] = {i: [] for i in ids}
    for entry in _applies(audit, since=since):
        for trigger_id, milestone in _milestones(entry.changes):
            if trigger_id in ids:
                found[trigger_id].append((milestone, entry))
    return {trigger.id: _lifecycle(audit, trigger, found[trigger.id]) for trigger in triggers}


def lifecycle(audit: AuditLog, trigger: Trigger) -> Lifecycle:
    """The trigger's milestones, newest first."""
    return lifecycles(audit, [trigger])[trigger.id]


def _applies(audit: AuditLog, *, since: datetime) -> Iterable[AuditEntry]:
    """The applies since `since`, newest first, read a page at a time."""
    seen: set[int | None] = set()
    until: datetime | None = None
    read = 0
    while read < _SEARCHED:
        query = AuditQuery(
            actions=frozenset({ActionKind.APPLY}), since=since, until=until, limit=_PAGE
        )
        page = [entry for entry in audit.entries(query) if entry.id not in seen]
        if not page:
            return
        read += len(page)
        for entry in page:
            seen.add(entry.id)
            yield entry
        # `until` is inclusive: entries of the oldest instant come again, and are skipped.
        until = page[-1].at


def _milestones(changes: Any) -> Iterable[tuple[str, Milestone]]:
    """What an apply's recorded diff did to which trigger."""
    for trigger_id in changes.get("added", ()):
        yield str(trigger_id), Milestone.CREATED
    for trigger_id in changes.get("retired", ()):
        yield str(trigger_id), Milestone.RETIRED
    for change in changes.get("changed", ()):
        if isinstance(change, dict) and change.get("revived"):
            yield str(change.get("id")), Milestone.REVIVED


def _lifecycle(
    audit: AuditLog, trigger: Trigger, found: list[tuple[Milestone, AuditEntry]]
) -> Lifecycle:
    applied: list[tuple[datetime, int]] | None = None

    def revision_at(milestone: Milestone, at: datetime) -> int | None:
        nonlocal applied
        if milestone is Milestone.CREATED:
            return _FIRST_REVISION
        if applied is None:  # read only for a trigger that was retired or revived
            kept = audit.revisions(trigger.id, limit=_REVISIONS)
            applied = [(revision.applied_at, revision.revision) for revision in kept]
        # Revisions come newest first; the one in force is the newest applied by then.
        return next((revision for when, revision in applied if when <= at), None)

    events = [
        LifeEvent(milestone=m, at=entry.at, revision=revision_at(m, entry.at), applied_by=entry)
        for m, entry in found
    ]
    if trigger.retired and (not events or events[0].milestone is not Milestone.RETIRED):
        events.insert(0, LifeEvent(milestone=Milestone.RETIRED, at=None, revision=trigger.revision))
    if not any(event.milestone is Milestone.CREATED for event in events):
        # The apply that created it is older than the applies read (or than the audit
        # log): the trigger row still knows when.
        events.append(
            LifeEvent(milestone=Milestone.CREATED, at=trigger.created_at, revision=_FIRST_REVISION)
        )
    return Lifecycle(trigger_id=trigger.id, events=tuple(events), retired=trigger.retired)
