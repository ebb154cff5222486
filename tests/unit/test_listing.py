"""A poll reads the rows written since the last one; a full listing reads them all, a page
a tick, and only its last page tells which triggers are gone."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.factories import spec
from triggers.errors import CorruptRowError
from triggers.model import Trigger
from triggers.scheduler.listing import Listing, row_id
from triggers.store.protocol import TriggerRow

T0 = datetime(2026, 1, 1, tzinfo=UTC)
EVERY = timedelta(minutes=10)


class PagedStore:
    """The listing part of a store: rows by id, each with when it was last written."""

    def __init__(self, ids: Sequence[str]) -> None:
        self.written = dict.fromkeys(ids, T0 - timedelta(hours=1))
        self.corrupt: set[str] = set()
        self.calls: list[dict[str, Any]] = []

    def list_triggers(
        self,
        *,
        changed_since: datetime | None = None,
        ids: Sequence[str] | None = None,
        after_id: str | None = None,
        limit: int | None = None,
    ) -> list[TriggerRow]:
        self.calls.append({"changed_since": changed_since, "after_id": after_id, "limit": limit})
        found = sorted(
            trigger_id
            for trigger_id, written in self.written.items()
            if (changed_since is None or written >= changed_since)
            and (after_id is None or trigger_id > after_id)
        )
        return [self._row(trigger_id) for trigger_id in found[:limit]]

    def _row(self, trigger_id: str) -> TriggerRow:
        if trigger_id in self.corrupt:
            return CorruptRowError("unreadable", trigger_id=trigger_id)
        return Trigger(
            spec=spec(trigger_id),
            revision=1,
            watermark_at=T0,
            created_at=T0,
            updated_at=self.written[trigger_id],
        )


def listing(store: PagedStore) -> Listing:
    return Listing(store, page=2, full_every=EVERY, margin=timedelta(seconds=15))  # type: ignore[arg-type]


def test_a_full_listing_reads_a_page_a_call_and_its_last_page_names_every_trigger() -> None:
    store = PagedStore(["a", "b", "c", "d", "e"])
    store.corrupt.add("c")
    found = listing(store)
    pages = [found.read(T0)]
    while found.in_progress:
        pages.append(found.read(T0))
    assert [[row_id(row) for row in page.rows] for page in pages] == [["a", "b"], ["c", "d"], ["e"]]
    assert [page.complete for page in pages] == [None, None, {"a", "b", "c", "d", "e"}]
    assert [call["after_id"] for call in store.calls] == [None, "b", "d"]


def test_between_full_listings_only_rows_written_since_are_read() -> None:
    store = PagedStore(["a", "b", "c"])
    found = listing(store)
    while True:
        found.read(T0)
        if not found.in_progress:
            break
    store.written["b"] = T0 + timedelta(seconds=30)
    page = found.read(T0 + timedelta(minutes=1))
    assert [row_id(row) for row in page.rows] == ["b"]
    assert page.complete is None and not found.in_progress
    assert store.calls[-1]["changed_since"] == T0 - timedelta(seconds=15)


def test_a_full_listing_comes_again_after_its_interval_and_after_a_clock_step_back() -> None:
    store = PagedStore(["a"])
    found = listing(store)
    assert found.read(T0).complete == {"a"}
    assert found.read(T0 + EVERY).complete == {"a"}
    found.clock_stepped_back(T0)
    assert found.read(T0).complete == {"a"}
