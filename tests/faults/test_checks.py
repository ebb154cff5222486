"""The fault checks on hand-made observations: each finding is found, and only it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tests.faults import checks, timing
from tests.faults.observations import ExecLine, Fault, Json, Observations, on_daemon_clock
from tests.faults.plan import Plan, TriggerSpec, steps
from tests.faults.report import build_report

BASE = 1_800_000_000
PLAN = Plan(
    triggers=(
        TriggerSpec(id="t", every_s=1, overlap="skip", steps=steps(("s", 0.5, False))),
        TriggerSpec(id="i", every_s=1, overlap="allow", steps=steps(("s", 0.5, True))),
    )
)


def iso(seconds: float) -> str:
    stamp = datetime.fromtimestamp(BASE + seconds, UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


def row(at: int, outcome: str = "completed", run_id: str | None = None, **extra: Any) -> Json:
    base: Json = {
        "trigger_id": "t",
        "occurrence": iso(at),
        "outcome": outcome,
        "reason": None,
        "run_id": run_id,
        "claimed_at": iso(at),
        "launched_at": iso(at) if run_id else None,
        "settled_at": iso(at + 0.6) if outcome not in {"launching", "launched"} else None,
        "last_occurrence": None,
        "count": 1,
        "host": "h",
        "manual_key": None,
        "idempotency_key": f"t:{iso(at)}",
    }
    return {**base, **extra}


def run(run_id: str, at: float, status: str = "completed", **extra: Any) -> Json:
    base: Json = {
        "run_id": run_id,
        "status": status,
        "state": status,
        "idempotency_key": f"t:{iso(at)}",
        "attributes": {"trigger_id": "t", "occurrence": iso(at)},
        "created_at": iso(at),
        "settled_at": iso(at + 0.6) if status != "active" else None,
    }
    return {**base, **extra}


def line(run_id: str, phase: str, at: float, *, trigger: str = "t", attempt: int = 1) -> ExecLine:
    return ExecLine(trigger, iso(int(at)), run_id, "s", attempt, phase, BASE + at, 1)


def observe(
    ledger: list[Json], *, only_t: bool = True, end: float = 5.5, **fields: Any
) -> Observations:
    plan = Plan(triggers=PLAN.triggers[:1]) if only_t else PLAN
    values: dict[str, Any] = {
        "plan": plan,
        "applied_after": BASE + 0.4,
        "applied_before": BASE + 0.5,
        "end_at": BASE + end,
        "ledger": ledger,
        "runs": [],
        "shown": {},
        "executions": [],
        "faults": [],
        "audit": {"available": False, "note": "absent"},
        "status_exit_code": 3,
        "settle": {"settled": True, "seconds": 1.0},
    }
    values.update(fields)
    return Observations(**values)


def test_accounting_finds_missing_doubled_and_unexpected_occurrences() -> None:
    ledger = [row(1), row(2), row(2), row(4), row(7)]

    found = checks.accounting(observe(ledger))

    assert found["expected"] == 5
    assert [m["occurrence_ms"] for m in found["missing_examples"]] == [
        (BASE + 3) * 1000,
        (BASE + 5) * 1000,
    ]
    assert found["doubled"] == 1
    assert found["unexpected"] == 1


def test_accounting_counts_a_range_row_as_each_of_its_occurrences() -> None:
    missed = row(1, "missed", last_occurrence=iso(5), count=5)
    wrong = row(1, "missed", last_occurrence=iso(5), count=4)

    assert checks.accounting(observe([missed]))["count"] == 0
    assert checks.accounting(observe([wrong]))["range_count_mismatch"] == 1


def test_accounting_flags_an_occurrence_off_the_schedule() -> None:
    ledger = [row(1), row(2), row(3), row(4), row(5), row(1, occurrence=iso(1.5))]

    assert checks.accounting(observe(ledger))["off_schedule"] == 1


def test_duplicates_flag_a_non_idempotent_step_started_twice_not_an_idempotent_one() -> None:
    executions = [
        line("r1", "start", 1.0),
        line("r1", "start", 3.0, attempt=2),
        line("r2", "start", 1.0, trigger="i"),
        line("r2", "start", 3.0, trigger="i", attempt=2),
    ]

    found = checks.duplicates(observe([], only_t=False, executions=executions))

    assert found["executed_twice"] == 1
    assert found["executed_twice_examples"][0]["run_id"] == "r1"
    assert found["idempotent_reexecuted"] == 1
    assert found["count"] == 1


def test_duplicates_flag_two_runs_for_one_occurrence() -> None:
    runs = [run("r1", 1), run("r2", 1)]

    assert checks.duplicates(observe([], runs=runs))["two_runs_started"] == 1


def test_parked_runs_are_told_apart_by_the_execution_log() -> None:
    runs = [run(rid, at, "active", state="parked") for rid, at in (("a", 1), ("b", 2), ("c", 3))]
    shown = {
        rid: {"run_id": rid, "effects": [{"step_id": "s", "attempt": 1, "status": "ambiguous"}]}
        for rid in ("a", "b", "c")
    }
    executions = [line("b", "start", 2.0), line("b", "end", 2.5), line("c", "start", 3.0)]

    found = checks.parked(observe([], runs=runs, shown=shown, executions=executions))

    assert (found["never_started"], found["step_finished"], found["in_flight"]) == (1, 1, 1)


def test_ledger_finds_rows_left_launching_stale_rows_and_runs_without_row() -> None:
    ledger = [row(1, "launching"), row(2, "launched", run_id="r2"), row(3, run_id="r3")]
    runs = [run("r2", 2), run("r3", 3), run("r9", 4)]

    found = checks.ledger_against_runs(observe(ledger, runs=runs))

    assert found["launching"] == 1
    assert found["stale"] == 1
    assert found["run_without_row"] == 1
    assert "outcome_differs" not in found


def test_resume_counts_from_daemon_started_or_the_end_of_the_step_run_through_the_kill() -> None:
    # r1 was between steps at the kill; r2's step ran on until 6.0.
    runs = [run("r1", 1, settled_at=iso(5.0)), run("r2", 2, settled_at=iso(6.5))]
    executions = [line("r2", "start", 2.0), line("r2", "end", 6.0)]
    kill = Fault(kind="kill9", at=BASE + 3.0, restart_at=BASE + 3.1, ready_at=BASE + 4.0)

    found = timing.resume(observe([], runs=runs, executions=executions, faults=[kill]))

    assert found["first_progress_s"]["max"] == 0.5
    assert found["all_resumed_s"]["max"] == 1.0
    assert found["all_resumed_from_spawn_s"]["max"] == 1.9
    assert found["runs_never_resumed"] == 0


def test_a_step_that_ran_on_through_two_kills_counts_under_the_second() -> None:
    # r1's step ran from 2.0 to 5.0, through the kill at 3.0 (daemon back at 4.0) and
    # the kill at 4.5 (daemon back at 6.0): the run settles at 6.1, 0.1 s after the
    # second restart, not 1.1 s after the end of its step under the first.
    runs = [run("r1", 1, settled_at=iso(6.1))]
    executions = [line("r1", "start", 2.0), line("r1", "end", 5.0)]
    first = Fault(kind="kill9", at=BASE + 3.0, restart_at=BASE + 3.1, ready_at=BASE + 4.0)
    second = Fault(kind="kill9", at=BASE + 4.5, restart_at=BASE + 4.6, ready_at=BASE + 6.0)

    found = timing.resume(observe([], runs=runs, executions=executions, faults=[first, second]))

    assert [r["resumed_max_s"] for r in found["per_restart"]] == [None, 0.1]
    assert found["runs_never_resumed"] == 0


def test_a_run_parked_by_a_later_host_crash_is_not_a_failed_resume_of_an_earlier_kill() -> None:
    # r1's step started at 2.0 and ran on through the kill at 3.0 (adopted); the host
    # crash at 5.0 killed it with the daemon, so the next daemon parked r1.
    runs = [run("r1", 1, "parked", settled_at=None)]
    executions = [line("r1", "start", 2.0)]
    kill = Fault(kind="kill9", at=BASE + 3.0, restart_at=BASE + 3.1, ready_at=BASE + 4.0)
    crash = Fault(
        kind="kill9", at=BASE + 5.0, restart_at=BASE + 5.1, ready_at=BASE + 6.0, detail="host_crash"
    )

    found = timing.resume(observe([], runs=runs, executions=executions, faults=[kill, crash]))
    alone = timing.resume(observe([], runs=runs, executions=executions, faults=[kill]))

    assert found["runs_parked_instead"] == 0
    assert alone["runs_parked_instead"] == 1  # without the crash, the kill parked it


def test_resume_counts_a_run_that_never_progressed() -> None:
    runs = [run("r1", 1, "active")]
    kill = Fault(kind="kill9", at=BASE + 3.0, restart_at=BASE + 3.1, ready_at=BASE + 4.0)

    found = timing.resume(observe([], runs=runs, faults=[kill]))

    assert found["runs_never_resumed"] == 1
    assert found["all_resumed_s"]["n"] == 0


def test_a_skip_behind_an_idle_run_is_stalled_one_behind_a_running_step_is_not() -> None:
    ledger = [
        row(1, "completed", run_id="r1"),
        row(4, "skipped", reason="overlap"),
        row(10, "completed", run_id="r10"),
        row(11, "skipped", reason="overlap"),
    ]
    runs = [run("r1", 1, settled_at=iso(8)), run("r10", 10, settled_at=iso(13))]
    executions = [
        line("r1", "start", 1.0),
        line("r1", "end", 2.0),
        line("r10", "start", 10.0),
        line("r10", "end", 12.5),
    ]

    found = timing.stalled_skips(observe(ledger, runs=runs, executions=executions, end=12))

    assert found["count"] == 1
    assert found["behind_idle_silent"] == 1
    assert found["examples"][0]["occurrence"] == iso(4)


def test_a_clean_run_holds_every_invariant_it_can_check() -> None:
    ledger = [row(at, run_id=f"r{at}") for at in range(1, 6)]
    runs = [run(f"r{at}", at) for at in range(1, 6)]
    executions = [
        line(f"r{at}", p, at + d) for at in range(1, 6) for p, d in (("start", 0), ("end", 0.5))
    ]

    report = build_report(
        observe(ledger, runs=runs, executions=executions),
        scenario="kill9",
        backend="sqlite",
        params={},
    )

    assert report["violations"] == []
    assert report["invariants"]["audit_clean"]["ok"] is None


def test_step_times_move_onto_the_daemon_clock_by_the_offset_in_force() -> None:
    jumps: list[Json] = [
        {"at": BASE + 10.0, "offset_before": 0.0, "offset_after": 90.0},
        {"at": BASE + 20.0, "offset_before": 90.0, "offset_after": 70.0},
    ]
    lines = [line("r", "start", t) for t in (5.0, 15.0, 25.0)]

    moved = on_daemon_clock(lines, jumps)

    assert [m.at - BASE for m in moved] == [5.0, 105.0, 95.0]
