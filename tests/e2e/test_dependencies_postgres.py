"""Dependent triggers across three daemons on one PostgreSQL, one of them killed and
restarted: each completed upstream run gives the dependent exactly one occurrence
naming it, none lost, none twice."""

from __future__ import annotations

import json
import subprocess
import textwrap
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tests.conftest import create_pg_database, drop_pg_database
from tests.e2e.conftest import Cli, stop, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.timeout(300)]

CONFIG = textwrap.dedent(
    """\
    version: 1
    flows:
      ok: {steps: [{id: work, run: [/bin/true]}]}
    triggers:
      - {id: import, flow: ok, every: 1s}
      - id: report
        flow: ok
        after: {trigger: import, outcome: completed}
        overlap: buffer_all
    """
)


@pytest.fixture
def database_url(pg_admin: sa.Engine) -> Iterator[str]:
    url = create_pg_database(pg_admin)
    yield url
    drop_pg_database(pg_admin, url)


def _on_host(cli: Cli, host: str) -> Cli:
    other = Cli(cli.database_url, cli.workdir)
    other.env["TRIGGERS_HOST"] = host
    return other


def _history(cli: Cli) -> list[dict[str, Any]] | None:
    result = cli.run("history", "--limit", "100000", "--json", check=False)
    if result.returncode != 0:
        return None
    rows: list[dict[str, Any]] = json.loads(result.stdout)
    return rows


def _reports(cli: Cli, minimum: int) -> list[dict[str, Any]] | None:
    rows = _history(cli)
    if rows is None:
        return None
    done = [r for r in rows if r["trigger_id"] == "report" and r["outcome"] == "completed"]
    return rows if len(done) >= minimum else None


def test_three_daemons_with_a_kill_fire_the_dependent_once_per_upstream_run(
    database_url: str, tmp_path: Path
) -> None:
    config = tmp_path / "triggers.yaml"
    config.write_text(CONFIG)
    clis = [_on_host(Cli(database_url, tmp_path), f"host-{n}") for n in range(3)]
    daemons: list[subprocess.Popen[str]] = []
    try:
        for n, cli in enumerate(clis):
            daemons.append(cli.daemon(config, tmp_path / f"daemon-{n}.log"))
        wait_for(lambda: _reports(clis[0], 3), timeout=90, what="three reports")
        daemons[0].kill()  # SIGKILL: its launches and runs are taken over
        daemons[0].wait(timeout=30)
        wait_for(lambda: _reports(clis[1], 8), timeout=120, what="eight reports")
        daemons[0] = clis[0].daemon(config, tmp_path / "daemon-0-again.log")
        wait_for(lambda: _reports(clis[2], 12), timeout=120, what="twelve reports")
    finally:
        codes = [stop(daemon) for daemon in daemons if daemon.poll() is None]
    assert codes and all(code == 0 for code in codes), codes
    rows = _history(clis[0])
    assert rows is not None
    imports = [r for r in rows if r["trigger_id"] == "import"]
    reports = [r for r in rows if r["trigger_id"] == "report"]
    completed = {r["run_id"] for r in imports if r["outcome"] == "completed"}
    named = Counter(r["upstream_run_id"] for r in reports)
    # Each completed import run named by exactly one report row, and nothing else named.
    assert set(named) == completed
    assert set(named.values()) == {1}
    assert all(r["idempotency_key"] == f"report:after:{r['upstream_run_id']}" for r in reports)
    ran = [r["run_id"] for r in reports if r["run_id"] is not None]
    assert len(ran) == len(set(ran)) >= 12
    # The runtime started one run per report row that launched, never two for one key.
    runs = clis[0].json("runs", "list", "--limit", "100000")
    keyed = Counter(
        run["idempotency_key"]
        for run in runs
        if str(run["idempotency_key"]).startswith("report:after:")
    )
    assert set(keyed.values()) == {1}
    assert sorted(keyed) == sorted(
        f"report:after:{r['upstream_run_id']}" for r in reports if r["run_id"]
    )
    # The upstream's runs were launched (and so settled) by several daemons.
    assert len({r["host"] for r in imports if r["outcome"] == "completed"}) >= 2
