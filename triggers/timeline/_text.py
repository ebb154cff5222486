"""The terminal's timeline: one row of Unicode cells per trigger, a ruler, a legend."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta, tzinfo

from triggers.durations import format_duration
from triggers.timeline._input import DstChange, Timeline, window_words
from triggers.timeline._lanes import Lane, clipped_downtime, lanes
from triggers.timeline._style import DOWNTIME, NOW, PRIORITY, Look, look

MIN_WIDTH = 40
_LABEL_MAX = 24
_STEPS = (
    [timedelta(seconds=s) for s in (1, 2, 5, 10, 15, 30)]
    + [timedelta(minutes=m) for m in (1, 2, 5, 10, 15, 30, 60, 120, 180, 360, 720)]
    + [timedelta(days=d) for d in (1, 2, 7, 14, 28, 56, 91, 182, 364)]
)
_LABEL_GAP = 2  # columns between one tick's label and the next tick
_PRECISE = timedelta(hours=2)  # a window shorter than this shows its times to the second
_DETAILS_MAX = 5  # downtime, DST and milestone lines listed under the legend, each
_LATE_LEAST = timedelta(minutes=1)  # a run launched this late marks its occurrence


def render_text(timeline: Timeline, *, width: int = 100, color: bool = False) -> str:
    """The timeline as lines of text `width` columns wide (at least 40), ending in a
    newline: a title, the time ruler, one row per trigger (and one for daemon
    downtime), then a legend of the glyphs shown and the downtime and DST changes
    in words. `color` adds ANSI colours (the glyphs alone tell everything apart).

    Raises:
        ValueError: a malformed ledger row (see `triggers.timeline.lanes`).
    """
    found = lanes(timeline)
    width = max(width, MIN_WIDTH)
    label_width = min(max([len(lane.trigger_id) for lane in found] + [11]), _LABEL_MAX)
    grid = _Grid(timeline, cells=width - label_width - 1)
    paint = _Paint(color)
    zone = timeline.display_zone
    lines = [_title(timeline, grid)]
    labels, ruler = grid.ruler(zone)
    lines.append(" " * (label_width + 1) + labels.rstrip())
    lines.append(" " * (label_width + 1) + paint.ruler(ruler, grid.column(timeline.now)))
    shown: set[str] = set()
    for lane in found:
        cells = grid.lane(lane)
        shown.update(kind for kind in cells if kind)
        lines.append(_label(lane.trigger_id, label_width) + " " + paint.cells(cells))
    downtime = clipped_downtime(timeline)
    if downtime:
        cells = grid.spans([(d.started_at, d.ended_at) for d in downtime], "down")
        lines.append(_label("daemon down", label_width) + " " + paint.cells(cells))
    lines.append("")
    lines.extend(
        _legend(shown, downtime=bool(downtime), now=timeline.now, paint=paint, width=width)
    )
    lines.extend(_details(timeline, found))
    return "\n".join(line.rstrip() for line in lines) + "\n"


class _Grid:
    """Columns of equal time: column i holds [since + i*cell, since + (i+1)*cell)."""

    def __init__(self, timeline: Timeline, *, cells: int) -> None:
        self.since, self.until = timeline.since, timeline.until
        self.cells = cells
        self.cell = timeline.span / cells

    def column(self, instant: datetime | None) -> int | None:
        if instant is None or not self.since <= instant <= self.until:
            return None
        return min(int((instant - self.since) / self.cell), self.cells - 1)

    def spans(self, spans: Iterable[tuple[datetime, datetime]], kind: str) -> list[str]:
        cells = [""] * self.cells
        for start, end in spans:
            first, last = self.column(start), self.column(end)
            if first is None or last is None:
                continue
            for index in range(first, last + 1):
                cells[index] = kind
        return cells

    def lane(self, lane: Lane) -> list[str]:
        """Each column's kind: the first in PRIORITY of what falls in it ("" for none)."""
        kinds: list[set[str]] = [set() for _ in range(self.cells)]

        def put(start: datetime, end: datetime, kind: str) -> None:
            first, last = self.column(start), self.column(end)
            if first is not None and last is not None:
                for index in range(first, last + 1):
                    kinds[index].add(kind)

        for start, end in lane.retired:
            put(start, end, "retired-span")
        for run in lane.runs:
            put(run.start, run.end, run.outcome)
            for hold in run.holds:
                put(hold.start, hold.end, hold.kind)
            if run.lateness >= max(self.cell, _LATE_LEAST):
                put(run.occurrence, run.occurrence, "late")
        for found in lane.ranges:
            put(found.start, found.end, found.outcome)
        for mark in lane.marks:
            put(mark.at, mark.at, mark.outcome)
        for at in lane.manual:
            put(at, at, "manual")
        for at in lane.upcoming:
            put(at, at, "upcoming")
        for change in lane.dst:
            put(change.at, change.at, "dst")
        for milestone in lane.life:
            put(milestone.at, milestone.at, milestone.event)
        rank = {kind: index for index, kind in enumerate(PRIORITY)}
        return [min(held, key=rank.__getitem__) if held else "" for held in kinds]

    def ruler(self, zone: tzinfo) -> tuple[str, str]:
        """The tick labels line and the ruler line beneath it."""
        step = self._step()
        labels = [" "] * self.cells
        ruler = ["─"] * self.cells
        free_from = 0
        for tick in _ticks(self.since, self.until, step, zone):
            column = self.column(tick)
            if column is None:
                continue
            text = _tick_label(tick.astimezone(zone), step)
            if column >= free_from and column + len(text) <= self.cells:
                labels[column : column + len(text)] = text
                free_from = column + len(text) + _LABEL_GAP
            ruler[column] = "┬"
        return "".join(labels), "".join(ruler)

    def _step(self) -> timedelta:
        """The smallest step whose ticks leave room for a label between them."""
        for step in _STEPS:
            room = len(_tick_label(self.since, step)) + _LABEL_GAP
            if step / self.cell >= room:
                return step
        return _STEPS[-1]


def _tick_label(local: datetime, step: timedelta) -> str:
    """`12:00:30` (steps of seconds), `12:30`, `Mar 29` (midnights and steps of days)."""
    if step >= timedelta(days=1) or (local.hour, local.minute, local.second) == (0, 0, 0):
        return local.strftime("%b %d")
    return local.strftime("%H:%M:%S" if step < timedelta(minutes=1) else "%H:%M")


def _ticks(since: datetime, until: datetime, step: timedelta, zone: tzinfo) -> list[datetime]:
    """Instants of wall-clock multiples of `step` in `zone` (days: midnights) in the window."""
    start = since.astimezone(zone).replace(hour=0, minute=0, second=0, microsecond=0)
    found = []
    if step >= timedelta(days=1):
        days = step.days
        tick = start
        while tick <= until:
            if tick >= since:
                found.append(tick)
            tick = (tick + timedelta(days=days)).replace(hour=0)
        return found
    count = math.ceil((since - start) / step)
    while True:
        # Same-zone arithmetic on aware datetimes is wall-clock arithmetic.
        tick = start + count * step
        if tick > until:
            return found
        if tick >= since:
            found.append(tick)
        count += 1


def _moment(instant: datetime, timeline: Timeline) -> str:
    """An instant in words, to the minute (to the second in a short window)."""
    shape = "%Y-%m-%d %H:%M:%S" if timeline.span < _PRECISE else "%Y-%m-%d %H:%M"
    return instant.astimezone(timeline.display_zone).strftime(shape)


def _title(timeline: Timeline, grid: _Grid) -> str:
    cell = format_duration(_round_cell(grid.cell))
    words = window_words(timeline, seconds=timeline.span < _PRECISE)
    return f"{timeline.title or 'timeline'}  {words}  (one column: {cell})"


def _round_cell(cell: timedelta) -> timedelta:
    return timedelta(seconds=max(1, round(cell.total_seconds())))


def _label(text: str, width: int) -> str:
    if len(text) > width:
        return text[: width - 1] + "…"
    return text.ljust(width)


class _Paint:
    """Glyphs, in colour or not."""

    def __init__(self, color: bool) -> None:
        self.color = color

    def glyph(self, found: Look, text: str | None = None) -> str:
        text = found.glyph if text is None else text
        return f"\x1b[{found.ansi}m{text}\x1b[0m" if self.color else text

    def cells(self, cells: Sequence[str]) -> str:
        out = []
        for kind in cells:
            if not kind:
                out.append(" ")
            elif kind == "down":
                out.append(self.glyph(DOWNTIME))
            else:
                out.append(self.glyph(look(kind)))
        return "".join(out)

    def ruler(self, ruler: str, now: int | None) -> str:
        if now is None:
            return ruler
        return ruler[:now] + self.glyph(NOW) + ruler[now + 1 :]


def _legend(
    shown: set[str], *, downtime: bool, now: datetime | None, paint: _Paint, width: int
) -> list[str]:
    entries = [
        f"{paint.glyph(look(kind))} {look(kind).words}"
        for kind in sorted(shown, key=PRIORITY.index)
        if kind in PRIORITY
    ]
    if downtime:
        entries.append(f"{paint.glyph(DOWNTIME)} {DOWNTIME.words}")
    if now is not None:
        entries.append(f"{paint.glyph(NOW)} now")
    if not entries:
        return ["nothing in this window"]
    lines, line, length = [], "", 0
    for entry, visible in zip(entries, (_visible(e) for e in entries), strict=True):
        if line and length + 2 + visible > width:
            lines.append(line)
            line, length = "", 0
        line, length = (f"{line}  {entry}", length + 2 + visible) if line else (entry, visible)
    lines.append(line)
    return lines


def _visible(text: str) -> int:
    """Columns `text` takes, ANSI colour codes aside."""
    length, escape = 0, False
    for char in text:
        if char == "\x1b":
            escape = True
        elif escape:
            escape = char != "m"
        else:
            length += 1
    return length


def _details(timeline: Timeline, found: Sequence[Lane]) -> list[str]:
    """Downtime, DST changes and triggers created, retired or revived, in words (at
    most `_DETAILS_MAX` of each)."""
    lines = []
    kept = [
        down
        for down in sorted(timeline.downtime, key=lambda d: d.started_at)
        if down.ended_at >= timeline.since and down.started_at <= timeline.until
    ]
    for down in kept[:_DETAILS_MAX]:
        length = format_duration(_round_cell(down.ended_at - down.started_at))
        end = "now" if down.ongoing else _moment(down.ended_at, timeline)
        lines.append(f"daemon down  {_moment(down.started_at, timeline)} → {end} ({length})")
    if len(kept) > _DETAILS_MAX:
        lines.append(f"daemon down  ... and {len(kept) - _DETAILS_MAX} more")
    changes: dict[tuple[datetime, str], tuple[DstChange, list[str]]] = {}
    for lane in found:
        for change in lane.dst:
            changes.setdefault((change.at, change.zone), (change, []))[1].append(lane.trigger_id)
    for change, trigger_ids in sorted(changes.values(), key=lambda c: c[0].at)[:_DETAILS_MAX]:
        lines.append(
            f"DST          {_moment(change.at, timeline)} {change.zone} {change.label}"
            f" ({', '.join(trigger_ids)})"
        )
    if len(changes) > _DETAILS_MAX:
        lines.append(f"DST          ... and {len(changes) - _DETAILS_MAX} more")
    life = sorted(
        ((mark.at, mark.event, lane.trigger_id) for lane in found for mark in lane.life),
    )
    for at, event, trigger_id in life[:_DETAILS_MAX]:
        lines.append(f"{event:<12} {_moment(at, timeline)} {trigger_id}")
    if len(life) > _DETAILS_MAX:
        lines.append(f"retired etc. ... and {len(life) - _DETAILS_MAX} more")
    return lines
