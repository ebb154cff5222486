"""A claim's trigger-row writes on PostgreSQL: a pipelined executemany, or one UPDATE ...
FROM (VALUES ...) (what the claim does now), alternating in the same invocation.

A fresh database (dropped afterwards) with N triggers; each round updates a batch of
`--batch` trigger rows (a claim batch's size, 128) in its own transaction, once
each way, alternating; the figures are medians over the rounds of the writes alone
(the commit after them is not timed), in milliseconds of wall-clock time and of
this process's CPU. The database is on this machine, so a
round trip costs little: across a network the one statement saves more.

    TRIGGERS_TEST_PG_URL=postgresql+psycopg://postgres@127.0.0.1:5432/test \\
        .venv/bin/python bench/pg_claim_writes.py --rounds 100
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _measure import load_average

from looms_runtime.testing import temporary_postgres_database
from triggers.clock import to_ms
from triggers.store import schema
from triggers.store._claim_seam import TriggerUpdate
from triggers.store._sql_claim_rows import _UPDATE_TRIGGER, update_triggers_from_values
from triggers.store._sql_common import executemany


def seed(engine: sa.Engine, count: int) -> list[str]:
    now = to_ms(datetime.now(UTC))
    ids = [f"t{n:05d}" for n in range(count)]
    rows = [
        {
            "id": trigger_id,
            "revision": 1,
            "digest": "0" * 64,
            "declaration": {},
            "enabled": True,
            "watermark_at": now,
            "created_at": now,
            "updated_at": now,
        }
        for trigger_id in ids
    ]
    with engine.begin() as conn:
        conn.execute(schema.triggers.insert(), [_as_datetimes(row) for row in rows])
    return ids


def _as_datetimes(row: dict[str, object]) -> dict[str, object]:
    out = dict(row)
    for key in ("watermark_at", "created_at", "updated_at"):
        out[key] = datetime.fromtimestamp(int(row[key]) / 1000, UTC)  # type: ignore[call-overload]
    return out


def updates(ids: list[str], round_number: int) -> list[TriggerUpdate]:
    at = datetime(2030, 1, 1, tzinfo=UTC) + timedelta(seconds=round_number)
    return [
        TriggerUpdate(
            trigger_id=trigger_id,
            active_count=round_number % 5,
            buffered_count=0,
            runs_launched=round_number,
            watermark_at=at,
        )
        for trigger_id in ids
    ]


def timed(engine: sa.Engine, write: object, batch: list[TriggerUpdate]) -> tuple[float, float]:
    with engine.connect() as conn:
        trans = conn.begin()
        wall, cpu = time.perf_counter(), time.process_time()
        write(conn, batch)  # type: ignore[operator]
        spent = (time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000
        trans.commit()  # not timed: the same for both, and most of a claim's wall time
        return spent


def by_executemany(conn: sa.Connection, batch: list[TriggerUpdate]) -> None:
    at = to_ms(datetime.now(UTC))
    executemany(
        conn,
        _UPDATE_TRIGGER,
        [
            {
                "b_id": u.trigger_id,
                "b_active": u.active_count,
                "b_buffered": u.buffered_count,
                "b_runs": u.runs_launched,
                "b_watermark": to_ms(u.watermark_at),
                "b_now": at,
            }
            for u in batch
        ],
    )


def by_values(conn: sa.Connection, batch: list[TriggerUpdate]) -> None:
    update_triggers_from_values(conn, batch, to_ms(datetime.now(UTC)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--triggers", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=100)
    args = parser.parse_args()
    server = os.environ.get(
        "TRIGGERS_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
    )
    load = [load_average()]
    figures: dict[str, dict[str, list[float]]] = {
        name: {"wall_ms": [], "cpu_ms": []} for name in ("executemany", "values")
    }
    with temporary_postgres_database(server, create_tables=False) as url:
        engine = sa.create_engine(url)
        schema.metadata.create_all(engine)
        ids = seed(engine, args.triggers)
        for number in range(args.rounds):
            start = (number * args.batch) % max(1, args.triggers - args.batch)
            batch = updates(ids[start : start + args.batch], number)
            order = [("executemany", by_executemany), ("values", by_values)]
            for name, write in order if number % 2 else reversed(order):
                wall, cpu = timed(engine, write, batch)
                figures[name]["wall_ms"].append(wall)
                figures[name]["cpu_ms"].append(cpu)
        engine.dispose()
    load.append(load_average())
    result: dict[str, object] = {"batch": args.batch, "rounds": args.rounds, "load": load}
    for name, values in figures.items():
        result[name] = {key: round(statistics.median(v), 3) for key, v in values.items()}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
