"""`find_triggers`: the dashboard list's search and state filters, answered by the store.

Run against the memory store, SQLite and PostgreSQL.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from looms_runtime.db import Database
from tests.factories import spec
from triggers.clock import utc
from triggers.errors import UnknownTriggerError
from triggers.model import Trigger
from triggers.services import require_trigger
from triggers.store.audit_log import AuditQuery
from triggers.store.protocol import (
    LISTED_STATES,
    ClaimRequest,
    HistoryQuery,
    Launch,
    ListedState,
    Reserved,
    RunChange,
    Settlement,
    TriggerListQuery,
    TriggerStore,
)
from triggers.store.sql import SqlTriggerStore
from triggers.store.sql_audit import SqlAuditLog

T0 = utc(2026, 1, 1)
LEASE = timedelta(minutes=5)


@pytest.fixture
def store(any_store: TriggerStore) -> TriggerStore:
    return any_store


def ids(store: TriggerStore, **query: object) -> list[str]:
    found = store.find_triggers(TriggerListQuery(**query))  # type: ignore[arg-type]  # the test's keywords
    return [row.id for row in found if isinstance(row, Trigger)]


def run(store: TriggerStore, trigger_id: str, minute: int, state: str) -> None:
    """Claim, launch and settle (or park) one occurrence of `trigger_id`."""
    at = T0 + timedelta(minutes=minute)
    [fire] = store.claim(
        [ClaimRequest(trigger_id=trigger_id, occurrence_at=at, expected_revision=1)],
        owner="a",
        host="h",
        now=at,
        lease=LEASE,
    )
    assert isinstance(fire, Reserved), fire
    run_id = f"{trigger_id}-{minute}"
    store.record_launched([Launch(claim=fire, run_id=run_id)], now=at)
    if state == "parked":
        store.record_run_changes(
            [RunChange(trigger_id=trigger_id, run_id=run_id, state="parked")], now=at
        )
    elif state != "active":
        store.record_settled(
            [Settlement(trigger_id=trigger_id, run_id=run_id, state=state)],  # type: ignore[arg-type]  # completed or failed
            now=at + timedelta(seconds=10),
        )


def seed(store: TriggerStore) -> None:
    """One trigger in each state, and ids and descriptions with `_` and `%` in them."""
    declared = [
        spec("backup", description="Nightly BACKUP of the disks"),
        spec("disk_check", description="100% of the disks"),
        spec("diskxcheck", description="C:\\temp, nothing else"),
        spec("held"),
        spec("off", enabled=False),
        spec("paused"),
        spec("red"),
        spec("recovered"),
        spec("gone"),
        spec("gone-red"),
    ]
    store.apply(declared, now=T0)
    store.set_paused("paused", paused=True, note="maintenance", now=T0)
    run(store, "held", 1, "parked")
    run(store, "red", 1, "completed")
    run(store, "red", 2, "failed")
    run(store, "recovered", 1, "failed")
    run(store, "recovered", 2, "completed")
    run(store, "gone-red", 1, "failed")
    run(store, "backup", 1, "active")
    store.apply([s for s in declared if not s.id.startswith("gone")], now=T0 + timedelta(hours=1))


EXPECTED: dict[ListedState, list[str]] = {
    "all": [
        "backup",
        "disk_check",
        "diskxcheck",
        "held",
        "off",
        "paused",
        "recovered",
        "red",
    ],
    "enabled": ["backup", "disk_check", "diskxcheck", "recovered", "red"],
    "paused": ["paused"],
    "blocked": ["held"],
    "disabled": ["off"],
    "retired": ["gone", "gone-red"],
    "failing": ["red"],
    "running": ["backup", "held"],  # a parked run is in flight too
}


@pytest.mark.parametrize("state", LISTED_STATES)
def test_each_state_selects_the_triggers_in_it(store: TriggerStore, state: ListedState) -> None:
    seed(store)
    assert ids(store, state=state) == EXPECTED[state]


@pytest.mark.parametrize(
    ("search", "found"),
    [
        ("backup", ["backup"]),
        ("ACKU", ["backup"]),  # the description's BACKUP, and the id's, either case
        ("DISK", ["backup", "disk_check", "diskxcheck"]),  # ids, and a description
        ("k_c", ["disk_check"]),  # `_` is itself, not any one character
        ("_", ["disk_check"]),
        ("%", ["disk_check"]),  # `%` is itself (in a description), not anything
        ("0% of", ["disk_check"]),
        ("\\temp", ["diskxcheck"]),  # so is the escape character
        ("\\", ["diskxcheck"]),
        ("nothing like it", []),
        ("%%", []),
    ],
)
def test_a_search_is_a_case_insensitive_substring_with_literal_wildcards(
    store: TriggerStore, search: str, found: list[str]
) -> None:
    seed(store)
    assert ids(store, search=search) == found


def test_a_search_and_a_state_select_together(store: TriggerStore) -> None:
    seed(store)
    assert ids(store, search="RE", state="failing") == ["red"]
    assert ids(store, search="re", state="all") == ["recovered", "red"]
    assert ids(store, search="re", state="retired") == ["gone-red"]
    assert ids(store, search="gone", state="all") == []
    assert ids(store, search="zzz", state="paused") == []


def test_pages_of_a_filter_follow_each_other_without_gaps_or_repeats(
    store: TriggerStore,
) -> None:
    names = [f"job-{n:02d}" for n in range(23)]
    store.apply([spec(name) for name in [*names, "other"]], now=T0)
    paused = names[::2]
    for name in paused:
        store.set_paused(name, paused=True, note=None, now=T0)
    for state, search, wanted in [
        ("paused", "", paused),
        ("enabled", "job", names[1::2]),
        ("all", "JOB-", names),
    ]:
        seen: list[str] = []
        after: str | None = None
        while True:
            page = ids(store, state=state, search=search, after_id=after, limit=4)
            assert len(page) <= 4
            seen += page
            if len(page) < 4:
                break
            after = page[-1]
        assert seen == wanted  # in id order, each once
    assert ids(store, after_id="job-22") == ["other"]
    assert ids(store, after_id="other") == []
    assert ids(store, state="paused", after_id=paused[-1]) == []


def test_reads_inside_reading_are_one_transaction_of_one_connection(
    reused_database: Database,
) -> None:
    store, audit = SqlTriggerStore(reused_database), SqlAuditLog(reused_database)
    store.apply([spec("a"), spec("b")], now=T0)
    begun: list[object] = []

    def count(conn: object) -> None:
        begun.append(conn)

    sa.event.listen(reused_database.engine, "begin", count)
    try:
        with store.reading():
            assert reused_database.checked_out() == 1
            assert [t.id for t in store.list_triggers() if isinstance(t, Trigger)] == ["a", "b"]
            assert store.history(HistoryQuery(trigger_id="a")) == []
            assert audit.entries(AuditQuery(trigger_id="a")) == []
            with store.reading():  # nested: the same one
                assert ids(store, search="b") == ["b"]
            with pytest.raises(UnknownTriggerError):
                require_trigger(store, "nope")
            assert store.get_trigger("b") is not None  # an error of ours leaves it usable
            assert reused_database.checked_out() == 1
        assert len(begun) == 1
        assert reused_database.checked_out() == 0
        store.get_trigger("a")
        assert len(begun) == 2  # outside: a transaction each
    finally:
        sa.event.remove(reused_database.engine, "begin", count)


def test_reading_on_every_store_reads_what_the_store_holds(store: TriggerStore) -> None:
    seed(store)
    with store.reading():
        inside = (ids(store, state="failing"), store.get_trigger("paused"))
    assert inside == (ids(store, state="failing"), store.get_trigger("paused"))
