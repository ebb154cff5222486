"""A pool shared by three daemons on one PostgreSQL, one of them killed and restarted:
the pool of 2 never has three runs at once, by the runtime's own start and end times."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tests.conftest import create_pg_database, drop_pg_database
from tests.e2e.conftest import Cli, stop, wait_for
from tests.e2e.test_pools import CONFIG, _instant, most_at_once

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.timeout(300)]


@pytest.fixture
def database_url(pg_admin: sa.Engine) -> Iterator[str]:
    url = create_pg_database(pg_admin)
    yield url
    drop_pg_database(pg_admin, url)


def _on_host(cli: Cli, host: str) -> Cli:
    other = Cli(cli.database_url, cli.workdir)
    other.env["TRIGGERS_HOST"] = host
    return other


def _completed(cli: Cli, minimum: int) -> list[dict[str, Any]] | None:
    result = cli.run(
        "history", "--outcome", "completed", "--limit", "100000", "--json", check=False
    )
    if result.returncode != 0:
        return None
    rows: list[dict[str, Any]] = json.loads(result.stdout)
    return rows if len(rows) >= minimum else None


def test_pool_of_two_across_three_daemons_with_a_kill_never_runs_three(
    database_url: str, tmp_path: Path
) -> None:
    config = tmp_path / "triggers.yaml"
    config.write_text(CONFIG)
    clis = [_on_host(Cli(database_url, tmp_path), f"host-{n}") for n in range(3)]
    daemons: list[subprocess.Popen[str]] = []
    try:
        for n, cli in enumerate(clis):
            daemons.append(cli.daemon(config, tmp_path / f"daemon-{n}.log"))
        wait_for(lambda: _completed(clis[0], 4), timeout=90, what="four runs")
        daemons[0].kill()  # SIGKILL: its launches and runs are taken over
        daemons[0].wait(timeout=30)
        wait_for(lambda: _completed(clis[1], 10), timeout=120, what="ten runs")
        daemons[0] = clis[0].daemon(config, tmp_path / "daemon-0-again.log")
        wait_for(lambda: _completed(clis[2], 14), timeout=120, what="fourteen runs")
    finally:
        codes = [stop(daemon) for daemon in daemons if daemon.poll() is None]
    assert codes and all(code == 0 for code in codes), codes
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
