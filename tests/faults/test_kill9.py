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


def test_kill9_leaves_no_row_launching(report: Json) -> None:
    holds(report, "no_row_left_launching")


def test_kill9_leaves_no_run_active_after_settling(report: Json) -> None:
    holds(report, "no_run_left_active")


def test_kill9_ledger_matches_the_runs(report: Json) -> None:
    holds(report, "ledger_matches_runs")


def test_kill9_parks_no_run_whose_step_never_started(report: Json) -> None:
    holds(report, "no_park_before_step_started")


def test_kill9_parks_no_run_whose_step_finished(report: Json) -> None:
    holds(report, "no_park_of_finished_step")


def test_kill9_resumes_every_interrupted_run(report: Json) -> None:
    holds(report, "interrupted_runs_resume")


def test_kill9_resumes_interrupted_runs_within_a_second(report: Json) -> None:
    holds(report, "resume_within_bound")


def test_kill9_skips_nothing_silently_behind_a_parked_run(report: Json) -> None:
    holds(report, "no_silent_block")


def test_kill9_daemons_exit_cleanly(report: Json) -> None:
    holds(report, "daemons_exit_cleanly")


def test_kill9_status_flags_no_daemon_alive(report: Json) -> None:
    holds(report, "status_flags_no_daemon")


def test_kill9_audit_is_clean(report: Json) -> None:
    holds(report, "audit_clean")
