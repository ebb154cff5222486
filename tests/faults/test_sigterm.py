"""SIGTERM while steps longer than the shutdown grace run, restarted at once (SQLite)."""

from __future__ import annotations

import pytest

from tests.faults.conftest import holds, run_scenario
from tests.faults.observations import Json

pytestmark = [pytest.mark.faults, pytest.mark.xdist_group("faults"), pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def report() -> Json:
    # Steps twice the shutdown grace (10 s): a stop must neither wait them out nor lose them.
    return run_scenario("sigterm", step_s=20, terms=1, seconds=16, settle_s=15)


def test_sigterm_exits_promptly_while_steps_run(report: Json) -> None:
    holds(report, "sigterm_prompt")


def test_sigterm_executes_each_step_once(report: Json) -> None:
    holds(report, "each_step_once")


def test_sigterm_accounts_every_occurrence_exactly_once(report: Json) -> None:
    holds(report, "no_unaccounted_occurrence")


def test_sigterm_leaves_no_row_launching(report: Json) -> None:
    holds(report, "no_row_left_launching")


def test_sigterm_leaves_no_run_active_after_settling(report: Json) -> None:
    holds(report, "no_run_left_active")


def test_sigterm_ledger_matches_the_runs(report: Json) -> None:
    holds(report, "ledger_matches_runs")


def test_sigterm_parks_no_run_whose_step_never_started(report: Json) -> None:
    holds(report, "no_park_before_step_started")


def test_sigterm_parks_no_run_whose_step_finished(report: Json) -> None:
    holds(report, "no_park_of_finished_step")


def test_sigterm_adopts_and_completes_every_interrupted_run(report: Json) -> None:
    holds(report, "interrupted_runs_resume")


def test_sigterm_ledger_is_fresh_while_no_daemon_runs(report: Json) -> None:
    holds(report, "ledger_fresh_while_stopped")


def test_sigterm_skips_nothing_silently_behind_a_parked_run(report: Json) -> None:
    holds(report, "no_silent_block")


def test_sigterm_daemons_exit_cleanly(report: Json) -> None:
    holds(report, "daemons_exit_cleanly")


def test_sigterm_status_flags_parked_runs_and_no_daemon(report: Json) -> None:
    holds(report, "status_flags_no_daemon")


def test_sigterm_audit_is_clean(report: Json) -> None:
    holds(report, "audit_clean")
