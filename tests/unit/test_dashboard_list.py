"""The dashboard's trigger list: pages by id with a cursor, a search, the state filters
(`failing` too), each row's sparkline from the trigger's newest ledger rows."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, cast

from tests.contract.test_store import T0, claim, reserved
from tests.factories import spec
from triggers.api._context import ApiServices
from triggers.api.dashboard._gather import PAGE, SPARK, ListFilter, trigger_list
from triggers.clock import FakeClock
from triggers.store.memory import MemoryTriggerStore
from triggers.store.protocol import Launch, Settlement


def _services(store: MemoryTriggerStore) -> ApiServices:
    return ApiServices(
        store=store,
        audit=cast("Any", None),
        runtime=cast("Any", None),
        clock=FakeClock(T0 + timedelta(hours=1)),
        host="h",
        owner="api:test",
    )


def _failed(store: MemoryTriggerStore, trigger_id: str, minute: int) -> None:
    fire = reserved(store, trigger_id, minute)
    store.record_launched([Launch(claim=fire, run_id=f"run-{trigger_id}")], now=T0)
    store.record_settled(
        [Settlement(trigger_id=trigger_id, run_id=f"run-{trigger_id}", state="failed")],
        now=T0 + timedelta(minutes=minute),
    )


def _ids(found: dict[str, Any]) -> list[str]:
    return [row["id"] for row in found["triggers"]]


def test_pages_follow_each_other_by_id_to_the_last() -> None:
    store = MemoryTriggerStore()
    names = [f"t{n:03d}" for n in range(PAGE * 2 + 7)]
    store.apply([spec(name) for name in names], now=T0)
    ctx = _services(store)
    first = trigger_list(ctx, ListFilter())
    assert _ids(first) == names[:PAGE] and first["next_after"] == names[PAGE - 1]
    second = trigger_list(ctx, ListFilter(after=first["next_after"]))
    assert _ids(second) == names[PAGE : PAGE * 2]
    last = trigger_list(ctx, ListFilter(after=second["next_after"]))
    assert _ids(last) == names[PAGE * 2 :] and last["next_after"] is None
    exact = trigger_list(ctx, ListFilter(after=names[PAGE + 6]))
    assert _ids(exact) == names[PAGE + 7 :] and exact["next_after"] is None


def test_a_sparkline_is_the_newest_outcomes_oldest_first() -> None:
    store = MemoryTriggerStore()
    store.apply([spec("a"), spec("b")], now=T0)
    for minute in range(1, SPARK + 6):
        claim(store, "a", minute)  # the first fires, the rest skip (overlap)
    [a, b] = trigger_list(_services(store), ListFilter())["triggers"]
    assert len(a["sparkline"]) == SPARK
    assert a["sparkline"][-1]["occurrence"] == "2026-01-01T00:25:00.000Z"
    assert a["last_outcome"] == "skipped" and b["sparkline"] == []


def test_search_and_failing_pick_their_triggers_past_a_batch() -> None:
    store = MemoryTriggerStore()
    names = [f"t{n:04d}" for n in range(1200)]
    store.apply([spec(name) for name in names], now=T0)
    for name in ("t0003", "t0700", "t1150"):
        _failed(store, name, 1)
    claim(store, "t0004", 1)
    ctx = _services(store)
    failing = trigger_list(ctx, ListFilter(state="failing"))
    assert _ids(failing) == ["t0003", "t0700", "t1150"] and failing["next_after"] is None
    assert [row["sparkline"][0]["outcome"] for row in failing["triggers"]] == ["failed"] * 3
    found = trigger_list(ctx, ListFilter(search="T115"))
    assert _ids(found) == [f"t115{n}" for n in range(10)]
    assert trigger_list(ctx, ListFilter(state="paused"))["triggers"] == []


def test_a_sparkline_says_its_counts_and_each_failures_time() -> None:
    from triggers.api.dashboard._render import _sparkline

    rows = [
        {"outcome": "completed", "occurrence": "2026-01-01T00:01:00.000Z"},
        {"outcome": "failed", "occurrence": "2026-01-01T00:02:00.000Z"},
        {"outcome": "completed", "occurrence": "2026-01-01T00:03:00.000Z"},
    ]
    svg = str(_sparkline(rows))
    assert 'aria-label="last 3: 2 completed, 1 failed"' in svg
    assert '<path class="good" d="M0 6h4v10h-4zM12 6h4v10h-4z"/>' in svg
    assert '<rect class="bad" x="6" y="0" width="4" height="16">' in svg
    assert "<title>failed · 2026-01-01 00:02:00 UTC</title>" in svg
