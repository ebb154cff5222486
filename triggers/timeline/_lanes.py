"""A timeline's rows sorted into lanes: runs, ranges, marks, one lane per trigger.

Both renderers draw these, so the SVG and the terminal show the same things.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfoNotFoundError

from triggers.timeline._input import (
    Branch,
    Downtime,
    DstChange,
    LifeMark,
    Timeline,
    parse_instant,
)
from triggers.timeline._zones import dst_changes

RUN_OUTCOMES = ("completed", "failed", "cancelled", "superseded", "launched")
"""Outcomes of a row that launched a run: drawn as a bar from launch to settlement."""
RANGE_OUTCOMES = ("skipped", "missed")
"""Outcomes of occurrences that did not launch: shaded from the first to the last."""
PENDING_OUTCOMES = ("launching", "buffered")
"""Outcomes of occurrences decided to launch, not launched yet: a mark."""
OUTCOMES = (*RUN_OUTCOMES, *RANGE_OUTCOMES, *PENDING_OUTCOMES)
WAITING_STATES = ("waiting", "sleeping", "signalled", "timed_out", "slept")
"""States of a step that waited (for a signal or a timer), going on or done."""
PARKED_STATE = "ambiguous"
"""A step's state that parks its run until an operator retries or cancels it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Hold:
    """A stretch of a run's bar in which it did no work: `waiting` (for a signal or a
    timer) or `parked` (a step left ambiguous, until an operator decides)."""

    kind: str
    start: datetime
    end: datetime


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
    upstream_run_id: str | None = None
    """A dependent trigger's run: the upstream run that caused it."""
    holds: tuple[Hold, ...] = ()

    @property
    def lateness(self) -> timedelta:
        """From its occurrence to its launch (a backfill's: hours, days)."""
        return self.start - self.occurrence


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
    life: list[LifeMark] = field(default_factory=list)
    """Its creation, retirement and revival within the window, oldest first."""
    retired: list[tuple[datetime, datetime]] = field(default_factory=list)
    """The stretches of the window in which it was retired (not declared)."""

    @property
    def empty(self) -> bool:
        return not (self.runs or self.ranges or self.marks or self.upcoming or self.life)


@dataclass(frozen=True, slots=True, kw_only=True)
class Cause:
    """A dependent run and the upstream run that caused it, both drawn: an arrow from
    the upstream's end on its lane to the dependent's start on its own."""

    source_lane: int
    source_at: datetime
    target_lane: int
    target_at: datetime
    upstream_run_id: str
    run_id: str | None


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
        lane.life, lane.retired = _life_of(timeline.lifecycle.get(lane.trigger_id, ()), timeline)
        lane.runs.sort(key=lambda run: run.start)
        lane.ranges.sort(key=lambda found_range: found_range.start)
        lane.marks.sort(key=lambda mark: mark.at)
        lane.manual.sort()
    return ordered


def causes(found: Sequence[Lane]) -> list[Cause]:
    """Each drawn dependent run whose upstream run is drawn too, by the dependent's
    start (an upstream outside the window, or on a lane not drawn, has no arrow)."""
    where = {
        run.run_id: (number, run)
        for number, lane in enumerate(found)
        for run in lane.runs
        if run.run_id is not None
    }
    arrows = []
    for number, lane in enumerate(found):
        for run in lane.runs:
            upstream = where.get(run.upstream_run_id) if run.upstream_run_id else None
            if upstream is None or run.upstream_run_id is None:
                continue
            source_lane, source = upstream
            arrows.append(
                Cause(
                    source_lane=source_lane,
                    source_at=min(source.end, run.start),
                    target_lane=number,
                    target_at=run.start,
                    upstream_run_id=run.upstream_run_id,
                    run_id=run.run_id,
                )
            )
    return sorted(arrows, key=lambda arrow: arrow.target_at)


LATE_SHARE = 1 / 150
"""Of the window: a run launched this long after its occurrence (and a minute at least)
has its occurrence marked at its instant and joined to its bar."""
_LATE_LEAST = timedelta(minutes=1)


def late_runs(lane: Lane, timeline: Timeline) -> list[Run]:
    """The lane's runs launched long after their occurrence (a backfill, a late
    catch-up) whose occurrence is in the window."""
    least = max(timeline.span * LATE_SHARE, _LATE_LEAST)
    return [
        run
        for run in lane.runs
        if run.lateness >= least and timeline.since <= run.occurrence <= timeline.until
    ]


def clusters(instants: Sequence[datetime], *, within: timedelta) -> list[tuple[datetime, int]]:
    """`instants` (sorted) as (first, how many) groups, each instant no further than
    `within` from the group's first: marks that would pile up on one spot, counted."""
    groups: list[tuple[datetime, int]] = []
    for at in instants:
        if groups and at - groups[-1][0] <= within:
            groups[-1] = (groups[-1][0], groups[-1][1] + 1)
        else:
            groups.append((at, 1))
    return groups


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
                    upstream_run_id=row.get("upstream_run_id") or None,
                    holds=_holds(
                        timeline.branches.get(str(row.get("run_id") or ""), ()), start, end
                    ),
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


def _holds(steps: Sequence[Branch], start: datetime, end: datetime) -> tuple[Hold, ...]:
    """The waiting and parked stretches of a run drawn from `start` to `end`."""
    found = []
    for step in steps:
        if step.state in WAITING_STATES:
            kind, began, ended = "waiting", step.started_at, step.ended_at or end
        elif step.state == PARKED_STATE:
            # Parked from when the step was found ambiguous until the run settled.
            kind, began, ended = "parked", step.ended_at or step.started_at, end
        else:
            continue
        began, ended = max(began, start), min(ended, end)
        if began < ended:
            found.append(Hold(kind=kind, start=began, end=ended))
    return tuple(sorted(found, key=lambda hold: hold.start))


def _life_of(
    marks: Sequence[LifeMark], timeline: Timeline
) -> tuple[list[LifeMark], list[tuple[datetime, datetime]]]:
    """The milestones within the window, and the stretches of it the trigger was retired."""
    since, until = timeline.since, timeline.until
    ordered = sorted(marks, key=lambda mark: mark.at)
    shown = [mark for mark in ordered if since <= mark.at <= until]
    spans: list[tuple[datetime, datetime]] = []
    retired_at: datetime | None = None
    for mark in ordered:
        if mark.event == "retired":
            retired_at = retired_at or mark.at
        elif retired_at is not None:
            spans.append((retired_at, mark.at))
            retired_at = None
    if retired_at is not None:
        spans.append((retired_at, until))
    clipped = [(max(a, since), min(b, until)) for a, b in spans]
    return shown, [(a, b) for a, b in clipped if a < b]
