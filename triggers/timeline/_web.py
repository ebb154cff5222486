"""A timeline as SVG markup for a web page, written directly (no matplotlib).

It draws the lanes `render_svg` draws (`triggers.timeline.lanes`), in the same colours
(`_style.LOOKS`), as plain shapes: each run's bar a link (`Timeline.run_links`) with a
tooltip, skipped and missed ranges shaded, pending occurrences as rings, manual fires
as diamonds, upcoming fires as ticks, DST changes dashed, downtime hatched, now as a
line, a time axis and a legend of what is drawn. What lies over a bar (now, a manual
fire's diamond, downtime) takes no clicks: a run that just ended is still followed.
A few milliseconds, where matplotlib takes tens (and seconds for its import): the
dashboard draws a page's picture with it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from html import escape

from triggers.timeline._input import Timeline
from triggers.timeline._lanes import Lane, Run, clipped_downtime, lanes, late_runs
from triggers.timeline._links import run_link, run_tooltip
from triggers.timeline._style import (
    CREATED,
    DOWNTIME,
    DST,
    FUTURE_SHADE,
    LATE,
    LOOKS,
    MANUAL,
    NOW,
    PARKED,
    RETIRED,
    RETIRED_SPAN,
    REVIVED,
    UPCOMING,
    WAITING,
)

WIDTH = 960
LABEL = 130
"""Pixels left of the plot for the lanes' names."""
LANE = 30
TOP = 22
"""Pixels above the first lane for the time axis."""
_STEPS = (
    timedelta(minutes=15),
    timedelta(minutes=30),
    timedelta(hours=1),
    timedelta(hours=2),
    timedelta(hours=3),
    timedelta(hours=6),
    timedelta(hours=12),
    timedelta(days=1),
    timedelta(days=2),
    timedelta(days=5),
    timedelta(days=7),
)
_TEXT = "#333333"
TICKS = 8
"""Ticks of the time axis at most."""
Scale = Callable[[datetime], float]
"""An instant's x in the picture."""


def render_web_svg(timeline: Timeline) -> str:
    """`timeline` as an `<svg>` element (no XML prologue), to put inline in a page.

    Raises:
        ValueError: a malformed ledger row (as `lanes` does).
    """
    found = lanes(timeline) or [Lane(trigger_id="(no trigger)")]
    plot = WIDTH - LABEL - 10
    height = TOP + LANE * len(found) + 34
    drawn: dict[str, str] = {}

    def x(at: datetime) -> float:
        share = (at - timeline.since) / timeline.span
        return round(LABEL + plot * min(max(share, 0.0), 1.0), 1)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" '
        f'width="{WIDTH}" height="{height}" role="img" font-family="sans-serif" font-size="11">',
        f"<title>{escape(timeline.title or 'timeline')}</title>",
        '<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><line x1="0" y1="0" x2="0" y2="6" '
        'stroke="#5A5A5A" stroke-width="2"/></pattern></defs>',
    ]
    bottom = TOP + LANE * len(found)
    if timeline.now is not None and timeline.now < timeline.until:
        start = x(max(timeline.now, timeline.since))
        parts.append(
            f'<rect x="{start}" y="{TOP}" width="{round(LABEL + plot - start, 1)}" '
            f'height="{bottom - TOP}" fill="{FUTURE_SHADE}"/>'
        )
        drawn["future"] = f'<rect width="10" height="10" fill="{FUTURE_SHADE}"/>'
    parts += _axis(timeline, x, bottom)
    for number, lane in enumerate(found):
        parts += _lane(timeline, lane, TOP + number * LANE, x, drawn)
    for down in clipped_downtime(timeline):
        left, right = x(down.started_at), x(down.ended_at)
        parts.append(
            f'<rect x="{left}" y="{TOP}" width="{max(right - left, 1)}" height="{bottom - TOP}" '
            f'fill="url(#hatch)" opacity="0.5" pointer-events="none"/>'
        )
        drawn["downtime"] = '<rect width="10" height="10" fill="url(#hatch)"/>'
    if timeline.now is not None and timeline.since <= timeline.now <= timeline.until:
        at = x(timeline.now)
        parts.append(
            f'<line x1="{at}" y1="{TOP - 4}" x2="{at}" y2="{bottom}" stroke="{NOW.colour}" '
            f'stroke-width="1.5" pointer-events="none"/>'
        )
        drawn["now"] = f'<line x1="5" y1="0" x2="5" y2="10" stroke="{NOW.colour}"/>'
    parts.append(_legend(drawn, bottom + 14))
    parts.append("</svg>")
    return "".join(parts)


def _axis(timeline: Timeline, place: Scale, bottom: int) -> list[str]:
    zone = timeline.display_zone
    step = next((s for s in _STEPS if timeline.span / s <= TICKS), _STEPS[-1])
    shape = "%H:%M" if step < timedelta(days=1) else "%m-%d"
    first = timeline.since.astimezone(zone).replace(minute=0, second=0, microsecond=0)
    if step >= timedelta(days=1):
        first = first.replace(hour=0)
    found = []
    at = first
    while at <= timeline.until:
        if at >= timeline.since:
            left = place(at)
            anchor = "start" if left < LABEL + 20 else "end" if left > WIDTH - 40 else "middle"
            found.append(
                f'<line x1="{left}" y1="{TOP - 3}" x2="{left}" y2="{bottom}" stroke="#000" '
                f'stroke-opacity="0.08"/><text x="{left}" y="{TOP - 7}" fill="{_TEXT}" '
                f'text-anchor="{anchor}">{at.astimezone(zone).strftime(shape)}</text>'
            )
        at += step
    found.append(
        f'<text x="4" y="{TOP - 7}" fill="{_TEXT}">'
        f"{escape(timeline.since.astimezone(zone).tzname() or 'UTC')}</text>"
    )
    return found


def _lane(
    timeline: Timeline, lane: Lane, top: int, place: Scale, drawn: dict[str, str]
) -> list[str]:
    middle = top + LANE // 2
    found = [
        f'<rect x="{LABEL}" y="{top + 3}" width="{WIDTH - LABEL - 10}" height="{LANE - 6}" '
        f'fill="#000" fill-opacity="0.03"/>',
        f'<text x="{LABEL - 8}" y="{middle + 4}" fill="{_TEXT}" text-anchor="end">'
        f"{escape(lane.trigger_id[:20])}</text>",
    ]
    found += _life(lane, top, place, drawn)
    for shaded in lane.ranges:
        look = LOOKS[shaded.outcome]
        left, right = place(shaded.start), place(shaded.end)
        said = f"{shaded.count} {shaded.outcome}" + (f" ({shaded.reason})" if shaded.reason else "")
        found.append(
            f'<rect x="{left}" y="{top + 7}" width="{max(right - left, 2)}" height="{LANE - 14}" '
            f'fill="{look.colour}" fill-opacity="0.45"><title>{escape(said)}</title></rect>'
        )
        drawn[f"range-{shaded.outcome}"] = _swatch(look.colour, 0.45, shaded.outcome)
    late = late_runs(lane, timeline)
    for run in lane.runs:
        look = LOOKS[run.outcome]
        left, right = place(run.start), place(run.end)
        bar = (
            f'<rect x="{left}" y="{top + 5}" width="{max(right - left, 4)}" '
            f'height="{LANE - 10}" fill="{look.colour}"/>'
        )
        tip = escape(run_tooltip(run, timeline.display_zone))
        link = run_link(timeline.run_links, run)
        if link is None:
            found.append(f"<g><title>{tip}</title>{bar}</g>")
        else:
            found.append(f'<a href="{escape(link)}"><title>{tip}</title>{bar}</a>')
        drawn[f"runs-{run.outcome}"] = _swatch(look.colour, 1, look.words)
        found += _held(run, top, place, drawn)
        if run in late:
            spot = place(run.occurrence)
            found.append(
                f'<line x1="{spot}" y1="{middle}" x2="{left}" y2="{middle}" '
                f'stroke="{LATE.colour}" stroke-dasharray="1 2" pointer-events="none"/>'
                f'<rect x="{spot - 3}" y="{middle - 3}" width="6" height="6" '
                f'transform="rotate(45 {spot} {middle})" '
                f'fill="white" stroke="{LATE.colour}"><title>occurrence '
                f"{escape(run.occurrence.isoformat())}, run later</title></rect>"
            )
            drawn["late"] = _legend_mark(
                f'<rect x="2" y="2" width="6" height="6" fill="white" stroke="{LATE.colour}"/>',
                LATE.words,
            )
        if run.manual:
            found.append(_diamond(left, top + 3))
            drawn["manual"] = _legend_mark(_diamond(5, 0), MANUAL.words)
    for mark in lane.marks:
        look = LOOKS[mark.outcome]
        found.append(
            f'<circle cx="{place(mark.at)}" cy="{middle}" r="4" fill="white" '
            f'stroke="{look.colour}" stroke-width="1.6"><title>{escape(mark.outcome)}</title>'
            "</circle>"
        )
        drawn[f"marks-{mark.outcome}"] = _legend_mark(
            f'<circle cx="5" cy="5" r="4" fill="white" stroke="{look.colour}"/>', mark.outcome
        )
    for at in lane.upcoming:
        left = place(at)
        found.append(
            f'<line x1="{left}" y1="{top + 9}" x2="{left}" y2="{top + LANE - 9}" '
            f'stroke="{UPCOMING.colour}" stroke-width="2" pointer-events="none"/>'
        )
        drawn["upcoming"] = _legend_mark(
            f'<line x1="5" y1="0" x2="5" y2="10" stroke="{UPCOMING.colour}" stroke-width="2"/>',
            UPCOMING.words,
        )
    for change in lane.dst:
        left = place(change.at)
        found.append(
            f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + LANE}" stroke="{DST.colour}" '
            f'stroke-dasharray="3 2"><title>{escape(change.label)}</title></line>'
        )
        drawn["dst"] = _legend_mark(
            f'<line x1="5" y1="0" x2="5" y2="10" stroke="{DST.colour}" stroke-dasharray="3 2"/>',
            DST.words,
        )
    return found


def _held(run: Run, top: int, place: Scale, drawn: dict[str, str]) -> list[str]:
    """A run's waiting time hollow and dashed over its bar, its parked time yellow."""
    found = []
    for hold in run.holds:
        left, right = place(hold.start), place(hold.end)
        look = WAITING if hold.kind == "waiting" else PARKED
        stroke = LOOKS[run.outcome].colour if hold.kind == "waiting" else "#8C7A00"
        found.append(
            f'<rect x="{left}" y="{top + 6}" width="{max(right - left, 2)}" height="{LANE - 12}" '
            f'fill="{look.colour}" stroke="{stroke}" stroke-dasharray="2 2" '
            f'pointer-events="none"/>'
        )
        drawn[f"runs-~{hold.kind}"] = _legend_mark(
            f'<rect width="10" height="10" fill="{look.colour}" stroke="{stroke}" '
            'stroke-dasharray="2 2"/>',
            look.words,
        )
    return found


def _life(lane: Lane, top: int, place: Scale, drawn: dict[str, str]) -> list[str]:
    """The retired time shaded, and a line at each creation, retirement and revival."""
    found = []
    for start, end in lane.retired:
        left, right = place(start), place(end)
        found.append(
            f'<rect x="{left}" y="{top + 2}" width="{max(right - left, 2)}" height="{LANE - 4}" '
            f'fill="{RETIRED_SPAN.colour}" fill-opacity="0.15" pointer-events="none"/>'
        )
        drawn["retired"] = _swatch(RETIRED_SPAN.colour, 0.15, RETIRED_SPAN.words)
    for mark in lane.life:
        look = {"created": CREATED, "retired": RETIRED, "revived": REVIVED}[mark.event]
        at = place(mark.at)
        found.append(
            f'<line x1="{at}" y1="{top + 1}" x2="{at}" y2="{top + LANE - 1}" '
            f'stroke="{look.colour}" stroke-width="2"><title>{mark.event} '
            f"{escape(mark.at.isoformat())}</title></line>"
        )
        drawn[f"retired-{mark.event}"] = _legend_mark(
            f'<line x1="5" y1="0" x2="5" y2="10" stroke="{look.colour}" stroke-width="2"/>',
            mark.event,
        )
    return found


def _diamond(left: float, top: float) -> str:
    return (
        f'<polygon points="{left},{top} {left + 4},{top + 4} {left},{top + 8} '
        f'{left - 4},{top + 4}" fill="{MANUAL.colour}" pointer-events="none"/>'
    )


def _swatch(colour: str, opacity: float, words: str) -> str:
    shape = f'<rect width="10" height="10" fill="{colour}" fill-opacity="{opacity}"/>'
    return _legend_mark(shape, words)


def _legend_mark(shape: str, words: str) -> str:
    return f"{shape}\x00{words}"


_ORDER = (
    "runs-",
    "late",
    "range-",
    "marks-",
    "manual",
    "upcoming",
    "dst",
    "retired",
    "downtime",
    "future",
    "now",
)
_WORDS = {"downtime": DOWNTIME.words, "future": "after now", "now": NOW.words}


def _legend(drawn: dict[str, str], top: int) -> str:
    """One entry per kind drawn, runs first, in a row below the lanes."""

    def rank(key: str) -> tuple[int, str]:
        return next((n for n, prefix in enumerate(_ORDER) if key.startswith(prefix)), 99), key

    entries, left = [], LABEL
    for key in sorted(drawn, key=rank):
        shape, _, words = drawn[key].partition("\x00")
        words = words or _WORDS.get(key, key)
        entries.append(
            f'<g transform="translate({left},{top})">{shape}<text x="14" y="9" '
            f'fill="{_TEXT}">{escape(words)}</text></g>'
        )
        left += 24 + 6 * len(words)
    return f'<g class="legend">{"".join(entries)}</g>'
