"""The processes and databases of a fault run: backends, daemon incarnations, the CLI.

`Lab` (harness.py) composes them; this module holds what does not depend on a run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from tests.faults.observations import epoch

TRIGGERS = shutil.which("triggers", path=str(Path(sys.executable).parent)) or "triggers"
DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
CLI_TIMEOUT_S = 180.0
SHOW_LIMIT = 40
"""At most this many `runs show` calls per collection (each is a process start)."""


def pg_url() -> str:
    """The PostgreSQL server fault runs create their databases on."""
    return os.environ.get("TRIGGERS_TEST_PG_URL") or DEFAULT_PG_URL


_AUDIT: list[bool] = []


def audit_available() -> bool:
    """Whether the installed CLI has `triggers audit` (asked once per process)."""
    if not _AUDIT:
        probe = subprocess.run(
            [TRIGGERS, "audit", "--help"], capture_output=True, timeout=CLI_TIMEOUT_S, check=False
        )
        _AUDIT.append(probe.returncode == 0)
    return _AUDIT[0]


class Backend(Protocol):
    name: str
    env: dict[str, str]

    def close(self) -> None: ...


class SqliteBackend:
    """The embedded default: a state directory, the daemon creates `triggers.sqlite` in it."""

    name = "sqlite"

    def __init__(self, root: Path) -> None:
        self.env = {"TRIGGERS_STATE_DIRECTORY": str(root / "state")}

    def close(self) -> None:
        return


class PostgresBackend:
    """A database of its own on the server; the first daemon migrates it (it is empty)."""

    name = "postgres"

    def __init__(self, server_url: str) -> None:
        self._admin_url = server_url
        self.database = f"faults_{uuid.uuid4().hex[:12]}"
        self._run(f'CREATE DATABASE "{self.database}"')
        url = make_url(server_url).set(database=self.database)
        self.env = {"TRIGGERS_DATABASE_URL": url.render_as_string(hide_password=False)}

    def _run(self, statement: str) -> None:
        engine = sa.create_engine(self._admin_url, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                conn.execute(sa.text(statement))
        finally:
            engine.dispose()

    def close(self) -> None:
        # The server may still be coming back from a restart scenario.
        for _ in range(30):
            try:
                self._run(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')
            except sa.exc.OperationalError:
                time.sleep(1)
            else:
                return


@dataclass(slots=True)
class Incarnation:
    """One daemon process of a slot."""

    slot: int
    number: int
    host: str | None
    log: Path
    proc: subprocess.Popen[bytes]
    spawned_at: float
    signalled: bool = False

    def events(self) -> list[dict[str, Any]]:
        found = []
        for line in self.log.read_text(errors="replace").splitlines():
            try:
                found.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return found

    def event_at(self, name: str) -> float | None:
        for event in self.events():
            if event.get("event") == name:
                return epoch(event.get("timestamp"))
        return None

    def launch_latencies_ms(self) -> list[float]:
        """The `latency_ms` of its `run_launched` log lines (occurrence to launch recorded)."""
        return [
            float(e["latency_ms"])
            for e in self.events()
            if e.get("event") == "run_launched" and isinstance(e.get("latency_ms"), int | float)
        ]

    def wait_started(self, timeout: float) -> float | None:
        """When it logged `daemon_started`, or None if it did not within `timeout` (or died)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            at = self.event_at("daemon_started")
            if at is not None:
                return at
            if self.proc.poll() is not None:
                return None
            time.sleep(0.05)
        return None


def parent_pid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])
