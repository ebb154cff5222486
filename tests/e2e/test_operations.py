"""The daemon as an operator sees it: reload, exit codes, waking on fire.

The service manager protocol is in test_systemd.py, the metrics in test_metrics.py.
"""

from __future__ import annotations

import json
import signal
import textwrap
from pathlib import Path

import pytest

from tests.e2e.conftest import Cli, log_events, stop, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

FIRST = textwrap.dedent(
    """\
    version: 1
    flows:
      noop: {steps: []}
    triggers:
      - {id: first, flow: noop, every: 1h}
    """
)
SECOND = FIRST + "  - {id: second, flow: noop, every: 1h}\n"


def _ids(cli: Cli) -> list[str]:
    result = cli.run("list", "--json", check=False)
    if result.returncode != 0:
        return []
    return [row["id"] for row in json.loads(result.stdout) if not row["retired"]]


def _alive(cli: Cli) -> bool:
    result = cli.run("status", "--json", check=False)  # exit 3 until a daemon is alive
    return result.returncode == 0 and json.loads(result.stdout)["daemons_alive"] > 0


def test_sighup_applies_a_valid_file_and_refuses_an_invalid_one(cli: Cli, tmp_path: Path) -> None:
    config = tmp_path / "t.yaml"
    config.write_text(FIRST)
    log = tmp_path / "d.log"
    daemon = cli.daemon(config, log)
    try:
        wait_for(lambda: _ids(cli) == ["first"], timeout=30, what="the first declarations")
        config.write_text(SECOND)
        daemon.send_signal(signal.SIGHUP)
        wait_for(lambda: _ids(cli) == ["first", "second"], timeout=30, what="the reload")
        config.write_text(SECOND.replace("every: 1h}", "every: nonsense}"))
        daemon.send_signal(signal.SIGHUP)
        refused = wait_for(
            lambda: [e for e in log_events(log) if e["event"] == "declarations_refused"],
            timeout=30,
            what="the refusal",
        )
        problems = refused[0]["problems"]
        assert {p["key"] for p in problems} == {"triggers[first].every", "triggers[second].every"}
        assert daemon.poll() is None, "a bad reload must not stop the daemon"
        assert _ids(cli) == ["first", "second"]  # the last good declarations stay
    finally:
        assert stop(daemon) == 0


def test_unreachable_database_exits_75_and_bad_settings_exit_78(cli: Cli) -> None:
    cli.env["TRIGGERS_DATABASE_URL"] = "postgresql+psycopg://postgres@127.0.0.1:1/none"
    unreachable = cli.run("list", "--json", check=False)
    assert unreachable.returncode == 75, unreachable.stderr
    assert unreachable.stdout == ""
    cli.env["TRIGGERS_DATABASE_URL"] = cli.database_url
    cli.env["TRIGGERS_POLL_INTERVAL"] = "soon"
    bad = cli.run("status", check=False)  # a command that uses the setting
    assert bad.returncode == 78
    assert "TRIGGERS_POLL_INTERVAL" in bad.stderr


def test_fire_wakes_the_daemon_on_this_host_instead_of_waiting_for_its_poll(
    cli: Cli, tmp_path: Path
) -> None:
    config = tmp_path / "t.yaml"
    config.write_text(FIRST)
    cli.env["TRIGGERS_POLL_INTERVAL"] = "10m"  # a poll would come far too late
    daemon = cli.daemon(config, tmp_path / "d.log")
    try:
        wait_for(lambda: _ids(cli) == ["first"], timeout=30, what="the declarations")
        wait_for(lambda: _alive(cli), timeout=30, what="a heartbeat")
        assert cli.json("fire", "first", "--key", "now")["action"] == "fire"
        [row] = wait_for(
            lambda: [r for r in cli.json("history", "first") if r["outcome"] == "completed"],
            timeout=20,
            what="the manual fire to run",
        )
        assert row["manual_key"] == "now"
    finally:
        assert stop(daemon) == 0
