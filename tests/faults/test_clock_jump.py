"""The wall clock jumps forward (past the catch-up grace) and back under a daemon.

libfaketime fakes the daemon's wall clock only; its monotonic clock stays real, as
it does when NTP or an operator steps a real clock.
"""

from __future__ import annotations

import pytest

from tests.faults.conftest import IN_CI, holds, run_scenario
from tests.faults.observations import Json
from tests.faults.scenarios import libfaketime

pytestmark = [pytest.mark.faults, pytest.mark.xdist_group("faults"), pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def report() -> Json:
    if libfaketime() is None:
        message = "libfaketime is not installed (`make faketime`, Debian package faketime)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return run_scenario("clock_jump", forward_s=90, back_s=8, settle_s=15)


def test_clock_jump_executes_no_non_idempotent_step_twice(report: Json) -> None:
    holds(report, "no_duplicate_execution")


def test_clock_jump_accounts_every_occurrence_exactly_once(report: Json) -> None:
    holds(report, "no_unaccounted_occurrence")


POLL_INTERVAL_S = 5.0
"""The daemon's longest sleep (TRIGGERS_POLL_INTERVAL's default): a jump is seen by then."""


def test_clock_jump_launches_again_within_a_poll_interval_of_each_jump(report: Json) -> None:
    lags = [jump["next_launch_lag_s"] for jump in report["jumps"]]
    assert len(lags) == 2, report["jumps"]
    assert all(lag is not None and lag <= POLL_INTERVAL_S for lag in lags), report["jumps"]


def test_clock_jump_leaves_no_row_launching(report: Json) -> None:
    holds(report, "no_row_left_launching")


def test_clock_jump_leaves_no_run_active_after_settling(report: Json) -> None:
    holds(report, "no_run_left_active")


def test_clock_jump_ledger_matches_the_runs(report: Json) -> None:
    holds(report, "ledger_matches_runs")


def test_clock_jump_daemon_exits_cleanly(report: Json) -> None:
    holds(report, "daemons_exit_cleanly")


def test_clock_jump_audit_is_clean(report: Json) -> None:
    holds(report, "audit_clean")
