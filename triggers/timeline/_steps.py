"""A run's steps drawn under its bar: a graph flow's branches side by side in time.

Groups `branches-{i}-{look}-{n}`: lane i's steps of one look (the run outcome their
state matches, or `waiting`, `parked`) and row height.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from triggers.timeline._annotations import Span
from triggers.timeline._input import Timeline
from triggers.timeline._lanes import WAITING_STATES, Lane
from triggers.timeline._legend import Legend, patch
from triggers.timeline._style import LOOKS, PARKED, WAITING

if TYPE_CHECKING:
    from matplotlib.axes import Axes

_BRANCH_BAND = 0.26
"""Of a lane's height, the band under a run's bar where its steps are drawn."""
_BRANCH_ROWS = 3
"""Rows of steps at once under a bar, at most: more branches than that share rows."""
_BRANCH_TALLEST = 0.13
_BRANCH_LEAST = _BRANCH_BAND / _BRANCH_ROWS
"""Of a lane's height (0.62 inch), a step's row at least: about 4 points."""
_BRANCH_LOOKS = {
    "succeeded": "completed",
    "failed": "failed",
    "ambiguous": "parked",
    "cancelled": "cancelled",
    "late": "completed",
    "running": "launched",
    **dict.fromkeys(WAITING_STATES, "waiting"),
}
"""A step's state, drawn in the colour of the run outcome it matches (or as waiting,
or parked: the look of those stretches of the run's bar)."""


def _packed(
    steps: Sequence[tuple[tuple[float, float], str]],
) -> list[tuple[int, tuple[float, float], str]]:
    """Each step's (x, width) on the first row where it overlaps no other step (a row
    per branch running at once), the rows beyond `_BRANCH_ROWS` folded onto the last."""
    ends: list[float] = []
    placed = []
    for (x, width), key in sorted(steps, key=lambda step: step[0][0]):
        row = next((n for n, end in enumerate(ends) if end <= x), len(ends))
        if row == len(ends):
            ends.append(x + width)
        else:
            ends[row] = x + width
        placed.append((min(row, _BRANCH_ROWS - 1), (x, width), key))
    return placed


def draw_steps(
    axes: Axes, legend: Legend, index: int, lane: Lane, timeline: Timeline, span: Span
) -> None:
    """A run's steps as bars in the band under its bar, coloured by their state: steps
    one after another share a row, steps at once (a graph flow's branches) stack, at
    most `_BRANCH_ROWS` rows and never thinner than `_BRANCH_LEAST` (groups
    `branches-{index}-{look}-{n}`, one per row height and look)."""
    bars: dict[tuple[str, float, float], list[tuple[float, float]]] = defaultdict(list)
    for run in lane.runs:
        steps = timeline.branches.get(run.run_id or "", ())
        if len(steps) <= 1:  # one step: its run's bar says it all
            continue
        placed = _packed(
            [
                (
                    span(
                        max(step.started_at, run.start),
                        max(step.started_at, run.start, min(step.ended_at or run.end, run.end)),
                    ),
                    _BRANCH_LOOKS.get(step.state, "launched"),
                )
                for step in steps
            ]
        )
        rows = max(row for row, _, _ in placed) + 1
        height = max(min(_BRANCH_BAND / rows, _BRANCH_TALLEST), _BRANCH_LEAST)
        for row, drawn, key in placed:
            bars[(key, index + 0.22 + row * height, height * 0.85)].append(drawn)
    for number, ((key, y, height), spans) in enumerate(bars.items()):
        face = (
            WAITING.colour
            if key == "waiting"
            else PARKED.colour
            if key == "parked"
            else LOOKS[key].colour
        )
        # A waiting step is hollow: outlined. (An outline makes matplotlib write
        # the bars as <use> of a shared path, so the others get none.)
        outline: dict[str, Any] = (
            {"edgecolors": LOOKS["launched"].colour} if key == "waiting" else {}
        )
        axes.broken_barh(
            spans,
            (y, height),
            facecolors=face,
            linewidth=0.5 if key == "waiting" else 0,
            zorder=3,
            gid=f"branches-{index}-{key}-{number}",
            **outline,
        )
        if key in LOOKS:
            legend.add(f"runs-{key}", patch(face), LOOKS[key].words)
