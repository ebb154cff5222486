"""A burst: N triggers due in the same second, on one daemon or several sharing a database.

Applies N hourly triggers whose occurrence is one second `--lead` seconds from now
(`cron: "S M * * * *"`, all the same), starts `--daemons` daemons, waits for that
second to come, and reads the ledger: how many of the N occurrences were launched,
how long after the occurrence the last one was (`launched_at` minus the occurrence:
the claim, its ledger row and the run start are committed by then), p50/p99, and
whether each occurrence was decided exactly once (one ledger row per trigger, one run
per idempotency key). The daemons' CPU over the burst goes beside it.

    .venv/bin/python bench/burst.py --triggers 10000
    .venv/bin/python bench/burst.py --triggers 10000 --daemons 3 \
        --database-url postgresql+psycopg://postgres@127.0.0.1:5432/bench
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa
from _measure import (
    TRIGGERS,
    cpu_ns,
    environment,
    load_average,
    memory_mb,
    percentile,
    summarize,
    timed_run,
)


def declarations(count: int, at: datetime, step: str) -> str:
    lines = ["version: 1", "flows:", "  noop:"]
    if step == "python":
        lines += ["    steps:", "      - {id: mark, python: 'bench.steps:mark'}"]
    else:
        lines += ["    steps: []"]
    lines += ["triggers:"]
    cron = f"{at.second} {at.minute} * * * *"
    lines += [f"  - {{id: t{n:06d}, flow: noop, cron: '{cron}'}}" for n in range(count)]
    return "\n".join(lines) + "\n"


def fresh_database(url: str) -> None:
    """An empty PostgreSQL database at `url` (SQLite files are new anyway)."""
    if not url.startswith("postgresql"):
        return
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP SCHEMA public CASCADE")
        conn.exec_driver_sql("CREATE SCHEMA public")
    engine.dispose()


def ledger(
    url: str, occurrence_ms: int, step_starts: dict[str, float] | None = None
) -> dict[str, object]:
    step_starts = step_starts or {}
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT trigger_id, outcome, claimed_at, launched_at, run_id FROM fires "
                "WHERE occurrence_at = :at"
            ),
            {"at": occurrence_ms},
        ).all()
        suffix = datetime.fromtimestamp(occurrence_ms / 1000, UTC).isoformat()
        suffix = suffix.replace("+00:00", "Z")
        runs = conn.execute(
            sa.text(
                "SELECT count(*), count(DISTINCT idempotency_key) FROM looms_runs "
                "WHERE idempotency_key LIKE :key"
            ),
            {"key": f"%:{suffix[:19]}%"},
        ).one()
    engine.dispose()
    launched = [r.launched_at - occurrence_ms for r in rows if r.launched_at is not None]
    claimed = [r.claimed_at - occurrence_ms for r in rows if r.claimed_at is not None]
    per_trigger = len({r.trigger_id for r in rows})
    result: dict[str, object] = {
        "ledger_rows": len(rows),
        "ledger_rows_per_trigger_max": 1 if per_trigger == len(rows) else "duplicates",
        "exactly_once": per_trigger == len(rows) and runs[0] == runs[1] == len(launched),
        "runs": runs[0],
        "launched": len(launched),
        "outcomes": sorted({r.outcome for r in rows}),
    }
    starts = [step_starts[r.run_id] - occurrence_ms for r in rows if r.run_id in step_starts]
    for name, values in (("launch", launched), ("claim", claimed), ("step_start", starts)):
        if values:
            result[f"{name}_ms_p50"] = round(percentile(values, 0.5), 1)
            result[f"{name}_ms_p99"] = round(percentile(values, 0.99), 1)
            result[f"{name}_ms_max"] = round(max(values), 1)
    if step_starts and rows:
        # Punctuality: of the burst's occurrences, the share whose step started
        # within 50 ms and within 1 s of their second.
        result["within_50ms"] = round(sum(1 for v in starts if v <= 50) / len(rows), 4)
        result["within_1s"] = round(sum(1 for v in starts if v <= 1000) / len(rows), 4)
    return result


def step_starts_of(path: Path) -> dict[str, float]:
    """run id -> when its step started (epoch ms), from the steps' own log."""
    found: dict[str, float] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            run_id, _, ns = line.partition(" ")
            found[run_id] = int(ns) / 1_000_000
    return found


def one(args: argparse.Namespace) -> dict[str, object]:
    workdir = Path(tempfile.mkdtemp(prefix="triggers-burst-"))
    url = args.database_url or f"sqlite:///{workdir / 'burst.sqlite'}"
    fresh_database(url)
    env = environment(url, workdir)
    env["BENCH_STEP_LOG"] = str(workdir / "steps.log")
    load_before = load_average()
    timed_run([TRIGGERS, "db", "upgrade"], env)
    at = (datetime.now(UTC) + timedelta(seconds=args.lead)).replace(microsecond=0)
    config = workdir / "triggers.yaml"
    config.write_text(declarations(args.triggers, at, args.step))
    applied = timed_run([TRIGGERS, "apply", str(config)], env)
    log = (workdir / "daemon.log").open("w")
    daemons = [
        subprocess.Popen(
            [TRIGGERS, "run", "--config", str(config)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        for _ in range(args.daemons)
    ]
    occurrence_ms = int(at.timestamp() * 1000)
    try:
        wait_s = at.timestamp() - time.time() - 1
        if wait_s < 0:
            raise SystemExit(f"--lead {args.lead} s was too short: apply took {applied.wall_s} s")
        time.sleep(wait_s)
        cpu_before = [cpu_ns(d.pid) for d in daemons]
        time.sleep(1 + args.window)
        cpu = [(cpu_ns(d.pid) - b) / 1e9 for d, b in zip(daemons, cpu_before, strict=True)]
        memory = max((memory_mb(d.pid) for d in daemons), key=lambda m: m["rss_mb"])
    finally:
        for daemon in daemons:
            daemon.send_signal(signal.SIGTERM)
        for daemon in daemons:
            daemon.wait(timeout=120)
    result: dict[str, object] = {
        "triggers": args.triggers,
        "daemons": args.daemons,
        "database": "postgresql" if url.startswith("postgresql") else "sqlite",
        "apply_s": applied.wall_s,
        **ledger(url, occurrence_ms, step_starts_of(workdir / "steps.log")),
        "cpu_s_per_daemon": [round(c, 2) for c in cpu],
        "cpu_s": round(sum(cpu), 2),
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
    parser.add_argument("--daemons", type=int, default=1)
    parser.add_argument("--database-url", help="default: a fresh SQLite file")
    parser.add_argument("--lead", type=float, default=30, help="seconds until the burst")
    parser.add_argument("--window", type=float, default=10, help="seconds watched after it")
    parser.add_argument("--step", choices=["python", "none"], default="none")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the work directories")
    args = parser.parse_args()
    samples = [one(args) for _ in range(args.repeat)]
    print(json.dumps({"median": summarize(samples), "samples": samples}, indent=2))


if __name__ == "__main__":
    main()
