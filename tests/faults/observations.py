"""What a fault run observed from the outside, in plain data the checks read."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Any

from tests.faults.plan import Plan

Json = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ExecLine:
    """One line a step wrote to the execution log."""

    trigger_id: str
    occurrence: str
    run_id: str
    step_id: str
    attempt: int
    phase: str
    """`start` or `end`."""
    at: float
    """Unix seconds, from the step's own `date` (the real clock, even under libfaketime)."""
    pid: int


def read_executions(text: str) -> tuple[list[ExecLine], int]:
    """The execution log's lines, and how many were malformed (a write cut short)."""
    lines, malformed = [], 0
    for raw in text.splitlines():
        parts = raw.split()
        if len(parts) != 8 or parts[5] not in {"start", "end"}:
            malformed += 1
            continue
        try:
            lines.append(
                ExecLine(
                    parts[0],
                    parts[1],
                    parts[2],
                    parts[3],
                    int(parts[4]),
                    parts[5],
                    float(parts[6]),
                    int(parts[7]),
                )
            )
        except ValueError:
            malformed += 1
    return lines, malformed


@dataclass(slots=True, kw_only=True)
class Fault:
    """One injected fault and, when the daemon was restarted, when."""

    kind: str
    """`kill9`, `sigterm`, `pg_restart` or `clock_jump`."""
    at: float
    slot: int = 0
    host: str | None = None
    restart_at: float | None = None
    """When the next daemon process was spawned (or the database was back)."""
    ready_at: float | None = None
    """When that daemon logged `daemon_started` (its own start-up is not takeover time)."""
    incarnation: int | None = None
    """Index of the restarted daemon in the lab's incarnations."""
    stop_s: float | None = None
    exit_code: int | None = None
    detail: str = ""

    def as_json(self) -> Json:
        return asdict(self)


@dataclass(slots=True, kw_only=True)
class Observations:
    """Everything read back after a fault run; instants are Unix seconds.

    `applied_after`/`applied_before` bracket the first apply (the spawn of the first
    daemon and its `declarations_applied` log line); `end_at` is the triggers' `end`.
    All three are on the daemon's clock, as are the ledger's and the runs' instants.
    """

    plan: Plan
    applied_after: float
    applied_before: float
    end_at: float
    ledger: list[Json]
    runs: list[Json]
    shown: dict[str, Json]
    executions: list[ExecLine]
    faults: list[Fault]
    audit: Json
    status_exit_code: int | None
    settle: Json
    final_stops: list[Json] = field(default_factory=list)
    unexpected_exits: list[Json] = field(default_factory=list)
    startups: list[Json] = field(default_factory=list)
    jumps: list[Json] = field(default_factory=list)
    snapshots: list[Json] = field(default_factory=list)
    """Ledger checks taken while no daemon ran (between a stop and the restart)."""
    notes: list[str] = field(default_factory=list)


def epoch(text: str | None) -> float | None:
    """An RFC 3339 instant (`...Z`) as Unix seconds."""
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def epoch_ms(text: str) -> int:
    """An RFC 3339 instant as integer Unix milliseconds (occurrences are whole ms)."""
    stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return round(stamp.timestamp() * 1000)


def on_daemon_clock(lines: list[ExecLine], jumps: list[Json]) -> list[ExecLine]:
    """The steps' real timestamps moved onto a daemon clock that jumped by `jumps`."""
    if not jumps:
        return lines
    ordered = sorted(jumps, key=lambda j: j["at"])

    def offset(at: float) -> float:
        found = float(ordered[0]["offset_before"])
        for jump in ordered:
            if jump["at"] <= at:
                found = float(jump["offset_after"])
        return found

    return [replace(line, at=line.at + offset(line.at)) for line in lines]
