"""Helpers to drive the installed `triggers` CLI and daemon as subprocesses."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import sqlalchemy as sa

from tests.conftest import create_pg_database, drop_pg_database

T = TypeVar("T")

TRIGGERS = shutil.which("triggers", path=str(Path(sys.executable).parent)) or "triggers"


class Cli:
    """Runs `triggers` against one database with a clean environment."""

    def __init__(self, database_url: str, workdir: Path) -> None:
        self.database_url = database_url
        self.workdir = workdir
        self.env = {
            key: value for key, value in os.environ.items() if not key.startswith("TRIGGERS_")
        }
        self.env.update(
            {
                "TRIGGERS_DATABASE_URL": database_url,
                "TRIGGERS_ENV_FILE": "",
                "TRIGGERS_LOG_FORMAT": "json",
                "TRIGGERS_POLL_INTERVAL": "1s",
                "TRIGGERS_RUN_POLL_INTERVAL": "1s",
            }
        )

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [TRIGGERS, *args],
            env=self.env,
            cwd=self.workdir,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"triggers {' '.join(args)} exited {result.returncode}\n"
                f"stdout: {result.stdout}\nstderr: {result.stderr}"
            )
        return result

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "--json").stdout)

    def daemon(self, config: Path, log: Path) -> subprocess.Popen[str]:
        with log.open("a") as handle:  # the child keeps its own descriptor
            return subprocess.Popen(
                [TRIGGERS, "run", "--config", str(config)],
                env=self.env,
                cwd=self.workdir,
                stdout=subprocess.DEVNULL,
                stderr=handle,
                text=True,
            )


def stop(process: subprocess.Popen[str], *, timeout: float = 30) -> int:
    """SIGTERM the daemon and wait for it."""
    process.send_signal(signal.SIGTERM)
    return process.wait(timeout=timeout)


def wait_for(check: Callable[[], T | None], *, timeout: float, what: str) -> T:
    """Poll `check` until it returns something truthy, or fail after `timeout`.

    Between two checks it sleeps at least as long as the last check took: a check is
    often a CLI call (a process of its own, a few tenths of a second of CPU), and
    polling back to back would take a core from the daemons being waited on."""
    deadline = time.monotonic() + timeout
    while True:
        began = time.monotonic()
        value = check()
        if value:
            return value
        ended = time.monotonic()
        if ended > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(max(0.2, ended - began))


def log_events(log: Path) -> list[dict[str, Any]]:
    events = []
    for line in log.read_text().splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return events


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(f"sqlite:///{tmp_path / 'triggers.sqlite'}", tmp_path)


@pytest.fixture
def pg_database_url(pg_admin: sa.Engine) -> Iterator[str]:
    """A PostgreSQL database of this test's own, dropped after it."""
    url = create_pg_database(pg_admin)
    yield url
    drop_pg_database(pg_admin, url)


def on_host(cli: Cli, host: str) -> Cli:
    """The same database and directory, as the daemon of another host."""
    other = Cli(cli.database_url, cli.workdir)
    other.env["TRIGGERS_HOST"] = host
    return other


def three_daemons_with_a_kill(
    database_url: str,
    workdir: Path,
    config: Path,
    reached: Callable[[Cli, int], object],
    counts: tuple[int, int, int],
    what: str,
) -> list[Cli]:
    """Three daemons (hosts `host-0`..`host-2`) on one database: once `reached(cli, n)`
    holds for the first count, the daemon that claimed the newest ledger row is
    SIGKILLed (so its triggers' work must be taken over by another: the triggers are
    divided among the daemons, and a few may all fall to one), after the second it is
    started again, after the third all are stopped with SIGTERM, each asserted to exit
    0. Returns the three hosts' CLIs."""
    clis = [on_host(Cli(database_url, workdir), f"host-{n}") for n in range(3)]
    first, second, third = counts
    daemons: list[subprocess.Popen[str]] = []
    try:
        for n, cli in enumerate(clis):
            daemons.append(cli.daemon(config, workdir / f"daemon-{n}.log"))
        wait_for(lambda: reached(clis[0], first), timeout=90, what=f"{first} {what}")
        newest = clis[0].json("history", "--limit", "1")
        hosts = [f"host-{n}" for n in range(3)]
        victim = hosts.index(newest[0]["host"]) if newest and newest[0].get("host") in hosts else 0
        daemons[victim].kill()
        daemons[victim].wait(timeout=30)
        other = clis[(victim + 1) % 3]
        wait_for(lambda: reached(other, second), timeout=120, what=f"{second} {what}")
        daemons[victim] = clis[victim].daemon(config, workdir / f"daemon-{victim}-again.log")
        wait_for(lambda: reached(clis[2], third), timeout=120, what=f"{third} {what}")
    finally:
        codes = []
        for daemon in daemons:
            # One that exited by itself is a failure too: its code is kept, not skipped.
            try:
                codes.append(daemon.returncode if daemon.poll() is not None else stop(daemon))
            except subprocess.TimeoutExpired:
                daemon.kill()
                codes.append(None)
    # The killed daemon was started again: the one in the list is new.
    assert len(codes) == 3 and all(code == 0 for code in codes), codes
    return clis
