"""The timeline picture drawn with matplotlib: a known ledger, and what the SVG shows of it.

Every element of the picture carries an id (see `triggers/timeline/_plot.py`), so
the SVG is read back as XML: bars per outcome and lane, shaded ranges, markers,
labels, downtime, DST, now.
"""

from __future__ import annotations

import struct
import xml.etree.ElementTree as ET
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.svg_picture import fills, ids, parse, shapes, texts
from tests.timeline_sample import NOW, sample_rows, sample_timeline
from triggers.errors import OutputFileError
from triggers.timeline import Branch, Timeline, render_file, render_png, render_svg

ROOT = Path(__file__).resolve().parents[2]
LANES = {"nightly-backup": 0, "backup-verify": 1, "heartbeat": 2, "report": 3}


@pytest.fixture(scope="module")
def svg() -> ET.Element:
    return parse(render_svg(sample_timeline()))


def test_each_lane_draws_one_bar_per_run_in_its_outcome_colour(svg: ET.Element) -> None:
    runs = Counter(
        (row["trigger_id"], row["outcome"]) for row in sample_rows() if row["launched_at"]
    )
    for (trigger_id, outcome), count in runs.items():
        assert shapes(svg, f"runs-{outcome}-{LANES[trigger_id]}") == count, (trigger_id, outcome)
    # Checked by hand too: the backup ran four times (one of them manual) and failed once.
    assert shapes(svg, "runs-completed-0") == 4 and shapes(svg, "runs-failed-0") == 1
    assert shapes(svg, "runs-launched-3") == 1 and shapes(svg, "runs-cancelled-3") == 1
    assert fills(svg, "runs-completed-2") == {"#009e73"}
    assert fills(svg, "runs-failed-3") == {"#d55e00"}
    assert fills(svg, "runs-launched-3") == {"#0072b2"}


def test_skipped_and_missed_ranges_are_shaded_and_labelled_with_their_reason(
    svg: ET.Element,
) -> None:
    assert shapes(svg, "range-missed-catchup_policy-2") == 1
    assert shapes(svg, "range-skipped-paused-2") == 1
    assert "hatch-skipped-paused-2" in ids(svg)
    assert texts(svg, "range-label-2-0") == ["paused ×11"]  # noqa: RUF001 (the sign)
    overlap_skips = sum(
        1 for row in sample_rows() if row["reason"] == "overlap" and row["trigger_id"] == "report"
    )
    assert shapes(svg, "once-skipped-overlap-3") == overlap_skips
    legend = texts(svg, "legend")
    assert {"missed: catchup policy", "skipped: paused", "skipped: overlap"} <= set(legend)


def test_manual_fires_upcoming_fires_dst_downtime_and_now_are_drawn(svg: ET.Element) -> None:
    assert shapes(svg, "manual-0") == 1 and texts(svg, "manual-count-0-0") == ["×3"]  # noqa: RUF001
    assert shapes(svg, "upcoming-2") == 4  # 09:00 to 12:00
    assert shapes(svg, "upcoming-3") == 7  # every 30 minutes, 08:35 to 11:35
    assert "upcoming-0" not in ids(svg)  # the backup's next fire is after the window
    assert texts(svg, "dst-label-0-0") == ["DST +01:00→+02:00"]
    assert not {"dst-1-0", "dst-2-0", "dst-3-0"} & ids(svg)  # UTC and New York: no change that week
    # Two outages an hour apart: one label, not two on top of each other.
    assert texts(svg, "downtime-label-0") == ["daemon down ×2"]  # noqa: RUF001
    assert "downtime-label-1" not in ids(svg) and "downtime-1" in ids(svg)
    assert {"downtime-0", "downtime-hatch-0", "now", "future"} <= ids(svg)
    assert texts(svg, "now-label") == ["now"]
    assert [texts(svg, f"label-{i}") for i in range(4)] == [
        ["nightly-backup"],
        ["backup-verify"],
        ["heartbeat"],
        ["report"],
    ]
    assert texts(svg, "zone-0") == ["Europe/Berlin"]
    assert texts(svg, "title") == ["triggers timeline · 2026-03-27 00:00 → 2026-03-30 12:00 UTC"]
    legend = set(texts(svg, "legend"))
    assert {"manual fire", "upcoming", "DST change", "daemon down", "after now", "now"} <= legend
    assert {"run completed", "run failed", "run cancelled", "running"} <= legend


def test_what_caused_a_run_what_waits_what_was_retired_and_what_was_backfilled(
    svg: ET.Element,
) -> None:
    # Each verification after its backup: three arrows, from lane 0 to lane 1.
    assert sorted(gid for gid in ids(svg) if gid.startswith("cause-")) == [
        "cause-0",
        "cause-1",
        "cause-2",
    ]
    assert shapes(svg, "waiting-1") == 1  # the last verification waits for `approved`
    assert texts(svg, "life-label-1-0") == ["retired"]
    assert texts(svg, "life-label-1-1") == ["revived"]
    assert shapes(svg, "retired-1") == 1
    assert shapes(svg, "late-2") == 1  # the heartbeat backfilled the next morning
    legend = set(texts(svg, "legend"))
    assert {"caused the run (after:)", "waiting (signal, timer)", "retired", "revived"} <= legend


def test_the_svg_is_self_contained_and_the_same_data_makes_the_same_file() -> None:
    data = render_svg(sample_timeline())
    assert data == render_svg(sample_timeline())
    text = data.decode()
    assert "<image" not in text and "@font-face" not in text and 'xlink:href="http' not in text
    assert "<dc:date>" not in text


def test_a_png_is_a_png_twelve_inches_wide() -> None:
    data = render_png(sample_timeline(), dpi=100)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert width == 1200 and 300 < height < 500


def test_without_now_there_is_no_now_line_and_nothing_is_upcoming() -> None:
    sample = sample_timeline()
    simulated = Timeline(
        since=sample.since, until=sample.until, rows=sample.rows, trigger_ids=sample.trigger_ids
    )
    found = ids(parse(render_svg(simulated)))
    assert not {"now", "future", "upcoming-2"} & found
    assert "runs-launched-3" in found  # still running: drawn to the end of the window


def test_an_empty_timeline_is_a_picture_of_empty_lanes() -> None:
    empty = Timeline(since=NOW, until=NOW.replace(hour=12), trigger_ids=["a", "b"])
    root = parse(render_svg(empty))
    assert texts(root, "label-1") == ["b"]
    assert not any(gid.startswith("runs-") for gid in ids(root))


def test_render_file_writes_by_the_extension_or_refuses(tmp_path: Path) -> None:
    sample = sample_timeline()
    assert render_file(sample, tmp_path / "a.SVG") > 0
    assert (tmp_path / "a.SVG").read_bytes().startswith(b"<?xml")
    render_file(sample, tmp_path / "a.png")
    assert (tmp_path / "a.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(OutputFileError, match=r"must end in \.svg or \.png") as caught:
        render_file(sample, tmp_path / "a.pdf")
    assert caught.value.exit_code == 2
    with pytest.raises(OutputFileError, match="No such file or directory"):
        render_file(sample, tmp_path / "missing" / "a.svg")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.SVG", "a.png"]  # nothing partial


def test_the_picture_in_the_docs_is_the_sample_as_drawn_now() -> None:
    """docs/timeline.svg is regenerated with `python -m tests.timeline_sample`."""
    shown = parse((ROOT / "docs" / "timeline.svg").read_bytes())
    fresh = parse(render_svg(sample_timeline()))
    assert ids(shown) == ids(fresh)
    for gid in ids(fresh):
        if gid.startswith(("runs-", "range-", "once-", "upcoming-", "manual-", "label-")):
            assert shapes(shown, gid) == shapes(fresh, gid), gid
            assert texts(shown, gid) == texts(fresh, gid), gid


def test_a_runs_branches_are_thin_bars_under_its_bar_by_state() -> None:
    start = NOW - timedelta(hours=2)
    rows = [
        {**r, "run_id": "graph-run"}
        for r in sample_rows()
        if r["trigger_id"] == "nightly-backup" and r["outcome"] == "failed"
    ]
    [failed] = rows
    launched = datetime.fromisoformat(failed["launched_at"])
    settled = datetime.fromisoformat(failed["settled_at"])
    branches = [
        Branch(step="dump-a", state="cancelled", started_at=launched, ended_at=settled),
        Branch(step="dump-b", state="failed", started_at=launched, ended_at=settled),
        Branch(step="dump-c", state="succeeded", started_at=launched, ended_at=launched),
    ]
    timeline = Timeline(
        since=min(start, launched - timedelta(hours=1)),
        until=NOW,
        now=NOW,
        rows=rows,
        trigger_ids=["nightly-backup"],
        branches={"graph-run": branches},
    )

    svg = parse(render_svg(timeline))
    groups = sorted(gid for gid in ids(svg) if gid.startswith("branches-0-"))

    assert [gid.rsplit("-", 2)[1] for gid in groups] == ["cancelled", "completed", "failed"]
    assert fills(svg, next(g for g in groups if "-failed-" in g)) == {"#d55e00"}
    one_step = Timeline(
        since=timeline.since,
        until=NOW,
        now=NOW,
        rows=rows,
        branches={"graph-run": branches[:1]},
    )
    assert not [g for g in ids(parse(render_svg(one_step))) if g.startswith("branches-")]
