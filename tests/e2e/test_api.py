"""The real daemon serving its HTTP API (`TRIGGERS_API_ADDRESS` on a free loopback port):
a fire over HTTP launches once however often it is retried, a signal over HTTP resumes a
waiting run, the CLI sees the same documents and the audit trail names the caller; the
daemon refuses to start on an API it must not serve (exit 78)."""

from __future__ import annotations

import getpass
import json
import signal
import socket
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Cli, log_events, stop, wait_for
from tests.e2e.test_startup import loaded

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

READ_TOKEN = "r" * 40
WRITE_TOKEN = "w" * 40
ROTATED = "n" * 40
CONFIG = textwrap.dedent(
    """\
    version: 1
    flows:
      approval:
        steps:
          - {id: build, run: [sh, -c, "echo built"]}
          - {id: approve, wait_signal: {name: approved, timeout: 10m}}
          - {id: deploy, run: [sh, -c, "echo deployed"]}
    triggers:
      - {id: release, flow: approval, cron: "0 3 * * *", description: Nightly release}
    """
)


def free_address() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


def _tokens(tmp_path: Path) -> dict[str, str]:
    read, write = tmp_path / "read-token", tmp_path / "write-token"
    read.write_text(f"{READ_TOKEN}\n")
    write.write_text(f"release-bot {WRITE_TOKEN}\n")
    read.chmod(0o600)
    write.chmod(0o600)
    return {"TRIGGERS_API_TOKEN_FILE": str(read), "TRIGGERS_API_WRITE_TOKEN_FILE": str(write)}


def _runs(client: httpx.Client, trigger_id: str, outcome: str) -> list[str]:
    rows = client.get(f"/triggers/{trigger_id}/history", params={"outcome": outcome}).json()
    return [row["run_id"] for row in rows]


def _waiting(client: httpx.Client, run_id: str) -> bool:
    events = client.get(f"/runs/{run_id}/events").json()
    return "wait_started" in [event["type"] for event in events]


def test_fire_and_signal_over_http_on_the_real_daemon(cli: Cli, tmp_path: Path) -> None:
    config = tmp_path / "triggers.yaml"
    config.write_text(CONFIG)
    address = free_address()
    cli.env.update({"TRIGGERS_API_ADDRESS": address, **_tokens(tmp_path)})
    log = tmp_path / "daemon.log"
    daemon = cli.daemon(config, log)
    base = f"http://{address}/api/v1"
    reader = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {READ_TOKEN}"})
    writer = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {WRITE_TOKEN}"})
    try:
        wait_for(lambda: _answers(reader), timeout=60, what="the API to answer")
        assert httpx.get(f"{base}/triggers").status_code == 401
        assert reader.post("/triggers/release/fire", json={"key": "r1"}).status_code == 403

        fired = [writer.post("/triggers/release/fire", json={"key": "r1"}) for _ in range(3)]
        assert [r.status_code for r in fired] == [200, 200, 200]
        assert [r.json()["action"] for r in fired] == ["fire", "duplicate", "duplicate"]
        [run_id] = wait_for(
            lambda: _runs(reader, "release", "launched"), timeout=30, what="the launch"
        )
        wait_for(lambda: _waiting(reader, run_id), timeout=30, what="the wait for approval")
        _the_wait_is_shown_everywhere(reader, cli, run_id)
        misspelt = writer.post(f"/runs/{run_id}/signal", json={"name": "aproved"})
        assert misspelt.status_code == 409, misspelt.text
        assert "waiting for signal 'approved'" in misspelt.json()["error"]["message"]

        signalled = writer.post(
            f"/runs/{run_id}/signal",
            json={"name": "approved", "payload": {"by": "alice"}, "note": "looks good"},
        )
        assert signalled.status_code == 200, signalled.text
        wait_for(
            lambda: _runs(reader, "release", "completed"), timeout=30, what="the run to finish"
        )

        [row] = reader.get("/history").json()
        assert (row["outcome"], row["run_id"], row["manual_key"]) == ("completed", run_id, "r1")
        assert [run["run_id"] for run in reader.get("/runs").json()] == [run_id]
        [deploy] = reader.get(f"/runs/{run_id}/logs", params={"step": "deploy"}).json()
        assert deploy["stdout"] == "deployed\n"
        _same_documents_as_the_cli(reader, cli, run_id)
        _a_settled_run_takes_no_signal(writer, cli, run_id)

        actions = cli.json("audit-log")
        by_api = [
            (e["action"], e["user"], e["host"]) for e in actions if e["user"] != getpass.getuser()
        ]
        assert by_api == [
            ("signal", "api:release-bot", "127.0.0.1"),
            ("fire", "api:release-bot", "127.0.0.1"),
            ("fire", "api:release-bot", "127.0.0.1"),
            ("fire", "api:release-bot", "127.0.0.1"),
        ]
        assert actions[0]["note"] == "looks good" and "alice" not in json.dumps(actions)
        missing = reader.get("/triggers/ghost")
        assert missing.status_code == 404
        assert missing.json() == json.loads(
            cli.run("describe", "ghost", "--json", check=False).stderr
        )

        _rotate_the_read_token(daemon, cli, reader, base)
    finally:
        reader.close()
        writer.close()
        assert stop(daemon) == 0
    events = [e["event"] for e in log_events(log)]
    assert events.count("api_started") == 1 and "api_stopped" in events
    assert events.count("api_tokens_reloaded") == 1
    text = log.read_text()
    assert all(token not in text for token in (READ_TOKEN, WRITE_TOKEN, ROTATED))


def _the_wait_is_shown_everywhere(reader: httpx.Client, cli: Cli, run_id: str) -> None:
    """`runs show`, `runs list`, `status` and the API say which signal the run waits for,
    until when, and the command that sends it."""
    command = f"triggers runs signal {run_id} approved"
    [wait] = reader.get(f"/runs/{run_id}").json()["waiting"]
    assert (wait["kind"], wait["signal"], wait["command"]) == ("signal", "approved", command)
    assert wait["until"] and wait["text"].startswith("waiting for signal 'approved' until ")
    shown = cli.run("runs", "show", run_id).stdout
    assert "waiting for signal 'approved' until " in shown and command in shown
    assert "approve" in shown.split("steps (", 1)[1]  # the wait is a row of the step table
    assert "waiting for 'approved' until" in cli.run("runs", "list").stdout
    [listed] = cli.json("runs", "list")
    assert listed["waiting"] == [wait]
    status = cli.run("status", check=False).stdout
    assert f"run {run_id} (trigger release) waiting for signal 'approved'" in status
    assert [run["run_id"] for run in cli.json("status")["waiting_runs"]] == [run_id]
    assert cli.json("runs", "show", run_id)["awaited_signals"] == ["approved"]
    assert f"{run_id} (waiting for 'approved')" in cli.run("list").stdout
    [release] = reader.get("/triggers").json()
    assert release["active_run_id"] == run_id and release["active_run_waiting"] == [wait]
    assert cli.json("list")[0]["active_run_waiting"] == [wait]
    # The waits are folded from the run's log read through sqlite3, as the rest.
    for args in (["list"], ["status"]):
        assert not any(name.startswith("sqlalchemy") for name in loaded(cli, *args)), args


def _a_settled_run_takes_no_signal(writer: httpx.Client, cli: Cli, run_id: str) -> None:
    late = cli.run("runs", "signal", run_id, "approved", check=False)
    assert late.returncode == 2, late.stdout
    assert f"run {run_id} is completed" in late.stderr
    refused = writer.post(f"/runs/{run_id}/signal", json={"name": "approved"})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "TRG-120"
    steps = {step["step"]: step["state"] for step in cli.json("runs", "show", run_id)["steps"]}
    assert steps == {"build": "succeeded", "approve": "signalled", "deploy": "succeeded"}


def _same_documents_as_the_cli(reader: httpx.Client, cli: Cli, run_id: str) -> None:
    for path, command in [
        ("/triggers", ["list"]),
        ("/history", ["history"]),
        ("/triggers/release/history", ["history", "release"]),
        ("/triggers/release/next?count=3&after=2026-01-01T00:00:00Z", _next_cli()),
        (f"/runs/{run_id}", ["runs", "show", run_id]),
        (f"/runs/{run_id}/events", ["runs", "events", run_id]),
        (f"/runs/{run_id}/logs", ["runs", "logs", run_id]),
        ("/runs", ["runs", "list"]),
        ("/audit-log", ["audit-log"]),
    ]:
        assert reader.get(path).json() == cli.json(*command), path
    described = reader.get("/triggers/release").json()
    assert _without_times(described) == _without_times(cli.json("describe", "release"))


def _rotate_the_read_token(
    daemon: subprocess.Popen[str], cli: Cli, reader: httpx.Client, base: str
) -> None:
    # A token rotated: the new line in the file, SIGHUP, the old one gone.
    Path(cli.env["TRIGGERS_API_TOKEN_FILE"]).write_text(f"{ROTATED}\n")
    daemon.send_signal(signal.SIGHUP)
    rotated = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {ROTATED}"})
    wait_for(lambda: _answers(rotated), timeout=30, what="the rotated token")
    rotated.close()
    assert reader.get("/triggers").status_code == 401


def _answers(client: httpx.Client) -> bool:
    try:
        return client.get("/triggers").status_code == 200
    except httpx.TransportError:
        return False


def _next_cli() -> list[str]:
    return ["next", "release", "-n", "3", "--after", "2026-01-01T00:00:00Z"]


def _without_times(document: dict[str, Any]) -> dict[str, Any]:
    # `describe` computes its next fires from the moment it is asked.
    return {key: value for key, value in document.items() if key != "next_fires"}


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"TRIGGERS_API_ADDRESS": "0.0.0.0:{port}"}, "listens beyond loopback"),
        (
            {"TRIGGERS_API_ADDRESS": "{address}", "TRIGGERS_API_TOKEN_FILE": "/nonexistent"},
            "cannot read",
        ),
        ({"TRIGGERS_API_ADDRESS": "localhost:99999"}, "TRIGGERS_API_ADDRESS"),
        ({"TRIGGERS_API_ADDRESS": "{taken}"}, "cannot serve the API"),
    ],
    ids=["beyond-loopback-without-token", "unreadable-token-file", "bad-address", "address-in-use"],
)
def test_the_daemon_refuses_an_api_it_must_not_serve(
    cli: Cli, tmp_path: Path, settings: dict[str, str], message: str
) -> None:
    config = tmp_path / "triggers.yaml"
    config.write_text(CONFIG)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = free_address()
        values = {
            "address": address,
            "port": address.rpartition(":")[2],
            "taken": f"127.0.0.1:{taken.getsockname()[1]}",
        }
        cli.env.update({key: value.format(**values) for key, value in settings.items()})
        result = cli.run("run", "--config", str(config), check=False)
    assert result.returncode == 78, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
