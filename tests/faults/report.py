"""One fault run's JSON report: figures, evidence, and each invariant held or broken."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict
from typing import Any

from tests.faults import checks, timing
from tests.faults.observations import Json, Observations

RESUME_BOUND_S = 1.0
"""Interrupted runs resume within this after a restart on the same host."""
STOP_BOUND_S = 3.0
"""A SIGTERM ends the daemon within this although steps are running (it never waits on them)."""


def build_report(obs: Observations, *, scenario: str, backend: str, params: Json) -> Json:
    """Every figure and finding of one run, and `invariants` naming what held."""
    losses = checks.accounting(obs)
    dups = checks.duplicates(obs)
    parked = checks.parked(obs)
    ledger = checks.ledger_against_runs(obs)
    resumed = timing.resume(obs)
    stalled = timing.stalled_skips(obs)
    stopped = timing.stops(obs)
    outcomes = Counter(str(r["outcome"]) for r in checks.scheduled_rows(obs))
    kinds = Counter(f.kind for f in obs.faults)
    report: Json = {
        "scenario": scenario,
        "backend": backend,
        "params": params,
        "fires": {
            "occurrences": losses["expected"],
            "launched": sum(1 for r in checks.scheduled_rows(obs) if r.get("run_id")),
            "step_executions": sum(1 for e in obs.executions if e.phase == "start"),
            "runs": len(obs.runs),
            "ledger_outcomes": dict(sorted(outcomes.items())),
            "buffered_left": checks.buffered_left(obs),
        },
        "faults": {
            "kills": kinds["kill9"],
            "sigterms": kinds["sigterm"],
            "pg_restarts": kinds["pg_restart"],
            "clock_jumps": kinds["clock_jump"],
            "restarts": sum(
                1 for f in obs.faults if f.restart_at is not None and f.kind != "pg_restart"
            ),
            "kill_moments": dict(Counter(f.detail for f in obs.faults if f.kind == "kill9")),
        },
        "duplicates": dups,
        "losses": losses,
        "parked": parked,
        "ledger": ledger,
        "stalled_skips": stalled,
        "resume": resumed,
        "stops": stopped,
        "jumps": timing.after_jumps(obs),
        "snapshots": obs.snapshots,
        "settle": obs.settle,
        "audit": obs.audit,
        "status_exit_code": obs.status_exit_code,
        "unexpected_exits": obs.unexpected_exits,
        "faults_log": [f.as_json() for f in obs.faults],
        "plan": [asdict(t) for t in obs.plan.triggers],
        "notes": obs.notes,
    }
    report["invariants"] = invariants(report, sigterm=scenario == "sigterm")
    report["violations"] = [
        f"{name}: {item['detail']}"
        for name, item in report["invariants"].items()
        if item["ok"] is False
    ]
    return report


def _check(ok: bool | None, detail: str) -> Json:
    return {"ok": ok, "detail": detail}


def _none_of(section: Json, *kinds: str) -> Json:
    """Holds when the section counts none of `kinds`; the detail lists those it counts."""
    found = {kind: section.get(kind, 0) for kind in kinds if section.get(kind, 0)}
    return _check(not found, ", ".join(f"{k} {n}" for k, n in found.items()) or "none")


def _at_most(summary: Json, bound: float, what: str) -> Json:
    worst = summary["max"]
    return _check(
        None if worst is None else worst <= bound, f"{what}: {summary} s (bound {bound} s)"
    )


def _resumed_within(resumed: Json) -> Json:
    """Every interrupted run resumed, the slowest within the bound (None: none interrupted)."""
    slowest = resumed["all_resumed_s"]
    behind = resumed["runs_never_resumed"] + resumed["runs_parked_instead"]
    if behind:
        return _check(False, f"{behind} interrupted runs never resumed; the others: {slowest} s")
    return _at_most(
        slowest, RESUME_BOUND_S, "slowest interrupted run per restart, from `daemon_started`"
    )


def invariants(report: Json, *, sigterm: bool = False) -> dict[str, Json]:
    """The promises a fault run can break; `ok` None means the check could not run."""
    dups, parked, ledger = report["duplicates"], report["parked"], report["ledger"]
    resumed, settle, audit = report["resume"], report["settle"], report["audit"]
    exits = [s for s in report["stops"]["final_stops"] if s["exit_code"] != 0]
    exits += report["stops"]["nonzero_exits"] + report["unexpected_exits"]
    silent = report["stalled_skips"].get("behind_parked_silent", 0)
    status = report["status_exit_code"]
    found: dict[str, Json] = {
        "no_duplicate_execution": _none_of(
            dups, "executed_twice", "two_runs_executed", "two_runs_started"
        ),
        "no_unaccounted_occurrence": _none_of(
            report["losses"],
            "missing",
            "doubled",
            "unexpected",
            "off_schedule",
            "range_count_mismatch",
        ),
        "no_row_left_launching": _none_of(ledger, "launching"),
        "no_run_left_active": _check(
            ledger["active_runs"] == 0 and bool(settle.get("settled")),
            f"{ledger['active_runs']} runs active (not parked) after {settle.get('seconds')} s",
        ),
        "ledger_matches_runs": _none_of(
            ledger,
            "stale",
            "outcome_differs",
            "run_without_row",
            "run_missing",
            "execution_of_unknown_run",
        ),
        "no_park_before_step_started": _none_of(parked, "never_started"),
        "no_park_of_finished_step": _none_of(parked, "step_finished"),
        "no_silent_block": _check(
            silent == 0 if report["stalled_skips"]["behind_parked"] else None,
            f"{silent} occurrences skipped as `overlap` behind a parked run"
            if report["stalled_skips"]["behind_parked"]
            else "no occurrence came due behind a parked run: nothing to judge",
        ),
        "interrupted_runs_resume": _none_of(resumed, "runs_never_resumed", "runs_parked_instead"),
        "resume_within_bound": _resumed_within(resumed),
        "ledger_fresh_while_stopped": _check(
            None if not report["snapshots"] else not any(s["stale"] for s in report["snapshots"]),
            f"rows left `launched`/`launching` for settled runs while no daemon ran: "
            f"{[s['stale'] for s in report['snapshots']]}",
        ),
        "daemons_exit_cleanly": _check(
            not exits, f"{len(exits)} daemons exited non-zero or unbidden"
        ),
        "status_flags_no_daemon": _check(
            status not in {None, 0},
            f"`triggers status` exit {status} with no daemon alive, {parked['count']} runs parked",
        ),
        "audit_clean": _check(
            audit.get("exit_code") == 0 if audit.get("available") else None,
            audit.get("note") or f"`triggers audit` exit {audit.get('exit_code')}",
        ),
    }
    if sigterm:
        found["sigterm_prompt"] = _at_most(
            report["stops"]["stop_s"], STOP_BOUND_S, "SIGTERM to exit"
        )
        found["each_step_once"] = _none_of(
            dups, "executed_twice", "two_runs_executed", "idempotent_reexecuted"
        )
    return found


_EVIDENCE: dict[str, tuple[tuple[str, ...], ...]] = {
    "no_duplicate_execution": (("duplicates",),),
    "each_step_once": (("duplicates",),),
    "no_unaccounted_occurrence": (("losses",),),
    "no_row_left_launching": (("ledger", "launching_examples"),),
    "no_run_left_active": (("ledger", "run_active_examples"), ("settle",)),
    "ledger_matches_runs": (("ledger",),),
    "no_park_before_step_started": (("parked", "examples"),),
    "no_park_of_finished_step": (("parked", "examples"),),
    "no_silent_block": (("stalled_skips", "examples"),),
    "interrupted_runs_resume": (("resume", "per_restart"),),
    "resume_within_bound": (("resume", "per_restart"),),
    "daemons_exit_cleanly": (("unexpected_exits",), ("stops",)),
    "status_flags_no_daemon": (("status_exit_code",), ("parked", "count")),
    "audit_clean": (("audit",),),
    "sigterm_prompt": (("stops",),),
    "ledger_fresh_while_stopped": (("snapshots",),),
}


def evidence(report: Json, name: str) -> Json:
    """The parts of the report that show why invariant `name` broke."""
    found: Json = {"seed": report["params"].get("seed")}
    for path in _EVIDENCE.get(name, ()):
        value: Any = report
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        found[".".join(path)] = value
    return found


def headline(report: Json) -> Json:
    """The figures docs/reliability.md quotes, one flat object."""
    r: Any = report
    return {
        "scenario": r["scenario"],
        "backend": r["backend"],
        "occurrences": r["fires"]["occurrences"],
        "launched": r["fires"]["launched"],
        "kills": r["faults"]["kills"],
        "sigterms": r["faults"]["sigterms"],
        "restarts": r["faults"]["restarts"],
        "duplicates": r["duplicates"]["count"],
        "losses": r["losses"]["count"],
        "parked": r["parked"]["count"],
        "parked_never_started": r["parked"]["never_started"],
        "stuck_launching": r["ledger"].get("launching", 0),
        "stuck_active": r["ledger"]["active_runs"],
        "stale_rows": r["ledger"].get("stale", 0),
        "stalled_skips": r["stalled_skips"]["count"],
        "resume_p50_s": r["resume"]["all_resumed_s"]["p50"],
        "resume_max_s": r["resume"]["all_resumed_s"]["max"],
        "first_progress_p50_s": r["resume"]["first_progress_s"]["p50"],
        "resume_from_spawn_max_s": r["resume"]["all_resumed_from_spawn_s"]["max"],
        "startup_p50_s": r["resume"]["startup_s"]["p50"],
        "first_launch_from_spawn_p50_s": r["resume"]["first_launch_from_spawn_s"]["p50"],
        "first_launch_from_spawn_max_s": r["resume"]["first_launch_from_spawn_s"]["max"],
        "stop_p50_s": r["stops"]["stop_s"]["p50"],
        "stop_max_s": r["stops"]["stop_s"]["max"],
        "violations": len(r["violations"]),
    }
