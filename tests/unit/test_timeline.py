"""The timeline's data: rows sorted into lanes, DST changes, the terminal rendering."""

from __future__ import annotations

from datetime import UTC, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.timeline_sample import row
from triggers.clock import iso, utc
from triggers.errors import ConfigError
from triggers.timeline import Downtime, DstChange, Timeline, dst_changes, lanes, render_text

T0 = utc(2026, 6, 1)
HOUR = timedelta(hours=1)
MINUTE = timedelta(minutes=1)


def window(rows: list[dict[str, Any]], **extra: Any) -> Timeline:
    return Timeline(since=T0, until=T0 + HOUR, rows=rows, **extra)


# -- lanes ------------------------------------------------------------------------------------


def test_rows_become_runs_ranges_and_marks_of_their_trigger() -> None:
    [lane] = lanes(
        window(
            [
                row("a", T0 + 5 * MINUTE, "completed", run=2 * MINUTE),
                row("a", T0 + 10 * MINUTE, "failed", run=MINUTE),
                row("a", T0 + 20 * MINUTE, "skipped", reason="overlap"),
                row(
                    "a",
                    T0 + 30 * MINUTE,
                    "missed",
                    reason="catchup_window",
                    last=T0 + 40 * MINUTE,
                    count=3,
                ),
                row("a", T0 + 45 * MINUTE, "buffered", reason="overlap"),
                row("a", T0 + 50 * MINUTE, "completed", run=MINUTE, manual_key="k"),
            ]
        )
    )
    assert [(r.outcome, r.start, r.end, r.manual) for r in lane.runs] == [
        (
            "completed",
            T0 + 5 * MINUTE + timedelta(seconds=1),
            T0 + 7 * MINUTE + timedelta(seconds=1),
            False,
        ),
        (
            "failed",
            T0 + 10 * MINUTE + timedelta(seconds=1),
            T0 + 11 * MINUTE + timedelta(seconds=1),
            False,
        ),
        (
            "completed",
            T0 + 50 * MINUTE + timedelta(seconds=1),
            T0 + 51 * MINUTE + timedelta(seconds=1),
            True,
        ),
    ]
    assert [(r.outcome, r.reason, r.start, r.end, r.count) for r in lane.ranges] == [
        ("skipped", "overlap", T0 + 20 * MINUTE, T0 + 20 * MINUTE, 1),
        ("missed", "catchup_window", T0 + 30 * MINUTE, T0 + 40 * MINUTE, 3),
    ]
    assert [(m.outcome, m.at) for m in lane.marks] == [("buffered", T0 + 45 * MINUTE)]
    assert lane.manual == [T0 + 50 * MINUTE]


def test_everything_is_clipped_to_the_window() -> None:
    [lane] = lanes(
        window(
            [
                row("a", T0 - 10 * MINUTE, "completed", run=15 * MINUTE),
                row("a", T0 - 2 * HOUR, "skipped", reason="paused", last=T0 + 5 * MINUTE, count=9),
                row("a", T0 + 2 * HOUR, "completed", run=MINUTE),
                row("a", T0 - 2 * HOUR, "completed", run=MINUTE),
            ],
            upcoming={"a": [T0 + 30 * MINUTE, T0 + 2 * HOUR]},
        )
    )
    assert [(r.start, r.end) for r in lane.runs] == [(T0, T0 + 5 * MINUTE + timedelta(seconds=1))]
    assert [(r.start, r.end) for r in lane.ranges] == [(T0, T0 + 5 * MINUTE)]
    assert lane.upcoming == [T0 + 30 * MINUTE]


def test_a_run_still_going_lasts_until_now_or_without_now_until_the_end() -> None:
    running = [row("a", T0 + 10 * MINUTE, "launched", run=HOUR)]
    [lane] = lanes(window(running, now=T0 + 20 * MINUTE))
    assert [(r.end, r.ongoing) for r in lane.runs] == [(T0 + 20 * MINUTE, True)]
    [lane] = lanes(window(running))
    assert lane.runs[0].end == T0 + HOUR


def test_a_superseded_occurrence_that_never_ran_is_a_mark() -> None:
    [lane] = lanes(window([row("a", T0 + MINUTE, "superseded", reason="overlap")]))
    assert lane.runs == [] and [m.outcome for m in lane.marks] == ["superseded"]


def test_lanes_follow_the_given_order_then_the_others_sorted() -> None:
    rows = [row(t, T0 + MINUTE, "completed", run=MINUTE) for t in ("z", "b", "a", "y")]
    found = lanes(window(rows, trigger_ids=["y", "quiet"]))
    assert [lane.trigger_id for lane in found] == ["y", "quiet", "a", "b", "z"]
    assert found[1].empty


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"outcome": "exploded"}, r"ledger row 0 \(a\): unknown outcome 'exploded'"),
        ({"occurrence": "yesterday"}, "not an RFC 3339 instant: 'yesterday'"),
        ({"launched_at": "2026-06-01T00:00:00"}, "an instant without an offset"),
        ({"trigger_id": None}, "ledger row 0: no trigger_id"),
    ],
    ids=["outcome", "instant", "naive", "trigger"],
)
def test_a_malformed_row_is_refused_naming_it(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        lanes(window([row("a", T0, "completed", run=MINUTE) | change]))


def test_a_window_that_ends_before_it_starts_is_refused() -> None:
    with pytest.raises(ValueError, match="until must be after"):
        Timeline(since=T0, until=T0)


# -- DST changes ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("zone", "expected"),
    [
        ("Europe/Berlin", [("2026-03-29T01:00:00.000Z", 1, 2), ("2026-10-25T01:00:00.000Z", 2, 1)]),
        (
            "America/New_York",
            [("2026-03-08T07:00:00.000Z", -5, -4), ("2026-11-01T06:00:00.000Z", -4, -5)],
        ),
        # Half an hour of DST.
        (
            "Australia/Lord_Howe",
            [("2026-04-04T15:00:00.000Z", 11, 10.5), ("2026-10-03T15:30:00.000Z", 10.5, 11)],
        ),
        ("UTC", []),
        ("Asia/Tokyo", []),
    ],
    ids=["berlin", "new-york", "lord-howe", "utc", "tokyo"],
)
def test_dst_changes_of_a_year(zone: str, expected: list[tuple[str, float, float]]) -> None:
    found = dst_changes(zone, since=utc(2026, 1, 1), until=utc(2027, 1, 1))
    assert [(iso(c.at), c.offset_before / HOUR, c.offset_after / HOUR) for c in found] == expected


def test_a_change_is_the_first_second_of_the_new_offset() -> None:
    [change] = dst_changes("Europe/Berlin", since=utc(2026, 3, 28), until=utc(2026, 3, 30))
    assert change.label == "+01:00→+02:00"
    assert (change.at - timedelta(seconds=1)).astimezone(change.at.tzinfo) < change.at
    assert dst_changes("Europe/Berlin", since=change.at, until=utc(2026, 3, 30)) == []


def test_lanes_draw_the_dst_changes_of_their_zone_unless_told_which() -> None:
    rows = [row("a", utc(2026, 3, 29), "completed", run=MINUTE)]
    since, until = utc(2026, 3, 28), utc(2026, 3, 30)
    [lane] = lanes(
        Timeline(since=since, until=until, rows=rows, trigger_zones={"a": "Europe/Berlin"})
    )
    assert [iso(c.at) for c in lane.dst] == ["2026-03-29T01:00:00.000Z"]
    told = DstChange(zone="X", at=utc(2026, 3, 29, 12), offset_before=HOUR, offset_after=2 * HOUR)
    [lane] = lanes(
        Timeline(
            since=since,
            until=until,
            rows=rows,
            trigger_zones={"a": "Europe/Berlin"},
            dst_changes={"a": [told]},
        )
    )
    assert lane.dst == [told]
    [lane] = lanes(
        Timeline(since=since, until=until, rows=rows, trigger_zones={"a": "Mars/Olympus"})
    )
    assert lane.dst == []


# -- the terminal -----------------------------------------------------------------------------


def cells(text: str, label: str) -> str:
    """The cells of the row labelled `label` (the label column is 11 wide here)."""
    rows = text.split("\n\n", maxsplit=1)[0].splitlines()[3:]  # under the title and the ruler
    [line] = [line for line in rows if line.ljust(12)[:12] == label.ljust(12)]
    return line[12:]


def test_each_trigger_is_a_row_of_one_cell_per_column_of_time() -> None:
    # 60 columns of one minute each.
    timeline = window(
        [
            row("a", T0 + 5 * MINUTE, "completed", run=3 * MINUTE, delay=timedelta(0)),
            row("a", T0 + 10 * MINUTE, "failed", run=MINUTE, delay=timedelta(0)),
            row("a", T0 + 20 * MINUTE, "skipped", reason="paused", last=T0 + 24 * MINUTE, count=5),
            row("a", T0 + 30 * MINUTE, "missed", reason="catchup_policy"),
            row("a", T0 + 40 * MINUTE, "completed", run=MINUTE, delay=timedelta(0), manual_key="k"),
            row("b", T0 + 45 * MINUTE, "launched", run=HOUR, delay=timedelta(0)),
        ],
        now=T0 + 50 * MINUTE,
        upcoming={"a": [T0 + 55 * MINUTE, T0 + 58 * MINUTE]},
        downtime=[Downtime(started_at=T0 + 26 * MINUTE, ended_at=T0 + 29 * MINUTE)],
    )
    text = render_text(timeline, width=72)
    assert cells(text, "a") == "     ████ ✗✗        ░░░░░     ▒         ◆█             ·  ·"
    assert cells(text, "b") == "                                             ▓▓▓▓▓▓"
    assert cells(text, "daemon down") == "                          ━━━━"
    lines = text.splitlines()
    assert lines[0] == "timeline  2026-06-01 00:00:00 → 2026-06-01 01:00:00 UTC  (one column: 1m)"
    assert lines[2][12:].index("▼") == 50  # now
    assert "✗ run failed  ◆ manual fire  ▓ running  █ run completed" in text
    assert "daemon down  2026-06-01 00:26:00 → 2026-06-01 00:29:00 (3m)" in text


def test_the_failure_in_a_column_wins_over_what_else_it_holds() -> None:
    timeline = window(
        [
            row("a", T0, "completed", run=HOUR, delay=timedelta(0)),
            row("a", T0 + 30 * MINUTE, "failed", run=MINUTE / 2, delay=timedelta(0)),
        ]
    )
    assert cells(render_text(timeline, width=72), "a") == "█" * 30 + "✗" + "█" * 29


def test_the_ruler_labels_ticks_in_the_display_zone() -> None:
    timeline = Timeline(since=utc(2026, 3, 28, 12), until=utc(2026, 3, 30, 12), trigger_ids=["a"])
    utc_ruler = render_text(timeline, width=100).splitlines()[1]
    assert utc_ruler.split() == [
        "12:00",
        "18:00",
        "Mar",
        "29",
        "06:00",
        "12:00",
        "18:00",
        "Mar",
        "30",
        "06:00",
    ]
    from zoneinfo import ZoneInfo

    tokyo = Timeline(
        since=utc(2026, 3, 28, 12),
        until=utc(2026, 3, 30, 12),
        trigger_ids=["a"],
        display_zone=ZoneInfo("Asia/Tokyo"),
    )
    text = render_text(tokyo, width=100)
    assert text.splitlines()[0].startswith("timeline  2026-03-28 21:00 → 2026-03-30 21:00 JST")
    assert "Mar 29" in text.splitlines()[1]


def test_colours_are_ansi_codes_around_the_same_glyphs() -> None:
    timeline = window([row("a", T0 + 5 * MINUTE, "failed", run=MINUTE, delay=timedelta(0))])
    plain, coloured = render_text(timeline, width=72), render_text(timeline, width=72, color=True)
    assert "\x1b[31;1m✗\x1b[0m" in coloured and "\x1b" not in plain
    strip = coloured.replace("\x1b[31;1m", "").replace("\x1b[0m", "").replace("\x1b[1m", "")
    assert strip.splitlines()[3] == plain.splitlines()[3]


def test_an_empty_window_says_so_and_a_narrow_terminal_still_gets_forty_columns() -> None:
    text = render_text(Timeline(since=T0, until=T0 + HOUR, trigger_ids=["a"]), width=10)
    assert "nothing in this window" in text
    assert max(len(line) for line in text.splitlines()[1:3]) <= 40
    assert cells(text, "a").strip() == ""


def test_dst_changes_are_listed_once_per_zone_with_their_triggers() -> None:
    timeline = Timeline(
        since=utc(2026, 3, 28),
        until=utc(2026, 3, 30),
        trigger_ids=["a", "b", "c"],
        trigger_zones={"a": "Europe/Berlin", "b": "Europe/Berlin", "c": "UTC"},
        display_zone=UTC,
    )
    text = render_text(timeline, width=80)
    assert "DST          2026-03-29 01:00 Europe/Berlin +01:00→+02:00 (a, b)" in text
    assert "┆" in cells(text, "a") and "┆" not in cells(text, "c")


def test_a_picture_without_matplotlib_is_refused_saying_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import importlib.util

    from triggers.timeline import check_destination, pictures_available, render_svg

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "matplotlib" else real(name, *a),
    )
    picture = Timeline(since=utc(2027, 1, 1), until=utc(2027, 1, 2), now=None, rows=[])

    assert not pictures_available()
    for attempt in (lambda: check_destination(tmp_path / "t.svg"), lambda: render_svg(picture)):
        with pytest.raises(ConfigError, match=r"pip install 'triggers\[pictures\]'"):
            attempt()
    assert render_text(picture, width=60)  # the terminal's drawing needs none of it


def test_a_dependent_triggers_run_is_not_drawn_as_an_operators() -> None:
    dependent = row("b", T0 + 5 * MINUTE, "completed", run=MINUTE, manual_key="after:run-a-1")
    dependent["upstream_run_id"] = "run-a-1"
    operator = row("b", T0 + 9 * MINUTE, "completed", run=MINUTE, manual_key="k")

    [lane] = lanes(window([dependent, operator]))

    assert [r.manual for r in lane.runs] == [False, True]
    assert lane.manual == [T0 + 9 * MINUTE]
