"""The daemon as systemd and an operator see it: reload, notify, metrics, exit codes."""

from __future__ import annotations

import json
import signal
import socket
import textwrap
import urllib.request
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


def test_daemon_speaks_sd_notify_and_serves_metrics(cli: Cli, tmp_path: Path) -> None:
    notify_path = tmp_path / "notify.sock"
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(notify_path))
    notify.settimeout(30)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = tmp_path / "t.yaml"
    config.write_text(FIRST.replace("every: 1h", "every: 1s"))
    cli.env["NOTIFY_SOCKET"] = str(notify_path)
    cli.env["TRIGGERS_METRICS_ADDRESS"] = f"127.0.0.1:{port}"
    daemon = cli.daemon(config, tmp_path / "d.log")
    try:
        assert notify.recv(4096).decode().startswith("READY=1")
        wait_for(lambda: cli.json("history", "first"), timeout=30, what="a fire")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            text = reply.read().decode()
        assert 'triggers_fires_total{outcome="launched"}' in text
        assert "triggers_fire_latency_seconds_bucket" in text
    finally:
        assert stop(daemon) == 0
    messages = []
    notify.settimeout(1)
    try:
        while True:
            messages.append(notify.recv(4096).decode())
    except TimeoutError:
        pass
    notify.close()
    assert any(m.startswith("STOPPING=1") for m in messages)


def test_unreachable_database_exits_75_and_bad_settings_exit_78(cli: Cli) -> None:
    cli.env["TRIGGERS_DATABASE_URL"] = "postgresql+psycopg://postgres@127.0.0.1:1/none"
    unreachable = cli.run("list", "--json", check=False)
    assert unreachable.returncode == 75, unreachable.stderr
    assert unreachable.stdout == ""
    cli.env["TRIGGERS_DATABASE_URL"] = cli.database_url
    cli.env["TRIGGERS_POLL_INTERVAL"] = "soon"
    bad = cli.run("list", check=False)
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
        wait_for(lambda: cli.json("status")["daemons"], timeout=30, what="a heartbeat")
        assert cli.json("fire", "first", "--key", "now")["action"] == "fire"
        [row] = wait_for(
            lambda: [r for r in cli.json("history", "first") if r["outcome"] == "completed"],
            timeout=20,
            what="the manual fire to run",
        )
        assert row["manual_key"] == "now"
    finally:
        assert stop(daemon) == 0
