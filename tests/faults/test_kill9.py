"""`kill -9` of the daemon at random moments, restarted at once each time (SQLite)."""

from __future__ import annotations

import pytest

from tests.faults.conftest import holds, run_scenario
from tests.faults.observations import Json

pytestmark = [pytest.mark.faults, pytest.mark.xdist_group("faults"), pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def report() -> Json:
    return run_scenario(
        "kill9",
        seconds=18,
        up_s=(0.2, 1.5),
        settle_s=15,
        moments=(
            "mid_launch",
            "after_launch",
            "mid_launch",
            "between_ticks",
            "inside_step",
            "host_crash",
        ),
        burst=3,
    )


def test_kill9_executes_no_non_idempotent_step_twice(report: Json) -> None:
    holds(report, "no_duplicate_execution")


def test_kill9_accounts_every_occurrence_exactly_once(report: Json) -> None:
    holds(report, "no_unaccounted_occurrence")


@pytest.mark.xfail(
    strict=False,
    reason="intermittent today: a launch claimed before a kill stays `launching` (5 min lease)",
)
def test_kill9_leaves_no_row_launching(report: Json) -> None:
    holds(report, "no_row_left_launching")


@pytest.mark.xfail(
    strict=False,
    reason="intermittent today: a dead owner's runs wait out the 30 s owner lease",
)
def test_kill9_leaves_no_run_active_after_settling(report: Json) -> None:
    holds(report, "no_run_left_active")


def test_kill9_ledger_matches_the_runs(report: Json) -> None:
    holds(report, "ledger_matches_runs")


@pytest.mark.xfail(
    strict=False,
    reason="intermittent today: a kill between a step's dispatch and its spawn parks the run",
)
def test_kill9_parks_no_run_whose_step_never_started(report: Json) -> None:
    holds(report, "no_park_before_step_started")


@pytest.mark.xfail(
    strict=False,
    reason="intermittent today: a step that outlived the daemon is parked once the lease ends",
)
def test_kill9_parks_no_run_whose_step_finished(report: Json) -> None:
    holds(report, "no_park_of_finished_step")


@pytest.mark.xfail(
    strict=False,
    reason="intermittent today: runs interrupted late are parked or still wait out the lease",
)
def test_kill9_resumes_every_interrupted_run(report: Json) -> None:
    holds(report, "interrupted_runs_resume")


@pytest.mark.xfail(strict=True, reason="takeover waits for the runtime's owner lease (30 s)")
def test_kill9_resumes_interrupted_runs_within_a_second(report: Json) -> None:
    holds(report, "resume_within_bound")


def test_kill9_skips_nothing_silently_behind_a_parked_run(report: Json) -> None:
    holds(report, "no_silent_block")


def test_kill9_daemons_exit_cleanly(report: Json) -> None:
    holds(report, "daemons_exit_cleanly")


@pytest.mark.xfail(strict=True, reason="`triggers status` exits 0 with no daemon alive")
def test_kill9_status_flags_no_daemon_alive(report: Json) -> None:
    holds(report, "status_flags_no_daemon")


def test_kill9_audit_is_clean(report: Json) -> None:
    holds(report, "audit_clean")
