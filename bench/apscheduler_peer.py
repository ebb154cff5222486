"""The peer: APScheduler 3 running N every-second interval jobs, memory or SQLAlchemy store.

Each job does nothing but return when it started; the listener pairs that with the
job's scheduled run time, so the figure is the same as ours: the step start minus
the occurrence. Runs in its own process, so that it measures what APScheduler does
alone on the machine.

    .venv/bin/python bench/apscheduler_peer.py --jobs 100 --seconds 30 --store memory
    .venv/bin/python bench/apscheduler_peer.py --jobs 100 --seconds 30 --store sqlite
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from apscheduler.events import EVENT_JOB_EXECUTED, EVENT_JOB_MISSED
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.memory import MemoryJobStore
from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
from apscheduler.schedulers.background import BackgroundScheduler


def started() -> float:
    return time.time()


def cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def run(args: argparse.Namespace) -> dict[str, object]:
    workdir = Path(tempfile.mkdtemp(prefix="apscheduler-peer-"))
    store = (
        MemoryJobStore()
        if args.store == "memory"
        else SQLAlchemyJobStore(url=f"sqlite:///{workdir / 'jobs.sqlite'}")
    )
    scheduler = BackgroundScheduler(
        jobstores={"default": store},
        executors={"default": ThreadPoolExecutor(args.threads)},
        job_defaults={"misfire_grace_time": 1, "coalesce": False, "max_instances": 5},
        timezone=UTC,
    )
    latencies: list[float] = []
    missed = [0]
    lock = threading.Lock()
    window: dict[str, float] = {}

    def listen(event: object) -> None:
        scheduled = event.scheduled_run_time.timestamp()  # type: ignore[attr-defined]
        if not window or not window["start"] <= scheduled < window["end"]:
            return
        with lock:
            if event.code == EVENT_JOB_MISSED:  # type: ignore[attr-defined]
                missed[0] += 1
            else:
                latencies.append((event.retval - scheduled) * 1000)  # type: ignore[attr-defined]

    scheduler.add_listener(listen, EVENT_JOB_EXECUTED | EVENT_JOB_MISSED)
    first = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
    for n in range(args.jobs):
        scheduler.add_job(started, "interval", seconds=1, start_date=first, id=f"j{n:05d}")
    scheduler.start()
    time.sleep(args.warmup)
    cpu = cpu_seconds()
    now = time.time()
    window.update(start=float(int(now) + 1), end=float(int(now) + 1 + args.seconds))
    time.sleep(args.seconds + 3)
    used = cpu_seconds() - cpu
    scheduler.shutdown(wait=False)
    ordered = sorted(latencies)

    def pct(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))], 1)

    result: dict[str, object] = {
        "peer": f"apscheduler {args.store} store",
        "jobs": args.jobs,
        "expected": args.jobs * int(args.seconds),
        "executed": len(latencies),
        "missed": missed[0],
        "cpu_percent_of_core": round(100 * used / (args.seconds + 3), 1),
    }
    if ordered:
        result.update(
            step_start_ms_p50=pct(0.5), step_start_ms_p99=pct(0.99), step_start_ms_max=pct(1.0)
        )
    # Punctuality: of every occurrence expected, the share started within 50 ms, 1 s.
    expected = max(1, int(result["expected"]))  # type: ignore[call-overload]
    result["within_50ms"] = round(sum(1 for v in ordered if v <= 50) / expected, 4)
    result["within_1s"] = round(sum(1 for v in ordered if v <= 1000) / expected, 4)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--warmup", type=float, default=5)
    parser.add_argument("--threads", type=int, default=20)
    parser.add_argument("--store", choices=["memory", "sqlite"], default="memory")
    print(json.dumps(run(parser.parse_args())))


if __name__ == "__main__":
    main()
