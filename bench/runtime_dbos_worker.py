"""The DBOS side of `bench/runtime_vs_dbos.py`, run by an interpreter that has `dbos`.

It is never imported by the project (DBOS is not one of its dependencies): the
comparison runs it as a subprocess with the throwaway virtualenv's Python, e.g.

    python3 -m venv /tmp/dbos-venv && /tmp/dbos-venv/bin/pip install dbos
    /tmp/dbos-venv/bin/python bench/runtime_dbos_worker.py URL --runs 1000 --callers 8

The work is the runtime side's: workflows of one no-op step started by concurrent
callers (start latency per call, runs/s until the last result), workflows of 10
no-op steps (steps/s), and one-step workflows started one at a time on an idle
system (start latency). One JSON object is printed on stdout.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import threading
import time
from typing import Any

from dbos import DBOS  # type: ignore[import-not-found]  # only in the DBOS virtualenv

STEPS = 10


@DBOS.step()
def noop(value: int) -> int:
    return value


@DBOS.workflow()
def one_step(value: int) -> int:
    return noop(value)


@DBOS.workflow()
def many_steps(value: int) -> int:
    for index in range(STEPS):
        noop(index)
    return value


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def started_concurrently(workflow: Any, runs: int, callers: int) -> tuple[float, list[float]]:
    """Start `runs` workflows from `callers` threads; elapsed seconds until the last result."""
    latencies: list[float] = []
    handles: list[Any] = []
    lock = threading.Lock()

    def caller(index: int) -> None:
        mine, started = [], []
        for i in range(index, runs, callers):
            began = time.perf_counter()
            started.append(DBOS.start_workflow(workflow, i))
            mine.append((time.perf_counter() - began) * 1000)
        with lock:
            latencies.extend(mine)
            handles.extend(started)

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(callers)]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for handle in handles:
        handle.get_result()
    return time.perf_counter() - began, latencies


def started_one_by_one(workflow: Any, runs: int) -> list[float]:
    """Start latency on an idle system: each workflow finishes before the next starts."""
    latencies = []
    for i in range(runs):
        began = time.perf_counter()
        handle = DBOS.start_workflow(workflow, i)
        latencies.append((time.perf_counter() - began) * 1000)
        handle.get_result()
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--step-runs", type=int, default=200)
    parser.add_argument("--callers", type=int, default=8)
    parser.add_argument("--idle-starts", type=int, default=200)
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    DBOS(config={"name": "looms-bench", "system_database_url": args.url, "run_admin_server": False})
    DBOS.launch()
    try:
        elapsed, latencies = started_concurrently(one_step, args.runs, args.callers)
        step_elapsed, _ = started_concurrently(many_steps, args.step_runs, args.callers)
        idle = started_one_by_one(one_step, args.idle_starts)
    finally:
        DBOS.destroy()
    print(
        json.dumps(
            {
                "runs_per_s": args.runs / elapsed,
                "steps_per_s": args.step_runs * STEPS / step_elapsed,
                "start_p50_ms": statistics.median(latencies),
                "start_p99_ms": percentile(latencies, 0.99),
                "idle_start_p50_ms": statistics.median(idle),
                "idle_start_p99_ms": percentile(idle, 0.99),
            }
        )
    )


if __name__ == "__main__":
    main()
