"""`history` of one trigger in a large ledger: the query alone, and the whole CLI call.

Applies `--triggers` hourly triggers, then writes `--rows` settled ledger rows straight
into the `fires` table (the daemon would take years): `--hot-rows` of them for trigger
t000000, the rest spread evenly over the others. Then times, for a typical trigger and
for the hot one, the store's history query in this process (median of `--repeat`
calls) and `triggers history ID --json` as a user runs it (median of `--cli-repeat`
processes, wall-clock and CPU), with the query plan the database chose.

    .venv/bin/python bench/history.py --rows 1000000
    .venv/bin/python bench/history.py --rows 1000000 \
        --database-url postgresql+psycopg://postgres@127.0.0.1:5432/bench
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa
from _measure import TRIGGERS, environment, load_average, timed_run
from burst import fresh_database

from triggers.model import Outcome
from triggers.settings import Settings
from triggers.store.database import open_database
from triggers.store.protocol import HistoryQuery
from triggers.store.sql import SqlTriggerStore

_HOUR_MS = 3_600_000
_BATCH = 20_000


def declarations(count: int) -> str:
    lines = ["version: 1", "flows:", "  noop:", "    steps: []", "triggers:"]
    lines += [f"  - {{id: t{n:06d}, flow: noop, cron: '0 * * * *'}}" for n in range(count)]
    return "\n".join(lines) + "\n"


def rows_of(trigger: int, count: int, newest_ms: int) -> list[dict[str, object]]:
    trigger_id = f"t{trigger:06d}"
    found = []
    for index in range(count):
        at = newest_ms - index * _HOUR_MS
        iso = datetime.fromtimestamp(at / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        # One in twenty skipped by the overlap policy, as a busy trigger's ledger has.
        skipped = index % 20 == 7
        found.append(
            {
                "trigger_id": trigger_id,
                "occurrence_at": at,
                "count": 1,
                "manual_key": "",
                "idempotency_key": None if skipped else f"{trigger_id}:{iso}",
                "kind": "scheduled",
                "outcome": "skipped" if skipped else "completed",
                "reason": "overlap" if skipped else None,
                "run_id": None if skipped else f"run-{trigger}-{index}",
                "revision": 1,
                "host": "bench",
                "claimed_at": at + 3,
                "launched_at": None if skipped else at + 9,
                "settled_at": at + 700,
            }
        )
    return found


def populate(url: str, args: argparse.Namespace, newest_ms: int) -> float:
    """Write the ledger rows; returns the seconds it took."""
    started = time.monotonic()
    engine = sa.create_engine(url)
    fires = sa.Table("fires", sa.MetaData(), autoload_with=engine)
    others = max(1, args.triggers - 1)
    per_other = (args.rows - args.hot_rows) // others
    plan = [(0, args.hot_rows)] + [(n, per_other) for n in range(1, args.triggers)]
    pending: list[dict[str, object]] = []
    with engine.begin() as conn:
        for trigger, count in plan:
            pending += rows_of(trigger, count, newest_ms)
            if len(pending) >= _BATCH:
                conn.execute(fires.insert(), pending)
                pending = []
        if pending:
            conn.execute(fires.insert(), pending)
        if url.startswith("postgresql"):
            conn.exec_driver_sql("ANALYZE fires")
        else:
            conn.exec_driver_sql("ANALYZE")
    engine.dispose()
    return round(time.monotonic() - started, 1)


def plan_of(url: str, trigger_id: str) -> str:
    """The plan of the history query, as the database explains it."""
    engine = sa.create_engine(url)
    text = (
        "SELECT * FROM fires WHERE trigger_id = :t AND manual_key = '' "
        "ORDER BY occurrence_at DESC, id DESC LIMIT 51"
    )
    with engine.connect() as conn:
        if url.startswith("postgresql"):
            rows = conn.execute(sa.text(f"EXPLAIN {text}"), {"t": trigger_id}).all()
            found = " / ".join(r[0].strip() for r in rows)
        else:
            rows = conn.execute(sa.text(f"EXPLAIN QUERY PLAN {text}"), {"t": trigger_id}).all()
            found = " / ".join(r[-1] for r in rows)
    engine.dispose()
    return found


def query_ms(store: SqlTriggerStore, query: HistoryQuery, repeat: int) -> dict[str, float]:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        store.history(query)
        times.append((time.perf_counter() - started) * 1000)
    return {"median_ms": round(statistics.median(times), 2), "max_ms": round(max(times), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--triggers", type=int, default=1_000)
    parser.add_argument("--hot-rows", type=int, default=100_000)
    parser.add_argument("--database-url", help="default: a fresh SQLite file")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--cli-repeat", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="triggers-history-"))
    url = args.database_url or f"sqlite:///{workdir / 'history.sqlite'}"
    fresh_database(url)
    env = environment(url, workdir)
    config = workdir / "triggers.yaml"
    config.write_text(declarations(args.triggers))
    timed_run([TRIGGERS, "apply", str(config)], env)
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    populate_s = populate(url, args, int((now - timedelta(hours=1)).timestamp() * 1000))
    db = open_database(Settings(database_url=url).database_location())
    store = SqlTriggerStore(db)
    result: dict[str, object] = {
        "rows": args.rows,
        "triggers": args.triggers,
        "database": "postgresql" if url.startswith("postgresql") else "sqlite",
        "populate_s": populate_s,
        "load_before": load_average(),
    }
    typical, hot = f"t{min(1, args.triggers - 1):06d}", "t000000"
    since = now - timedelta(days=2)
    for name, trigger_id in (("typical", typical), ("hot", hot)):
        queries = {
            "history": HistoryQuery(trigger_id=trigger_id, limit=51),
            "since_2d": HistoryQuery(trigger_id=trigger_id, since=since, limit=51),
            "outcome_skipped": HistoryQuery(
                trigger_id=trigger_id, outcomes=frozenset({Outcome.SKIPPED}), limit=51
            ),
        }
        result[name] = {
            "trigger_id": trigger_id,
            **{key: query_ms(store, query, args.repeat) for key, query in queries.items()},
            "plan": plan_of(url, trigger_id),
        }
        command = [TRIGGERS, "history", trigger_id, "--json"]
        cli = [timed_run(command, env) for _ in range(args.cli_repeat)]
        result[name]["cli_s"] = round(statistics.median(c.wall_s for c in cli), 3)
        result[name]["cli_cpu_s"] = round(statistics.median(c.cpu_s for c in cli), 3)
        result[name]["cli_rows"] = len(json.loads(cli[0].stdout))
    result["load_after"] = load_average()
    db.dispose()
    if args.keep:
        result["workdir"] = str(workdir)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
