"""Many hourly triggers: `apply`, the daemon's first tick, its idle CPU and its memory.

For each repeat, on a fresh SQLite database (migrated first, so the apply is timed
alone): applies N hourly triggers (`cron: "M * * * *"`, M half an hour from now, so
none comes due while measuring), applies the same file again (nothing changes),
starts `triggers run`, and reports how long until its first tick (its heartbeat
row) and until it knows every trigger (its `triggers_listed` log line: the listing
is read a page a tick, so the first tick comes before the last page), its CPU over a
quiet window once start-up has settled, and its memory.
Every figure is the median of the repeats (their range beside it), with the CPU of
each command beside its wall-clock time and the load average around the run: the
machine is shared.

    .venv/bin/python bench/scale.py --triggers 10000 --repeat 3
    .venv/bin/python bench/scale.py --triggers 50000 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from _measure import (
    TRIGGERS,
    cpu_ns,
    environment,
    load_average,
    memory_mb,
    summarize,
    timed_run,
)


def declarations(count: int, minute: int) -> str:
    lines = ["version: 1", "flows:", "  noop:", "    steps: []", "triggers:"]
    lines += [f"  - {{id: t{n:06d}, flow: noop, cron: '{minute} * * * *'}}" for n in range(count)]
    return "\n".join(lines) + "\n"


def first_tick(path: Path, started: float, timeout_s: float) -> float | None:
    """Seconds from `started` until the daemon's first heartbeat row, or None."""
    while time.monotonic() - started < timeout_s:
        try:
            with sqlite3.connect(path, timeout=5) as conn:
                if conn.execute("SELECT count(*) FROM heartbeats").fetchone()[0]:
                    return round(time.monotonic() - started, 3)
        except sqlite3.OperationalError:
            pass  # not migrated yet, or busy
        time.sleep(0.02)
    return None


def listed_after(log: Path, started_at: float) -> float | None:
    """Seconds from `started_at` (epoch) to the daemon's `triggers_listed` line, or None."""
    for line in log.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("event") == "triggers_listed":
            at = datetime.fromisoformat(entry["timestamp"].replace("Z", "+00:00"))
            return round(at.timestamp() - started_at, 3)
    return None


def one(args: argparse.Namespace) -> dict[str, object]:
    workdir = Path(tempfile.mkdtemp(prefix="triggers-scale-"))
    path = workdir / "scale.sqlite"
    env = environment(f"sqlite:///{path}", workdir)
    config = workdir / "triggers.yaml"
    minute = (datetime.now(UTC).minute + 30) % 60
    config.write_text(declarations(args.triggers, minute))
    load_before = load_average()
    timed_run([TRIGGERS, "db", "upgrade"], env)
    applied = timed_run([TRIGGERS, "apply", str(config)], env)
    again = timed_run([TRIGGERS, "apply", str(config)], env)
    started, started_at = time.monotonic(), time.time()
    log = workdir / "daemon.log"
    daemon = subprocess.Popen(
        [TRIGGERS, "run", "--config", str(config)],
        env={**env, "TRIGGERS_LOG_LEVEL": "info"},
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
    )
    try:
        tick_s = first_tick(path, started, timeout_s=120)
        start_cpu_s = cpu_ns(daemon.pid) / 1e9
        # Start-up work (compiling every schedule, the first listing) settles first.
        time.sleep(args.settle)
        cpu_before, wall_before = cpu_ns(daemon.pid), time.monotonic()
        time.sleep(args.seconds)
        cpu = (cpu_ns(daemon.pid) - cpu_before) / 1e9
        wall = time.monotonic() - wall_before
        memory = memory_mb(daemon.pid)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)
    result: dict[str, object] = {
        "triggers": args.triggers,
        "apply_s": applied.wall_s,
        "apply_cpu_s": applied.cpu_s,
        "apply_unchanged_s": again.wall_s,
        "apply_unchanged_cpu_s": again.cpu_s,
        "first_tick_s": tick_s,
        "all_listed_s": listed_after(log, started_at),
        "start_cpu_s": round(start_cpu_s, 3),
        "idle_window_s": round(wall, 1),
        "idle_cpu_percent_of_core": round(100 * cpu / wall, 3),
        **memory,
        "load_before": load_before,
        "load_after": load_average(),
    }
    if args.keep:
        result["workdir"] = str(workdir)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--triggers", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=30, help="the idle window")
    parser.add_argument("--settle", type=float, default=20, help="wait after the first tick")
    parser.add_argument("--keep", action="store_true", help="keep the work directories")
    args = parser.parse_args()
    samples = [one(args) for _ in range(args.repeat)]
    print(json.dumps({"median": summarize(samples), "samples": samples}, indent=2))


if __name__ == "__main__":
    main()
