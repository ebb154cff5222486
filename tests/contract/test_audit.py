"""`audit`: each disagreement between the ledger and the runtime is found, and only those."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

import pytest
import sqlalchemy as sa

from looms_runtime.db import Database
from tests.factories import spec
from triggers.audit import AuditReport, RunFact, audit
from triggers.clock import utc
from triggers.errors import StoreError
from triggers.model import Outcome, Reason
from triggers.store.audit_log import Actor, AuditQuery
from triggers.store.protocol import Claim, ClaimRequest, Launch, RangeRecord, Reserved, RunChange
from triggers.store.schema import triggers as triggers_table
from triggers.store.sql import SqlTriggerStore
from triggers.store.sql_audit import SqlAuditLog

T0 = utc(2026, 1, 1)
LEASE = timedelta(minutes=5)
RETENTION = timedelta(days=30)


@pytest.fixture
def store(reused_database: Database) -> SqlTriggerStore:
    store = SqlTriggerStore(reused_database)
    store.apply([spec("a")], now=T0)
    return store


def claim(store: SqlTriggerStore, minute: int) -> Claim:
    at = T0 + timedelta(minutes=minute)
    [result] = store.claim(
        [ClaimRequest(trigger_id="a", occurrence_at=at, expected_revision=1)],
        owner="o",
        host="h",
        now=at,
        lease=LEASE,
    )
    assert isinstance(result, Claim), result
    return result


def launch(store: SqlTriggerStore, minute: int, run_id: str) -> Claim:
    first = claim(store, minute)
    assert isinstance(first, Reserved), first
    store.record_launched([Launch(claim=first, run_id=run_id)], now=first.occurrence_at)
    return first


def fact(run_id: str, key: str, status: str) -> RunFact:
    settled = None if status == "active" else T0
    return RunFact(
        run_id=run_id,
        trigger_id="a",
        idempotency_key=key,
        status=status,
        created_at=T0,
        settled_at=settled,
    )


def check(store: SqlTriggerStore, *runs: RunFact) -> AuditReport:
    statuses: Mapping[str, str] = {run.run_id: run.status for run in runs}
    return audit(
        store,
        list(runs),
        lambda ids: {run_id: statuses.get(run_id, "missing") for run_id in ids},
        now=T0 + timedelta(hours=1),
        fire_retention=RETENTION,
    )


def checks(report: AuditReport) -> list[str]:
    return [finding.check for finding in report.findings]


def test_a_ledger_that_agrees_with_the_runtime_is_clean(store: SqlTriggerStore) -> None:
    first = launch(store, 1, "run-1")
    store.record_run_changes([RunChange(trigger_id="a", run_id="run-1", state="completed")], now=T0)
    second = launch(store, 2, "run-2")

    report = check(
        store,
        fact("run-1", first.idempotency_key, "completed"),
        fact("run-2", second.idempotency_key, "active"),
    )

    assert report.clean, report.findings
    assert (report.rows, report.runs, report.triggers) == (2, 2, 1)


def test_a_row_whose_run_settled_otherwise_is_found(store: SqlTriggerStore) -> None:
    first = launch(store, 1, "run-1")

    report = check(store, fact("run-1", first.idempotency_key, "completed"))

    assert checks(report) == ["run_state"]
    assert "launched" in report.findings[0].message


def test_a_run_without_its_row_and_a_lost_launch_record_are_found(
    store: SqlTriggerStore,
) -> None:
    pending = claim(store, 1)  # the runtime has its run; the ledger still says launching

    report = check(
        store,
        fact("run-1", pending.idempotency_key, "active"),
        fact("run-9", "a:2026-01-01T05:00:00Z", "completed"),
    )

    assert sorted(checks(report)) == ["launch_unrecorded", "run_without_row"]


def test_an_occurrence_recorded_twice_is_found(store: SqlTriggerStore) -> None:
    store.record_ranges(
        [
            RangeRecord(
                trigger_id="a",
                expected_revision=1,
                after=T0,
                first_at=T0 + timedelta(minutes=1),
                last_at=T0 + timedelta(minutes=5),
                count=5,
                outcome=Outcome.MISSED,
                reason=Reason.CATCHUP_POLICY,
            )
        ],
        now=T0,
    )
    # A row for an occurrence the range already holds, written behind the store's back.
    with store._db.write() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO fires (trigger_id, occurrence_at, count, manual_key, kind, outcome)"
                " VALUES ('a', :at, 1, '', 'scheduled', 'skipped')"
            ),
            {"at": int((T0 + timedelta(minutes=3)).timestamp() * 1000)},
        )

    assert checks(check(store)) == ["occurrence_twice"]


def test_counters_that_drifted_from_the_ledger_are_found(store: SqlTriggerStore) -> None:
    first = launch(store, 1, "run-1")
    with store._db.write() as conn:
        conn.execute(triggers_table.update().values(active_count=3))

    report = check(store, fact("run-1", first.idempotency_key, "active"))

    assert checks(report) == ["counters"]
    assert report.findings[0].message == "active_count is 3, the ledger holds 1"


def test_a_pause_whose_audit_entry_fails_is_not_kept(
    reused_database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operator's action commits with its audit entry or not at all."""
    from triggers import actions

    store = SqlTriggerStore(reused_database)
    store.apply([spec("t")], now=T0)
    log = SqlAuditLog(reused_database)

    def refuse(entry: object) -> object:
        raise StoreError("the audit log refused the entry")

    monkeypatch.setattr(log, "record", refuse)
    with pytest.raises(StoreError):
        actions.pause(store, log, "t", note="n", actor=Actor(host="h", user="u"), now=T0)

    trigger = store.get_trigger("t")
    assert trigger is not None
    assert not trigger.paused  # rolled back with the entry that failed
    monkeypatch.undo()
    actions.pause(store, log, "t", note="n", actor=Actor(host="h", user="u"), now=T0)
    paused = store.get_trigger("t")
    assert paused is not None and paused.paused
    assert [e.action.value for e in log.entries(AuditQuery(trigger_id="t"))] == ["pause"]
