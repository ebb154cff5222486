"""A minute's worth: N every-minute triggers spread over the minute as `H` spreads them.

Applies N triggers `cron: "H * * * * *"` (each at a second of the minute derived
from its id, so about N/60 come due each second, all N within each minute) with a
flow of no steps, starts `--daemons` daemons on one database (PostgreSQL for
several), lets them run `--minutes` minutes (from the next whole second; `--seconds`
for a shorter window) once every daemon is up and a warm-up has passed, and reads the
ledger over that window: every occurrence expected (from each id's own second), each
decided exactly once
(one ledger row per trigger and occurrence, one run per idempotency key), the share
launched within 1 s of its occurrence (and within 50 ms), p50/p99/max, the daemons'
summed CPU and each one's memory.

    .venv/bin/python bench/spread.py --triggers 100000 --daemons 3 --minutes 2 \\
        --database-url postgresql+psycopg://postgres@127.0.0.1:5432/bench
    .venv/bin/python bench/spread.py --triggers 600 --minutes 1
    .venv/bin/python bench/spread.py --triggers 60 --seconds 10 --warmup 1  # the short version

The PostgreSQL database given is emptied first (`DROP SCHEMA public CASCADE`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa
from _measure import (
    TRIGGERS,
    cpu_ns,
    environment,
    load_average,
    memory_mb,
    percentile,
    timed_run,
    wait_for_launches,
)
from burst import fresh_database
from croniter import croniter


def declarations(count: int) -> str:
    lines = ["version: 1", "flows:", "  noop:", "    steps: []", "triggers:"]
    lines += [f"  - {{id: s{n:06d}, flow: noop, cron: 'H * * * * *'}}" for n in range(count)]
    return "\n".join(lines) + "\n"


def expected(count: int, start_s: int, window_s: int) -> int:
    """The occurrences due in [start_s, start_s + window_s): each id has its own second."""
    if window_s >= 60:
        return count * (window_s // 60) + expected(count, start_s, window_s % 60)
    seconds = {(start_s + k) % 60 for k in range(window_s)}
    return sum(
        1
        for n in range(count)
        # croniter's own draw: six fields put the seconds last (index 5), as triggers does
        if int(croniter("* * * * * H", hash_id=f"s{n:06d}".encode()).expanded[5][0]) in seconds
    )


def ledger(url: str, start_ms: int, end_ms: int) -> dict[str, object]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT trigger_id, occurrence_at, outcome, launched_at, run_id FROM fires "
                "WHERE occurrence_at >= :a AND occurrence_at < :b AND kind = 'scheduled'"
            ),
            {"a": start_ms, "b": end_ms},
        ).all()
        keys = conn.execute(
            sa.text(
                "SELECT count(*), count(DISTINCT idempotency_key) FROM fires "
                "WHERE occurrence_at >= :a AND occurrence_at < :b AND run_id IS NOT NULL"
            ),
            {"a": start_ms, "b": end_ms},
        ).one()
    engine.dispose()
    identities = {(r.trigger_id, r.occurrence_at) for r in rows}
    late = [r.launched_at - r.occurrence_at for r in rows if r.launched_at is not None]
    result: dict[str, object] = {
        "ledger_rows": len(rows),
        "exactly_once": len(identities) == len(rows) and keys[0] == keys[1],
        "outcomes": dict(
            sorted(
                {
                    o: sum(1 for r in rows if r.outcome == o) for o in {r.outcome for r in rows}
                }.items()
            )
        ),
    }
    if late:
        result.update(
            {
                "within_50ms": round(sum(1 for v in late if v <= 50) / len(rows), 4),
                "within_1s": round(sum(1 for v in late if v <= 1000) / len(rows), 4),
                "launch_ms_p50": percentile(late, 0.5),
                "launch_ms_p99": percentile(late, 0.99),
                "launch_ms_max": max(late),
            }
        )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--triggers", type=int, default=100_000)
    parser.add_argument("--daemons", type=int, default=1)
    parser.add_argument("--minutes", type=int, default=1, help="minutes measured")
    parser.add_argument("--seconds", type=int, help="seconds measured instead of minutes")
    parser.add_argument(
        "--warmup", type=float, default=20, help="seconds once every daemon launches"
    )
    parser.add_argument("--ready-timeout", type=float, default=300)
    parser.add_argument("--database-url", help="default: a fresh SQLite file")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="triggers-spread-"))
    url = args.database_url or f"sqlite:///{workdir / 'spread.sqlite'}"
    fresh_database(url)
    env = environment(url, workdir)
    load_before = load_average()
    timed_run([TRIGGERS, "db", "upgrade"], env)
    config = workdir / "triggers.yaml"
    config.write_text(declarations(args.triggers))
    applied = timed_run([TRIGGERS, "apply", str(config)], env)
    with (workdir / "daemon.log").open("w") as log:
        daemons = [
            subprocess.Popen(
                [TRIGGERS, "run", "--config", str(config)],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
            for _ in range(args.daemons)
        ]
    window = args.seconds or 60 * args.minutes
    try:
        # The warm-up starts once the daemons launch, however long a busy machine takes
        # to start them; each trigger is due once in any 60 s, so the window starts at
        # the next second.
        wait_for_launches(url, 1, deadline=time.monotonic() + args.ready_timeout)
        time.sleep(args.warmup)
        start_s = int(time.time()) + 1
        time.sleep(max(0.0, start_s - time.time()))
        cpu_before = [cpu_ns(d.pid) for d in daemons]
        time.sleep(window)
        cpu = [(cpu_ns(d.pid) - b) / 1e9 for d, b in zip(daemons, cpu_before, strict=True)]
        memory = [memory_mb(d.pid) for d in daemons]
        time.sleep(5)  # the last second's launches commit
    finally:
        for daemon in daemons:
            daemon.send_signal(signal.SIGTERM)
        for daemon in daemons:
            daemon.wait(timeout=120)
    result: dict[str, object] = {
        "triggers": args.triggers,
        "daemons": args.daemons,
        "database": "postgresql" if url.startswith("postgresql") else "sqlite",
        "window_s": window,
        "expected": expected(args.triggers, start_s, window),
        "apply_s": applied.wall_s,
        **ledger(url, start_s * 1000, (start_s + window) * 1000),
        "cpu_s_per_daemon": [round(c, 2) for c in cpu],
        "cpu_percent_of_core_summed": round(100 * sum(cpu) / window, 1),
        "rss_mb_per_daemon": [m["rss_mb"] for m in memory],
        "load_before": load_before,
        "load_after": load_average(),
    }
    if args.keep:
        result["workdir"] = str(workdir)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
