"""Fire latency of N every-second triggers on the real daemon, beside APScheduler.

Starts `triggers run` as a subprocess on a fresh database with N triggers
(`every: 1s`, `overlap: allow`) whose flow is one no-op Python step that records
when it started (`--step none`: a flow with no steps), lets it run, stops it with
SIGTERM, then reads the fire ledger. Two figures per fire: the launch (`launched_at`
minus the occurrence: the claim, the ledger row and the run start are committed by
then) and the step start (the moment the step's function began, minus the
occurrence: what a scheduler's users wait for, and what the peers' figures mean).
Prints p50/p95/p99/max, how many of the expected fires ran, punctuality (the
share of the expected fires whose step started within 50 ms and within 1 s of the
occurrence), the load average, and the daemon's CPU (its worker processes' apart)
and memory. `--peers` runs APScheduler 3 with the same job count
afterwards, in the same invocation (memory store, and SQLAlchemy store on SQLite;
see bench/apscheduler_peer.py), and prints its figures beside ours.

    .venv/bin/python bench/fire_latency.py --triggers 100 --seconds 30 --peers
    .venv/bin/python bench/fire_latency.py --triggers 1000 --seconds 30 --peers
    .venv/bin/python bench/fire_latency.py --triggers 1000 --daemons 3 \
        --database-url postgresql+psycopg://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _measure import ROOT, TRIGGERS, database, environment, wait_for_launches
from burst import step_starts_of


def declarations(count: int, *, step: str) -> str:
    lines = ["version: 1", "flows:", "  noop:"]
    if step == "python":
        lines += ["    steps:", "      - {id: mark, python: 'bench.steps:mark'}"]
    else:
        lines += ["    steps: []"]
    lines += ["triggers:"]
    lines += [
        f"  - {{id: t{n:05d}, flow: noop, every: 1s, overlap: allow, max_active: 5}}"
        for n in range(count)
    ]
    return "\n".join(lines) + "\n"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def workers_cpu_seconds(pid: int) -> dict[int, float]:
    """CPU of each worker process the daemon `pid` started (its Python steps' processes)."""
    found: dict[int, float] = {}
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return found
    for child in map(int, children):
        try:
            if b"worker_main" in Path(f"/proc/{child}/cmdline").read_bytes():
                found[child] = cpu_seconds(child)
        except OSError:
            continue
    return found


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def run(args: argparse.Namespace) -> dict[str, object]:
    workdir = Path(tempfile.mkdtemp(prefix="triggers-bench-"))
    try:
        with database(args.database_url, workdir) as url:
            return _run(args, url, workdir)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


def _run(args: argparse.Namespace, url: str, workdir: Path) -> dict[str, object]:
    config = workdir / "triggers.yaml"
    config.write_text(declarations(args.triggers, step=args.step))
    step_log = workdir / "steps.log"
    env = environment(url, workdir)
    env["BENCH_STEP_LOG"] = str(step_log)
    if args.worker_processes is not None:
        env["TRIGGERS_WORKER_PROCESSES"] = str(args.worker_processes)
    log = (workdir / "daemon.log").open("w")
    daemons = [
        subprocess.Popen(
            [TRIGGERS, "run", "--config", str(config)],
            env=env,
            stderr=log,
            stdout=subprocess.DEVNULL,
        )
        for _ in range(args.daemons)
    ]
    try:
        measured = _window(args, url, daemons)
    finally:
        _stop(daemons)
    load, cpu_used, workers_used, memory, window_start, window_end = measured
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT occurrence_at, launched_at, outcome, run_id FROM fires "
                "WHERE occurrence_at >= :a AND occurrence_at < :b"
            ),
            {"a": int(window_start * 1000) + 1000, "b": int(window_end * 1000) - 1000},
        ).all()
    engine.dispose()
    step_starts = step_starts_of(step_log)
    seconds = len({r[0] for r in rows})
    expected = seconds * args.triggers
    latencies = [(r[1] - r[0]) for r in rows if r[1] is not None]
    launched = len(latencies)
    result: dict[str, object] = {
        "triggers": args.triggers,
        "daemons": args.daemons,
        "database": "postgresql" if url.startswith("postgresql") else "sqlite",
        "window_s": round(window_end - window_start, 1),
        "expected": expected,
        "launched": launched,
        "ledger_rows": len(rows),
        "outcomes": dict(
            sorted({o: sum(1 for r in rows if r[2] == o) for o in {r[2] for r in rows}}.items())
        ),
        "worker_processes": args.worker_processes,
        "load_average": load,
        "cpu_percent_of_core": round(100 * cpu_used / (window_end - window_start), 1),
        "workers_cpu_percent_of_core": round(100 * workers_used / (window_end - window_start), 1),
        "rss_mb": round(memory, 1),
    }
    if latencies:
        result.update(
            {
                "launch_ms_p50": percentile(latencies, 0.50),
                "launch_ms_p95": percentile(latencies, 0.95),
                "launch_ms_p99": percentile(latencies, 0.99),
                "launch_ms_max": max(latencies),
                "launch_ms_mean": round(statistics.fmean(latencies), 1),
            }
        )
    if args.step == "python":
        starts = [step_starts[r[3]] - r[0] for r in rows if r[3] in step_starts]
        result["steps_started"] = len(starts)
        # Punctuality: of every occurrence expected, the share whose step started
        # within 50 ms and within 1 s of it (a skipped or missed one counts as late).
        result["within_50ms"] = round(sum(1 for v in starts if v <= 50) / max(1, expected), 4)
        result["within_1s"] = round(sum(1 for v in starts if v <= 1000) / max(1, expected), 4)
        if starts:
            result.update(
                {
                    "step_start_ms_p50": percentile(starts, 0.50),
                    "step_start_ms_p95": percentile(starts, 0.95),
                    "step_start_ms_p99": percentile(starts, 0.99),
                    "step_start_ms_max": round(max(starts), 1),
                }
            )
    if args.keep:
        result["workdir"] = str(workdir)
    return result


def _window(
    args: argparse.Namespace, url: str, daemons: list[subprocess.Popen[bytes]]
) -> tuple[list[float], float, float, float, float, float]:
    """The measured window, once every trigger launched: load, CPU, workers' CPU,
    memory and the window's ends."""
    time.sleep(args.warmup)
    # The window opens once the daemons fire, however long a busy machine takes to
    # start them (migrate, apply, first tick), not after a fixed time.
    wait_for_launches(
        url, args.triggers, deadline=time.monotonic() + args.ready_timeout, daemons=daemons
    )
    load = [round(os.getloadavg()[0], 2)]
    cpu_start = sum(cpu_seconds(d.pid) for d in daemons)
    workers_start = [workers_cpu_seconds(d.pid) for d in daemons]
    window_start = time.time()
    time.sleep(args.seconds)
    window_end = time.time()
    cpu_used = sum(cpu_seconds(d.pid) for d in daemons) - cpu_start
    workers_used = sum(
        cpu - before.get(pid, 0.0)
        for d, before in zip(daemons, workers_start, strict=True)
        for pid, cpu in workers_cpu_seconds(d.pid).items()
    )
    memory = max(rss_mb(d.pid) for d in daemons)
    load.append(round(os.getloadavg()[0], 2))
    return load, cpu_used, workers_used, memory, window_start, window_end


def _stop(daemons: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM, then SIGKILL whatever did not stop within a minute (an overloaded
    daemon left behind would spoil every measurement after it)."""
    for daemon in daemons:
        if daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
    for daemon in daemons:
        try:
            daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()


def peers(args: argparse.Namespace) -> list[dict[str, object]]:
    """APScheduler with the same job count, one store after the other, alone on the machine."""
    found = []
    for store in ("memory", "sqlite"):
        command = [
            sys.executable,
            str(ROOT / "bench" / "apscheduler_peer.py"),
            "--jobs",
            str(args.triggers),
            "--seconds",
            str(int(args.seconds)),
            "--store",
            store,
        ]
        output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        found.append(json.loads(output))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--triggers", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--warmup", type=float, default=5)
    parser.add_argument(
        "--ready-timeout",
        type=float,
        default=300,
        help="after the warm-up, how long to wait for every trigger's first launch",
    )
    parser.add_argument("--daemons", type=int, default=1)
    parser.add_argument(
        "--database-url",
        help="a PostgreSQL server (any database on it): each run creates its own there",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--step", choices=["python", "none"], default="python")
    parser.add_argument(
        "--worker-processes",
        type=int,
        help="TRIGGERS_WORKER_PROCESSES for the daemon (default: its own, one per core)",
    )
    parser.add_argument("--peers", action="store_true", help="also run APScheduler alike")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = [run(args)]
    if args.peers:
        results += peers(args)
    if args.json:
        print(json.dumps(results if args.peers else results[0]))
        return
    print(f"# {datetime.now().astimezone():%Y-%m-%d %H:%M} fire latency, every-second triggers")
    for result in results:
        print(f"## {result.get('peer', 'triggers')}")
        for key, value in result.items():
            print(f"{key:>22}: {value}")


if __name__ == "__main__":
    main()
