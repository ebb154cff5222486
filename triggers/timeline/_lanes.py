"""A timeline's rows sorted into lanes: runs, ranges, marks, one lane per trigger.

Both renderers draw these, so the SVG and the terminal show the same things.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfoNotFoundError

from triggers.timeline._input import Downtime, DstChange, Timeline, parse_instant
from triggers.timeline._zones import dst_changes

RUN_OUTCOMES = ("completed", "failed", "cancelled", "superseded", "launched")
"""Outcomes of a row that launched a run: drawn as a bar from launch to settlement."""
RANGE_OUTCOMES = ("skipped", "missed")
"""Outcomes of occurrences that did not launch: shaded from the first to the last."""
PENDING_OUTCOMES = ("launching", "buffered")
"""Outcomes of occurrences decided to launch, not launched yet: a mark."""
OUTCOMES = (*RUN_OUTCOMES, *RANGE_OUTCOMES, *PENDING_OUTCOMES)


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """A run's bar: from its launch to its settlement (or to now, while it runs)."""

    start: datetime
    end: datetime
    outcome: str
    occurrence: datetime
    manual: bool
    ongoing: bool
    run_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Range:
    """Occurrences that did not launch, first to last (one occurrence: a moment)."""

    start: datetime
    end: datetime
    outcome: str
    reason: str | None
    count: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Mark:
    """An occurrence drawn at its instant: pending, or a superseded one that never ran."""

    at: datetime
    outcome: str
    manual: bool


@dataclass(slots=True, kw_only=True)
class Lane:
    """What one trigger's row of the picture shows."""

    trigger_id: str
    zone: str | None = None
    runs: list[Run] = field(default_factory=list)
    ranges: list[Range] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    manual: list[datetime] = field(default_factory=list)
    """Occurrences of manual fires (`fire`), marked on top of their run."""
    upcoming: list[datetime] = field(default_factory=list)
    dst: list[DstChange] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.runs or self.ranges or self.marks or self.upcoming)


def lanes(timeline: Timeline) -> list[Lane]:
    """The lanes of `timeline`, top to bottom, everything clipped to its window.

    Raises:
        ValueError: a row lacks `trigger_id`, `occurrence` or `outcome`, or holds an
            unknown outcome or an unreadable instant (its index is named).
    """
    found: dict[str, Lane] = {
        trigger_id: Lane(trigger_id=trigger_id) for trigger_id in timeline.trigger_ids
    }
    for index, row in enumerate(timeline.rows):
        trigger_id = row.get("trigger_id")
        if not isinstance(trigger_id, str) or not trigger_id:
            raise ValueError(f"ledger row {index}: no trigger_id")
        lane = found.get(trigger_id)
        if lane is None:
            lane = found[trigger_id] = Lane(trigger_id=trigger_id)
        _place(lane, row, index=index, timeline=timeline)
    listed = set(timeline.trigger_ids)
    ordered = [found[t] for t in timeline.trigger_ids] + [
        found[t] for t in sorted(found) if t not in listed
    ]
    for lane in ordered:
        lane.zone = timeline.trigger_zones.get(lane.trigger_id)
        lane.upcoming = sorted(
            at
            for at in (
                parse_instant(value, what=f"upcoming fire of {lane.trigger_id}")
                for value in timeline.upcoming.get(lane.trigger_id, ())
            )
            if at is not None and timeline.since <= at <= timeline.until
        )
        lane.dst = _dst_of(lane, timeline)
        lane.runs.sort(key=lambda run: run.start)
        lane.ranges.sort(key=lambda found_range: found_range.start)
        lane.marks.sort(key=lambda mark: mark.at)
        lane.manual.sort()
    return ordered


def clipped_downtime(timeline: Timeline) -> list[Downtime]:
    """The downtime within the window, clipped to it, oldest first."""
    kept = []
    for down in sorted(timeline.downtime, key=lambda d: d.started_at):
        start, end = max(down.started_at, timeline.since), min(down.ended_at, timeline.until)
        if start < end:
            kept.append(Downtime(started_at=start, ended_at=end, ongoing=down.ongoing))
    return kept


def _place(lane: Lane, row: Mapping[str, Any], *, index: int, timeline: Timeline) -> None:
    where = f"ledger row {index} ({lane.trigger_id})"
    outcome = row.get("outcome")
    if outcome not in OUTCOMES:
        raise ValueError(f"{where}: unknown outcome {outcome!r}")
    occurrence = parse_instant(row.get("occurrence"), what=f"{where} occurrence")
    if occurrence is None:
        raise ValueError(f"{where}: no occurrence")
    last = parse_instant(row.get("last_occurrence"), what=f"{where} last_occurrence")
    launched = parse_instant(row.get("launched_at"), what=f"{where} launched_at")
    settled = parse_instant(row.get("settled_at"), what=f"{where} settled_at")
    # A dependent trigger's occurrence has a key too (its upstream run): not an operator's.
    manual = bool(row.get("manual_key")) and not row.get("upstream_run_id")
    since, until = timeline.since, timeline.until
    if manual and since <= occurrence <= until:
        lane.manual.append(occurrence)
    if outcome in RUN_OUTCOMES and launched is not None:
        ongoing = settled is None
        end = settled or min(timeline.now or until, until)
        start, end = max(launched, since), min(max(end, launched), until)
        if start <= end and launched <= until:
            lane.runs.append(
                Run(
                    start=start,
                    end=end,
                    outcome=str(outcome),
                    occurrence=occurrence,
                    manual=manual,
                    ongoing=ongoing,
                    run_id=row.get("run_id") or None,
                )
            )
        return
    if outcome in RANGE_OUTCOMES:
        end = max(last or occurrence, occurrence)
        if end >= since and occurrence <= until:
            count = row.get("count")
            lane.ranges.append(
                Range(
                    start=max(occurrence, since),
                    end=min(end, until),
                    outcome=str(outcome),
                    reason=row.get("reason"),
                    count=count if isinstance(count, int) and count > 0 else 1,
                )
            )
        return
    if since <= occurrence <= until:
        lane.marks.append(Mark(at=occurrence, outcome=str(outcome), manual=manual))


def _dst_of(lane: Lane, timeline: Timeline) -> list[DstChange]:
    if timeline.dst_changes is not None:
        return [
            change
            for change in timeline.dst_changes.get(lane.trigger_id, ())
            if timeline.since <= change.at <= timeline.until
        ]
    if lane.zone is None:
        return []
    try:
        return dst_changes(lane.zone, since=timeline.since, until=timeline.until)
    except (ZoneInfoNotFoundError, ValueError):
        return []  # a zone this machine's tzdata does not know: nothing to draw
