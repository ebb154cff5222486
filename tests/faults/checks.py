"""The invariants of a fault run that do not depend on timing.

Each function reads `Observations` and returns a JSON-able finding with a count and
a few examples (the evidence: trigger, occurrence, run, step, what the ledger said).
The expected occurrences are computed from the schedule itself, never from what
the daemon recorded.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from tests.faults.observations import ExecLine, Json, Observations, epoch_ms
from tests.faults.plan import TriggerSpec

EXAMPLES = 10
SETTLED = {"completed": "completed", "failed": "failed", "cancelled": "cancelled"}
"""A settled run's status and the ledger outcome it must have (superseded: cancelled)."""


def _points(spec: TriggerSpec, after_ms: int, upto_ms: int) -> range:
    """The schedule's occurrences in (after, upto], in ms (`every` is anchored at 0)."""
    first = (after_ms // spec.every_ms + 1) * spec.every_ms
    return range(first, upto_ms + 1, spec.every_ms)


def _is_range(row: Json) -> bool:
    return row.get("last_occurrence") is not None or int(row.get("count") or 1) > 1


def scheduled_rows(obs: Observations) -> list[Json]:
    """The ledger rows of scheduled occurrences (manual fires have their own keys)."""
    return [r for r in obs.ledger if not r.get("manual_key")]


def accounting(obs: Observations) -> Json:
    """Every scheduled occurrence in exactly one ledger row or range, none outside."""
    after_ms = round(obs.applied_after * 1000)
    before_ms = round(obs.applied_before * 1000)
    end_ms = round(obs.end_at * 1000)
    findings: dict[str, list[Json]] = defaultdict(list)
    expected = 0
    for spec in obs.plan.triggers:
        covered: Counter[int] = Counter()
        for row in scheduled_rows(obs):
            if row["trigger_id"] != spec.id:
                continue
            first = epoch_ms(row["occurrence"])
            if first % spec.every_ms:
                findings["off_schedule"].append(_brief(row))
                continue
            if _is_range(row):
                last = epoch_ms(row["last_occurrence"] or row["occurrence"])
                span = range(first, last + 1, spec.every_ms)
                if len(span) != int(row.get("count") or 1):
                    findings["range_count_mismatch"].append({**_brief(row), "points": len(span)})
                covered.update(span)
            else:
                covered[first] += 1
        required = set(_points(spec, before_ms, end_ms))
        optional = set(_points(spec, after_ms, before_ms))
        expected += len(required) + sum(1 for p in optional if covered[p])
        for point in sorted(required):
            if covered[point] == 0:
                findings["missing"].append({"trigger_id": spec.id, "occurrence_ms": point})
        for point, times in sorted(covered.items()):
            if times > 1:
                findings["doubled"].append(
                    {"trigger_id": spec.id, "occurrence_ms": point, "rows": times}
                )
            if point not in required and point not in optional:
                findings["unexpected"].append({"trigger_id": spec.id, "occurrence_ms": point})
    known = {spec.id for spec in obs.plan.triggers}
    for row in scheduled_rows(obs):
        if row["trigger_id"] not in known:
            findings["unexpected"].append(_brief(row))
    return _counted(findings, expected=expected)


def duplicates(obs: Observations) -> Json:
    """Non-idempotent steps executed twice for one run; occurrences that got two runs."""
    specs = obs.plan.by_id()
    starts: dict[tuple[str, str], list[ExecLine]] = defaultdict(list)
    runs_of: dict[tuple[str, str], set[str]] = defaultdict(set)
    for line in obs.executions:
        if line.phase == "start":
            starts[(line.run_id, line.step_id)].append(line)
            runs_of[(line.trigger_id, line.occurrence)].add(line.run_id)
    findings: dict[str, list[Json]] = defaultdict(list)
    reexecuted: list[Json] = []
    for (run_id, step_id), lines in starts.items():
        if len(lines) < 2:
            continue
        spec = specs.get(lines[0].trigger_id)
        step = next((s for s in spec.steps if s.id == step_id), None) if spec else None
        evidence = {
            "trigger_id": lines[0].trigger_id,
            "occurrence": lines[0].occurrence,
            "run_id": run_id,
            "step_id": step_id,
            "attempts": [line.attempt for line in lines],
            "started_at": [round(line.at, 3) for line in lines],
        }
        (reexecuted if step is not None and step.idempotent else findings["executed_twice"]).append(
            evidence
        )
    for (trigger_id, occurrence), run_ids in runs_of.items():
        if len(run_ids) > 1:
            findings["two_runs_executed"].append(
                {"trigger_id": trigger_id, "occurrence": occurrence, "run_ids": sorted(run_ids)}
            )
    by_occurrence: dict[tuple[str, str], list[str]] = defaultdict(list)
    for run in obs.runs:
        attributes = run.get("attributes") or {}
        key = run.get("idempotency_key") or ""
        if ":manual:" in key or "trigger_id" not in attributes:
            continue
        by_occurrence[(attributes["trigger_id"], str(attributes.get("occurrence")))].append(
            run["run_id"]
        )
    for (trigger_id, occurrence), started in by_occurrence.items():
        if len(started) > 1:
            findings["two_runs_started"].append(
                {"trigger_id": trigger_id, "occurrence": occurrence, "run_ids": sorted(started)}
            )
    result = _counted(findings)
    result["idempotent_reexecuted"] = len(reexecuted)
    result["idempotent_reexecuted_examples"] = reexecuted[:EXAMPLES]
    return result


def parked(obs: Observations) -> Json:
    """Runs parked for an operator, and what the execution log says of their step.

    `never_started`: no `start` line for the parked step's attempt (the process never
    spawned, so its outcome was known: it did not run). `step_finished`: the step wrote
    its `end` line (the outcome existed; only the bookkeeping lost it). `in_flight`:
    started, never ended (the one case a kill can make truly unknowable).
    """
    lines = _lines_by_attempt(obs.executions)
    counts: Counter[str] = Counter()
    examples: list[Json] = []
    for run in obs.runs:
        if run.get("state") != "parked":
            continue
        show = obs.shown.get(run["run_id"])
        effects = [
            e
            for e in (show or {}).get("effects", [])
            if e.get("status") in {"ambiguous", "timed_out"}
        ]
        if show is None or not effects:
            counts["not_shown" if show is None else "no_ambiguous_step"] += 1
            examples.append(
                {"run_id": run["run_id"], "park_reason": (show or {}).get("park_reason")}
            )
            continue
        for effect in effects:
            phases = lines.get((run["run_id"], effect.get("step_id"), effect.get("attempt")), set())
            kind = (
                "never_started"
                if "start" not in phases
                else "step_finished"
                if "end" in phases
                else "in_flight"
            )
            counts[kind] += 1
            examples.append(
                {
                    "run_id": run["run_id"],
                    "trigger_id": (run.get("attributes") or {}).get("trigger_id"),
                    "occurrence": (run.get("attributes") or {}).get("occurrence"),
                    "step_id": effect.get("step_id"),
                    "attempt": effect.get("attempt"),
                    "effect_status": effect.get("status"),
                    "execution_log": kind,
                    "park_reason": show.get("park_reason"),
                }
            )
    total = sum(1 for r in obs.runs if r.get("state") == "parked")
    return {
        "count": total,
        "never_started": counts["never_started"],
        "step_finished": counts["step_finished"],
        "in_flight": counts["in_flight"],
        "unexplained": counts["not_shown"] + counts["no_ambiguous_step"],
        "examples": examples[:EXAMPLES],
    }


def ledger_against_runs(obs: Observations) -> Json:
    """After settling (no daemon running): no row `launching`, none stale, no run unrecorded."""
    runs = {r["run_id"]: r for r in obs.runs}
    by_key = {r.get("idempotency_key"): r for r in obs.runs if r.get("idempotency_key")}
    findings: dict[str, list[Json]] = defaultdict(list)
    recorded: set[str] = set()
    for row in scheduled_rows(obs):
        run = runs.get(row.get("run_id") or "") or by_key.get(row.get("idempotency_key"))
        if run is not None:
            recorded.add(run["run_id"])
        outcome = row["outcome"]
        evidence = {
            **_brief(row),
            "run_status": run and run.get("status"),
            "run_state": run and run.get("state"),
        }
        if outcome == "launching":
            findings["launching"].append(evidence)
        elif outcome == "launched":
            if run is None:
                findings["run_missing"].append(evidence)
            elif run.get("status") in SETTLED:
                findings["stale"].append({**evidence, "run_settled_at": run.get("settled_at")})
            elif run.get("state") != "parked":
                findings["run_active"].append(evidence)
        elif run is not None and outcome in {"completed", "failed", "cancelled", "superseded"}:
            want = "cancelled" if outcome == "superseded" else outcome
            if SETTLED.get(str(run.get("status"))) != want:
                findings["outcome_differs"].append(evidence)
    for run in obs.runs:
        key = run.get("idempotency_key") or ""
        if run["run_id"] not in recorded and ":manual:" not in key:
            findings["run_without_row"].append(
                {"run_id": run["run_id"], "idempotency_key": key, "status": run.get("status")}
            )
    known = set(runs)
    for line in obs.executions:
        if line.run_id not in known:
            findings["execution_of_unknown_run"].append(
                {"run_id": line.run_id, "step_id": line.step_id}
            )
    result = _counted(findings)
    active = [r for r in obs.runs if r.get("status") == "active" and r.get("state") != "parked"]
    result["active_runs"] = len(active)
    return result


def stale_rows(ledger: list[Json], runs: list[Json]) -> list[Json]:
    """Rows `launched` (or `launching`) whose run the runtime has already settled."""
    by_id = {r["run_id"]: r for r in runs}
    by_key = {r.get("idempotency_key"): r for r in runs if r.get("idempotency_key")}
    found = []
    for row in ledger:
        if row["outcome"] not in {"launched", "launching"}:
            continue
        run = by_id.get(row.get("run_id") or "") or by_key.get(row.get("idempotency_key"))
        if run is not None and run.get("status") in SETTLED:
            found.append(
                {
                    **_brief(row),
                    "run_status": run["status"],
                    "run_settled_at": run.get("settled_at"),
                }
            )
    return found


def buffered_left(obs: Observations) -> int:
    """Rows still `buffered` when everything settled (pending, not lost: reported only)."""
    return sum(1 for r in scheduled_rows(obs) if r["outcome"] == "buffered")


def _lines_by_attempt(lines: list[ExecLine]) -> dict[tuple[str, Any, Any], set[str]]:
    found: dict[tuple[str, Any, Any], set[str]] = defaultdict(set)
    for line in lines:
        found[(line.run_id, line.step_id, line.attempt)].add(line.phase)
    return found


def _brief(row: Json) -> Json:
    keys = ("trigger_id", "occurrence", "outcome", "reason", "run_id", "claimed_at", "host")
    return {k: row.get(k) for k in keys}


def _counted(findings: dict[str, list[Json]], **extra: Any) -> Json:
    result: Json = {"count": sum(len(v) for v in findings.values()), **extra}
    for name, items in sorted(findings.items()):
        result[name] = len(items)
        result[f"{name}_examples"] = items[:EXAMPLES]
    return result
