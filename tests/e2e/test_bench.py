"""The benchmarks run and print their figures (bench/scale.py, burst.py, history.py,
simulate.py, fire_latency.py, runtime_throughput.py, command_steps.py, spread.py,
daemon_startup.py, api_storm.py, alerts.py).

A smoke test with tiny figures, so the scripts keep working as the code changes: the
figures themselves are machine-dependent and asserted nowhere (docs/benchmarks.md
quotes them, with the commands).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

BENCH = Path(__file__).resolve().parents[2] / "bench"


def bench(script: str, *args: str) -> Any:
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_scale_reports_apply_first_tick_idle_cpu_and_memory() -> None:
    found = bench(
        "scale.py", "--triggers", "20", "--repeat", "1", "--seconds", "1", "--settle", "1"
    )
    [sample] = found["samples"]
    assert sample["triggers"] == 20
    for key in ("apply_s", "apply_cpu_s", "first_tick_s", "idle_cpu_percent_of_core", "rss_mb"):
        assert isinstance(sample[key], float), key
    assert isinstance(sample["all_listed_s"], float)
    assert found["median"]["apply_s"] == sample["apply_s"]


def test_burst_reports_every_occurrence_launched_once() -> None:
    found = bench("burst.py", "--triggers", "20", "--lead", "15", "--window", "2")
    [sample] = found["samples"]
    assert sample["ledger_rows"] == sample["launched"] == 20
    assert sample["exactly_once"] is True
    assert isinstance(sample["launch_ms_max"], int)


def test_history_reports_the_query_and_the_cli_call() -> None:
    found = bench(
        "history.py",
        *("--rows", "300", "--triggers", "5", "--hot-rows", "100"),
        *("--repeat", "2", "--cli-repeat", "1"),
    )
    for kind in ("typical", "hot"):
        assert isinstance(found[kind]["history"]["median_ms"], float)
        assert found[kind]["cli_rows"] == 50
        assert isinstance(found[kind]["cli_s"], float)


def test_simulate_reports_simulated_days_and_occurrences_per_second() -> None:
    found = bench("simulate.py", "--file", "typical", "--days", "4", "--repeat", "1")
    assert found["file"] == "typical"
    assert found["days"] == 4
    assert found["occurrences"] >= found["runs"] > 0
    for key in ("seconds", "cpu_seconds", "days_per_s", "days_per_cpu_s", "load_average"):
        assert isinstance(found[key], float), key


def test_fire_latency_reports_launches_and_step_starts() -> None:
    # The window opens once every trigger has launched (the script waits for that,
    # however long a loaded machine takes to start the daemon), so some of it launch.
    found = bench(
        "fire_latency.py",
        "--triggers",
        "3",
        "--seconds",
        "3",
        "--warmup",
        "1",
        "--ready-timeout",
        "150",
        "--json",
    )
    assert found["triggers"] == 3
    assert 0 < found["launched"] <= found["expected"]
    for key in ("launch_ms_p99", "step_start_ms_p99", "cpu_percent_of_core", "rss_mb"):
        assert isinstance(found[key], int | float), key
    assert 0 <= found["within_50ms"] <= found["within_1s"] <= 1
    assert isinstance(found["workers_cpu_percent_of_core"], float)


def test_runtime_throughput_reports_runs_per_second() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / "runtime_throughput.py"), "--runs", "20", "--callers", "2"],
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
        env={k: v for k, v in os.environ.items() if k != "TRIGGERS_TEST_PG_URL"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line.split() for line in done.stdout.splitlines() if line.startswith("sqlite")]
    flows = {" ".join(row[1:4]) if row[1] == "1" else " ".join(row[1:3]) for row in rows}
    assert {"1 python step", "0 steps", "raw commit"} <= flows


def test_command_steps_reports_the_cpu_of_a_step() -> None:
    found = bench(
        "command_steps.py", "--triggers", "2", "--seconds", "1", "--warmup", "0", "--python"
    )
    entry = next(value for key, value in found["summary"].items() if key != "fork_exec_true_ms")
    for key in ("cpu_ms_per_fire_with_steps", "cpu_ms_per_step", "supervision_ms_per_step"):
        assert isinstance(entry[key], float), key
    assert {run["kind"] for run in found["runs"]} == {"command", "none", "python"}
    assert all(run["fires"] > 0 for run in found["runs"])


def test_spread_reports_each_occurrence_once_and_the_share_within_a_second() -> None:
    found = bench("spread.py", "--triggers", "60", "--seconds", "4", "--warmup", "1")
    assert found["window_s"] == 4
    assert 0 < found["expected"] < 60  # the ids' seconds in those four
    assert found["ledger_rows"] == found["expected"]
    assert found["exactly_once"] is True
    assert isinstance(found["within_1s"], float)
    assert len(found["rss_mb_per_daemon"]) == 1


def test_daemon_startup_reports_each_phase_of_a_restart() -> None:
    found = bench("daemon_startup.py", "--runs", "1", "--triggers", "2", "--down", "1")
    phases = found["from_spawn_ms"]
    for phase in ("declarations_unchanged", "runtime_started", "run_launched", "api_started"):
        assert phases[phase]["median"] > 0, phase
    # What came due while no daemon ran is claimed before the web framework is loaded.
    assert phases["runtime_started"]["median"] <= phases["run_launched"]["median"]
    assert phases["run_launched"]["median"] <= phases["api_started"]["median"]


def test_api_storm_answers_every_request() -> None:
    found = bench("api_storm.py", "--requests", "300", "--in-flight", "10", "--idle-share", "0")
    assert sum(found["answers"].values()) == 300
    assert found["failures"] == {}
    assert set(found["answers"]) == {"200"}
    assert found["daemon_exit_code"] == 0


def test_alerts_reports_the_alerts_delivered_and_the_fires_with_alerts_off_and_on() -> None:
    found = bench(
        "alerts.py",
        *("--triggers", "5", "--seconds", "10", "--warmup", "1", "--fail-after", "2.5"),
        "--json",
    )
    off, on = found["off"], found["on"]
    assert off["outbox"] == {}
    assert on["triggers_alerted"] == on["distinct_alerts"] == 5  # one each, however often
    assert on["outbox"] == {"delivered": 5}
    assert isinstance(on["last_received_after_flag_s"], float)
    for part in ("window", "before", "burst", "after"):
        assert 0 < on[part]["launched"] <= on[part]["expected"], part
        assert isinstance(off[part]["launch_ms_p99"], int | float), part
    assert "step_start_ms_p99" in found["on_vs_off"]["window"]  # launches may take 0 ms
