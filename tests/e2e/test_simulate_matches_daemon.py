"""`simulate` writes the ledger the real daemon writes: a holiday (a calendar
exclusion), a full pool and a chain of three dependent triggers, played by
`triggers run` on SQLite with its clock set just before Christmas (a test hook,
`clocked_daemon.py`), and by `simulate` over the same range.

The schedules have seconds fields, so the scenario takes about half a minute of real
time: the chain `ingest` -> `transform` -> `publish` runs at 23:59:42 (six seconds
after the daemon's start); at 23:59:48 `backup` takes the pool's one slot for six
seconds and `transform` finds it full; from midnight `ingest` is excluded by the
German holidays (25 December) and `backup` launches again. Each step of the scenario
is four seconds or more from the one it must not overlap. Runs of a dependent start
when their upstream's run ends, a few milliseconds later on the daemon than in the
simulation, so a dependent's row is compared by the chain of scheduled occurrences
that caused it, not by its instant.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Cli, stop, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

START = "2026-12-24T23:59:36+00:00"
END = "2026-12-25T00:00:00.000Z"
CONFIG = """\
version: 1
calendars:
  de: {holidays: {country: DE}}
pools:
  heavy: {slots: 1}
flows:
  quick: {steps: [{id: go, run: [sleep, "1"]}]}
  long: {steps: [{id: go, run: [sleep, "6"]}]}
triggers:
  - {id: ingest, flow: quick, cron: "42,48,0 * * * * *", exclude: [de]}
  - {id: transform, flow: quick, after: {trigger: ingest, outcome: completed}, pool: heavy}
  - {id: publish, flow: quick, after: {trigger: transform, outcome: completed}}
  - {id: backup, flow: long, cron: "48,0 * * * * *", pool: heavy}
"""
DURATIONS = ["ingest=1s", "transform=1s", "publish=1s", "backup=6s"]


def _daemon(cli: Cli, config: Path, log: Path) -> subprocess.Popen[str]:
    env = {**cli.env, "CLOCK_START": START}
    with log.open("a") as stderr:
        return subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).with_name("clocked_daemon.py")),
                "run",
                "--config",
                str(config),
            ],
            env=env,
            cwd=cli.workdir,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            text=True,
        )


def _history(cli: Cli) -> list[dict[str, Any]] | None:
    result = cli.run("history", "--limit", "10000", "--json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def _past_midnight(cli: Cli) -> list[dict[str, Any]] | None:
    """The ledger once midnight's occurrences are decided and every earlier run ended."""
    rows = _history(cli)
    if rows is None:
        return None
    decided = {(r["trigger_id"], r["occurrence"]): r["outcome"] for r in rows}
    if ("ingest", END) not in decided or decided.get(("backup", END)) != "launched":
        return None
    earlier = [r for r in rows if r["occurrence"] < END]
    live = {"launching", "launched", "buffered"}
    return rows if not any(r["outcome"] in live for r in earlier) else None


def _ledger(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Each row as what it is: its trigger, outcome, reason and what the reason names,
    and its scheduled occurrence, or for a dependent's, the rows that caused it."""
    by_run = {r["run_id"]: r for r in rows if r["run_id"]}

    def cause(row: dict[str, Any]) -> tuple[Any, ...]:
        upstream = row["upstream_run_id"]
        if upstream is None:
            return (row["occurrence"],)
        parent = by_run.get(upstream)
        return ("?",) if parent is None else (parent["trigger_id"], *cause(parent))

    return sorted(
        (r["trigger_id"], r["outcome"], r["reason"], r["reason_detail"], r["count"], cause(r))
        for r in rows
        if r["occurrence"] <= END
    )


def test_simulate_writes_the_daemons_ledger_for_a_holiday_a_full_pool_and_a_chain(
    cli: Cli, tmp_path: Path
) -> None:
    config = tmp_path / "triggers.yaml"
    config.write_text(CONFIG)
    daemon = _daemon(cli, config, tmp_path / "daemon.log")
    try:
        rows = wait_for(lambda: _past_midnight(cli), timeout=180, what="midnight decided")
    finally:
        assert stop(daemon) == 0
    durations = [part for item in DURATIONS for part in ("--duration", item)]
    simulated = json.loads(
        cli.run("simulate", str(config), "--from", START, "--to", END, *durations, "--json").stdout
    )

    daemon_ledger, simulated_ledger = _ledger(rows), _ledger(simulated)
    assert daemon_ledger == simulated_ledger
    # The scenario did what it is here for: a chain, a full pool, a holiday.
    outcomes = {(row[0], row[1], row[2]) for row in daemon_ledger}
    assert {
        ("ingest", "completed", None),
        ("transform", "completed", None),
        ("publish", "completed", None),
        ("transform", "skipped", "pool_full"),
        ("ingest", "skipped", "calendar"),
        ("backup", "launched", None),
    } <= outcomes, textwrap.indent("\n".join(map(str, daemon_ledger)), "  ")
