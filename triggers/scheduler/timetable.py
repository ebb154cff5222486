"""What the loop knows of every trigger, and a heap of when each is next due.

Nothing here costs anything per idle trigger: a trigger is looked at when it is
due (its next occurrence, plus its jitter) or when it changes. Rescheduling
pushes a new heap item and leaves the old one to be discarded when it surfaces.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from datetime import datetime

import structlog

from triggers.errors import ScheduleError
from triggers.model import Trigger, upstreams_of
from triggers.scheduler.calendars import TriggerCalendars, compile_calendars
from triggers.scheduler.forecast import fire_time, stop_reason
from triggers.scheduler.occurrences import CompiledSchedule, compile_schedule

log = structlog.get_logger()


@dataclass(slots=True)
class Entry:
    """One trigger as the loop sees it."""

    trigger: Trigger
    schedule: CompiledSchedule | None
    watermark_at: datetime
    due_at: datetime | None = None
    generation: int = 0
    calendars: TriggerCalendars | None = None
    """The trigger's `exclude` and `only` calendars; None when it names none."""
    handed_off: bool = False
    """Due again after another daemon, its owner, was left to claim it first: when it
    comes due like this the owner did not, and this daemon claims it."""


class Timetable:
    """Entries by trigger id, and a heap of their due times."""

    def __init__(self) -> None:
        self.entries: dict[str, Entry] = {}
        # Triggers last seen paused or disabled (not retired): only they can have
        # occurrences to record as skipped, so a poll looks at them, not at them all.
        self._quiet: set[str] = set()
        self._heap: list[tuple[datetime, int, str, int]] = []
        self._sequence = 0
        # Entries taken off the heap as due and not rescheduled since: a tick that
        # fails part-way puts them back (`put_back`), or they would wait for a change.
        self._taken: dict[str, Entry] = {}
        # The upstreams of each dependent trigger (`after:`), by the dependent's id.
        self._upstreams: dict[str, tuple[str, ...]] = {}

    def followed(self, trigger_ids: set[str]) -> bool:
        """Whether a dependent trigger follows the runs of one of `trigger_ids`."""
        return any(not trigger_ids.isdisjoint(listed) for listed in self._upstreams.values())

    def sync(self, trigger: Trigger) -> Entry:
        """Take a stored trigger in, recompiling its schedule when its revision changed.

        The watermark only moves forward: the stored one, or what this loop has
        recorded since it read it."""
        if trigger.retired or trigger.claimable:
            self._quiet.discard(trigger.id)
        else:
            self._quiet.add(trigger.id)
        upstreams = upstreams_of(trigger.spec)
        if upstreams:
            self._upstreams[trigger.id] = upstreams
        else:
            self._upstreams.pop(trigger.id, None)
        entry = self.entries.get(trigger.id)
        if entry is not None and entry.trigger == trigger:
            return entry  # nothing changed: its due time stands
        if entry is None or entry.trigger.revision != trigger.revision:
            watermark = trigger.watermark_at if entry is None else entry.watermark_at
            entry = Entry(
                trigger=trigger,
                schedule=_compile(trigger),
                calendars=_calendars(trigger),
                watermark_at=max(trigger.watermark_at, watermark),
                generation=entry.generation if entry is not None else 0,
            )
            self.entries[trigger.id] = entry
        else:
            entry.trigger = trigger
            entry.watermark_at = max(entry.watermark_at, trigger.watermark_at)
        self.reschedule(entry)
        return entry

    def remove(self, trigger_id: str) -> None:
        """Forget a trigger (gone from the store, or unreadable)."""
        self.entries.pop(trigger_id, None)
        self._quiet.discard(trigger_id)
        self._upstreams.pop(trigger_id, None)

    def quiet_entries(self) -> list[Entry]:
        """The entries of triggers last seen paused or disabled (a superset of those that
        are now: the caller checks each)."""
        return [self.entries[i] for i in sorted(self._quiet) if i in self.entries]

    def compiled(self, trigger: Trigger) -> bool:
        """Whether `trigger` is known at its revision (syncing it compiles nothing)."""
        entry = self.entries.get(trigger.id)
        return entry is not None and entry.trigger.revision == trigger.revision

    def reschedule(
        self, entry: Entry, *, at: datetime | None = None, handed_off: bool = False
    ) -> None:
        """Due at `at`, or at its next occurrence after the watermark (plus jitter)."""
        trigger_id = entry.trigger.spec.id
        self._taken.pop(trigger_id, None)
        entry.generation += 1
        entry.handed_off = handed_off
        due_at = entry.due_at = at if at is not None else _due_at(entry)
        if due_at is not None:
            self._sequence += 1
            heapq.heappush(self._heap, (due_at, self._sequence, trigger_id, entry.generation))

    def pop_due(self, now: datetime) -> list[Entry]:
        """Every entry due at or before `now`, taken off the heap."""
        due = []
        while self._heap and self._heap[0][0] <= now:
            _, _, trigger_id, generation = heapq.heappop(self._heap)
            entry = self.entries.get(trigger_id)
            if entry is not None and entry.generation == generation:
                self._take(entry)
                due.append(entry)
        return due

    def take_if_due(self, entry: Entry, now: datetime) -> bool:
        """Take one entry off the heap if it is due; True when it was."""
        if entry.due_at is None or entry.due_at > now:
            return False
        self._take(entry)
        return True

    def put_back(self, at: datetime) -> int:
        """Make every entry taken as due and not rescheduled since due again at `at`.

        A tick that fails part-way calls this, so that the occurrences it took are
        decided by the next tick rather than when their trigger next changes.
        Returns how many were put back."""
        taken, self._taken = self._taken, {}
        count = 0
        for trigger_id, entry in taken.items():
            if self.entries.get(trigger_id) is entry and entry.due_at is None:
                self.reschedule(entry, at=at)
                count += 1
        return count

    def _take(self, entry: Entry) -> None:
        entry.due_at = None
        entry.generation += 1
        self._taken[entry.trigger.spec.id] = entry

    def soonest(self, count: int) -> list[tuple[datetime, str]]:
        """The `count` earliest due times with their trigger ids, soonest first.

        Safe from another thread (the dashboard's): it reads a copy of the heap, so an
        answer may be a moment behind the loop, never torn."""
        heap = self._heap.copy()  # one C call: the loop's pushes and pops are not seen mid-way
        current = []
        for due_at, _, trigger_id, generation in heap:
            entry = self.entries.get(trigger_id)
            if entry is not None and entry.generation == generation:
                current.append((due_at, trigger_id))
        return heapq.nsmallest(count, current)

    def next_due(self) -> datetime | None:
        """When the earliest entry is due, or None."""
        while self._heap:
            due_at, _, trigger_id, generation = self._heap[0]
            entry = self.entries.get(trigger_id)
            if entry is not None and entry.generation == generation:
                return due_at
            heapq.heappop(self._heap)  # rescheduled or removed since it was pushed
        return None


def _compile(trigger: Trigger) -> CompiledSchedule | None:
    spec = trigger.spec
    try:
        return compile_schedule(
            spec.schedule,
            trigger_id=spec.id,
            timezone=spec.timezone,
            start_at=spec.start_at,
            end_at=spec.end_at,
            validated=True,
        )
    except ScheduleError as exc:
        log.error("schedule_invalid", trigger_id=spec.id, error=str(exc))
        return None


def _calendars(trigger: Trigger) -> TriggerCalendars | None:
    try:
        return compile_calendars(trigger.spec)
    except ScheduleError as exc:  # a stored row no longer valid here (its zone is gone)
        log.error("calendar_invalid", trigger_id=trigger.id, error=str(exc))
        return None


def _due_at(entry: Entry) -> datetime | None:
    """What `triggers next` shows (`forecast`): the next occurrence after the
    watermark, launched at its jitter, unless the trigger takes no claims now."""
    trigger, spec = entry.trigger, entry.trigger.spec
    stop = stop_reason(
        spec, paused=trigger.paused, retired=trigger.retired, runs_launched=trigger.runs_launched
    )
    if entry.schedule is None or stop is not None:
        return None
    next_at = entry.schedule.next_after(entry.watermark_at)
    if next_at is None:
        return None
    return fire_time(spec, entry.schedule, next_at)
