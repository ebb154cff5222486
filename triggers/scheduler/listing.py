"""Which trigger rows a poll reads: those written since the last poll and, every ten
minutes (and at start), all of them, a page a tick.

An idle daemon with ten thousand triggers must not decode them all every poll, so
between full listings only the rows written since the last listing are read (with
a margin for writers whose clocks run a little behind ours). A full listing (the
first one, and one every `full_every`, which also finds the triggers deleted behind
the daemon's back) reads the rows in id order, `page` at a time, one page a tick: a
start with fifty thousand triggers ticks after the first page, not after them all.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from triggers.errors import TriggersError
from triggers.store.protocol import TriggerRow, TriggerStore


@dataclass(frozen=True, slots=True)
class Page:
    """Rows read by one poll or one tick of a full listing."""

    rows: list[TriggerRow]
    complete: set[str] | None = None
    """When this page ended a full listing: every id it found (the others are gone)."""


def row_id(row: TriggerRow) -> str:
    """The id of a row, readable or not."""
    if isinstance(row, TriggersError):
        return str(row.details.get("trigger_id"))
    return row.id


class Listing:
    """The listing state of one loop (see the module doc)."""

    def __init__(
        self, store: TriggerStore, *, page: int, full_every: timedelta, margin: timedelta
    ) -> None:
        self._store = store
        self._page = page
        self._full_every = full_every
        self._margin = margin
        self._listed_at: datetime | None = None
        self._fully_listed_at: datetime | None = None
        # A full listing under way: the id after which its next page starts, the ids it
        # found so far, and when it began (rows written since are read again after it).
        self._cursor: str | None = None
        self._seen: set[str] = set()
        self._started_at: datetime | None = None

    @property
    def in_progress(self) -> bool:
        """A full listing has pages left: the next tick should come at once."""
        return self._started_at is not None

    def clock_stepped_back(self, now: datetime) -> None:
        """Rows written since carry the stepped clock: the next listing is a full one."""
        if self._listed_at is not None and self._listed_at > now:
            self._fully_listed_at = None

    def read(self, now: datetime) -> Page:
        """The next page of a full listing under way or due, else the rows written since
        the last listing."""
        listed_at = self._listed_at
        if self._started_at is None:
            full_due = (
                listed_at is None
                or self._fully_listed_at is None
                or now - self._fully_listed_at >= self._full_every
            )
            if not full_due and listed_at is not None:
                rows = self._store.list_triggers(changed_since=listed_at - self._margin)
                self._listed_at = now
                return Page(rows)
            self._started_at, self._cursor, self._seen = now, None, set()
        rows = self._store.list_triggers(after_id=self._cursor, limit=self._page)
        ids = [row_id(row) for row in rows]
        self._seen.update(ids)
        if len(rows) == self._page:
            self._cursor = ids[-1]
            return Page(rows)
        self._listed_at = self._fully_listed_at = self._started_at
        self._started_at, self._cursor = None, None
        complete, self._seen = self._seen, set()
        return Page(rows, complete=complete)
