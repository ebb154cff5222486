"""`triggers timeline` end to end: a real daemon writes a real ledger on SQLite, stops,
starts again after an outage, and the command draws it (JSON, SVG, PNG, terminal)."""

from __future__ import annotations

import json
import sqlite3
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Cli, stop, wait_for
from tests.svg_picture import ids, parse, shapes, texts
from triggers.clock import iso

# One worker runs the module (`--dist loadgroup`): its module-scoped daemon and
# ledger are built once, not once on each worker that gets one of its tests.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240), pytest.mark.xdist_group("timeline")]

DECLARATIONS = textwrap.dedent(
    """\
    version: 1
    flows:
      noop: {steps: []}
      broken:
        steps:
          - {id: fail, run: [sh, -c, "exit 3"]}
    triggers:
      - {id: tick, flow: noop, every: 1s}
      - {id: broken, flow: broken, every: 2s, timezone: Europe/Berlin}
    """
)
OUTAGE_MS = 120_000


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> tuple[Cli, str]:
    """A database whose daemon ran, fired by hand, stopped, was 'down' two minutes (its
    heartbeats moved back), and ran again; and the instant the first one started."""
    workdir = tmp_path_factory.mktemp("timeline")
    cli = Cli(f"sqlite:///{workdir / 'triggers.sqlite'}", workdir)
    config = workdir / "triggers.yaml"
    config.write_text(DECLARATIONS)
    cli.run("apply", str(config))
    started = iso(datetime.now(UTC) - timedelta(seconds=5))
    daemon = cli.daemon(config, workdir / "first.log")
    try:
        wait_for(lambda: _count(cli, "broken", "failed") >= 2, timeout=60, what="failures")
        cli.run("fire", "tick", "--key", "by-hand")
        wait_for(lambda: _manual_done(cli), timeout=60, what="the manual fire")
    finally:
        assert stop(daemon) == 0
    with sqlite3.connect(workdir / "triggers.sqlite") as conn:
        conn.execute(
            "UPDATE heartbeats SET last_tick_at = last_tick_at - ?, stopped_at = stopped_at - ?",
            (OUTAGE_MS, OUTAGE_MS),
        )
    daemon = cli.daemon(config, workdir / "second.log")
    try:
        wait_for(lambda: _recorded_downtime(cli, started), timeout=60, what="the downtime")
        wait_for(lambda: _count(cli, "tick", "completed") >= 6, timeout=60, what="more runs")
    finally:
        assert stop(daemon) == 0
    return cli, started


def _count(cli: Cli, trigger_id: str, outcome: str) -> int:
    rows = cli.json("history", trigger_id, "--outcome", outcome, "--limit", "1000")
    return len(rows)


def _manual_done(cli: Cli) -> bool:
    rows = cli.json("history", "tick", "--outcome", "completed", "--limit", "1000")
    return any(row["manual_key"] == "by-hand" for row in rows)


def _recorded_downtime(cli: Cli, since: str) -> bool:
    found = cli.json("timeline", "--since", since)["downtime"]
    return any(not down["ongoing"] for down in found)


def test_the_json_is_what_the_picture_draws_and_its_rows_are_history_rows(
    ledger: tuple[Cli, str],
) -> None:
    cli, since = ledger
    document = cli.json("timeline", "--since", since, "--until", "+1m")
    assert [t["id"] for t in document["triggers"]] == ["broken", "tick"]
    by_id = {t["id"]: t for t in document["triggers"]}
    for trigger_id, drawn in by_id.items():
        history = cli.json("history", trigger_id, "--since", since, "--limit", "100000")
        # The shape of `history --json`, but the trigger's `retirement` and `revival`.
        rows = [
            {k: v for k, v in row.items() if k not in ("retirement", "revival")} for row in history
        ]
        assert drawn["rows"] == rows, trigger_id
        assert not drawn["rows_cut"]
    assert by_id["broken"]["timezone"] == "Europe/Berlin"
    assert len(by_id["tick"]["upcoming"]) >= 55  # every second, a minute ahead
    [down] = [d for d in document["downtime"] if not d["ongoing"]]
    assert down["started_at"] < down["ended_at"]


def test_an_svg_shows_runs_by_outcome_the_manual_fire_and_the_downtime(
    ledger: tuple[Cli, str], tmp_path: Path
) -> None:
    cli, since = ledger
    picture = tmp_path / "fires.svg"
    done = cli.run("timeline", "--since", since, "--output", str(picture))
    assert done.stdout.startswith(f"{picture}: 2 triggers, ") and done.stderr == ""
    root = parse(picture.read_bytes())
    found = ids(root)
    assert {"runs-failed-0", "runs-completed-1", "manual-1", "downtime-0", "now"} <= found
    assert shapes(root, "manual-1") == 1
    assert texts(root, "label-0") == ["broken"] and texts(root, "zone-0") == ["Europe/Berlin"]
    document = cli.json("timeline", "--since", since, "--output", str(tmp_path / "again.svg"))
    assert (
        document["triggers"] == 2 and document["bytes"] == (tmp_path / "again.svg").stat().st_size
    )


def test_a_png_of_one_trigger(ledger: tuple[Cli, str], tmp_path: Path) -> None:
    cli, since = ledger
    cli.run("timeline", "tick", "--since", since, "-o", str(tmp_path / "tick.png"))
    assert (tmp_path / "tick.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_terminal_gets_one_row_per_trigger_and_a_legend(ledger: tuple[Cli, str]) -> None:
    cli, since = ledger
    text = cli.run("timeline", "--since", since, "--width", "90").stdout
    lines = text.splitlines()
    assert lines[0].startswith("timeline  ")
    labels = [line.split(" ")[0] for line in lines[3:6]]
    assert labels == ["broken", "tick", "daemon"]
    assert all(len(line) <= 90 for line in lines[:6])
    assert "✗" in lines[3] and "█" in lines[4] and "◆" in lines[4]
    assert "✗ run failed" in text and "━ daemon down" in text
    assert "\x1b[" not in text  # not a terminal: no colours


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["-o", "fires.pdf"], "TRG-117", "must end in .svg or .png"),
        (["-o", "no/such/dir/fires.svg"], "TRG-117", "cannot write"),
        (["ghost"], "TRG-112", "no trigger 'ghost'"),
        (["--since", "now", "--until", "1h ago"], "TRG-113", "the window must end after"),
        (["--since", "yesterday-ish"], "TRG-113", "cannot parse time"),
    ],
    ids=["extension", "directory", "unknown-id", "window", "time"],
)
def test_bad_input_is_a_clear_error_with_exit_2(
    ledger: tuple[Cli, str], args: list[str], code: str, message: str
) -> None:
    cli, _ = ledger
    plain = cli.run("timeline", *args, check=False)
    assert plain.returncode == 2 and plain.stdout == ""
    assert plain.stderr.startswith("error: ") and message in plain.stderr
    assert "Traceback" not in plain.stderr
    structured = cli.run("timeline", *args, "--json", check=False)
    assert structured.returncode == 2 and structured.stdout == ""
    error: dict[str, Any] = json.loads(structured.stderr)["error"]
    assert error["code"] == code and message in error["message"]
