"""Helpers to drive the installed `triggers` CLI and daemon as subprocesses."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

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
    """Poll `check` until it returns something truthy, or fail after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.2)


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
