"""The real daemon process, end to end, on the embedded SQLite store."""

from __future__ import annotations

import json
import textwrap
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Cli, log_events, stop, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

CONFIG = textwrap.dedent(
    """\
    version: 1
    flows:
      tick:
        steps:
          - id: mark
            run:
              - sh
              - -c
              - echo "$TRIGGERS_TRIGGER_ID $TRIGGERS_OCCURRENCE $TRIGGERS_RUN_ID" >> {marks}
            timeout: 10s
    triggers:
      - id: alpha
        flow: tick
        every: 1s
        overlap: allow
        max_active: 20
      - id: beta
        flow: tick
        every: 1s
        overlap: allow
        max_active: 20
      - id: gamma
        flow: tick
        every: 1s
        overlap: allow
        max_active: 20
    """
)


def _when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _completed_seconds(cli: Cli, trigger_id: str, minimum: int) -> list[dict[str, Any]] | None:
    result = cli.run(
        "history", trigger_id, "--outcome", "completed", "--limit", "10000", "--json", check=False
    )
    if result.returncode in (2, 78):  # no database yet (78), or no declarations yet (2)
        return None
    rows: list[dict[str, Any]] = json.loads(result.stdout)
    return rows if len(rows) >= minimum else None


def test_every_second_triggers_fire_each_second_exactly_once_across_a_restart(
    cli: Cli, tmp_path: Path
) -> None:
    marks = tmp_path / "marks.txt"
    config = tmp_path / "triggers.yaml"
    config.write_text(CONFIG.format(marks=marks))
    log = tmp_path / "daemon.log"

    first = cli.daemon(config, log)
    try:
        wait_for(
            lambda: _completed_seconds(cli, "gamma", 4), timeout=60, what="four completed fires"
        )
    finally:
        assert stop(first) == 0
    second = cli.daemon(config, log)
    try:
        before = len(cli.json("history", "gamma", "--limit", "10000"))
        wait_for(
            lambda: _completed_seconds(cli, "gamma", before + 3),
            timeout=60,
            what="fires after the restart",
        )
    finally:
        assert stop(second) == 0

    events = log_events(log)
    assert [e["event"] for e in events].count("daemon_stopped") == 2
    # The restart found the file already in force and did not parse it again.
    assert [e["event"] for e in events].count("declarations_unchanged") == 1
    assert all(e.get("level") != "error" for e in events), [
        e for e in events if e.get("level") == "error"
    ]

    # A daemon with the triggers retired settles what the last stop left running
    # (runs are never cancelled by a stop) and launches nothing new.
    retired = tmp_path / "retired.yaml"
    retired.write_text("version: 1\nflows: {}\ntriggers: []\n")
    third = cli.daemon(retired, log)
    try:
        # Started first: a quick answer below must not stop it while it starts up.
        wait_for(
            lambda: [e["event"] for e in log_events(log)].count("daemon_started") == 3,
            timeout=30,
            what="the third daemon to start",
        )
        wait_for(
            lambda: not cli.json("history", "--outcome", "launched", "--outcome", "launching"),
            timeout=30,
            what="every launched run to settle",
        )
    finally:
        assert stop(third) == 0

    history = cli.json("history", "--limit", "100000")
    run_ids = Counter(row["run_id"] for row in history if row["run_id"])
    assert run_ids and max(run_ids.values()) == 1, "a run served two occurrences"
    for trigger_id in ("alpha", "beta", "gamma"):
        rows = sorted(
            (r for r in history if r["trigger_id"] == trigger_id), key=lambda r: r["occurrence"]
        )
        covered = []
        for row in rows:  # a range row covers `count` consecutive seconds
            start = _when(row["occurrence"])
            covered += [start + timedelta(seconds=n) for n in range(row["count"])]
        assert len(covered) == len(set(covered)), f"{trigger_id}: an occurrence twice"
        span = int((max(covered) - min(covered)).total_seconds()) + 1
        assert sorted(covered) == [min(covered) + timedelta(seconds=n) for n in range(span)], (
            f"{trigger_id}: a second is missing from the ledger"
        )
        launched = [r for r in rows if r["outcome"] not in {"missed", "skipped"}]
        assert {r["outcome"] for r in launched} == {"completed"}, trigger_id
        for row in launched:
            assert _when(row["launched_at"]) >= _when(row["occurrence"])

    lines = marks.read_text().split("\n")
    marked = Counter(tuple(line.split()[:2]) for line in lines if line)
    assert max(marked.values()) == 1, "a step ran twice for one occurrence"
    completed = {(r["trigger_id"], r["occurrence"]) for r in history if r["outcome"] == "completed"}
    assert {(t, o.replace(".000Z", "Z")) for t, o in marked} >= {
        (t, o.replace(".000Z", "Z")) for t, o in completed
    }


def test_validate_reports_every_problem_with_location_and_exit_2(cli: Cli, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "version: 1\nflows:\n  f:\n    steps:\n      - {id: a, run: [true]}\n"
        "triggers:\n  - id: x\n    flow: nope\n    cron: '61 * * * *'\n    overlpa: skip\n"
    )
    result = cli.run("validate", str(bad), "--json", check=False)
    assert result.returncode == 2
    assert result.stdout == ""
    error = json.loads(result.stderr)["error"]
    assert error["code"] == "TRG-111"
    keys = {(p["key"], p["line"]) for p in error["details"]["problems"]}
    assert {("triggers[x].flow", 8), ("triggers[x].cron", 9), ("triggers[x].overlpa", 10)} <= keys


def test_apply_refuses_invalid_file_and_touches_nothing(cli: Cli, tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(
        "version: 1\nflows:\n  f:\n    steps: []\ntriggers:\n  - {id: keep, flow: f, every: 1h}\n"
    )
    cli.run("apply", str(good))
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nflows: {}\ntriggers:\n  - {id: other, flow: f, every: 1h}\n")
    result = cli.run("apply", str(bad), check=False)
    assert result.returncode == 2
    assert "bad.yaml:4" in result.stderr
    assert [t["id"] for t in cli.json("list")] == ["keep"]


def test_query_commands_speak_json_and_exit_codes(cli: Cli, tmp_path: Path) -> None:
    config = tmp_path / "t.yaml"
    config.write_text(
        "version: 1\nflows:\n  f:\n    steps: []\ntriggers:\n"
        "  - {id: nightly, flow: f, cron: '30 2 * * *', timezone: Europe/Berlin}\n"
    )
    upcoming = cli.json(
        "next", "nightly", "-n", "2", "--after", "2026-03-28T12:00:00Z", "--config", str(config)
    )
    assert [(u["occurrence"], u["local"], u["dst"]) for u in upcoming] == [
        ("2026-03-29T01:00:00.000Z", "2026-03-29T03:00:00+02:00", "moved"),
        ("2026-03-30T00:30:00.000Z", "2026-03-30T02:30:00+02:00", None),
    ]
    cli.run("apply", str(config))
    [row] = cli.json("list")
    assert row["id"] == "nightly" and row["schedule"] == "cron 30 2 * * *"
    assert row["timezone"] == "Europe/Berlin" and row["enabled"] and not row["paused"]
    assert row["revision"] == 1 and row["next_fire"] is not None
    assert cli.json("history", "nightly") == []
    unknown = cli.run("history", "ghost", "--json", check=False)
    assert unknown.returncode == 2 and unknown.stdout == ""
    bad_time = cli.run("history", "--since", "yesterday-ish", check=False)
    assert bad_time.returncode == 2
    assert cli.json("pause", "nightly")["paused"] is True
    assert cli.json("list")[0]["paused"] is True
    assert cli.json("resume", "nightly")["paused"] is False


def test_daemon_refuses_database_with_schema_behind(cli: Cli, tmp_path: Path) -> None:
    import sqlalchemy as sa

    config = tmp_path / "t.yaml"
    config.write_text("version: 1\nflows: {}\ntriggers: []\n")
    cli.run("db", "upgrade")
    engine = sa.create_engine(cli.database_url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '0001'"))
    engine.dispose()
    process = cli.daemon(config, tmp_path / "d.log")
    assert process.wait(timeout=60) == 78
    assert "triggers db upgrade" in (tmp_path / "d.log").read_text()


RUNS_CONFIG = textwrap.dedent(
    """\
    version: 1
    flows:
      gated:
        steps:
          - id: gate
            wait_signal: {name: go, timeout: 10m}
          - id: after
            run: [echo, opened]
      long:
        steps:
          - id: nap
            run: [sleep, "60"]
    triggers:
      - {id: gated, flow: gated, every: 1d}
      - {id: long, flow: long, every: 1d}
    """
)


def _run_of(cli: Cli, trigger_id: str) -> str | None:
    rows = cli.json("history", trigger_id)
    return rows[0]["run_id"] if rows and rows[0]["run_id"] else None


# Every CLI call here is a process of its own: on a loaded machine the calls, not the
# daemon, take most of the time, so the test's budget covers its waits' deadlines.
@pytest.mark.timeout(900)
def test_runs_commands_show_signal_and_cancel_runs_of_the_daemon(cli: Cli, tmp_path: Path) -> None:
    config = tmp_path / "runs.yaml"
    config.write_text(RUNS_CONFIG)
    daemon = cli.daemon(config, tmp_path / "d.log")
    try:
        wait_for(
            lambda: cli.run("list", check=False).returncode == 0 and cli.json("list"),
            timeout=120,
            what="the declarations",
        )
        cli.json("fire", "gated")
        cli.json("fire", "long")
        gated = wait_for(lambda: _run_of(cli, "gated"), timeout=120, what="the gated run")
        long = wait_for(lambda: _run_of(cli, "long"), timeout=120, what="the long run")

        listed = {run["run_id"]: run for run in cli.json("runs", "list")}
        assert listed[gated]["attributes"]["trigger_id"] == "gated"
        wait_for(
            lambda: "wait_started" in [e["type"] for e in cli.json("runs", "events", gated)],
            timeout=120,
            what="the gate to wait",
        )
        shown = cli.json("runs", "show", gated)
        assert shown["status"] == "active" and shown["flow"] == "gated"

        cli.json("runs", "signal", gated, "go", "--payload", '{"ok": true}', "--key", "k1")
        cli.json("runs", "signal", gated, "go", "--payload", '{"ok": true}', "--key", "k1")
        cli.json("runs", "cancel", long, "--reason", "test")
        wait_for(
            lambda: (
                {r["outcome"] for r in cli.json("history", "gated")} == {"completed"}
                and {r["outcome"] for r in cli.json("history", "long")} == {"cancelled"}
            ),
            timeout=180,
            what="the runs to settle",
        )
        types = [e["type"] for e in cli.json("runs", "events", gated)]
        assert types[0] == "run_started" and types[-1] == "run_completed"
        missing = cli.run("runs", "show", "no-such-run", "--json", check=False)
        assert missing.returncode == 2 and missing.stdout == ""
    finally:
        assert stop(daemon) == 0
