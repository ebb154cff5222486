"""looms_runtime and DBOS side by side: the same work on the same kind of database.

For each backend (a SQLite temp file; PostgreSQL when TRIGGERS_TEST_PG_URL is set,
each side in a fresh database of that server), both runtimes do the same work:

- runs/s: `--runs` durable Python flows (DBOS: workflows) of one no-op step,
  started by `--callers` concurrent callers; the clock stops at the last result;
- steps/s: `--step-runs` flows of 10 no-op steps each, started the same way;
- start latency p50/p99: how long each start call took to return (the start is
  durable then, on both sides), loaded (during the runs/s measurement) and idle
  (`--idle-starts` runs started one at a time, each settled before the next).

DBOS runs in its own interpreter (`--dbos-python`, or DBOS_PYTHON), a throwaway
virtualenv with `pip install dbos`; without one, only this runtime is measured:

    python3 -m venv /tmp/dbos-venv && /tmp/dbos-venv/bin/pip install dbos
    .venv/bin/python bench/runtime_vs_dbos.py --dbos-python /tmp/dbos-venv/bin/python

Both sides use their database defaults, except that this runtime's SQLite file is
WAL with synchronous=FULL (every committed event survives a power loss).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import sqlalchemy as sa
import structlog

from looms_runtime import Database, RunSettled, Runtime, StartRequest, schema
from looms_runtime.flow import FlowContext
from looms_runtime.testing import temporary_postgres_database

STEPS = 10
WORKER = Path(__file__).with_name("runtime_dbos_worker.py")


def noop(value: int) -> int:
    """The step that does no work of its own."""
    return value


def one_step(ctx: FlowContext, value: int) -> int:
    return ctx.step("noop", noop, value)


def many_steps(ctx: FlowContext, value: int) -> int:
    for index in range(STEPS):
        ctx.step(f"noop{index}", noop, index)
    return value


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@contextmanager
def sqlite_url(*, tables: bool) -> Iterator[str]:
    with tempfile.TemporaryDirectory() as directory:
        url = f"sqlite:///{Path(directory) / 'bench.sqlite'}"
        if tables:
            engine = sa.create_engine(url)
            schema.metadata.create_all(engine)
            engine.dispose()
        yield url


def started_concurrently(
    runtime: Runtime, settled: Callable[[int], bool], flow: str, runs: int, callers: int
) -> tuple[float, list[float]]:
    """Start `runs` runs from `callers` threads; seconds until the last one settled."""
    version = runtime.register_flow(flow, {"kind": "python", "ref": f"__main__:{flow}"})
    latencies: list[float] = []
    lock = threading.Lock()
    tag = os.urandom(4).hex()

    def caller(index: int) -> None:
        mine = []
        for i in range(index, runs, callers):
            request = StartRequest(
                flow=flow, version=version, input=i, idempotency_key=f"{tag}:{i}"
            )
            began = time.perf_counter()
            runtime.start_run(request)
            mine.append((time.perf_counter() - began) * 1000)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(callers)]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if not settled(runs):
        raise SystemExit(f"{flow}: not every run settled")
    return time.perf_counter() - began, latencies


def started_one_by_one(runtime: Runtime, flow: str, runs: int) -> list[float]:
    """Start latency on an idle system: each run settles before the next one starts."""
    version = runtime.register_flow(flow, {"kind": "python", "ref": f"__main__:{flow}"})
    tag = os.urandom(4).hex()
    latencies = []
    for i in range(runs):
        request = StartRequest(flow=flow, version=version, input=i, idempotency_key=f"{tag}:{i}")
        began = time.perf_counter()
        run_id = runtime.start_run(request).run_id
        latencies.append((time.perf_counter() - began) * 1000)
        runtime.wait_settled(run_id, 60)
    return latencies


def measure_looms(url: str, args: argparse.Namespace) -> dict[str, float]:
    count = 0
    cond = threading.Condition()

    def on_settled(_: RunSettled) -> None:
        nonlocal count
        with cond:
            count += 1
            cond.notify_all()

    def settled(runs: int) -> bool:
        nonlocal count
        with cond:
            done = cond.wait_for(lambda: count >= runs, timeout=300)
            count = 0
            return done

    db = Database(url, pool_size=args.workers + 4)
    runtime = Runtime(db, owner=f"bench-{os.getpid()}", workers=args.workers, on_settled=on_settled)
    runtime.start()
    try:
        elapsed, latencies = started_concurrently(
            runtime, settled, "one_step", args.runs, args.callers
        )
        step_elapsed, _ = started_concurrently(
            runtime, settled, "many_steps", args.step_runs, args.callers
        )
        idle = started_one_by_one(runtime, "one_step", args.idle_starts)
    finally:
        runtime.close(timeout=30)
        db.dispose()
    return {
        "runs_per_s": args.runs / elapsed,
        "steps_per_s": args.step_runs * STEPS / step_elapsed,
        "start_p50_ms": statistics.median(latencies),
        "start_p99_ms": percentile(latencies, 0.99),
        "idle_start_p50_ms": statistics.median(idle),
        "idle_start_p99_ms": percentile(idle, 0.99),
    }


def measure_dbos(python: str, url: str, args: argparse.Namespace) -> dict[str, float]:
    command = [python, str(WORKER), url, "--runs", str(args.runs)]
    command += ["--step-runs", str(args.step_runs), "--callers", str(args.callers)]
    command += ["--idle-starts", str(args.idle_starts)]
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"the DBOS side failed:\n{done.stderr[-2000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


ROWS = (
    ("runs/s (1 step)", "runs_per_s", True),
    ("steps/s (10-step flows)", "steps_per_s", True),
    ("start p50 (ms), loaded", "start_p50_ms", False),
    ("start p99 (ms), loaded", "start_p99_ms", False),
    ("start p50 (ms), idle", "idle_start_p50_ms", False),
    ("start p99 (ms), idle", "idle_start_p99_ms", False),
)


def report(label: str, looms: dict[str, float], dbos: dict[str, float] | None) -> None:
    for name, key, higher_is_better in ROWS:
        mine = looms[key]
        line = f"{label:<9} {name:<26} {mine:>10.1f}"
        if dbos is not None:
            theirs = dbos[key]
            ratio = mine / theirs if higher_is_better else theirs / mine
            line += f" {theirs:>10.1f} {ratio:>9.1f}x"
        print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--step-runs", type=int, default=200)
    parser.add_argument("--callers", type=int, default=8)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--idle-starts", type=int, default=200)
    parser.add_argument("--dbos-python", default=os.environ.get("DBOS_PYTHON"))
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    backends: list[tuple[str, Callable[[bool], AbstractContextManager[str]]]] = [
        ("sqlite", lambda tables: sqlite_url(tables=tables))
    ]
    pg_url = os.environ.get("TRIGGERS_TEST_PG_URL")
    if pg_url:
        backends.append(
            ("postgres", lambda tables: temporary_postgres_database(pg_url, create_tables=tables))
        )
    if not args.dbos_python:
        print("DBOS skipped: give --dbos-python (or DBOS_PYTHON) to compare with it")
    print(f"{args.runs} one-step runs, {args.step_runs} ten-step runs, {args.callers} callers")
    head = f"{'backend':<9} {'metric':<26} {'looms':>10}"
    print(head + (f" {'dbos':>10} {'advantage':>10}" if args.dbos_python else ""))
    for label, database in backends:
        with database(True) as url:
            looms = measure_looms(url, args)
        dbos = None
        if args.dbos_python:
            with database(False) as url:
                dbos = measure_dbos(args.dbos_python, url, args)
        report(label, looms, dbos)


if __name__ == "__main__":
    main()
