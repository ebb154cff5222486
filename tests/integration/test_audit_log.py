"""The audit log, declaration history and the read side of describe and status, on both engines."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from looms_runtime.db import Database
from tests.factories import spec
from triggers import actions
from triggers.clock import utc
from triggers.inspection import describe_trigger, status_report
from triggers.model import Outcome, Reason
from triggers.store.audit_log import ActionKind, Actor, AuditEntry, AuditQuery
from triggers.store.protocol import Heartbeat, RangeRecord
from triggers.store.sql import SqlTriggerStore
from triggers.store.sql_audit import SqlAuditLog

T0 = utc(2026, 1, 1)
ALICE = Actor(host="ops-1", user="alice")
BOB = Actor(host="ops-2", user="root (sudo by bob)")


@pytest.fixture
def store(reused_database: Database) -> SqlTriggerStore:
    return SqlTriggerStore(reused_database)


@pytest.fixture
def audit(reused_database: Database) -> SqlAuditLog:
    return SqlAuditLog(reused_database)


def entry(kind: ActionKind, minutes: int, **extra: object) -> AuditEntry:
    return AuditEntry(at=T0 + timedelta(minutes=minutes), action=kind, actor=ALICE, **extra)  # type: ignore[arg-type]


def test_entries_come_back_newest_first_filtered_with_their_changes(audit: SqlAuditLog) -> None:
    audit.record(entry(ActionKind.APPLY, 1, changes={"added": ["a", "b"], "changed": []}))
    audit.record(entry(ActionKind.PAUSE, 2, trigger_id="a", note="db maintenance"))
    audit.record(entry(ActionKind.CANCEL, 3, trigger_id="a", run_id="r1"))
    recorded = audit.record(entry(ActionKind.FIRE, 4, trigger_id="b"))

    assert recorded.id is not None
    everything = audit.entries(AuditQuery())
    assert [e.action for e in everything] == [
        ActionKind.FIRE,
        ActionKind.CANCEL,
        ActionKind.PAUSE,
        ActionKind.APPLY,
    ]
    assert everything[-1].changes == {"added": ["a", "b"], "changed": []}
    assert everything[-1].actor == ALICE
    assert [e.action for e in audit.entries(AuditQuery(trigger_id="a"))] == [
        ActionKind.CANCEL,
        ActionKind.PAUSE,
    ]
    assert [e.run_id for e in audit.entries(AuditQuery(run_id="r1"))] == ["r1"]
    paused = audit.entries(AuditQuery(actions=frozenset({ActionKind.PAUSE})))
    assert [e.note for e in paused] == ["db maintenance"]
    window = AuditQuery(since=T0 + timedelta(minutes=2), until=T0 + timedelta(minutes=3))
    assert [e.action for e in audit.entries(window)] == [ActionKind.CANCEL, ActionKind.PAUSE]
    assert len(audit.entries(AuditQuery(limit=1))) == 1


def test_each_new_revision_keeps_its_declaration(
    store: SqlTriggerStore, audit: SqlAuditLog
) -> None:
    store.apply([spec("a", cron="0 * * * *")], now=T0)
    store.apply([spec("a", cron="0 * * * *")], now=T0 + timedelta(minutes=1))  # unchanged
    store.apply([spec("a", cron="30 * * * *")], now=T0 + timedelta(minutes=2))
    store.apply([], now=T0 + timedelta(minutes=3))  # retired
    store.apply([spec("a", cron="30 * * * *")], now=T0 + timedelta(minutes=4))  # revived as is

    revisions = audit.revisions("a")

    assert [(r.revision, r.applied_at) for r in revisions] == [
        (2, T0 + timedelta(minutes=2)),
        (1, T0),
    ]
    assert revisions[0].declaration["schedule"] == {"kind": "cron", "expression": "30 * * * *"}
    assert revisions[1].digest != revisions[0].digest


def test_a_resume_keeps_the_note_and_time_of_the_pause_it_ends(
    store: SqlTriggerStore, audit: SqlAuditLog
) -> None:
    store.apply([spec("a")], now=T0)
    paused_at = T0 + timedelta(minutes=5)
    actions.pause(store, audit, "a", note="db maintenance", actor=ALICE, now=paused_at)
    actions.resume(store, audit, "a", note=None, actor=BOB, now=T0 + timedelta(minutes=9))

    resumed, paused = audit.entries(AuditQuery(trigger_id="a"))
    assert (paused.action, paused.note, paused.actor) == (ActionKind.PAUSE, "db maintenance", ALICE)
    assert resumed.actor == BOB
    assert resumed.changes == {
        "paused": False,
        "was_paused": True,
        "paused_at": "2026-01-01T00:05:00.000Z",
        "pause_note": "db maintenance",
    }
    assert store.get_trigger("a").pause_note is None  # type: ignore[union-attr]


def test_describe_tells_who_paused_which_apply_changed_what_and_what_comes_next(
    store: SqlTriggerStore, audit: SqlAuditLog
) -> None:
    from triggers.declarations import Declarations

    def apply_file(minutes: int, *specs: object, by: Actor) -> None:
        declarations = Declarations(flows={}, triggers=list(specs), source="t.yaml")  # type: ignore[arg-type]
        actions.apply(
            store,
            audit,
            lambda name, definition: "unused",
            declarations,
            now=T0 + timedelta(minutes=minutes),
            actor=by,
        )

    apply_file(0, spec("a", cron="0 * * * *"), spec("other"), by=ALICE)
    apply_file(10, spec("a", cron="30 * * * *"), spec("other"), by=BOB)
    apply_file(20, spec("a", cron="30 * * * *"), by=ALICE)  # retires `other` only
    actions.pause(store, audit, "a", note="vacation", actor=BOB, now=T0 + timedelta(minutes=30))

    found = describe_trigger(store, audit, "a", now=T0 + timedelta(minutes=31))

    assert found.state == "paused"
    assert found.paused_by is not None and found.paused_by.actor == BOB
    assert found.paused_by.note == "vacation"
    newest, first = found.revisions
    assert (newest.revision, newest.applied_by.actor if newest.applied_by else None) == (2, BOB)
    assert [(c.key, c.old, c.new) for c in newest.changes] == [
        ("schedule", "cron 0 * * * *", "cron 30 * * * *")
    ]
    assert first.first and first.applied_by is not None and first.applied_by.actor == ALICE
    assert [e.action for e in found.actions] == [
        ActionKind.PAUSE,
        ActionKind.APPLY,
        ActionKind.APPLY,
    ]
    assert found.next_fires == []  # paused: nothing comes next until it is resumed


def test_describe_without_an_operator_pause_names_none(
    store: SqlTriggerStore, audit: SqlAuditLog
) -> None:
    store.apply([spec("a", pause_on_failure=True)], now=T0)
    store.set_paused("a", paused=True, note="run r1 failed", now=T0 + timedelta(minutes=1))

    found = describe_trigger(store, audit, "a", now=T0 + timedelta(minutes=2), upcoming=3)

    assert found.paused_by is None and found.trigger.pause_note == "run r1 failed"


def test_status_counts_occurrences_not_rows_and_judges_heartbeats(
    store: SqlTriggerStore,
) -> None:
    store.apply([spec("a"), spec("b")], now=T0)
    missed = RangeRecord(
        trigger_id="a",
        expected_revision=1,
        after=T0,
        first_at=T0 + timedelta(minutes=1),
        last_at=T0 + timedelta(minutes=10),
        count=10,
        outcome=Outcome.MISSED,
        reason=Reason.CATCHUP_POLICY,
    )
    assert store.record_ranges([missed], now=T0) == [None]
    now = T0 + timedelta(minutes=11)
    fresh = Heartbeat(owner="d1", host="h", pid=1, version="1", started_at=T0, last_tick_at=now)
    store.heartbeat(fresh)
    store.heartbeat(dataclasses.replace(fresh, owner="d2", last_tick_at=T0))

    report = status_report(store, now=now, poll_interval=timedelta(seconds=5), parked_runs=[])

    assert report.occurrences == {"missed": 10}
    assert {v.beat.owner: v.state for v in report.daemons} == {"d1": "alive", "d2": "stale"}
    assert report.triggers["total"] == 2 and report.problems == []


def test_heartbeats_of_long_silent_daemons_are_pruned(store: SqlTriggerStore) -> None:
    beat = Heartbeat(owner="old", host="h", pid=1, version="1", started_at=T0, last_tick_at=T0)
    store.heartbeat(beat)
    store.heartbeat(dataclasses.replace(beat, owner="new", last_tick_at=T0 + timedelta(days=2)))

    assert store.prune_heartbeats(older_than=T0 + timedelta(days=1)) == 1
    assert [b.owner for b in store.heartbeats()] == ["new"]
