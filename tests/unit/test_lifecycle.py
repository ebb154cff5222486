"""`triggers.lifecycle`: a trigger's creation, retirements and revivals, read back from
the applies the audit log recorded and the trigger's revisions."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from tests.factories import spec
from triggers.clock import utc
from triggers.lifecycle import Milestone, lifecycle, lifecycles
from triggers.model import Trigger
from triggers.store.audit_log import ActionKind, Actor, AuditEntry, AuditQuery, TriggerRevision

T0 = utc(2026, 1, 1)
OPS = Actor(host="ops-host", user="ops")


class ListedAudit:
    """An audit log held in a list, answering queries as the SQL one does."""

    def __init__(self) -> None:
        self.kept: list[AuditEntry] = []
        self.revision_rows: list[TriggerRevision] = []
        self.revision_reads = 0

    def record(self, entry: AuditEntry) -> AuditEntry:
        kept = AuditEntry(
            at=entry.at,
            action=entry.action,
            actor=entry.actor,
            note=entry.note,
            changes=entry.changes,
            id=len(self.kept) + 1,
        )
        self.kept.append(kept)
        return kept

    def entries(self, query: AuditQuery) -> list[AuditEntry]:
        found = [
            e
            for e in self.kept
            if (not query.actions or e.action in query.actions)
            and (query.since is None or e.at >= query.since)
            and (query.until is None or e.at <= query.until)
        ]
        found.sort(key=lambda e: (e.at, e.id or 0), reverse=True)
        return found[: query.limit]

    def revisions(self, trigger_id: str, *, limit: int = 20) -> Sequence[TriggerRevision]:
        self.revision_reads += 1
        own = [r for r in self.revision_rows if r.trigger_id == trigger_id]
        return sorted(own, key=lambda r: r.revision, reverse=True)[:limit]

    def apply(self, minutes: int, **changes: object) -> None:
        self.record(
            AuditEntry(
                at=T0 + timedelta(minutes=minutes),
                action=ActionKind.APPLY,
                actor=OPS,
                changes={"added": [], "changed": [], "retired": []} | changes,
            )
        )

    def revision(self, trigger_id: str, revision: int, minutes: int) -> None:
        self.revision_rows.append(
            TriggerRevision(
                trigger_id=trigger_id,
                revision=revision,
                digest=str(revision),
                declaration={},
                applied_at=T0 + timedelta(minutes=minutes),
            )
        )


def stored(trigger_id: str, *, revision: int = 1, retired: bool = False) -> Trigger:
    return Trigger(
        spec=spec(trigger_id),
        revision=revision,
        retired=retired,
        watermark_at=T0,
        created_at=T0,
        updated_at=T0,
    )


def test_lifecycle_reads_creation_retirement_and_revival_with_their_revisions() -> None:
    audit = ListedAudit()
    audit.apply(0, added=["a", "b"])
    audit.revision("a", 1, 0)
    audit.apply(10, retired=["a"])
    audit.apply(20, changed=[{"id": "a", "revived": True, "fields": [{"key": "x"}]}])
    audit.revision("a", 2, 20)
    audit.apply(30, retired=["a"])

    life = lifecycle(audit, stored("a", revision=2, retired=True))

    assert [(e.milestone, e.at, e.revision) for e in life.events] == [
        (Milestone.RETIRED, T0 + timedelta(minutes=30), 2),
        (Milestone.REVIVED, T0 + timedelta(minutes=20), 2),
        (Milestone.RETIRED, T0 + timedelta(minutes=10), 1),
        (Milestone.CREATED, T0, 1),
    ]
    assert life.retirement is life.events[0]
    assert life.revival is None  # it is retired again
    assert life.events[0].applied_by is not None
    assert life.events[0].applied_by.actor == OPS


def test_a_revived_trigger_has_a_revival_and_no_retirement() -> None:
    audit = ListedAudit()
    audit.apply(0, added=["a"])
    audit.apply(10, retired=["a"])
    audit.apply(20, changed=[{"id": "a", "revived": True, "fields": []}])
    audit.revision("a", 1, 0)

    life = lifecycle(audit, stored("a"))

    assert life.retirement is None
    assert life.revival is not None
    assert (life.revival.at, life.revival.revision) == (T0 + timedelta(minutes=20), 1)


def test_a_change_that_is_no_revival_is_no_milestone_and_reads_no_revisions() -> None:
    audit = ListedAudit()
    audit.apply(0, added=["a"])
    audit.apply(10, changed=[{"id": "a", "revived": False, "fields": [{"key": "x"}]}])

    life = lifecycle(audit, stored("a", revision=2))

    assert [e.milestone for e in life.events] == [Milestone.CREATED]
    assert audit.revision_reads == 0


def test_a_retirement_whose_apply_is_gone_is_still_said_without_a_time() -> None:
    audit = ListedAudit()  # a store older than its audit log: no applies at all

    life = lifecycle(audit, stored("a", revision=3, retired=True))

    assert [(e.milestone, e.at, e.revision, e.applied_by) for e in life.events] == [
        (Milestone.RETIRED, None, 3, None),
        (Milestone.CREATED, T0, 1, None),  # from the trigger row
    ]
    assert life.retirement is not None
    assert life.retirement.to_json()["at"] is None


def test_lifecycles_of_many_triggers_read_the_applies_once_per_page() -> None:
    audit = ListedAudit()
    for minute in range(450):  # more than two pages of applies, each at its own minute
        audit.apply(minute, added=[f"t{minute}"])
    audit.apply(500, retired=["t0"])
    audit.revision("t0", 1, 0)

    found = lifecycles(audit, [stored("t0", retired=True), stored("t449")])

    assert [e.milestone for e in found["t0"].events] == [Milestone.RETIRED, Milestone.CREATED]
    assert found["t0"].events[1].applied_by is not None  # the oldest page was read too
    assert found["t449"].events[0].at == T0 + timedelta(minutes=449)


def test_a_declared_trigger_has_no_retirement_even_when_its_revival_went_unrecorded() -> None:
    audit = ListedAudit()
    audit.apply(0, added=["a"])
    audit.apply(10, retired=["a"])  # the apply that revived it could not be recorded

    life = lifecycle(audit, stored("a"))

    assert life.retirement is None
    assert [e.milestone for e in life.events] == [Milestone.RETIRED, Milestone.CREATED]
