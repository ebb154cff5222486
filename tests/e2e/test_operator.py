"""What an operator sees and leaves behind: the audit log, describe, apply --dry-run, step
output, and a status that tells the truth."""

from __future__ import annotations

import getpass
import json
import os
import signal
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Cli, stop, wait_for
from tests.svg_picture import ids, parse

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

FIRST = textwrap.dedent(
    """\
    version: 1
    flows:
      noop: {steps: []}
    triggers:
      - {id: report, flow: noop, cron: "0 6 * * *"}
      - {id: cleanup, flow: noop, every: 1h}
    """
)
SECOND = textwrap.dedent(
    """\
    version: 1
    flows:
      noop: {steps: []}
    triggers:
      - {id: report, flow: noop, cron: "30 6 * * *", catchup: {window: 6h}}
      - {id: heartbeat, flow: noop, every: 1h}
    """
)


def test_every_operator_action_is_recorded_and_describe_shows_it_whole(
    cli: Cli, tmp_path: Path
) -> None:
    first, second = tmp_path / "first.yaml", tmp_path / "second.yaml"
    first.write_text(FIRST)
    second.write_text(SECOND)
    cli.run("apply", str(first), "--note", "initial rollout")

    preview = cli.run("apply", "--dry-run", str(second)).stdout
    assert preview.splitlines() == [
        "created: 1 (heartbeat)",
        "updated: 1 (report)",
        "    report.catchup.window: 1d -> 6h",
        "    report.schedule: cron 0 6 * * * -> cron 30 6 * * *",
        "unchanged: 0",
        "retired: 1 (cleanup)",
        f"dry run: nothing written (apply {second} to do it)",
    ]
    planned = cli.json("apply", "--dry-run", str(second))
    assert planned["dry_run"] and planned["retired"] == ["cleanup"]
    assert [row["id"] for row in cli.json("list") if not row["retired"]] == ["cleanup", "report"]
    assert len(cli.json("audit-log")) == 1  # a dry run records nothing

    applied = cli.json("apply", str(second))
    assert applied["diff"] == planned["diff"] and not applied["dry_run"]
    cli.run("pause", "report", "--note", "db maintenance")
    paused = cli.json("describe", "report")
    assert paused["state"] == "paused" and paused["pause_note"] == "db maintenance"
    assert paused["paused_by"]["user"] == getpass.getuser()
    cli.run("resume", "report")
    cli.run("fire", "heartbeat", "--key", "by-hand", "--note", "smoke test")
    described = cli.run("describe", "heartbeat").stdout
    assert "0 launched by its schedule (what max_runs counts; manual fires" in described
    cli.run("backfill", "heartbeat", "--from", "3h ago", "--to", "now", "--note", "gap")

    log = cli.json("audit-log")
    assert [e["action"] for e in log] == ["backfill", "fire", "resume", "pause", "apply", "apply"]
    assert {e["user"] for e in log} == {getpass.getuser()} and all(e["host"] for e in log)
    assert [e["note"] for e in log] == [
        "gap",
        "smoke test",
        None,
        "db maintenance",
        None,
        "initial rollout",
    ]
    assert log[2]["changes"]["pause_note"] == "db maintenance"  # kept after the resume
    assert log[4]["changes"]["retired"] == ["cleanup"]
    assert [e["action"] for e in cli.json("audit-log", "--trigger", "report")] == [
        "resume",
        "pause",
    ]
    assert [e["note"] for e in cli.json("audit-log", "--action", "fire")] == ["smoke test"]

    whole = cli.json("describe", "report", "--next", "2")
    assert whole["state"] == "enabled" and whole["revision"] == 2
    assert whole["declaration"]["schedule"] == "cron 30 6 * * *"
    newest, oldest = whole["revisions"]
    assert {(c["key"], c["old"], c["new"]) for c in newest["changes"]} == {
        ("schedule", "cron 0 6 * * *", "cron 30 6 * * *"),
        ("catchup.window", "1d", "6h"),
    }
    assert oldest["first"] and newest["applied_by"]["user"] == getpass.getuser()
    assert [n["occurrence"][11:19] for n in whole["next_fires"]] == ["06:30:00", "06:30:00"]
    assert [e["action"] for e in whole["actions"]] == ["resume", "pause", "apply", "apply"]
    text = cli.run("describe", "report").stdout
    assert "schedule: cron 0 6 * * * -> cron 30 6 * * *" in text
    retired = cli.json("describe", "cleanup")
    assert retired["state"] == "retired" and retired["next_fires"] == []


STEPS = textwrap.dedent(
    """\
    version: 1
    flows:
      failing:
        steps:
          - id: greet
            run: [sh, -c, "echo hello from stdout; echo disk full on /var >&2; exit 3"]
      gated:
        steps:
          - {id: gate, wait_signal: {name: go}}
    triggers:
      - {id: flaky, flow: failing, every: 1d}
      - {id: gated, flow: gated, every: 1d}
    """
)


def _run_of(cli: Cli, trigger_id: str, outcome: str) -> str | None:
    rows = [r for r in cli.json("history", trigger_id) if r["outcome"] == outcome]
    return rows[0]["run_id"] if rows else None


def _status(cli: Cli) -> tuple[int, dict[str, Any]]:
    result = cli.run("status", "--json", check=False)
    return result.returncode, json.loads(result.stdout)


def test_step_output_runs_actions_and_a_truthful_status(cli: Cli, tmp_path: Path) -> None:
    config = tmp_path / "steps.yaml"
    config.write_text(STEPS)
    assert cli.run("apply", str(config)).returncode == 0
    code, report = _status(cli)
    assert code == 3 and report["problems"] == ["no daemon is alive"]
    daemon = cli.daemon(config, tmp_path / "d.log")
    try:
        wait_for(lambda: _status(cli)[0] == 0, timeout=30, what="a live daemon")
        cli.run("fire", "flaky")
        cli.run("fire", "gated")
        failed = wait_for(lambda: _run_of(cli, "flaky", "failed"), timeout=30, what="the failure")
        gated = wait_for(lambda: _run_of(cli, "gated", "launched"), timeout=30, what="the gate")

        [row] = cli.json("history", "flaky")
        assert row["error"].endswith("exit code 3: disk full on /var")
        logs = cli.run("runs", "logs", failed).stdout
        assert "== greet, attempt 1: failed" in logs
        assert "-- stdout\nhello from stdout\n" in logs and "-- stderr\ndisk full on /var\n" in logs
        [attempt] = cli.json("runs", "logs", failed, "greet")
        assert (attempt["exit_code"], attempt["stderr"]) == (3, "disk full on /var\n")
        shown = cli.run("runs", "show", failed).stdout
        assert "stderr of greet (attempt 1, last lines):\n  disk full on /var\n" in shown
        [effect] = cli.json("runs", "show", failed)["effects"]
        assert effect["last_output"]["stdout"] == "hello from stdout\n"
        missing = cli.run("runs", "logs", failed, "nope", check=False)
        assert missing.returncode == 2 and "its steps: greet" in missing.stderr

        wait_for(
            lambda: "wait_started" in [e["type"] for e in cli.json("runs", "events", gated)],
            timeout=30,
            what="the gate to wait",
        )
        cli.run("runs", "signal", gated, "go", "--payload", '{"secret": "x"}', "--note", "go")
        log = cli.json("audit-log", "--run", gated)
        assert [(e["action"], e["trigger_id"], e["note"]) for e in log] == [
            ("signal", "gated", "go")
        ]
        assert "secret" not in json.dumps(log)  # a payload is the operator's data
        occurrences = _status(cli)[1]["occurrences"]
        assert occurrences["failed"] == 1 and sum(occurrences.values()) == 2
    finally:
        os.kill(daemon.pid, signal.SIGKILL)  # a crash: its heartbeat stays, unstopped
        daemon.wait(timeout=30)
    code, report = wait_for(
        lambda: (found := _status(cli))[1]["daemons_alive"] == 0 and found,
        timeout=30,
        what="the dead daemon to go stale",
    )
    assert code == 3 and [d["state"] for d in report["daemons"]] == ["stale"]
    assert "daemon" in cli.run("status", check=False).stdout
    restarted = cli.daemon(config, tmp_path / "d2.log")
    try:
        wait_for(lambda: _status(cli)[0] == 0, timeout=30, what="the restarted daemon")
        states = sorted(d["state"] for d in _status(cli)[1]["daemons"])
        assert states == ["alive", "stale"]
    finally:
        assert stop(restarted) == 0
    _replaced_daemons_fold_into_one_line(cli, config, tmp_path)


def _replaced_daemons_fold_into_one_line(cli: Cli, config: Path, tmp_path: Path) -> None:
    third = cli.daemon(config, tmp_path / "d3.log")
    try:
        wait_for(lambda: _status(cli)[0] == 0, timeout=30, what="the third daemon")
        daemons = _status(cli)[1]["daemons"]
        [alive] = [d for d in daemons if d["state"] == "alive"]
        successor = f"{alive['host']}:{alive['pid']}"
        assert sorted(d["replaced_by"] or "-" for d in daemons) == ["-", successor, successor]
        text = cli.run("status").stdout
        assert f"earlier daemons: 2 (1 stale, 1 stopped) replaced by {successor} (--all)" in text
        assert text.count("daemon ") == 1  # only the live one has a line of its own
        every = cli.run("status", "--all").stdout
        assert every.count(f", replaced by {successor}") == 2
    finally:
        assert stop(third) == 0


BRANCHES = textwrap.dedent(
    """\
    version: 1
    flows:
      branches:
        steps:
          - {id: dump-a, run: [sh, -c, "sleep 30"], needs: []}
          - {id: dump-b, run: [sh, -c, "sleep 0.5; exit 4"], needs: []}
          - {id: upload, run: [sh, -c, "true"], needs: [dump-a, dump-b]}
    triggers:
      - {id: branched, flow: branches, every: 1d}
    """
)


def test_runs_show_lists_a_graph_flows_branches_with_their_states(cli: Cli, tmp_path: Path) -> None:
    config = tmp_path / "branches.yaml"
    config.write_text(BRANCHES)
    assert cli.run("apply", str(config)).returncode == 0
    daemon = cli.daemon(config, tmp_path / "d.log")
    try:
        wait_for(lambda: _status(cli)[0] == 0, timeout=30, what="a live daemon")
        cli.run("fire", "branched")
        run = wait_for(
            lambda: _run_of(cli, "branched", "failed"), timeout=30, what="the failed branch"
        )
        steps = cli.json("runs", "show", run)["steps"]
        assert [(s["step"], s["state"]) for s in steps] == [
            ("dump-a", "cancelled"),  # stopped when its sibling failed
            ("dump-b", "failed"),
        ]  # upload never started
        assert steps[0]["started_at"] <= steps[1]["started_at"] < steps[1]["ended_at"]
        assert "steps (branches that ran at once" in cli.run("runs", "show", run).stdout
        picture = tmp_path / "fires.svg"
        cli.run("timeline", "--since", "10m ago", "--output", str(picture))
        drawn = {g for g in ids(parse(picture.read_bytes())) if g.startswith("branches-0-")}
        assert {g.rsplit("-", 2)[1] for g in drawn} == {"cancelled", "failed"}
    finally:
        assert stop(daemon) == 0
