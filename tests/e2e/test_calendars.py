"""Calendars in the real daemon: excluded occurrences in its ledger, as `simulate` says."""

from __future__ import annotations

import json
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Cli, stop, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def _config(today: datetime) -> str:
    # The "holiday" is today, and the days around it: a run across midnight stays inside.
    first = (today - timedelta(days=1)).date().isoformat()
    last = (today + timedelta(days=1)).date().isoformat()
    return textwrap.dedent(
        f"""\
        version: 1
        calendars:
          closed: {{dates: ["{first}..{last}"]}}
        flows:
          noop: {{steps: []}}
        triggers:
          - {{id: shut, flow: noop, every: 1s, exclude: [closed]}}
          - {{id: open, flow: noop, every: 1s, overlap: allow, max_active: 50}}
        """
    )


def _rows(cli: Cli, trigger_id: str, minimum: int) -> list[dict[str, Any]] | None:
    result = cli.run("history", trigger_id, "--limit", "10000", "--json", check=False)
    if result.returncode != 0:
        return None
    rows: list[dict[str, Any]] = json.loads(result.stdout)
    return rows if len(rows) >= minimum else None


def test_daemon_records_excluded_occurrences_as_simulate_does(cli: Cli, tmp_path: Path) -> None:
    config = tmp_path / "triggers.yaml"
    config.write_text(_config(datetime.now(UTC)))
    daemon = cli.daemon(config, tmp_path / "daemon.log")
    try:
        wait_for(lambda: _rows(cli, "shut", 5), timeout=60, what="five excluded occurrences")
        wait_for(
            lambda: not cli.json("history", "--outcome", "launched", "--outcome", "launching"),
            timeout=30,
            what="the open trigger's runs to settle",
        )
    finally:
        assert stop(daemon) == 0

    history = cli.json("history", "--limit", "10000")
    shut = [row for row in history if row["trigger_id"] == "shut"]
    assert shut and all(
        (row["outcome"], row["reason"], row["run_id"]) == ("skipped", "calendar", None)
        for row in shut
    ), shut
    assert {row["reason_detail"] for row in shut} == {f"closed ({_range(config)})"}
    text = cli.run("history", "shut", "--limit", "1").stdout
    assert f"calendar closed ({_range(config)})" in text

    # The simulator, over the seconds the daemon decided, writes the same ledger.
    first = min(row["occurrence"] for row in history)
    last = max(row["occurrence"] for row in history)
    start = datetime.fromisoformat(first.replace("Z", "+00:00")) - timedelta(milliseconds=1)
    simulated = json.loads(
        cli.run(
            "simulate",
            str(config),
            "--from",
            start.isoformat(),
            "--to",
            last,
            "--duration",
            "0s",
            "--json",
        ).stdout
    )

    def ledger(rows: list[dict[str, Any]]) -> set[tuple[Any, ...]]:
        return {
            (r["trigger_id"], r["occurrence"], r["outcome"], r["reason"], r["reason_detail"])
            for r in rows
            if r["count"] == 1 and first <= r["occurrence"] <= last
        }

    daemon_rows = ledger(history)
    assert {r[2] for r in daemon_rows if r[0] == "open"} == {"completed"}
    # A daemon's first seconds may be one range row (catch-up); compare what both decided.
    assert ledger(simulated) >= daemon_rows


def _range(config: Path) -> str:
    line = next(line for line in config.read_text().splitlines() if "closed:" in line)
    return line.split('"')[1]
