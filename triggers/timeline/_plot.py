"""The timeline as a picture (SVG or PNG), drawn with matplotlib.

matplotlib is imported here and only here, when a picture is asked for: it costs
a command a fifth of a second and more to load. The picture is built on a bare
`Figure` (no pyplot: no GUI backend, no global figure state). Every element
carries an SVG id naming what it is, so a test (or a person with a text editor)
can find it:

- `lane-{i}`: the stripe of every other lane (top lane: 0); `label-{i}` its trigger
  id, `zone-{i}` the zone of its schedule;
- `runs-{outcome}-{i}`: lane i's run bars of that outcome, one `<path>` each (bars
  that overlap in the picture, at least 1/600 of the window wide each, are one);
- `branches-{i}-{look}-{n}`: the steps of lane i's runs of more than one step, bars
  under their run's bar in the colour of the outcome their state matches (`_steps.py`);
- `waiting-{i}`, `parked-{i}`, `late-{i}`, `late-links-{i}`, `manual-count-{i}-{n}`,
  `retired-{i}`, `life-{i}-{n}`, `life-label-{i}-{n}`, `cause-{n}`: see `_annotations.py`;
- `range-{outcome}-{reason}-{i}`: its skipped or missed ranges of that reason, one
  `<path>` each (their hatch: `hatch-{outcome}-{reason}-{i}`), and
  `range-label-{i}-{n}` the words on a range wide enough to hold them;
- `once-{outcome}-{reason}-{i}`: single skipped or missed occurrences, one `<use>` each;
- `marks-{outcome}-{i}`, `manual-{i}`, `upcoming-{i}`: markers, one `<use>` each;
- `dst-{i}-{n}`, `dst-label-{i}-{n}`: lane i's DST changes and their offsets;
- `downtime-{n}` (its hatch `downtime-hatch-{n}`), `downtime-label-{n}` (one label, with
  their count, for downtimes whose words would overlap): daemon downtime, across
  every lane;
- `now`, `now-label`, `future`: the line at now and the lighter shade after it;
- `title`, `legend`.

Each arrow (`cause-{n}`) holds a `<title>` naming the two runs. With
`Timeline.run_links`, each run's bar is a `<path>` of its own inside an
`<a xlink:href>` to the run, with a `<title>` (the browser's tooltip) naming the run,
its outcome and its times (`linked_runs`).
"""

from __future__ import annotations

import importlib.util
import io
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from triggers.errors import ConfigError
from triggers.timeline._annotations import (
    downtime_labels,
    draw_causes,
    draw_holds,
    draw_late,
    draw_life,
    draw_manual,
    drawn_causes,
)
from triggers.timeline._dates import x_of as _x
from triggers.timeline._input import Downtime, Timeline, window_words, zone_words
from triggers.timeline._lanes import RUN_OUTCOMES, Lane, clipped_downtime, lanes
from triggers.timeline._legend import Legend, hatched, line, patch, ring
from triggers.timeline._links import cause_titles, run_link, titled
from triggers.timeline._steps import draw_steps
from triggers.timeline._style import (
    DOWNTIME,
    DST,
    FUTURE_SHADE,
    HATCHES,
    LANE_SHADE,
    LOOKS,
    NOW,
    UPCOMING,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes

_WIDTH_IN = 12.0
_LANE_IN = 0.62
_MIN_BAR = 1 / 600  # of the window: a run shorter than this is drawn this wide
_MIN_LINK = 1 / 250  # as wide at least when it is a link: something a pointer can hit
_LABEL_ROOM = 0.07  # of the window: a range this wide carries its reason in words
_RC: dict[Any, Any] = {
    "svg.fonttype": "none",  # real <text>: searchable, selectable, small
    "svg.hashsalt": "triggers-timeline",  # stable ids: the same data, the same file
    "font.family": "DejaVu Sans",
    "font.size": 9,
    "hatch.linewidth": 0.6,
}
_FACE_ALPHA = "4D"  # of a range's shade (hex, as in #RRGGBBAA)
_HATCH_ALPHA = "B3"


def render_svg(timeline: Timeline) -> bytes:
    """A self-contained SVG document of `timeline` (no external fonts or images).

    Raises:
        ValueError: a malformed ledger row.
    """
    return _render(timeline, "svg")


def render_png(timeline: Timeline, *, dpi: int = 144) -> bytes:
    """A PNG image of `timeline`.

    Raises:
        ValueError: a malformed ledger row.
    """
    return _render(timeline, "png", dpi=dpi)


MISSING = (
    "drawing a picture needs matplotlib, an optional dependency: "
    "pip install 'triggers[pictures]' (or pip install matplotlib)"
)
"""What a picture asked for without matplotlib says (the CLI's error, the dashboard's note)."""


def pictures_available(*, raise_missing: bool = False) -> bool:
    """Whether matplotlib can be imported, found without importing it.

    Raises:
        ConfigError: it cannot, and `raise_missing` (exit 78, `MISSING`).
    """
    found = importlib.util.find_spec("matplotlib") is not None
    if not found and raise_missing:
        raise ConfigError(MISSING)
    return found


def _render(timeline: Timeline, kind: str, *, dpi: int = 100) -> bytes:
    pictures_available(raise_missing=True)
    import matplotlib  # noqa: PLC0415 (a fifth of a second: only when a picture is drawn)

    found = lanes(timeline)
    with matplotlib.rc_context(_RC):
        figure = _Drawing(timeline, found).figure
        out = io.BytesIO()
        metadata: dict[str, Any] = {"Software": "triggers timeline (matplotlib)"}
        if kind == "svg":
            # The same data makes the same file: no date, no version of matplotlib.
            metadata = {"Creator": "triggers timeline (matplotlib)", "Date": None}
        figure.savefig(out, format=kind, dpi=dpi, metadata=metadata)
    if kind != "svg":
        return out.getvalue()
    data = cause_titles(out.getvalue(), drawn_causes(found))
    return titled(data, found, timeline) if timeline.run_links else data


def _merged(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """(x, width) spans with those that overlap or touch joined: ten thousand runs a day
    are a few bars at the picture's resolution, not ten thousand shapes."""
    joined: list[tuple[float, float]] = []
    for x, width in sorted(spans):
        if joined and x <= joined[-1][0] + joined[-1][1]:
            last_x, last_width = joined[-1]
            joined[-1] = (last_x, max(last_width, x + width - last_x))
        else:
            joined.append((x, width))
    return joined


class _Drawing:
    """One figure being drawn, and the legend entries of what it has drawn so far."""

    def __init__(self, timeline: Timeline, found: Sequence[Lane]) -> None:
        from matplotlib.figure import Figure  # noqa: PLC0415

        self.timeline = timeline
        self.legend = Legend()
        rows = max(len(found), 1)
        self.figure = Figure(figsize=(_WIDTH_IN, 1.9 + _LANE_IN * rows), layout="constrained")
        self.axes: Axes = self.figure.add_subplot()
        self.axes.set_xlim(_x(timeline.since), _x(timeline.until))
        self.axes.set_ylim(rows - 0.5, -0.5)
        self._frame(found)
        self._future()
        self._downtime(clipped_downtime(timeline))
        for index, lane in enumerate(found):
            draw_life(self.axes, self.legend, index, lane, self._span, timeline)
            self._ranges(index, lane)
            self._runs(index, lane)
            draw_late(self.axes, self.legend, index, lane, timeline)
            self._marks(index, lane)
            self._dst(index, lane)
        draw_causes(self.axes, self.legend, found)
        self._now()
        self.legend.draw(self.figure)

    # -- the frame: axes, lanes, title ------------------------------------------------

    def _frame(self, found: Sequence[Lane]) -> None:
        from matplotlib.dates import AutoDateLocator, ConciseDateFormatter  # noqa: PLC0415

        axes, timeline = self.axes, self.timeline
        zone = timeline.display_zone
        locator = AutoDateLocator(tz=zone, minticks=5, maxticks=12)
        formatter = ConciseDateFormatter(locator, tz=zone)
        formatter.offset_formats = [""] * 6  # the title says the window
        axes.xaxis.set_major_locator(locator)
        axes.xaxis.set_major_formatter(formatter)
        axes.grid(axis="x", color="#DDDDDD", linewidth=0.6, zorder=0)
        axes.set_axisbelow(True)
        for side in ("top", "right", "left"):
            axes.spines[side].set_visible(False)
        axes.tick_params(axis="y", length=0)
        for index, lane in enumerate(found):
            if index % 2 == 0:
                axes.axhspan(
                    index - 0.5, index + 0.5, color=LANE_SHADE, zorder=0, gid=f"lane-{index}"
                )
            if lane.zone is not None:
                axes.annotate(
                    lane.zone,
                    (0, index),
                    xycoords=("axes fraction", "data"),
                    xytext=(-8, -2),
                    textcoords="offset points",
                    ha="right",
                    va="top",
                    fontsize=7.5,
                    color="#777777",
                    gid=f"zone-{index}",
                )
        axes.set_yticks(range(len(found)), [lane.trigger_id for lane in found])
        for index, text in enumerate(axes.get_yticklabels()):
            text.set_gid(f"label-{index}")
            text.set_fontsize(9.5)
            text.set_verticalalignment("bottom" if found[index].zone else "center")
        axes.set_xlabel(f"time ({zone_words(timeline)})", color="#555555")
        axes.set_title(
            f"{timeline.title or 'triggers timeline'} · {window_words(timeline)}",
            loc="left",
            fontsize=11,
            pad=14,
            gid="title",
        )

    def _future(self) -> None:
        now, until = self.timeline.now, self.timeline.until
        if now is None or now >= until:
            return
        start = max(now, self.timeline.since)
        self.axes.axvspan(_x(start), _x(until), color=FUTURE_SHADE, zorder=0.5, gid="future")
        self.legend.add("future", patch(FUTURE_SHADE), "after now")

    def _now(self) -> None:
        now = self.timeline.now
        if now is None or not self.timeline.since <= now <= self.timeline.until:
            return
        self.axes.axvline(_x(now), color=NOW.colour, linewidth=1.4, zorder=6, gid="now")
        self.axes.annotate(
            "now",
            (_x(now), 0),
            xycoords=("data", "axes fraction"),
            xytext=(0, -11),
            textcoords="offset points",
            ha="center",
            color=NOW.colour,
            fontweight="bold",
            gid="now-label",
        )
        self.legend.add("now", line(NOW.colour), "now")

    # -- across every lane: downtime ----------------------------------------------------

    def _downtime(self, downs: Sequence[Downtime]) -> None:
        # The face and the hatch are two shapes: in SVG, a pattern would fade the hatch
        # with the face's transparency.
        face, hatch = DOWNTIME.colour + "24", DOWNTIME.colour + "80"
        for number, down in enumerate(downs):
            start, end = _x(down.started_at), _x(down.ended_at)
            self.axes.axvspan(
                start, end, facecolor=face, linewidth=0, zorder=1, gid=f"downtime-{number}"
            )
            self.axes.axvspan(
                start,
                end,
                facecolor="none",
                edgecolor=hatch,
                hatch="////",
                linewidth=0,
                zorder=1,
                gid=f"downtime-hatch-{number}",
            )
            self.legend.add("downtime", hatched(face, hatch, "////"), DOWNTIME.words)
        for number, label in enumerate(downtime_labels(downs, self.timeline)):
            self.axes.annotate(
                label.words,
                (_x(label.at), 1),
                xycoords=("data", "axes fraction"),
                xytext=(2 if label.align == "left" else -2, 3),
                textcoords="offset points",
                ha=label.align,
                fontsize=8,
                color=DOWNTIME.colour,
                gid=f"downtime-label-{number}",
            )

    # -- one lane -------------------------------------------------------------------------

    def _span(self, start: datetime, end: datetime) -> tuple[float, float]:
        """(x, width) from `start` to `end`, at least `_MIN_BAR` of the window wide."""
        timeline = self.timeline
        least = timeline.span * (_MIN_LINK if timeline.run_links else _MIN_BAR)
        if end - start < least:
            start = max(start - (least - (end - start)) / 2, timeline.since)
            end = start + least
        return _x(start), _x(end) - _x(start)

    def _runs(self, index: int, lane: Lane) -> None:
        bars: dict[str, list[tuple[float, float]]] = defaultdict(list)
        urls: dict[str, list[str | None]] = defaultdict(list)
        links = self.timeline.run_links
        for run in lane.runs:
            bars[run.outcome].append(self._span(run.start, run.end))
            urls[run.outcome].append(run_link(links, run))
        for outcome in RUN_OUTCOMES:
            if outcome not in bars:
                continue
            look = LOOKS[outcome]
            bar = self.axes.broken_barh(
                bars[outcome] if links else _merged(bars[outcome]),
                (index - 0.2, 0.4),
                facecolors=look.colour,
                linewidth=0,
                zorder=7 if links else 3,  # a link above the line at now, to be hit
                gid=f"runs-{outcome}-{index}",
            )
            if links:
                bar.set_urls(urls[outcome])
            self.legend.add(f"runs-{outcome}", patch(look.colour), look.words)
        draw_holds(self.axes, self.legend, index, lane, self._span, zorder=7.5 if links else 3.5)
        draw_steps(self.axes, self.legend, index, lane, self.timeline, self._span)

    def _ranges(self, index: int, lane: Lane) -> None:
        shades: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
        single: dict[tuple[str, str], list[datetime]] = defaultdict(list)
        labelled = 0
        for found in lane.ranges:
            reason = found.reason or "none"
            if found.count == 1 and found.start == found.end:
                single[(found.outcome, reason)].append(found.start)
                continue
            shades[(found.outcome, reason)].append(self._span(found.start, found.end))
            if found.end - found.start >= self.timeline.span * _LABEL_ROOM:
                times = f" ×{found.count}" if found.count > 1 else ""  # noqa: RUF001 (the sign)
                words = reason.replace("_", " ") + times
                self.axes.text(
                    _x(found.start + (found.end - found.start) / 2),
                    index + 0.3,
                    words,
                    ha="center",
                    va="center",
                    fontsize=7.5,
                    color="#333333",
                    zorder=4,
                    gid=f"range-label-{index}-{labelled}",
                )
                labelled += 1
        for (outcome, reason), spans in shades.items():
            self._shade(index, outcome, reason, spans)
        for (outcome, reason), instants in single.items():
            colour = LOOKS[outcome].colour
            gid = f"once-{outcome}-{reason}-{index}"
            self._points(instants, index + 0.3, "x", colour, 4.5, gid, zorder=4)
            self.legend.add(
                f"once-{outcome}-{reason}",
                line(colour, marker="x"),
                f"{outcome}: {reason.replace('_', ' ')}",
            )

    def _shade(
        self, index: int, outcome: str, reason: str, spans: list[tuple[float, float]]
    ) -> None:
        colour = LOOKS[outcome].colour
        face, hatch = colour + _FACE_ALPHA, colour + _HATCH_ALPHA
        lane_band = (index - 0.42, 0.84)
        self.axes.broken_barh(
            spans,
            lane_band,
            facecolors=face,
            edgecolors=colour,
            linewidth=0.6,
            zorder=2,
            gid=f"range-{outcome}-{reason}-{index}",
        )
        pattern = HATCHES.get(reason, "")
        if pattern:
            self.axes.broken_barh(
                spans,
                lane_band,
                facecolors="none",
                edgecolors=hatch,
                hatch=pattern,
                linewidth=0,
                zorder=2,
                gid=f"hatch-{outcome}-{reason}-{index}",
            )
        self.legend.add(
            f"range-{outcome}-{reason}",
            hatched(face, hatch, pattern, edge=colour),
            f"{outcome}: {reason.replace('_', ' ')}",
        )

    def _marks(self, index: int, lane: Lane) -> None:
        marks: dict[str, list[datetime]] = defaultdict(list)
        for mark in lane.marks:
            marks[mark.outcome].append(mark.at)
        for outcome, instants in marks.items():
            look = LOOKS[outcome]
            self.axes.plot(
                [_x(at) for at in instants],
                [index] * len(instants),
                linestyle="none",
                marker="o",
                markersize=6,
                markerfacecolor="white",
                markeredgecolor=look.colour,
                markeredgewidth=1.6,
                zorder=4,
                gid=f"marks-{outcome}-{index}",
            )
            self.legend.add(f"marks-{outcome}", ring(look.colour), look.words)
        draw_manual(self.axes, self.legend, index, lane, self.timeline)
        if lane.upcoming:
            gid = f"upcoming-{index}"
            self._points(lane.upcoming, index, "|", UPCOMING.colour, 13, gid, zorder=3)
            self.legend.add("upcoming", line(UPCOMING.colour, marker="|"), UPCOMING.words)

    def _dst(self, index: int, lane: Lane) -> None:
        for number, change in enumerate(lane.dst):
            self.axes.vlines(
                _x(change.at),
                index - 0.46,
                index + 0.46,
                colors=DST.colour,
                linestyles=(0, (3, 2)),
                linewidth=1.1,
                zorder=4,
                gid=f"dst-{index}-{number}",
            )
            self.axes.annotate(
                f"DST {change.label}",
                (_x(change.at), index - 0.46),
                xytext=(3, -1),
                textcoords="offset points",
                va="top",
                fontsize=7.5,
                color=DST.colour,
                gid=f"dst-label-{index}-{number}",
            )
            self.legend.add("dst", line(DST.colour, dashed=True), DST.words)

    def _points(
        self,
        instants: Sequence[datetime],
        y: float,
        marker: str,
        colour: str,
        size: float,
        gid: str,
        *,
        zorder: float = 5,
    ) -> None:
        self.axes.plot(
            [_x(at) for at in instants],
            [y] * len(instants),
            linestyle="none",
            marker=marker,
            markersize=size,
            color=colour,
            markeredgewidth=1.4,
            zorder=zorder,
            gid=gid,
        )
