"""Real `triggers run` processes on a real database, faults from the outside.

A `Lab` owns one temporary world: a database (a SQLite state directory, or a
PostgreSQL database of its own), a declarations file generated from a `Plan`, the
execution log its steps append to, and the daemon processes (`slots`, each with a
host name, restarted as new incarnations). Scenarios kill, stop and restart daemons
through it and record each fault; `collect()` then reads everything back through the
CLI (`history`, `runs list`, `runs show`, `status`, `audit` when it exists) for the
checks. Nothing here reads the database directly: what is judged is what a user sees.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.faults.checks import stale_rows
from tests.faults.observations import (
    ExecLine,
    Fault,
    Observations,
    on_daemon_clock,
    read_executions,
)
from tests.faults.plan import Plan, declarations
from tests.faults.processes import (
    CLI_TIMEOUT_S,
    SHOW_LIMIT,
    TRIGGERS,
    Backend,
    Incarnation,
    PostgresBackend,
    SqliteBackend,
    audit_available,
    parent_pid,
    pg_url,
)


@dataclass(slots=True)
class Lab:
    """One fault run's world. Use as a context manager: `cleanup()` runs on exit."""

    plan: Plan
    backend_name: str = "sqlite"
    settings: dict[str, str] = field(default_factory=dict)
    """Extra `TRIGGERS_*` settings for the daemons (the defaults are what users get)."""
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment for daemons and CLI alike (e.g. libfaketime)."""
    keep: bool = False
    root: Path = field(init=False)
    backend: Backend = field(init=False)
    exec_log: Path = field(init=False)
    config: Path = field(init=False)
    end_at: float = 0.0
    incarnations: list[Incarnation] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    final_stops: list[dict[str, Any]] = field(default_factory=list)
    snapshots: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="triggers-faults-"))
        self.exec_log = self.root / "executions.log"
        self.exec_log.touch()
        self.config = self.root / "triggers.yaml"
        if self.backend_name == "postgres":
            self.backend = PostgresBackend(pg_url())
        else:
            self.backend = SqliteBackend(self.root)

    def __enter__(self) -> Lab:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.cleanup()

    # -- declarations and processes -------------------------------------------------

    def write_config(self, *, end_at: float) -> None:
        """The declarations, every trigger ending at `end_at` (on the daemon's clock)."""
        self.end_at = end_at
        text = declarations(
            self.plan, log=self.exec_log, end_at=datetime.fromtimestamp(end_at, UTC)
        )
        self.config.write_text(text)

    def process_env(self, host: str | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRIGGERS_")}
        env.update(self.backend.env)
        env["TRIGGERS_LOG_FORMAT"] = "json"
        env.update(self.settings)
        env.update(self.env)
        if host is not None:
            env["TRIGGERS_HOST"] = host
        return env

    def start(self, slot: int = 0, *, host: str | None = None) -> Incarnation:
        """A new daemon process for `slot` (its log is its own file)."""
        number = sum(1 for i in self.incarnations if i.slot == slot)
        log = self.root / f"daemon-{slot}-{number:03d}.log"
        with log.open("ab") as handle:  # the child keeps its own descriptor
            proc = subprocess.Popen(
                [TRIGGERS, "run", "--config", str(self.config)],
                env=self.process_env(host),
                cwd=self.root,
                stdout=subprocess.DEVNULL,
                stderr=handle,
            )
        incarnation = Incarnation(slot, number, host, log, proc, time.time())
        self.incarnations.append(incarnation)
        return incarnation

    def current(self, slot: int = 0) -> Incarnation:
        return [i for i in self.incarnations if i.slot == slot][-1]

    def kill9(self, slot: int = 0, *, restart: bool = True, detail: str = "") -> Fault:
        """SIGKILL the slot's daemon (only its own pid: the steps it spawned live on)."""
        daemon = self.current(slot)
        daemon.signalled = True
        at = time.time()
        daemon.proc.send_signal(signal.SIGKILL)
        daemon.proc.wait()
        fault = Fault(kind="kill9", slot=slot, host=daemon.host, at=at, detail=detail)
        fault.exit_code = daemon.proc.returncode
        if restart:
            fault.restart_at = time.time()
            self.start(slot, host=daemon.host)
            fault.incarnation = len(self.incarnations) - 1
        self.faults.append(fault)
        return fault

    def crash_host(self, slot: int = 0, *, restart: bool = True) -> Fault:
        """SIGKILL the daemon and every step still running (with any supervisor of theirs).

        What a reboot or an OOM kill of the whole service does: the one fault after
        which a step's outcome is really unknown.
        """
        running = self._running_steps()
        fault = self.kill9(slot, restart=False, detail="host_crash")
        for pid in running:
            parent = parent_pid(pid)
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
            # A step's parent is init once the daemon died, unless a supervisor holds it.
            if parent not in {None, 0, 1, os.getpid()}:
                with contextlib.suppress(OSError):
                    os.kill(parent, signal.SIGKILL)
        if restart:
            fault.restart_at = time.time()
            self.start(slot, host=fault.host)
            fault.incarnation = len(self.incarnations) - 1
        return fault

    def _running_steps(self) -> list[int]:
        """Shell pids of this run's steps that are still alive (checked in /proc)."""
        found = []
        for line in self._executions():
            if line.phase != "start":
                continue
            try:
                cmdline = Path(f"/proc/{line.pid}/cmdline").read_bytes()
            except OSError:
                continue
            if str(self.exec_log).encode() in cmdline:
                found.append(line.pid)
        return found

    def sigterm(self, slot: int = 0, *, restart: bool = True, detail: str = "") -> Fault:
        """SIGTERM the slot's daemon, wait for its exit (timed), restart it at once."""
        daemon = self.current(slot)
        daemon.signalled = True
        at = time.time()
        daemon.proc.send_signal(signal.SIGTERM)
        try:
            daemon.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.notes.append(f"slot {slot}: SIGTERM not obeyed within 120 s, SIGKILL sent")
            daemon.proc.kill()
            daemon.proc.wait()
        fault = Fault(kind="sigterm", slot=slot, host=daemon.host, at=at, detail=detail)
        fault.stop_s = time.time() - at
        fault.exit_code = daemon.proc.returncode
        if restart:
            fault.restart_at = time.time()
            self.start(slot, host=daemon.host)
            fault.incarnation = len(self.incarnations) - 1
        self.faults.append(fault)
        return fault

    def unexpected_exits(self) -> list[Incarnation]:
        """Daemons that exited although nobody signalled them."""
        return [i for i in self.incarnations if not i.signalled and i.proc.poll() is not None]

    def wait_new_start_line(self, timeout: float) -> bool:
        """Block until a step writes a new `start` line (the moment "inside a step")."""
        before = self.exec_log.read_text().count(" start ")
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.exec_log.read_text().count(" start ") > before:
                return True
            time.sleep(0.01)
        return False

    # -- settling and reading back ---------------------------------------------------

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [TRIGGERS, *args],
            env=self.process_env(),
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT_S,
            check=False,
        )

    def cli_json(self, *args: str) -> Any:
        result = self.cli(*args, "--json")
        if result.returncode != 0:
            command = " ".join(args)
            raise RuntimeError(
                f"triggers {command} --json exited {result.returncode}: {result.stderr[-2000:]}"
            )
        return json.loads(result.stdout)

    def settle(self, *, timeout: float) -> dict[str, Any]:
        """After the triggers' end: wait (bounded) until no run is active except parked ones."""
        started = time.time()
        still: list[dict[str, Any]] = []
        while True:
            runs = self.cli_json("runs", "list", "--status", "active", "--limit", "100000")
            still = [r for r in runs if r.get("state") != "parked"]
            if not still or time.time() - started > timeout:
                break
            time.sleep(1.0)
        return {
            "settled": not still,
            "seconds": round(time.time() - started, 2),
            "timeout_s": timeout,
            "still_active": len(still),
        }

    def snapshot(self, *, after: str) -> dict[str, Any]:
        """With no daemon running: rows still `launched`/`launching` for settled runs."""
        with ThreadPoolExecutor(max_workers=2) as pool:
            history = pool.submit(self.cli_json, "history", "--limit", "100000")
            runs = pool.submit(self.cli_json, "runs", "list", "--limit", "100000")
            stale = stale_rows(history.result(), runs.result())
        taken = {"at": time.time(), "after": after, "stale": len(stale), "examples": stale[:10]}
        self.snapshots.append(taken)
        return taken

    def stop_all(self) -> None:
        """SIGTERM every live daemon at once; their exit codes and times are recorded."""
        live = [i for i in self.incarnations if i.proc.poll() is None]
        at = time.time()
        for daemon in live:
            daemon.signalled = True
            daemon.proc.send_signal(signal.SIGTERM)
        for daemon in live:
            try:
                code = daemon.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                daemon.proc.kill()
                code = daemon.proc.wait()
            self.final_stops.append(
                {"slot": daemon.slot, "exit_code": code, "stop_s": round(time.time() - at, 3)}
            )

    def collect(
        self, *, settle: dict[str, Any], jumps: list[dict[str, Any]] | None = None
    ) -> Observations:
        """Everything the checks need, read through the CLI with no daemon running.

        With clock `jumps` (the daemon's clock = the real one + an offset that changed
        at each jump's real instant), the steps' real timestamps are moved onto the
        daemon's clock so every instant compared is on one axis.
        """
        first = self.incarnations[0]
        applied = first.event_at("declarations_applied") or first.event_at("daemon_started")
        with ThreadPoolExecutor(max_workers=3) as pool:
            history = pool.submit(self.cli_json, "history", "--limit", "100000")
            runs = pool.submit(self.cli_json, "runs", "list", "--limit", "100000")
            status = pool.submit(self.cli, "status", "--json")
            audit = pool.submit(self._audit)
            ledger, all_runs = history.result(), runs.result()
            wanted = [r["run_id"] for r in all_runs if r.get("state") == "parked"]
            if len(wanted) > SHOW_LIMIT:
                self.notes.append(f"{len(wanted)} parked runs, `runs show` read for {SHOW_LIMIT}")
            shows = list(
                pool.map(lambda run_id: self.cli_json("runs", "show", run_id), wanted[:SHOW_LIMIT])
            )
            status_result, audit_result = status.result(), audit.result()
        exits = [
            {
                "slot": i.slot,
                "incarnation": i.number,
                "exit_code": i.proc.returncode,
                "log_tail": i.log.read_text(errors="replace")[-1500:],
            }
            for i in self.unexpected_exits()
        ]
        return Observations(
            plan=self.plan,
            applied_after=first.spawned_at,
            applied_before=applied if applied is not None else first.spawned_at,
            end_at=self.end_at,
            ledger=ledger,
            runs=all_runs,
            shown={s["run_id"]: s for s in shows},
            executions=on_daemon_clock(self._executions(), jumps or []),
            faults=self._faults_with_ready(),
            audit=audit_result,
            status_exit_code=status_result.returncode,
            settle=settle,
            final_stops=list(self.final_stops),
            unexpected_exits=exits,
            startups=self._startups(),
            jumps=jumps or [],
            snapshots=list(self.snapshots),
            notes=list(self.notes),
        )

    def _faults_with_ready(self) -> list[Fault]:
        for fault in self.faults:
            if fault.incarnation is not None:
                fault.ready_at = self.incarnations[fault.incarnation].event_at("daemon_started")
            elif fault.ready_at is None:
                fault.ready_at = fault.restart_at
        return list(self.faults)

    def _startups(self) -> list[dict[str, Any]]:
        found = []
        for daemon in self.incarnations[1:]:
            started = daemon.event_at("daemon_started")
            found.append(
                {
                    "slot": daemon.slot,
                    "incarnation": daemon.number,
                    "seconds": None if started is None else round(started - daemon.spawned_at, 3),
                }
            )
        return found

    def _executions(self) -> list[ExecLine]:
        lines, malformed = read_executions(self.exec_log.read_text(errors="replace"))
        if malformed:
            self.notes.append(f"{malformed} malformed execution log lines ignored")
        return lines

    def _audit(self) -> dict[str, Any]:
        if not audit_available():
            return {
                "available": False,
                "note": "`triggers audit` does not exist yet: check skipped",
            }
        result = self.cli("audit", "--json")
        try:
            output: Any = json.loads(result.stdout) if result.stdout.strip() else None
        except json.JSONDecodeError:
            output = result.stdout[-4000:]
        return {
            "available": True,
            "exit_code": result.returncode,
            "output": output,
            "stderr": result.stderr[-2000:],
        }

    def cleanup(self) -> None:
        """Kill what is still running (our daemons, and steps they left), drop the database."""
        for daemon in self.incarnations:
            if daemon.proc.poll() is None:
                daemon.proc.kill()
                daemon.proc.wait()
        self._kill_leftover_steps()
        self.backend.close()
        if not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)

    def _kill_leftover_steps(self) -> None:
        # A step runs in its own session (its shell leads the group): kill that group
        # only when /proc confirms it is still one of this run's steps.
        for pid in self._running_steps():
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
