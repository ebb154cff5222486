"""Dependent triggers across three daemons on one PostgreSQL, one of them killed and
restarted: each completed upstream run gives the dependent exactly one occurrence
naming it, none lost, none twice."""

from __future__ import annotations

import json
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Cli, three_daemons_with_a_kill

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
    pg_database_url: str, tmp_path: Path
) -> None:
    config = tmp_path / "triggers.yaml"
    config.write_text(CONFIG)
    clis = three_daemons_with_a_kill(
        pg_database_url, tmp_path, config, _reports, (3, 8, 12), "reports"
    )
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
    # Several daemons took part: the one that claimed was killed, another took over.
    assert len({r["host"] for r in rows if r["host"]}) >= 2


SETS = textwrap.dedent(
    """\
    version: 1
    flows:
      ok: {steps: [{id: work, run: [/bin/true]}]}
    triggers:
      - {id: a, flow: ok, every: 1s}
      - {id: b, flow: ok, every: 1s}
      - id: both
        flow: ok
        after: {all: [{trigger: a}, {trigger: b}], within: 1h}
        overlap: buffer_all
      - id: either
        flow: ok
        after: {any: [{trigger: a}, {trigger: b}]}
        overlap: buffer_all
    """
)


def _sets(cli: Cli, minimum: int) -> list[dict[str, Any]] | None:
    rows = _history(cli)
    if rows is None:
        return None
    done = [r for r in rows if r["trigger_id"] == "both" and r["outcome"] == "completed"]
    return rows if len(done) >= minimum else None


def test_three_daemons_with_a_kill_use_each_upstream_run_once_for_all_and_any(
    pg_database_url: str, tmp_path: Path
) -> None:
    config = tmp_path / "triggers.yaml"
    config.write_text(SETS)
    clis = three_daemons_with_a_kill(pg_database_url, tmp_path, config, _sets, (3, 8, 12), "sets")
    rows = _history(clis[0])
    assert rows is not None
    completed = {
        name: {r["run_id"] for r in rows if r["trigger_id"] == name and r["outcome"] == "completed"}
        for name in ("a", "b")
    }
    both = [r for r in rows if r["trigger_id"] == "both"]
    used = Counter(run for r in both for run in r["upstream_run_ids"])
    # Every set is one completed run of a and one of b, the last of them its key ...
    for row in both:
        first, second = row["upstream_run_ids"]
        assert first in completed["a"], row
        assert second in completed["b"], row
        assert row["upstream_run_id"] in (first, second)
        assert row["idempotency_key"] == f"both:after:{row['upstream_run_id']}"
    # ... each run in one set at most, and none lost: with nothing leaving the window,
    # the runs pair off until one trigger has none left.
    assert set(used.values()) == {1}
    assert len(both) == min(len(completed["a"]), len(completed["b"]))
    # `any`: every completed run of either upstream, once.
    either = Counter(r["upstream_run_id"] for r in rows if r["trigger_id"] == "either")
    assert set(either) == completed["a"] | completed["b"]
    assert set(either.values()) == {1}
