"""Throughput and start latency of `looms_runtime` with every event durably committed.

For each backend (a SQLite temp file with synchronous=FULL; PostgreSQL when
TRIGGERS_TEST_PG_URL is set) and each flow (one `python` step calling a no-op, and a
flow with no steps), N runs are started by concurrent callers (as the scheduler's
launches do) and the clock stops when the last one has settled; start latency is the
time each `start_run` call takes to return (the start is durable then). Also measured:
a `start_runs` batch of 1000 requests shaped like the scheduler's (input, env,
attributes) on an idle database (median of 5: the whole call, its one write
transaction, and the Python time per request outside that transaction), and the
raw single-row INSERT+COMMIT rate of the same database, so the runtime's cost shows
as a ratio. `bench/runtime_vs_dbos.py` compares with DBOS.

    .venv/bin/python bench/runtime_throughput.py [--runs 2000] [--callers 8] [--workers 16]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import structlog

from looms_runtime import Database, RunSettled, Runtime, StartRequest, schema
from looms_runtime.testing import temporary_postgres_database

FLOWS: dict[str, dict[str, Any]] = {
    "1 python step": {
        "kind": "steps",
        "steps": [
            {
                "id": "noop",
                "type": "python",
                "ref": "__main__:noop",
                "timeout_s": None,
                "retry": None,
                "idempotent": True,
            }
        ],
    },
    "0 steps": {"kind": "steps", "steps": []},
}


BATCH = 1000
BATCH_REPEATS = 5
OCCURRENCE = "2030-01-01T02:30:00Z"


def noop(_input: object) -> None:
    """The step that does no work of its own."""


@contextmanager
def sqlite_url() -> Iterator[str]:
    with tempfile.TemporaryDirectory() as directory:
        url = f"sqlite:///{Path(directory) / 'bench.sqlite'}"
        engine = sa.create_engine(url)
        schema.metadata.create_all(engine)
        engine.dispose()
        yield url


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def raw_commits_per_s(db: Database, n: int = 500) -> float:
    table = sa.Table("bench_raw", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True))
    table.create(db.engine)
    started = time.perf_counter()
    for i in range(n):
        with db.write() as conn:
            conn.execute(table.insert().values(id=i))
    elapsed = time.perf_counter() - started
    table.drop(db.engine)
    return n / elapsed


class TimedDatabase(Database):
    """A `Database` that records how long each write transaction is open."""

    def __init__(self, url: str, **options: Any) -> None:
        super().__init__(url, **options)
        self.write_ms: list[float] = []

    @contextmanager
    def write(self, *, urgent: bool = False) -> Iterator[sa.Connection]:
        began = time.perf_counter()
        with super().write(urgent=urgent) as conn:
            yield conn
        self.write_ms.append((time.perf_counter() - began) * 1000)


def run_flow(db: Database, name: str, *, runs: int, callers: int, workers: int) -> dict[str, float]:
    """N runs started by concurrent callers; the clock stops when the last one settled."""
    done = threading.Event()
    settled = 0
    lock = threading.Lock()

    def on_settled(_: RunSettled) -> None:
        nonlocal settled
        with lock:
            settled += 1
            if settled == runs:
                done.set()

    owner = f"bench-{os.getpid()}-{os.urandom(2).hex()}"
    runtime = Runtime(db, owner=owner, workers=workers, on_settled=on_settled)
    runtime.start()
    version = runtime.register_flow(name, FLOWS[name])
    latencies: list[float] = []
    tag = os.urandom(4).hex()

    def caller(index: int) -> None:
        mine: list[float] = []
        for i in range(index, runs, callers):
            request = StartRequest(flow=name, version=version, idempotency_key=f"{tag}:{i}")
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
    finished = done.wait(120)
    elapsed = time.perf_counter() - began
    runtime.close(timeout=30)
    if not finished:
        raise SystemExit(f"only {settled} of {runs} runs settled")
    return {
        "runs_per_s": runs / elapsed,
        "p50": statistics.median(latencies),
        "p99": percentile(latencies, 0.99),
    }


def batch_start(db: TimedDatabase, name: str) -> tuple[float, float]:
    """`start_runs` of 1000 requests shaped like the scheduler's (input, env, attributes)
    on an otherwise idle database, repeated: the median call ms and its transaction ms."""
    runtime = Runtime(db, owner=f"bench-batch-{os.urandom(2).hex()}")
    version = runtime.register_flow(name, FLOWS[name])
    calls, transactions = [], []
    for repeat in range(BATCH_REPEATS):
        tag = os.urandom(4).hex()
        batch = [
            StartRequest(
                flow=name,
                version=version,
                input={"full": True},
                idempotency_key=f"{tag}:batch:{repeat}:{i}",
                env={"TRIGGERS_TRIGGER_ID": f"t{i}", "TRIGGERS_OCCURRENCE": OCCURRENCE},
                attributes={"trigger_id": f"t{i}", "occurrence": OCCURRENCE},
            )
            for i in range(BATCH)
        ]
        db.write_ms.clear()
        began = time.perf_counter()
        runtime.start_runs(batch)
        calls.append((time.perf_counter() - began) * 1000)
        transactions.append(max(db.write_ms))
    runtime.close()
    return statistics.median(calls), statistics.median(transactions)


def bench_backend(
    label: str, make: Callable[[], AbstractContextManager[str]], args: argparse.Namespace
) -> list[str]:
    """Each measurement on a fresh database: runs a measurement leaves behind (the batch's
    are owned by a runtime that never started) would be claimed and driven by the next."""
    lines = []
    for name in FLOWS:
        with make() as url:
            db = TimedDatabase(url, pool_size=args.workers + 4)
            result = run_flow(db, name, runs=args.runs, callers=args.callers, workers=args.workers)
            db.dispose()
        with make() as url:
            db = TimedDatabase(url)
            call_ms, transaction_ms = batch_start(db, name)
            db.dispose()
        python_us = (call_ms - transaction_ms) * 1000 / BATCH
        lines.append(
            f"{label:<10} {name:<14} {result['runs_per_s']:>8.0f} {result['p50']:>9.2f}"
            f" {result['p99']:>9.2f} {call_ms:>10.1f} {transaction_ms:>8.1f} {python_us:>9.1f}"
        )
    with make() as url:
        db = TimedDatabase(url)
        raw = raw_commits_per_s(db)
        db.dispose()
    lines.append(f"{label:<10} {'raw commit':<14} {raw:>8.0f}   (single-row INSERT+COMMIT/s)")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--callers", type=int, default=8)
    parser.add_argument("--workers", type=int, default=16)
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    backends: list[tuple[str, Callable[[], AbstractContextManager[str]]]] = [("sqlite", sqlite_url)]
    pg_url = os.environ.get("TRIGGERS_TEST_PG_URL")
    if pg_url:
        backends.append(("postgres", lambda: temporary_postgres_database(pg_url)))
    print(f"{args.runs} runs per flow, {args.callers} concurrent callers, {args.workers} workers")
    head = ("backend", "flow", "runs/s", "start p50", "start p99", "1000-batch", "its txn")
    print(
        f"{head[0]:<10} {head[1]:<14} {head[2]:>8} {head[3]:>9} {head[4]:>9}"
        f" {head[5]:>10} {head[6]:>8} {'python':>9}"
    )
    print(
        f"{'':<10} {'':<14} {'':>8} {'(ms)':>9} {'(ms)':>9} {'call (ms)':>10} {'(ms)':>8}"
        f" {'us/req':>9}"
    )
    for label, make in backends:
        for line in bench_backend(label, make, args):
            print(line, flush=True)


if __name__ == "__main__":
    main()
