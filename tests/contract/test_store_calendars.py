"""The claim's `calendar` rule, on the memory store, SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from looms_runtime.db import Database
from tests.factories import spec
from triggers.clock import utc
from triggers.model import Action, CalendarSpec, Outcome, Overlap, Reason
from triggers.store.protocol import Claim, ClaimRequest, HistoryQuery, Reserved, TriggerStore

T0 = utc(2026, 11, 1)
LEASE = timedelta(minutes=5)
SUNDAYS = CalendarSpec(name="sundays", weekdays=(6,))


@pytest.fixture
def database(reused_database: Database) -> Database:
    return reused_database


@pytest.fixture
def store(any_store: TriggerStore) -> TriggerStore:
    return any_store


def _claim(store: TriggerStore, *requests: tuple[int, str | None], **extra: Any) -> list[Claim]:
    results = store.claim(
        [
            ClaimRequest(
                trigger_id="a",
                occurrence_at=T0 + timedelta(minutes=minute),
                expected_revision=1,
                excluded_by=excluded_by,
                **extra,
            )
            for minute, excluded_by in requests
        ],
        owner="o",
        host="h",
        now=T0 + timedelta(minutes=max(minute for minute, _ in requests)),
        lease=LEASE,
    )
    assert all(isinstance(result, Claim) for result in results), results
    return [result for result in results if isinstance(result, Claim)]


def test_excluded_occurrence_is_skipped_naming_calendar_and_day(store: TriggerStore) -> None:
    store.apply([spec("a", exclude=(SUNDAYS,))], now=T0)

    [skipped, fired] = _claim(store, (1, "sundays (Sunday)"), (2, None))

    assert (skipped.action, skipped.reason) == (Action.SKIP, Reason.CALENDAR)
    assert isinstance(fired, Reserved) and fired.action is Action.FIRE
    rows = {row.occurrence_at: row for row in store.history(HistoryQuery(trigger_id="a"))}
    row = rows[T0 + timedelta(minutes=1)]
    assert (row.outcome, row.reason, row.reason_detail) == (
        Outcome.SKIPPED,
        Reason.CALENDAR,
        "sundays (Sunday)",
    )
    assert row.settled_at is not None and row.run_id is None
    assert rows[T0 + timedelta(minutes=2)].reason_detail is None
    trigger = store.get_trigger("a")
    assert trigger is not None
    assert trigger.watermark_at == T0 + timedelta(minutes=2)
    assert (trigger.active_count, trigger.runs_launched) == (1, 1)


def test_excluded_occurrence_takes_no_slot_and_is_not_superseded(store: TriggerStore) -> None:
    store.apply([spec("a", overlap=Overlap.SUPERSEDE, exclude=(SUNDAYS,))], now=T0)

    decided = _claim(store, (1, None), (2, "sundays (Sunday)"), (3, "sundays (Sunday)"))

    assert [(c.action, c.reason) for c in decided] == [
        (Action.FIRE, None),
        (Action.SKIP, Reason.CALENDAR),
        (Action.SKIP, Reason.CALENDAR),
    ]
    trigger = store.get_trigger("a")
    assert trigger is not None and trigger.active_count == 1 and trigger.buffered_count == 0


def test_excluded_occurrence_of_busy_buffering_trigger_is_not_buffered(
    store: TriggerStore,
) -> None:
    store.apply([spec("a", overlap=Overlap.BUFFER_ALL, exclude=(SUNDAYS,))], now=T0)

    decided = _claim(store, (1, None), (2, "sundays (Sunday)"), (3, None))

    assert [(c.action, c.reason) for c in decided] == [
        (Action.FIRE, None),
        (Action.SKIP, Reason.CALENDAR),
        (Action.BUFFER, Reason.OVERLAP),
    ]


def test_manual_fire_is_never_excluded(store: TriggerStore) -> None:
    store.apply([spec("a", exclude=(SUNDAYS,))], now=T0)

    [manual] = _claim(store, (1, "sundays (Sunday)"), kind="manual", manual_key="k")

    assert manual.action is Action.FIRE


def test_calendar_change_is_a_new_revision(store: TriggerStore) -> None:
    store.apply([spec("a", exclude=(SUNDAYS,))], now=T0)
    same = store.apply([spec("a", exclude=(SUNDAYS,))], now=T0 + timedelta(minutes=1))
    saturdays = CalendarSpec(name="sundays", weekdays=(5, 6))
    changed = store.apply([spec("a", exclude=(saturdays,))], now=T0 + timedelta(minutes=2))

    assert same.unchanged == ["a"]
    assert changed.updated == ["a"]
    trigger = store.get_trigger("a")
    assert trigger is not None and trigger.revision == 2
    assert trigger.spec.exclude == (saturdays,)
