"""Pools in the real daemon: a pool of 2 never has 3 runs at once (by the runs' own
start and end times in the runtime), and a full pool skips or buffers."""

from __future__ import annotations

import json
import textwrap
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Cli, stop, wait_for
from tests.e2e.test_metrics import Samples, _free_port, _scrape, _value

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

CONFIG = textwrap.dedent(
    """\
    version: 1
    pools:
      db-heavy: {slots: 2}
    flows:
      heavy: {steps: [{id: work, sleep: 3s}]}
    defaults:
      pool: db-heavy
    triggers:
      - {id: a, flow: heavy, every: 1s}
      - {id: b, flow: heavy, every: 1s}
      - {id: c, flow: heavy, every: 1s, overlap: buffer}
    """
)


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def most_at_once(intervals: list[tuple[datetime, datetime]]) -> int:
    """The most intervals open at one instant (one ending as another starts: not both)."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    most = current = 0
    for _, step in events:  # at equal instants an end (-1) sorts before a start
        current += step
        most = max(most, current)
    return most


def _history(cli: Cli) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads(
        cli.run("history", "--limit", "100000", "--json").stdout
    )
    return rows


def _enough(cli: Cli) -> list[dict[str, Any]] | None:
    result = cli.run("history", "--limit", "100000", "--json", check=False)
    if result.returncode != 0:
        return None
    rows: list[dict[str, Any]] = json.loads(result.stdout)
    completed = [r for r in rows if r["outcome"] == "completed"]
    waited = [
        r
        for r in completed
        if r["trigger_id"] == "c"
        and _instant(r["launched_at"]) - _instant(r["claimed_at"]) >= _SECOND
    ]
    return rows if len(completed) >= 8 and waited else None


def _pool_full_scrape(port: int) -> Samples | None:
    samples, _ = _scrape(port)
    return samples if _value(samples, "triggers_pool_active_runs", pool="db-heavy") == 2 else None


_SECOND = _instant("2026-01-01T00:00:01Z") - _instant("2026-01-01T00:00:00Z")


def test_pool_of_two_never_runs_three_and_full_pool_skips_or_buffers(
    cli: Cli, tmp_path: Path
) -> None:
    config = tmp_path / "triggers.yaml"
    config.write_text(CONFIG)
    port = _free_port()
    cli.env["TRIGGERS_METRICS_ADDRESS"] = f"127.0.0.1:{port}"
    daemon = cli.daemon(config, tmp_path / "daemon.log")
    try:
        wait_for(lambda: _enough(cli), timeout=120, what="eight runs, one of c after a wait")
        status = cli.json("status")
        described = cli.json("describe", "c")
        samples = wait_for(
            lambda: _pool_full_scrape(port), timeout=30, what="the pool full in the metrics"
        )
    finally:
        assert stop(daemon) == 0

    assert _value(samples, "triggers_pool_slots", pool="db-heavy") == 2
    assert described["pool"]["name"] == "db-heavy"
    assert described["pool"]["members"] == ["a", "b", "c"]
    assert described["declaration"]["pool"] == "db-heavy"

    [pool] = status["pools"]
    assert (pool["name"], pool["slots"]) == ("db-heavy", 2)
    assert 0 <= pool["active"] <= 2
    runs = [
        run
        for run in cli.json("runs", "list", "--limit", "100000")
        if run["settled_at"] is not None
    ]
    assert len(runs) >= 8
    intervals = [(_instant(r["created_at"]), _instant(r["settled_at"])) for r in runs]
    assert most_at_once(intervals) == 2  # full, never over

    history = _history(cli)
    ledger = [
        (_instant(r["launched_at"]), _instant(r["settled_at"]))
        for r in history
        if r["launched_at"] and r["settled_at"]
    ]
    assert most_at_once(ledger) <= 2
    full = [r for r in history if r["reason"] == "pool_full"]
    assert {r["reason_detail"] for r in full} == {"db-heavy"}
    # The skip members' occurrences are skipped when the pool is full...
    assert any(r["trigger_id"] in ("a", "b") and r["outcome"] == "skipped" for r in full)
    # ...and the buffering member's waited, buffered, then launched.
    assert all(r["outcome"] in ("skipped", "buffered") for r in full)
    assert any(
        r["trigger_id"] == "c"
        and r["outcome"] == "completed"
        and _instant(r["launched_at"]) - _instant(r["claimed_at"]) >= _SECOND
        for r in history
    )
