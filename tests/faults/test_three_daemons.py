"""Three daemons (three host names) on one PostgreSQL database, one killed at a time."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from tests.faults.conftest import holds, run_scenario
from tests.faults.observations import Json

pytestmark = [
    pytest.mark.faults,
    pytest.mark.postgres,
    pytest.mark.xdist_group("faults"),
    pytest.mark.timeout(300),
]


@pytest.fixture(scope="module")
def report(pg_admin: sa.Engine) -> Json:
    return run_scenario("three_daemons", seconds=18, up_s=(1.0, 3.0), settle_s=15)


def test_three_daemons_execute_no_non_idempotent_step_twice(report: Json) -> None:
    holds(report, "no_duplicate_execution")


def test_three_daemons_account_every_occurrence_exactly_once(report: Json) -> None:
    holds(report, "no_unaccounted_occurrence")


def test_three_daemons_leave_no_row_launching(report: Json) -> None:
    holds(report, "no_row_left_launching")


def test_three_daemons_leave_no_run_active_after_settling(report: Json) -> None:
    holds(report, "no_run_left_active")


def test_three_daemons_ledger_matches_the_runs(report: Json) -> None:
    holds(report, "ledger_matches_runs")


def test_three_daemons_park_no_run_whose_step_never_started(report: Json) -> None:
    holds(report, "no_park_before_step_started")


def test_three_daemons_park_no_run_whose_step_finished(report: Json) -> None:
    holds(report, "no_park_of_finished_step")


def test_three_daemons_resume_every_interrupted_run(report: Json) -> None:
    holds(report, "interrupted_runs_resume")


def test_three_daemons_resume_interrupted_runs_within_a_second(report: Json) -> None:
    holds(report, "resume_within_bound")


def test_three_daemons_skip_nothing_silently_behind_a_parked_run(report: Json) -> None:
    holds(report, "no_silent_block")


def test_three_daemons_exit_cleanly(report: Json) -> None:
    holds(report, "daemons_exit_cleanly")


def test_three_daemons_audit_is_clean(report: Json) -> None:
    holds(report, "audit_clean")
