"""Links and tooltips of a timeline's run bars, for a picture shown in a web page.

matplotlib wraps a bar whose collection has URLs in `<a xlink:href>`, but writes no
`<title>`: `titled` adds one to each run's link, the tooltip a browser shows.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import tzinfo
from html import escape
from urllib.parse import quote

from triggers.timeline._input import Timeline
from triggers.timeline._lanes import Cause, Lane, Run


def run_link(links: str | None, run: Run) -> str | None:
    """The link of a run's bar (None: no links asked for, or a run without an id)."""
    if links is None or run.run_id is None:
        return None
    return links.replace("{run_id}", quote(run.run_id, safe=""))


def run_tooltip(run: Run, zone: tzinfo) -> str:
    """What hovering a run's bar says: `run R · failed · 02:30:00 → 02:31:12 UTC`."""
    start, end = run.start.astimezone(zone), run.end.astimezone(zone)
    shape = "%Y-%m-%d %H:%M:%S"
    ending = "running" if run.ongoing else end.strftime(shape)
    manual = " (manual)" if run.manual else ""
    return (
        f"run {run.run_id}{manual} · {run.outcome} · {start.strftime(shape)} → {ending} "
        f"{end.tzname() or 'UTC'}"
    )


def titled(svg: bytes, found: Sequence[Lane], timeline: Timeline) -> bytes:
    """`svg` with a `<title>` first in each run's link, the tooltip browsers show."""
    text = svg.decode()
    for lane in found:
        for run in lane.runs:
            link = run_link(timeline.run_links, run)
            if link is None:
                continue
            # matplotlib opens links in a new window (target="_blank"): the page's own
            # link instead, with SVG 2's plain href beside the xlink one.
            anchor = re.compile(f'<a xlink:href="{re.escape(escape(link))}"[^>]*>')
            tip = escape(run_tooltip(run, timeline.display_zone))
            mine = f'<a href="{escape(link)}" xlink:href="{escape(link)}"><title>{tip}</title>'
            hit = anchor.search(text)
            if hit is not None:
                text = text[: hit.start()] + mine + text[hit.end() :]
    # What is drawn over the bars (waiting and parked time, milestones, counts) takes
    # no clicks: the run under it is still followed.
    text = _OVER_BARS.sub(r'\g<0> pointer-events="none"', text)
    return text.encode()


_CAUSE = re.compile(r'<g id="cause-([0-9]+)">')
_OVER_BARS = re.compile(r'<g id="(?:waiting|parked|life|life-label|manual-count)-[0-9-]+"')


def cause_titles(svg: bytes, arrows: Sequence[Cause]) -> bytes:
    """`svg` with a `<title>` in each arrow's group (`cause-{n}`): which run caused which."""
    tips = [
        escape(f"run {arrow.upstream_run_id} caused run {arrow.run_id or '(no id)'}")
        for arrow in arrows
    ]

    def titled_group(found: re.Match[str]) -> str:
        number = int(found.group(1))
        if number >= len(tips):
            return found.group(0)
        return f"{found.group(0)}<title>{tips[number]}</title>"

    # One pass over the document, however many arrows (up to 500) it holds.
    return _CAUSE.sub(titled_group, svg.decode()).encode()
