"""The picture reads at a glance: labels that do not overlap, retired lanes that say so,
waiting and parked time drawn as such, backfilled occurrences at their instant, crowded
manual fires counted, steps tall enough to see, and arrows from a run to the runs it
caused."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import timedelta
from typing import Any

from tests.svg_picture import SVG, element, ids, parse, shapes, texts
from tests.timeline_sample import row
from triggers.clock import utc
from triggers.timeline import (
    Branch,
    Downtime,
    LifeMark,
    Timeline,
    lanes,
    render_png,
    render_svg,
)

T0 = utc(2026, 6, 1)
HOUR = timedelta(hours=1)
MINUTE = timedelta(minutes=1)
SECOND = timedelta(seconds=1)


def day(rows: list[dict[str, Any]], **extra: Any) -> Timeline:
    return Timeline(since=T0, until=T0 + 24 * HOUR, rows=rows, **extra)


def svg(timeline: Timeline) -> ET.Element:
    return parse(render_svg(timeline))


def heights(root: ET.Element, gid: str) -> list[float]:
    """The heights (points) of the bars the element `gid` draws."""
    found = []
    for path in element(root, gid).iter(f"{SVG}path"):
        numbers = [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?", str(path.get("d")))]
        ys = numbers[1::2]
        found.append(max(ys) - min(ys))
    return found


def label_texts(root: ET.Element, prefix: str) -> list[str]:
    return [
        "".join(node.itertext())
        for gid in sorted(i for i in ids(root) if i.startswith(prefix))
        for node in element(root, gid).iter(f"{SVG}text")
    ]


# -- downtime ---------------------------------------------------------------------------------


def test_two_close_downtimes_share_one_label_instead_of_overlapping() -> None:
    close = [
        Downtime(started_at=T0 + 10 * HOUR, ended_at=T0 + 10 * HOUR + 5 * MINUTE),
        Downtime(started_at=T0 + 10 * HOUR + 20 * MINUTE, ended_at=T0 + 10 * HOUR + 30 * MINUTE),
        Downtime(started_at=T0 + 18 * HOUR, ended_at=T0 + 19 * HOUR),
    ]
    root = svg(day([], trigger_ids=["a"], downtime=close))
    assert {"downtime-0", "downtime-1", "downtime-2"} <= ids(root)  # each is drawn
    assert label_texts(root, "downtime-label-") == ["daemon down ×2", "daemon down"]  # noqa: RUF001


def test_downtime_labels_far_apart_are_one_each_and_an_ongoing_one_says_so() -> None:
    downs = [
        Downtime(started_at=T0 + 2 * HOUR, ended_at=T0 + 3 * HOUR),
        Downtime(started_at=T0 + 23 * HOUR, ended_at=T0 + 24 * HOUR, ongoing=True),
    ]
    root = svg(day([], trigger_ids=["a"], downtime=downs))
    assert label_texts(root, "downtime-label-") == ["daemon down", "daemon down (ongoing)"]


# -- a retired trigger ------------------------------------------------------------------------


def test_a_retired_lane_ends_with_a_mark_saying_retired_and_revived_when_it_came_back() -> None:
    rows = [row("a", T0 + HOUR, "completed", run=MINUTE)]
    life = {
        "a": [
            LifeMark(event="created", at=T0 - 48 * HOUR),  # before the window: not drawn
            LifeMark(event="retired", at=T0 + 6 * HOUR),
            LifeMark(event="revived", at=T0 + 12 * HOUR),
            LifeMark(event="retired", at=T0 + 20 * HOUR),
        ]
    }
    [lane] = lanes(day(rows, lifecycle=life))
    assert lane.retired == [(T0 + 6 * HOUR, T0 + 12 * HOUR), (T0 + 20 * HOUR, T0 + 24 * HOUR)]
    root = svg(day(rows, lifecycle=life))
    assert label_texts(root, "life-label-0-") == ["retired", "revived", "retired"]
    assert shapes(root, "retired-0") == 2
    assert "retired (not declared)" in texts(root, "legend")


def test_milestones_close_together_share_one_label_in_turn() -> None:
    life = {
        "a": [
            LifeMark(event="retired", at=T0 + 6 * HOUR),
            LifeMark(event="revived", at=T0 + 6 * HOUR + MINUTE),
        ]
    }
    root = svg(day([], trigger_ids=["a"], lifecycle=life))
    assert label_texts(root, "life-label-0-") == ["retired → revived"]
    assert {"life-0-0", "life-0-1"} <= ids(root)  # a line each


def test_a_trigger_retired_before_the_window_is_shaded_from_its_start() -> None:
    life = {"a": [LifeMark(event="retired", at=T0 - HOUR)]}
    [lane] = lanes(day([], trigger_ids=["a"], lifecycle=life))
    assert lane.life == [] and lane.retired == [(T0, T0 + 24 * HOUR)]
    assert not lane.empty or lane.retired  # the lane is drawn, shaded


# -- waiting and parked runs -------------------------------------------------------------------


def test_waiting_and_parked_time_is_drawn_apart_from_the_runs_work() -> None:
    waiting = row("a", T0 + HOUR, "launched", run=HOUR, delay=timedelta(0))
    parked = row("b", T0 + HOUR, "launched", run=HOUR, delay=timedelta(0))
    steps = {
        waiting["run_id"]: [
            Branch(step="build", state="succeeded", started_at=T0 + HOUR, ended_at=T0 + 2 * HOUR),
            Branch(step="approve", state="waiting", started_at=T0 + 2 * HOUR),
        ],
        parked["run_id"]: [
            Branch(
                step="deploy",
                state="ambiguous",
                started_at=T0 + HOUR,
                ended_at=T0 + HOUR + 10 * MINUTE,
            ),
        ],
    }
    picture = day([waiting, parked], now=T0 + 5 * HOUR, branches=steps)
    a, b = lanes(picture)
    assert [(h.kind, h.start, h.end) for h in a.runs[0].holds] == [
        ("waiting", T0 + 2 * HOUR, T0 + 5 * HOUR)
    ]
    assert [(h.kind, h.start, h.end) for h in b.runs[0].holds] == [
        ("parked", T0 + HOUR + 10 * MINUTE, T0 + 5 * HOUR)
    ]
    root = svg(picture)
    assert shapes(root, "waiting-0") == 1 and shapes(root, "parked-1") == 1
    legend = texts(root, "legend")
    assert "waiting (signal, timer)" in legend and "parked (awaits an operator)" in legend


# -- backfilled occurrences --------------------------------------------------------------------


def test_a_backfilled_occurrence_is_marked_at_its_instant_and_joined_to_its_run() -> None:
    backfilled = row("a", T0 + 2 * HOUR, "completed", run=MINUTE, delay=14 * HOUR)
    on_time = row("a", T0 + 20 * HOUR, "completed", run=MINUTE)
    root = svg(day([backfilled, on_time]))
    assert shapes(root, "late-0") == 1  # the backfilled one only
    [marker] = element(root, "late-0").iter(f"{SVG}use")
    bar_xs = [
        float(n)
        for bar in element(root, "runs-completed-0").iter(f"{SVG}path")
        for n in re.findall(r"-?\d+(?:\.\d+)?", str(bar.get("d")))[0::2]
    ]
    assert float(str(marker.get("x"))) < min(bar_xs) - 300  # 2:00, far left of 16:00
    assert "late-links-0" in ids(root)
    assert any("backfill" in words for words in texts(root, "legend"))


# -- manual fires ----------------------------------------------------------------------------------


def test_manual_fires_within_a_minute_are_one_mark_with_their_count() -> None:
    fires = [
        row("a", T0 + 9 * HOUR + n * 20 * SECOND, "completed", run=5 * SECOND, manual_key=f"k{n}")
        for n in range(3)
    ]
    alone = row("a", T0 + 15 * HOUR, "completed", run=5 * SECOND, manual_key="k9")
    root = svg(day([*fires, alone]))
    assert shapes(root, "manual-0") == 2
    assert label_texts(root, "manual-count-0-") == ["×3"]  # noqa: RUF001


# -- steps ---------------------------------------------------------------------------------------


def test_steps_at_once_stack_in_rows_tall_enough_to_read_and_steps_in_turn_share_one() -> None:
    run = row("a", T0 + 6 * HOUR, "completed", run=6 * HOUR, delay=timedelta(0))
    start = T0 + 6 * HOUR
    branches = {
        run["run_id"]: [
            Branch(step=f"b{n}", state="succeeded", started_at=start, ended_at=start + 5 * HOUR)
            for n in range(3)
        ]
    }
    root = svg(day([run], branches=branches))
    bars = [h for gid in ids(root) if gid.startswith("branches-0-") for h in heights(root, gid)]
    assert len(bars) == 3 and min(bars) >= 3.5  # points: a 0.62-inch lane's rows
    in_turn = {
        run["run_id"]: [
            Branch(
                step=f"s{n}",
                state="succeeded",
                started_at=start + n * HOUR,
                ended_at=start + (n + 1) * HOUR,
            )
            for n in range(3)
        ]
    }
    root = svg(day([run], branches=in_turn))
    [group] = [gid for gid in ids(root) if gid.startswith("branches-0-")]
    assert len(heights(root, group)) == 3 and min(heights(root, group)) >= 5


# -- what caused a run -----------------------------------------------------------------------------


def dependent_rows() -> list[dict[str, Any]]:
    upstream = row("import", T0 + 2 * HOUR, "completed", run=HOUR)
    report = row(
        "report",
        T0 + 3 * HOUR,
        "completed",
        run=30 * MINUTE,
        manual_key=f"after:{upstream['run_id']}",
    )
    report["upstream_run_id"] = upstream["run_id"]
    report["launched_at"] = upstream["settled_at"]
    orphan = row("report", T0 + 9 * HOUR, "completed", run=MINUTE, manual_key="after:gone")
    orphan["upstream_run_id"] = "gone"  # its upstream is not drawn: no arrow
    return [upstream, report, orphan]


def test_an_arrow_goes_from_the_upstream_run_to_the_run_it_caused() -> None:
    from triggers.timeline._lanes import causes

    picture = day(dependent_rows(), trigger_ids=["import", "report"])
    [arrow] = causes(lanes(picture))
    assert (arrow.source_lane, arrow.target_lane) == (0, 1)
    assert arrow.source_at == arrow.target_at == T0 + 3 * HOUR + SECOND
    root = svg(picture)
    assert {gid for gid in ids(root) if gid.startswith("cause-")} == {"cause-0"}
    assert "caused the run (after:)" in texts(root, "legend")
    [tip] = [node.text for node in element(root, "cause-0").iter(f"{SVG}title")]
    assert tip == f"run {dependent_rows()[0]['run_id']} caused run {dependent_rows()[1]['run_id']}"
    assert render_png(picture)[:8] == b"\x89PNG\r\n\x1a\n"


def test_runs_link_to_their_run_with_a_tooltip_and_what_lies_over_them_takes_no_clicks() -> None:
    rows = dependent_rows()
    steps = {rows[1]["run_id"]: [Branch(step="gate", state="waiting", started_at=T0 + 3 * HOUR)]}
    picture = day(rows, run_links="/runs/{run_id}", branches=steps)
    text = render_svg(picture).decode()
    assert text.count("<title>run ") >= 3  # three runs and an arrow
    assert '<a href="/runs/run-import-010200"' in text
    assert '<g id="waiting-1" pointer-events="none">' in text


# -- the terminal -----------------------------------------------------------------------------


def test_the_terminal_marks_waiting_retirement_revival_and_backfilled_occurrences() -> None:
    from tests.timeline_sample import sample_timeline
    from triggers.timeline import render_text

    text = render_text(sample_timeline(), width=120)
    lanes_text = {line.split(" ", 1)[0]: line for line in text.splitlines()[3:7]}
    assert "┤╌" in lanes_text["backup-verify"] and "╌┣" in lanes_text["backup-verify"]
    assert "▓┄" in lanes_text["backup-verify"]  # running, then waiting until now
    assert "◇" in lanes_text["heartbeat"]  # the backfilled occurrence, at its instant
    assert "retired      2026-03-28 12:00 backup-verify" in text
    assert "revived      2026-03-29 12:00 backup-verify" in text
    assert "┄ waiting (signal, timer)" in text and "╌ retired (not declared)" in text


def test_the_web_picture_marks_the_same_without_matplotlib() -> None:
    from tests.timeline_sample import sample_timeline
    from triggers.timeline import render_web_svg

    svg_text = render_web_svg(sample_timeline())
    assert "<title>retired 2026-03-28T12:00:00+00:00</title>" in svg_text
    assert "<title>revived 2026-03-29T12:00:00+00:00</title>" in svg_text
    assert "<title>occurrence 2026-03-28T17:00:00+00:00, run later</title>" in svg_text
    for words in ("waiting (signal, timer)", "retired (not declared)", "backfill"):
        assert words in svg_text
