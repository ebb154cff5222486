"""Dependent triggers in the real daemon: each completed `import` run gives `report`
exactly one run whose ledger row names it, and a failed run fires only the triggers
that wait for a failure."""

from __future__ import annotations

import json
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Cli, stop, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

CONFIG = textwrap.dedent(
    """\
    version: 1
    flows:
      ok: {steps: [{id: work, run: [/bin/true]}]}
      broken: {steps: [{id: work, run: [/bin/false], retry: {max_attempts: 1}}]}
      nothing: {steps: []}
    triggers:
      - {id: import, flow: ok, every: 1s}
      - {id: report, flow: ok, after: {trigger: import, outcome: completed}}
      - {id: flaky, flow: broken, every: 1s}
      - {id: never, flow: ok, after: {trigger: flaky, outcome: completed}}
      - {id: alarm, flow: ok, after: {trigger: flaky, outcome: failed}}
      - {id: mark, flow: nothing, every: 1s}
      - {id: tally, flow: ok, after: {trigger: mark, outcome: completed}}
    """
)


def _history(cli: Cli) -> list[dict[str, Any]] | None:
    result = cli.run("history", "--limit", "100000", "--json", check=False)
    if result.returncode != 0:
        return None
    rows: list[dict[str, Any]] = json.loads(result.stdout)
    return rows


def _enough(cli: Cli) -> list[dict[str, Any]] | None:
    rows = _history(cli)
    if rows is None:
        return None
    done = Counter((r["trigger_id"], r["outcome"]) for r in rows)
    enough = (
        done["report", "completed"] >= 4
        and done["alarm", "completed"] >= 2
        and done["tally", "completed"] >= 2
    )
    return rows if enough else None


def test_each_upstream_run_fires_its_dependent_once_naming_the_run(
    cli: Cli, tmp_path: Path
) -> None:
    config = tmp_path / "triggers.yaml"
    config.write_text(CONFIG)
    daemon = cli.daemon(config, tmp_path / "daemon.log")
    try:
        wait_for(lambda: _enough(cli), timeout=120, what="four reports, two alarms, two tallies")
        described = cli.json("describe", "report")
    finally:
        assert stop(daemon) == 0
    rows = _history(cli)
    assert rows is not None

    def of(trigger_id: str) -> list[dict[str, Any]]:
        return [r for r in rows if r["trigger_id"] == trigger_id]

    assert described["declaration"]["schedule"] == "after import completed"
    completed_imports = {r["run_id"] for r in of("import") if r["outcome"] == "completed"}
    failed_flaky = {r["run_id"] for r in of("flaky") if r["outcome"] == "failed"}
    # A flow with no steps completes within its start: its runs fire dependents too.
    marks = {r["run_id"] for r in of("mark") if r["outcome"] == "completed"}
    assert len(completed_imports) >= 4 and len(failed_flaky) >= 2 and len(marks) >= 2
    # One row per upstream run, each naming it, none for another trigger's runs.
    for dependent, upstream_runs in (
        ("report", completed_imports),
        ("alarm", failed_flaky),
        ("tally", marks),
    ):
        named = [r["upstream_run_id"] for r in of(dependent)]
        assert sorted(named) == sorted(upstream_runs), dependent
        for row in of(dependent):
            assert row["idempotency_key"] == f"{dependent}:after:{row['upstream_run_id']}"
            assert row["occurrence"] is not None
    assert of("never") == []
    # Every report that ran is its own run, launched by its own row.
    ran = [r for r in of("report") if r["run_id"] is not None]
    assert len({r["run_id"] for r in ran}) == len(ran) >= 4
    assert all(r["upstream_run_id"] is None for r in of("import"))


REQUIRES = textwrap.dedent(
    """\
    version: 1
    flows:
      ok: {steps: [{id: work, run: [/bin/true]}]}
    triggers:
      - {id: import, flow: ok, every: 1s}
      - {id: never, flow: ok, every: 1s, enabled: false}
      - {id: fed, flow: ok, every: 1s, requires: {trigger: import, since: 1m}}
      - {id: starved, flow: ok, every: 1s, requires: {trigger: never, since: 1h}}
    """
)


def _requirement_met_and_unmet(cli: Cli) -> list[dict[str, Any]] | None:
    rows = _history(cli)
    if rows is None:
        return None
    done = Counter((r["trigger_id"], r["outcome"], r["reason"]) for r in rows)
    enough = done["fed", "completed", None] >= 2 and done["starved", "skipped", "requirement"] >= 2
    return rows if enough else None


def test_a_requirement_runs_what_its_trigger_fed_and_skips_what_it_starved(
    cli: Cli, tmp_path: Path
) -> None:
    config = tmp_path / "triggers.yaml"
    config.write_text(REQUIRES)
    daemon = cli.daemon(config, tmp_path / "daemon.log")
    try:
        rows = wait_for(
            lambda: _requirement_met_and_unmet(cli), timeout=120, what="fed runs, starved skips"
        )
    finally:
        assert stop(daemon) == 0

    starved = [r for r in rows if r["trigger_id"] == "starved"]
    assert {(r["outcome"], r["reason"], r["reason_detail"]) for r in starved} == {
        ("skipped", "requirement", "never completed within 1h")
    }
    assert all(r["run_id"] is None for r in starved)
    fed = [r for r in rows if r["trigger_id"] == "fed" and r["reason"] == "requirement"]
    first_import = min(
        r["settled_at"] for r in rows if r["trigger_id"] == "import" and r["outcome"] == "completed"
    )
    # Only occurrences before the first import completed can have been skipped.
    assert all(r["occurrence"] <= first_import for r in fed)
