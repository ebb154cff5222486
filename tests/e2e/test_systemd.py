"""The daemon under a service manager: sd_notify on a real socket, the unit's reload.

systemd itself is not running here; the tests stand in for it the way it talks to a
`Type=notify` service: a datagram socket in `NOTIFY_SOCKET`, `WATCHDOG_USEC`, and the
unit's `ExecReload=` commands run one after another, stopping at the first failure.
"""

from __future__ import annotations

import shlex
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import TRIGGERS, Cli, log_events, stop, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "systemd" / "triggers.service"
SHIPPED_BIN = "/opt/triggers/bin/triggers"

DECLARATIONS = textwrap.dedent(
    """\
    version: 1
    flows:
      noop: {steps: []}
    triggers:
    """
)


def _declare(*trigger_ids: str, every: str = "1h") -> str:
    return DECLARATIONS + "".join(
        f"  - {{id: {trigger_id}, flow: noop, every: {every}}}\n" for trigger_id in trigger_ids
    )


class NotifySocket:
    """The service manager's end of sd_notify: every datagram the daemon sends."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.bind(self.path)
        self.seen: list[str] = []

    def expect(self, matches: Callable[[str], bool], *, what: str, timeout: float = 30) -> str:
        """The next message that `matches` (the ones before it are kept in `seen`)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {what} within {timeout} s; got {self.seen[-10:]}")
            self._sock.settimeout(left)
            try:
                message = self._sock.recv(4096).decode()
            except TimeoutError:
                continue
            self.seen.append(message)
            if matches(message):
                return message

    def during(self, seconds: float) -> list[str]:
        """Every message that arrives in the next `seconds`."""
        got: list[str] = []
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self._sock.settimeout(left)
            try:
                got.append(self._sock.recv(4096).decode())
            except TimeoutError:
                break
        self.seen.extend(got)
        return got

    def close(self) -> None:
        self._sock.close()


def _fields(message: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in message.splitlines() if "=" in line)


def _starts(prefix: str) -> Callable[[str], bool]:
    return lambda message: message.startswith(prefix)


@pytest.fixture
def notify(tmp_path: Path, cli: Cli) -> Iterator[NotifySocket]:
    sock = NotifySocket(tmp_path / "notify.sock")
    cli.env["NOTIFY_SOCKET"] = sock.path
    yield sock
    sock.close()


def exec_reload(cli: Cli, config: Path, main_pid: int) -> subprocess.CompletedProcess[str]:
    """Run the unit's `ExecReload=` lines as systemd does: in order, until one fails."""
    lines = [
        line.removeprefix("ExecReload=")
        for line in UNIT.read_text().splitlines()
        if line.startswith("ExecReload=")
    ]
    assert lines, "the unit has no ExecReload="
    result = None
    for line in lines:
        argv = [
            TRIGGERS
            if word == SHIPPED_BIN
            else word.replace("${TRIGGERS_CONFIG}", str(config)).replace("$MAINPID", str(main_pid))
            for word in shlex.split(line)
        ]
        env = {**cli.env, "TRIGGERS_CONFIG": str(config)}
        result = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=60, check=False
        )
        if result.returncode != 0:
            break
    assert result is not None
    return result


def test_ready_then_reloading_and_ready_around_each_reload_with_live_status(
    cli: Cli, tmp_path: Path, notify: NotifySocket
) -> None:
    config = tmp_path / "t.yaml"
    config.write_text(_declare("first"))
    log = tmp_path / "d.log"
    daemon = cli.daemon(config, log)
    try:
        ready = _fields(notify.expect(_starts("READY=1"), what="READY=1"))
        assert ready["STATUS"].startswith("1 trigger; next first at ")

        config.write_text(_declare("first", "second"))
        before_us = time.monotonic_ns() // 1000
        assert exec_reload(cli, config, daemon.pid).returncode == 0
        reloading = _fields(notify.expect(_starts("RELOADING=1"), what="RELOADING=1"))
        assert before_us <= int(reloading["MONOTONIC_USEC"]) <= time.monotonic_ns() // 1000
        ready = _fields(notify.expect(_starts("READY=1"), what="READY=1 after the reload"))
        assert ready["STATUS"].startswith("2 triggers; next ")
        assert "last error" not in ready["STATUS"]

        # A file that fails validation fails the reload before the daemon is signalled.
        config.write_text(_declare("first", "second", every="nonsense"))
        refused = exec_reload(cli, config, daemon.pid)
        assert refused.returncode == 2
        assert "triggers[first].every" in refused.stderr
        # Signalled anyway, the daemon refuses it too, and says so in its status.
        daemon.send_signal(signal.SIGHUP)
        notify.expect(_starts("RELOADING=1"), what="RELOADING=1 on a bad file")
        ready = _fields(notify.expect(_starts("READY=1"), what="READY=1 after the refusal"))
        assert ready["STATUS"].startswith("2 triggers; ")
        assert f"last error: {config} refused (2 problems)" in ready["STATUS"]

        # The next good reload clears the error.
        config.write_text(_declare("first", "second", "third"))
        assert exec_reload(cli, config, daemon.pid).returncode == 0
        ready = _fields(notify.expect(_starts("READY=1"), what="READY=1 after the fix"))
        assert ready["STATUS"].startswith("3 triggers; next ")
        assert "last error" not in ready["STATUS"]
    finally:
        assert stop(daemon) == 0
    notify.expect(_starts("STOPPING=1"), what="STOPPING=1")
    refusals = [e for e in log_events(log) if e["event"] == "declarations_refused"]
    assert len(refusals) == 1, "only the direct SIGHUP reached the daemon"


def test_the_watchdog_is_fed_only_while_the_scheduler_ticks(
    cli: Cli, tmp_path: Path, notify: NotifySocket
) -> None:
    gate = tmp_path / "stall"
    config = tmp_path / "t.yaml"
    config.write_text(_declare("first", every="1s"))
    # Three seconds: long enough that no ordinary tick of a loaded machine looks stuck.
    cli.env["WATCHDOG_USEC"] = "3000000"
    cli.env["STALL_FILE"] = str(gate)
    with (tmp_path / "d.log").open("a") as stderr:
        daemon = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).with_name("stalling_daemon.py")),
                "run",
                "--config",
                str(config),
            ],
            env=cli.env,
            cwd=cli.workdir,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            text=True,
        )
    try:
        notify.expect(_starts("READY=1"), what="READY=1")
        notify.expect(_starts("WATCHDOG=1"), what="a first ping")

        gate.touch()  # the next tick blocks
        stalled = notify.expect(lambda m: "stalled" in m, what="a stalled status")
        assert _fields(stalled)["STATUS"].startswith("1 trigger; ")
        # Past the stall's detection: not one ping more, over one and a half intervals.
        assert "WATCHDOG=1" not in notify.during(4.5)

        gate.unlink()
        notify.expect(_starts("WATCHDOG=1"), what="pings once ticks resume")
        recovered = notify.expect(_starts("STATUS="), what="the status without the stall")
        assert "stalled" not in recovered
    finally:
        gate.unlink(missing_ok=True)
        assert stop(daemon) == 0
    events = [e["event"] for e in log_events(tmp_path / "d.log")]
    assert events.index("scheduler_stalled") < events.index("scheduler_recovered")


def test_the_daemon_keeps_the_service_managers_variables_from_its_steps(
    cli: Cli, tmp_path: Path, notify: NotifySocket
) -> None:
    seen = tmp_path / "env"
    config = tmp_path / "t.yaml"
    config.write_text(
        textwrap.dedent(
            f"""\
            version: 1
            flows:
              dump:
                steps:
                  - id: env
                    run: [sh, -c, 'env > {seen}']
            triggers:
              - {{id: envdump, flow: dump, every: 1h}}
            """
        )
    )
    cli.env["WATCHDOG_USEC"] = "30000000"
    daemon = cli.daemon(config, tmp_path / "d.log")
    try:
        notify.expect(_starts("READY=1"), what="READY=1")
        assert cli.json("fire", "envdump", "--key", "env")["action"] == "fire"
        wait_for(lambda: seen.exists() and seen.read_text(), timeout=30, what="the step")
    finally:
        assert stop(daemon) == 0
    names = {line.split("=", 1)[0] for line in seen.read_text().splitlines()}
    assert "TRIGGERS_TRIGGER_ID" in names
    assert not names & {"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"}
