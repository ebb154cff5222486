"""A timeline drawn for a web page: each run's bar a link to its run, with a tooltip."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from triggers.timeline import Timeline, render_svg, render_web_svg

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _row(run_id: str, outcome: str, minutes_ago: int) -> dict[str, object]:
    at = NOW - timedelta(minutes=minutes_ago)
    stamp = at.isoformat().replace("+00:00", "Z")
    end = (at + timedelta(seconds=30)).isoformat().replace("+00:00", "Z")
    return {
        "trigger_id": "nightly",
        "occurrence": stamp,
        "outcome": outcome,
        "run_id": run_id,
        "claimed_at": stamp,
        "launched_at": stamp,
        "settled_at": end,
        "count": 1,
        "manual_key": "",
    }


def test_each_run_bar_links_to_its_run_with_a_tooltip() -> None:
    picture = Timeline(
        since=NOW - timedelta(hours=2),
        until=NOW,
        now=NOW,
        rows=[_row("r/1", "completed", 90), _row("r2", "failed", 89)],
        trigger_ids=["nightly"],
        run_links="/runs/{run_id}",
    )
    svg = render_svg(picture).decode()
    links = re.findall(r'<a href="([^"]+)" xlink:href="[^"]+"><title>([^<]+)</title>', svg)
    assert sorted(links) == [
        ("/runs/r%2F1", "run r/1 · completed · 2026-03-01 10:30:00 → 2026-03-01 10:30:30 UTC"),
        ("/runs/r2", "run r2 · failed · 2026-03-01 10:31:00 → 2026-03-01 10:31:30 UTC"),
    ]
    assert "_blank" not in svg


def test_without_links_the_picture_is_as_before() -> None:
    picture = Timeline(
        since=NOW - timedelta(hours=2), until=NOW, now=NOW, rows=[_row("r2", "failed", 89)]
    )
    assert "<a " not in render_svg(picture).decode()


def test_a_web_picture_links_each_run_without_matplotlib() -> None:
    import subprocess
    import sys

    picture = Timeline(
        since=NOW - timedelta(hours=2),
        until=NOW + timedelta(minutes=30),
        now=NOW,
        rows=[_row("r/1", "completed", 90), _row("r2", "failed", 89)],
        upcoming={"nightly": [NOW + timedelta(minutes=10)]},
        trigger_ids=["nightly"],
        run_links="/runs/{run_id}",
    )
    svg = render_web_svg(picture)
    assert svg.startswith("<svg ") and svg.endswith("</svg>")
    links = re.findall(r'<a href="([^"]+)"><title>([^<]+)</title><rect ', svg)
    assert [href for href, _ in links] == ["/runs/r%2F1", "/runs/r2"]
    assert links[1][1] == "run r2 · failed · 2026-03-01 10:31:00 → 2026-03-01 10:31:30 UTC"
    assert "run failed" in svg and "upcoming" in svg and "now" in svg  # the legend
    probe = "import sys, triggers.timeline._web; print('matplotlib' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True)
    assert done.stdout.strip() == "False", done.stderr
