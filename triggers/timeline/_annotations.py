"""What the picture marks over and beside the bars: the waiting and parked stretches of
runs, the occurrences of runs launched long after them (backfills), manual fires
counted where they crowd, a trigger's creation, retirement and revival, the arrows
from an upstream run to the runs it caused, and downtime labels that never overlap.

Ids (see `_plot.py` for the rest): `waiting-{i}`, `parked-{i}`; `late-{i}` (a ring at
each such occurrence) and `late-links-{i}` (the dotted line to its run); `manual-{i}`
and `manual-count-{i}-{n}`; `retired-{i}` (the shade of the retired time),
`life-{i}-{n}` and `life-label-{i}-{n}`; `cause-{n}` (one arrow each, by the
dependent's start).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from triggers.timeline._dates import x_of
from triggers.timeline._input import Downtime, Timeline
from triggers.timeline._lanes import Cause, Lane, causes, clusters, late_runs
from triggers.timeline._legend import Legend, hatched, line, ring
from triggers.timeline._style import (
    CAUSE,
    CREATED,
    LATE,
    LOOKS,
    MANUAL,
    PARKED,
    RETIRED,
    RETIRED_SPAN,
    REVIVED,
    WAITING,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes

Span = Callable[[datetime, datetime], tuple[float, float]]
"""(x, width) of a stretch of time, at least the picture's narrowest bar wide."""

AXES_PT = 700.0
"""The plot's width in points, at least (a 12-inch figure less the lanes' names)."""
_CHAR_PT = 5.0
"""The width of a character of an 8-point label, at most (DejaVu Sans)."""
_BOLD_PT = 5.4
"""The same, of a bold 7.5-point label."""
_GAP_PT = 6.0
_MARK_PT = 8.0
"""Manual fires closer than this (at the plot's width) are one mark, counted."""
MAX_ARROWS = 500
"""Arrows drawn at most (the newest dependents'); more would be a smear."""
_LIFE_LOOKS = {"created": CREATED, "retired": RETIRED, "revived": REVIVED}


@dataclass(frozen=True, slots=True, kw_only=True)
class Label:
    """Where the words of one thing, or of several close together, go."""

    at: datetime
    align: str
    """`left` (the words start at `at`) or `right` (they end there)."""
    words: str
    first: int
    """The index of the first thing it names; it names `count` of them."""
    count: int


def spread(
    items: Sequence[tuple[datetime, datetime]],
    words: Callable[[int, int], str],
    timeline: Timeline,
    *,
    char_pt: float = _CHAR_PT,
) -> list[Label]:
    """One label for each of `items` (start, end; sorted), but items whose labels would
    overlap share one, worded by `words(first, count)`: a label starts at its first
    item's start, or near the right edge ends at its last item's end."""
    placed: list[tuple[float, Label]] = []

    def label(first: int, count: int) -> tuple[float, float, Label]:
        text = words(first, count)
        width = len(text) * char_pt / AXES_PT
        start = (items[first][0] - timeline.since) / timeline.span
        if start + width <= 1:
            return (
                start,
                start + width,
                Label(at=items[first][0], align="left", words=text, first=first, count=count),
            )
        end_at = items[first + count - 1][1]
        end = (end_at - timeline.since) / timeline.span
        return (
            end - width,
            end,
            Label(at=end_at, align="right", words=text, first=first, count=count),
        )

    for number in range(len(items)):
        left, right, alone = label(number, 1)
        if placed and left < placed[-1][0] + _GAP_PT / AXES_PT:
            previous = placed[-1][1]
            _, right, joined = label(previous.first, previous.count + 1)
            placed[-1] = (right, joined)
        else:
            placed.append((right, alone))
    return [found for _, found in placed]


def downtime_labels(downs: Sequence[Downtime], timeline: Timeline) -> list[Label]:
    """A label per downtime, but downtimes whose words would overlap share one ("daemon
    down" with their count), so two short outages close together stay readable."""

    def words(first: int, count: int) -> str:
        text = "daemon down" + (f" ×{count}" if count > 1 else "")  # noqa: RUF001 (the sign)
        return text + (" (ongoing)" if downs[first + count - 1].ongoing else "")

    return spread([(d.started_at, d.ended_at) for d in downs], words, timeline)


def draw_holds(
    axes: Axes, legend: Legend, index: int, lane: Lane, span: Span, *, zorder: float
) -> None:
    """Waiting time hollow and striped over its run's bar (outlined in the run's colour),
    parked time yellow and crossed: neither reads as a run at work."""
    bars: dict[str, list[tuple[float, float]]] = defaultdict(list)
    edges: dict[str, list[str]] = defaultdict(list)
    for run in lane.runs:
        for hold in run.holds:
            bars[hold.kind].append(span(hold.start, hold.end))
            edges[hold.kind].append(LOOKS[run.outcome].colour)
    for kind, spans in bars.items():
        look, pattern = (WAITING, "--") if kind == "waiting" else (PARKED, "xx")
        axes.broken_barh(
            spans,
            (index - 0.2, 0.4),
            facecolors=look.colour,
            edgecolors=edges[kind] if kind == "waiting" else "#8C7A00",
            hatch=pattern,
            linewidth=0.9,
            zorder=zorder,
            gid=f"{kind}-{index}",
        )
        edge = LOOKS["launched"].colour if kind == "waiting" else "#8C7A00"
        legend.add(f"hold-{kind}", hatched(look.colour, edge, pattern, edge=edge), look.words)


def draw_late(axes: Axes, legend: Legend, index: int, lane: Lane, timeline: Timeline) -> None:
    """A run launched long after its occurrence (a backfill, a late catch-up): a ring at
    the occurrence, joined to the run's bar by a dotted line."""
    late = late_runs(lane, timeline)
    if not late:
        return
    axes.hlines(
        [index] * len(late),
        [x_of(run.occurrence) for run in late],
        [x_of(run.start) for run in late],
        colors=LATE.colour,
        linestyles=(0, (1, 2)),
        linewidth=0.9,
        zorder=2.5,
        gid=f"late-links-{index}",
    )
    axes.plot(
        [x_of(run.occurrence) for run in late],
        [index] * len(late),
        linestyle="none",
        marker="D",
        markersize=5,
        markerfacecolor="white",
        markeredgecolor=LATE.colour,
        markeredgewidth=1.2,
        zorder=4,
        gid=f"late-{index}",
    )
    handle = ring(LATE.colour)
    handle.set_marker("D")
    legend.add("late", handle, LATE.words)


def draw_manual(axes: Axes, legend: Legend, index: int, lane: Lane, timeline: Timeline) -> None:
    """A mark above each manual fire's run; fires that would pile up on one spot are
    one mark with their count beside it."""
    if not lane.manual:
        return
    groups = clusters(lane.manual, within=timeline.span * (_MARK_PT / AXES_PT))
    y = index - 0.33
    axes.plot(
        [x_of(at) for at, _ in groups],
        [y] * len(groups),
        linestyle="none",
        marker="v",
        markersize=7,
        color=MANUAL.colour,
        markeredgewidth=1.4,
        zorder=5,
        gid=f"manual-{index}",
    )
    counted = [(at, count) for at, count in groups if count > 1]
    for number, (at, count) in enumerate(counted):
        axes.annotate(
            f"×{count}",  # noqa: RUF001 (the sign)
            (x_of(at), y),
            xytext=(5, 0),
            textcoords="offset points",
            va="center",
            fontsize=7.5,
            fontweight="bold",
            color=MANUAL.colour,
            zorder=5,
            gid=f"manual-count-{index}-{number}",
        )
    legend.add("manual", line(MANUAL.colour, marker="v"), MANUAL.words)


def draw_life(
    axes: Axes, legend: Legend, index: int, lane: Lane, span: Span, timeline: Timeline
) -> None:
    """The retired time shaded grey, and a line with its word at each creation,
    retirement and revival: a retired lane ends with "retired", not in silence."""
    if lane.retired:
        axes.broken_barh(
            [span(start, end) for start, end in lane.retired],
            (index - 0.46, 0.92),
            facecolors="#6B6B6B1F",
            edgecolors="#6B6B6B80",
            hatch="\\\\\\",
            linewidth=0,
            zorder=1.5,
            gid=f"retired-{index}",
        )
        legend.add(
            "life-retired-span",
            hatched("#6B6B6B1F", "#6B6B6B80", "\\\\\\"),
            RETIRED_SPAN.words,
        )
    for number, mark in enumerate(lane.life):
        look = _LIFE_LOOKS[mark.event]
        axes.vlines(
            x_of(mark.at),
            index - 0.46,
            index + 0.46,
            colors=look.colour,
            linewidth=1.0 if mark.event == "created" else 2.0,
            zorder=6,
            gid=f"life-{index}-{number}",
        )
        legend.add(f"life-{mark.event}", line(look.colour), mark.event)
    marks = lane.life

    def words(first: int, count: int) -> str:
        return " → ".join(mark.event for mark in marks[first : first + count])

    labels = spread([(m.at, m.at) for m in marks], words, timeline, char_pt=_BOLD_PT)
    for number, label in enumerate(labels):
        # Several together: in the colour of the last, the state the lane is left in.
        look = _LIFE_LOOKS[marks[label.first + label.count - 1].event]
        axes.annotate(
            label.words,
            (x_of(label.at), index + 0.46),
            xytext=(3 if label.align == "left" else -3, 2),
            textcoords="offset points",
            ha=label.align,
            va="bottom",
            fontsize=7.5,
            fontweight="bold",
            color=look.colour,
            zorder=6,
            gid=f"life-label-{index}-{number}",
        )


def drawn_causes(found: Sequence[Lane]) -> list[Cause]:
    """The arrows the picture draws, `cause-{n}` in this order."""
    return causes(found)[-MAX_ARROWS:]


def draw_causes(axes: Axes, legend: Legend, found: Sequence[Lane]) -> None:
    """An arrow from each upstream run's end to the dependent run it caused."""
    from matplotlib.patches import FancyArrowPatch  # noqa: PLC0415

    arrows = drawn_causes(found)
    for number, arrow in enumerate(arrows):
        down = arrow.target_lane > arrow.source_lane
        same = arrow.target_lane == arrow.source_lane
        source_y = arrow.source_lane + (0.2 if down else -0.2)
        target_y = arrow.target_lane + (-0.2 if down or same else 0.2)
        axes.add_patch(
            FancyArrowPatch(
                (x_of(arrow.source_at), source_y),
                (x_of(arrow.target_at), target_y),
                arrowstyle="-|>",
                color=CAUSE.colour,
                linewidth=1.0,
                mutation_scale=9,
                shrinkA=0,
                shrinkB=0,
                connectionstyle="arc3,rad=-0.4" if same else "arc3,rad=0",
                zorder=8,
                gid=f"cause-{number}",
            )
        )
    if arrows:
        legend.add("cause", line(CAUSE.colour, marker=">"), CAUSE.words)
