"""A pool shared by three daemons on one PostgreSQL, one of them killed and restarted:
the pool of 2 never has three runs at once, by the runtime's own start and end times."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Cli, three_daemons_with_a_kill
from tests.e2e.test_pools import CONFIG, _instant, most_at_once

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.timeout(300)]


def _completed(cli: Cli, minimum: int) -> list[dict[str, Any]] | None:
    result = cli.run(
        "history", "--outcome", "completed", "--limit", "100000", "--json", check=False
    )
    if result.returncode != 0:
        return None
    rows: list[dict[str, Any]] = json.loads(result.stdout)
    return rows if len(rows) >= minimum else None


def test_pool_of_two_across_three_daemons_with_a_kill_never_runs_three(
    pg_database_url: str, tmp_path: Path
) -> None:
    config = tmp_path / "triggers.yaml"
    config.write_text(CONFIG)
    clis = three_daemons_with_a_kill(
        pg_database_url, tmp_path, config, _completed, (4, 10, 14), "completed runs"
    )
    cli = clis[0]
    runs = [run for run in cli.json("runs", "list", "--limit", "100000") if run["settled_at"]]
    intervals = [(_instant(r["created_at"]), _instant(r["settled_at"])) for r in runs]
    assert len(intervals) >= 14
    assert most_at_once(intervals) == 2
    history = cli.json("history", "--limit", "100000")
    ledger = [
        (_instant(r["launched_at"]), _instant(r["settled_at"]))
        for r in history
        if r["launched_at"] and r["settled_at"]
    ]
    assert most_at_once(ledger) <= 2
    full = [r for r in history if r["reason"] == "pool_full"]
    assert full and {r["reason_detail"] for r in full} == {"db-heavy"}
    assert len({r["host"] for r in history if r["outcome"] == "completed"}) >= 2
    # Nothing lost: each trigger's every second, from its first to its last, is one row
    # (or in one range row), the killed daemon's included.
    for trigger_id in ("a", "b", "c"):
        rows = [r for r in history if r["trigger_id"] == trigger_id]
        first = min(_instant(r["occurrence"]) for r in rows)
        last = max(_instant(r["last_occurrence"] or r["occurrence"]) for r in rows)
        seconds = round((last - first).total_seconds()) + 1
        assert sum(r["count"] for r in rows) == seconds, trigger_id
