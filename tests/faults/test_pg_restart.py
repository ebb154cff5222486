"""The PostgreSQL server restarted under a running daemon.

It restarts the whole server, so it runs only when `TRIGGERS_TEST_PG_CLUSTER`
names a cluster this machine may restart (`15/main`: `pg_ctlcluster 15 main
restart`), never against a server other runs share by accident.
"""

from __future__ import annotations

import os

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

CLUSTER = os.environ.get("TRIGGERS_TEST_PG_CLUSTER")


@pytest.fixture(scope="module")
def report(pg_admin: sa.Engine) -> Json:
    if not CLUSTER:
        pytest.skip("restarting PostgreSQL needs TRIGGERS_TEST_PG_CLUSTER (e.g. 15/main)")
    return run_scenario("pg_restart", cluster=CLUSTER, seconds=15, restarts=1, settle_s=15)


def test_pg_restart_daemon_rides_through(report: Json) -> None:
    holds(report, "daemons_exit_cleanly")


def test_pg_restart_executes_no_non_idempotent_step_twice(report: Json) -> None:
    holds(report, "no_duplicate_execution")


def test_pg_restart_accounts_every_occurrence_exactly_once(report: Json) -> None:
    holds(report, "no_unaccounted_occurrence")


def test_pg_restart_leaves_no_row_launching(report: Json) -> None:
    holds(report, "no_row_left_launching")


def test_pg_restart_leaves_no_run_active_after_settling(report: Json) -> None:
    holds(report, "no_run_left_active")


def test_pg_restart_ledger_matches_the_runs(report: Json) -> None:
    holds(report, "ledger_matches_runs")


def test_pg_restart_parks_no_run(report: Json) -> None:
    holds(report, "no_park_before_step_started")
    holds(report, "no_park_of_finished_step")


def test_pg_restart_audit_is_clean(report: Json) -> None:
    holds(report, "audit_clean")
