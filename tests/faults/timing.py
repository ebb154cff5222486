"""The time a fault costs: restart to resumed runs, fires skipped behind idle runs, stops.

A run is *interrupted* by a fault at `k` when the runtime had created it before `k`
and had not settled it by then. It *resumes* at its first progress after `k`: its
settlement, or a step starting (the execution log). The time counted is from the
moment it could have resumed: the restart, or the end of the step that was running
through the fault (a step that outlives the daemon is not the daemon's delay).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from tests.faults.checks import EXAMPLES, scheduled_rows
from tests.faults.observations import ExecLine, Fault, Json, Observations, epoch

IDLE_SLACK_S = 1.0
"""A run idle longer than this (its step ended, no next one, not settled) is stalled."""


def summary(values: list[float]) -> Json:
    """Count, p50 and max (nearest rank), rounded to ms; None when there is nothing."""
    if not values:
        return {"n": 0, "p50": None, "max": None}
    ordered = sorted(values)
    p50 = ordered[max(0, math.ceil(0.5 * len(ordered)) - 1)]
    return {"n": len(ordered), "p50": round(p50, 3), "max": round(ordered[-1], 3)}


def _by_run(lines: list[ExecLine]) -> dict[str, list[ExecLine]]:
    found: dict[str, list[ExecLine]] = defaultdict(list)
    for line in sorted(lines, key=lambda item: item.at):
        found[line.run_id].append(line)
    return found


def resume(obs: Observations) -> Json:
    """Per restart: the interrupted runs' resume times, and the first new launch.

    Times count from the restarted daemon's `daemon_started` (its start-up, a process
    start on this machine, is reported apart as `startup_s`); `*_from_spawn_s` count
    from the moment the new process was spawned, as a user timing a restart sees it.
    """
    lines = _by_run(obs.executions)
    host_of = {r["run_id"]: r.get("host") for r in scheduled_rows(obs) if r.get("run_id")}
    worst: list[float] = []
    worst_spawn: list[float] = []
    first: list[float] = []
    launch: list[float] = []
    never: set[str] = set()
    parked: set[str] = set()
    # After a host crash (its running steps killed too) a run whose step may have run
    # is ambiguous: parking it is the promise, not a failure to resume. That holds for
    # the faults before the crash too: a run whose step went on through an earlier
    # kill (adopted, so no new start and no settlement to see) and was then killed
    # with the host is parked by the crash, not by the earlier kill.
    excused: set[str] = set()
    for fault in obs.faults:
        if fault.restart_at is not None and fault.detail == "host_crash":
            ready = fault.ready_at or fault.restart_at
            excused |= _interrupted(obs, fault, ready, lines, host_of)[2]
    per_restart: list[Json] = []
    for fault in obs.faults:
        if fault.restart_at is None:
            continue
        ready = fault.ready_at or fault.restart_at
        delays, never_here, parked_here = _interrupted(
            obs, fault, ready, lines, host_of, until=_next_fault_at(obs, fault)
        )
        never |= never_here
        parked |= parked_here - excused
        if delays:
            first.append(min(delays))
            worst.append(max(delays))
            worst_spawn.append(max(delays) + ready - fault.restart_at)
        new_launch = _first_launch(obs, fault)
        if new_launch is not None:
            launch.append(new_launch)
        per_restart.append(
            {
                "kind": fault.kind,
                "at": round(fault.at, 3),
                "detail": fault.detail,
                "startup_s": round(ready - fault.restart_at, 3),
                "interrupted": len(delays) + len(never_here) + len(parked_here),
                "resumed_max_s": round(max(delays), 3) if delays else None,
                "never_resumed": sorted(never_here),
                "parked": sorted(parked_here),
                "first_launch_from_spawn_s": None if new_launch is None else round(new_launch, 3),
            }
        )
    return {
        "restarts_measured": len(per_restart),
        "all_resumed_s": summary(worst),
        "all_resumed_from_spawn_s": summary(worst_spawn),
        "first_progress_s": summary(first),
        "first_launch_from_spawn_s": summary(launch),
        "startup_s": summary([r["startup_s"] for r in per_restart]),
        "runs_never_resumed": len(never),
        "runs_parked_instead": len(parked),
        "per_restart": per_restart,
    }


def _interrupted(
    obs: Observations,
    fault: Fault,
    ready_at: float,
    lines: dict[str, list[ExecLine]],
    host_of: dict[str, Any],
    *,
    until: float | None = None,
) -> tuple[list[float], set[str], set[str]]:
    """Resume delays of the runs a fault interrupted; the ids never resumed, and parked.

    A run whose first progress comes after the next fault of the same daemon (`until`:
    its step ran on through this restart and the next kill) is that fault's to count.
    """
    delays: list[float] = []
    never: set[str] = set()
    parked: set[str] = set()
    for run in obs.runs:
        created, settled = epoch(run.get("created_at")), epoch(run.get("settled_at"))
        if created is None or created >= fault.at or (settled is not None and settled <= fault.at):
            continue
        if fault.host is not None and host_of.get(run["run_id"]) not in {None, fault.host}:
            continue
        own = lines.get(run["run_id"], [])
        ready = ready_at
        for line in own:
            if line.phase == "start" and line.at < fault.at:
                end = next(
                    (
                        e.at
                        for e in own
                        if e.phase == "end"
                        and e.step_id == line.step_id
                        and e.attempt == line.attempt
                    ),
                    None,
                )
                if end is not None and end > fault.at:
                    ready = max(ready, end)
        progress = [line.at for line in own if line.phase == "start" and line.at > fault.at]
        if settled is not None:
            progress.append(settled)
        if progress and until is not None and min(progress) > until:
            continue
        if progress:
            delays.append(max(0.0, min(progress) - ready))
        elif run.get("state") == "parked":
            parked.add(run["run_id"])
        else:
            never.add(run["run_id"])
    return delays, never, parked


def _next_fault_at(obs: Observations, fault: Fault) -> float | None:
    """When the same daemon slot met its next fault, if it did."""
    later = [f.at for f in obs.faults if f.slot == fault.slot and f.at > fault.at]
    return min(later) if later else None


def _first_launch(obs: Observations, fault: Fault) -> float | None:
    assert fault.restart_at is not None
    times = [
        at
        for row in scheduled_rows(obs)
        if (at := epoch(row.get("launched_at"))) is not None
        and at > fault.restart_at
        and (fault.host is None or row.get("host") == fault.host)
    ]
    return min(times) - fault.restart_at if times else None


def stalled_skips(obs: Observations) -> Json:
    """Occurrences skipped for overlap while every run in the way was idle.

    Such a skip is a fire lost to bookkeeping (a dead owner not yet taken over, a run
    parked, a ledger row not yet settled), not to the policy. `silent` ones say plain
    `overlap`; a run parked for an operator must make them `blocked`, naming the run.
    """
    lines = _by_run(obs.executions)
    runs = {r["run_id"]: r for r in obs.runs}
    rows_of: dict[str, list[Json]] = defaultdict(list)
    for row in scheduled_rows(obs):
        rows_of[row["trigger_id"]].append(row)
    counts: dict[str, int] = defaultdict(int)
    examples: list[Json] = []
    for trigger_rows in rows_of.values():
        holders = [r for r in trigger_rows if r.get("run_id") or r["outcome"] == "launching"]
        for row in trigger_rows:
            if row["outcome"] != "skipped" or row.get("reason") not in {"overlap", "blocked"}:
                continue
            decided = epoch(row.get("claimed_at")) or 0.0
            blocking = [h for h in holders if _holds(h, runs, decided)]
            if not blocking or not all(
                (idle := _idle_since(h, lines)) is not None and idle <= decided - IDLE_SLACK_S
                for h in blocking
            ):
                continue
            is_parked = any(_parked_by(obs, runs, h.get("run_id"), decided) for h in blocking)
            named = row.get("reason") == "blocked" and row.get("blocked_by") in {
                h.get("run_id") for h in blocking
            }
            kind = ("behind_parked" if is_parked else "behind_idle") + (
                "_named" if named else "_silent"
            )
            counts[kind] += 1
            if len(examples) < EXAMPLES:
                examples.append(
                    {
                        "trigger_id": row["trigger_id"],
                        "occurrence": row["occurrence"],
                        "reason": row.get("reason"),
                        "blocked_by": row.get("blocked_by"),
                        "holders": [
                            {
                                "run_id": h.get("run_id"),
                                "outcome": h["outcome"],
                                "idle_s": round(decided - (_idle_since(h, lines) or decided), 3),
                            }
                            for h in blocking
                        ],
                    }
                )
    silent = counts["behind_parked_silent"] + counts["behind_idle_silent"]
    behind_parked = counts["behind_parked_silent"] + counts["behind_parked_named"]
    return {
        "count": sum(counts.values()),
        "silent": silent,
        "behind_parked": behind_parked,
        **dict(counts),
        "examples": examples,
    }


def _parked_by(obs: Observations, runs: dict[str, Json], run_id: str | None, at: float) -> bool:
    """Whether the run was parked at `at` (parking is its last change: `updated_at`)."""
    run = runs.get(run_id or "")
    if run is None or run.get("state") != "parked":
        return False
    shown = obs.shown.get(run["run_id"])
    parked_at = epoch(shown.get("updated_at")) if shown else None
    return parked_at is None or parked_at <= at


def _holds(holder: Json, runs: dict[str, Json], at: float) -> bool:
    """Whether this earlier occurrence's run (or reservation) was active at `at`."""
    began = epoch(holder.get("launched_at")) or epoch(holder.get("claimed_at"))
    if began is None or began > at:
        return False
    run = runs.get(holder.get("run_id") or "")
    ended = epoch(run.get("settled_at")) if run else None
    if ended is None and holder["outcome"] not in {"launching", "launched"}:
        ended = epoch(holder.get("settled_at"))
    return ended is None or ended > at


def _idle_since(holder: Json, lines: dict[str, list[ExecLine]]) -> float | None:
    """Since when nothing ran for this holder; None while a step of it was running."""
    own = lines.get(holder.get("run_id") or "", [])
    if not own:
        return epoch(holder.get("launched_at")) or epoch(holder.get("claimed_at"))
    last = own[-1]
    return last.at if last.phase == "end" else None


def stops(obs: Observations) -> Json:
    """How long each SIGTERM took to end its daemon, and the exit codes."""
    terms = [f for f in obs.faults if f.kind == "sigterm"]
    return {
        "stop_s": summary([f.stop_s for f in terms if f.stop_s is not None]),
        "nonzero_exits": [f.as_json() for f in terms if f.exit_code != 0],
        "final_stops": obs.final_stops,
    }


def after_jumps(obs: Observations) -> list[Json]:
    """Per clock jump: how long after it (real seconds) the daemon launched again.

    After a forward jump, any launch counts (the catch-up); after a backward one, only
    an occurrence past the latest instant the clock had shown (those before it were
    decided already and must not be decided again).
    """
    found = []
    for jump in obs.jumps:
        now_after = jump["at"] + jump["offset_after"]
        horizon = (
            jump["at"] + jump["offset_before"]
            if jump["offset_after"] < jump["offset_before"]
            else None
        )
        launches = sorted(
            (at, occurrence)
            for row in scheduled_rows(obs)
            if (at := epoch(row.get("launched_at"))) is not None
            and (occurrence := epoch(row["occurrence"])) is not None
            and at >= now_after
            and (horizon is None or occurrence > horizon)
        )
        lag = round(launches[0][0] - max(now_after, launches[0][1]), 3) if launches else None
        found.append({**jump, "next_launch_lag_s": lag})
    return found
