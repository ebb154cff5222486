"""The dashboard's pages at scale, and what an open dashboard costs the daemon.

Applies `--triggers` hourly triggers, writes `--rows` settled ledger rows straight into
the `fires` table (as bench/history.py does), starts the real daemon with
`TRIGGERS_API_ADDRESS`, and times, over HTTP from this process, the overview, the
trigger list's first page, a trigger's page and a run's page: median and p90 of
`--repeat` requests each. Then the daemon's CPU over `--idle-s` seconds with no
browser, and over as long with one open tab's refreshes (the overview and a
trigger's page, every 5 s each, with the ETag of the last answer, as dashboard.js
asks them), as a share of a core; and the daemon's CPU for one refresh of an unchanged
page (a 304; its CPU over 20 in a row less its idle share), from which an open tab's
cost follows without the idle daemon's noise.

    .venv/bin/python bench/dashboard.py
    .venv/bin/python bench/dashboard.py \
        --database-url postgresql+psycopg://postgres@127.0.0.1:5432/bench
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from _measure import TRIGGERS, cpu_ns, environment, load_average, percentile, timed_run
from burst import fresh_database
from history import declarations, populate

REFRESH_S = 5.0
STATUSES: dict[int, int] = {}
"""The open tab's refreshes by HTTP status (304: unchanged, nothing drawn)."""


def free_address() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


def timed(client: httpx.Client, path: str, repeat: int) -> dict[str, float]:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        answer = client.get(path)
        times.append((time.perf_counter() - started) * 1000)
        if answer.status_code != 200:
            raise SystemExit(f"GET {path}: {answer.status_code}\n{answer.text[:2000]}")
    return {
        "first_ms": round(times[0], 1),
        "median_ms": round(statistics.median(times[1:] or times), 1),
        "p90_ms": round(percentile(times[1:] or times, 0.9), 1),
    }


def share_of_core(pid: int, seconds: float, client: httpx.Client | None, paths: list[str]) -> float:
    """The daemon's CPU over `seconds`, in % of a core; with a client, it refreshes
    `paths` every REFRESH_S seconds meanwhile (one open tab)."""
    before, started = cpu_ns(pid), time.monotonic()
    next_at = started
    tags: dict[str, str] = {}
    while time.monotonic() - started < seconds:
        if client is not None and time.monotonic() >= next_at:
            for path in paths:  # as dashboard.js asks: with the ETag of what it shows
                headers = {"X-Dashboard-Refresh": "1"}
                if path in tags:
                    headers["If-None-Match"] = tags[path]
                answer = client.get(path, headers=headers)
                if answer.status_code == 200:
                    tags[path] = answer.headers.get("etag", "")
                STATUSES[answer.status_code] = STATUSES.get(answer.status_code, 0) + 1
            next_at += REFRESH_S
        time.sleep(0.05)
    spent = (cpu_ns(pid) - before) / 1e9
    return round(100 * spent / (time.monotonic() - started), 3)


def refresh_cost(client: httpx.Client, pid: int, path: str, idle_pct: float) -> float:
    """The daemon's CPU for one refresh of an unchanged `path` (answered 304), in ms:
    its CPU over 20 back-to-back refreshes, less what it spends idle meanwhile."""
    tag = client.get(path).headers["etag"]
    before, started = cpu_ns(pid), time.monotonic()
    for _ in range(20):
        client.get(path, headers={"X-Dashboard-Refresh": "1", "If-None-Match": tag})
    elapsed = time.monotonic() - started
    spent_ms = (cpu_ns(pid) - before) / 1e6 - idle_pct / 100 * elapsed * 1000
    return round(max(spent_ms, 0.0) / 20, 2)


def transactions(url: str, client: httpx.Client, path: str) -> float:
    """PostgreSQL's transactions (commits and rollbacks) per request of `path`, over
    20 requests (the daemon's own ticks meanwhile included: a few)."""
    import sqlalchemy as sa  # noqa: PLC0415

    engine = sa.create_engine(url, poolclass=sa.NullPool)
    count = sa.text(
        "SELECT xact_commit + xact_rollback FROM pg_stat_database"
        " WHERE datname = current_database()"
    )

    def counted() -> int:
        time.sleep(1.5)  # backends flush their counts at most once a second
        with engine.connect() as conn:
            return int(conn.execute(count).scalar_one())

    before = counted()
    for _ in range(20):
        client.get(path)
    after = counted() - 1  # the reading of `before` is a transaction too
    engine.dispose()
    return round((after - before) / 20, 1)


def wait_for_answers(client: httpx.Client, daemon: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120
    while True:
        try:
            if client.get("/login").status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or daemon.poll() is not None:
            raise SystemExit("the daemon did not answer")
        time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--triggers", type=int, default=10_000)
    parser.add_argument("--database-url", help="default: a fresh SQLite file")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--idle-s", type=float, default=60.0)
    args = parser.parse_args()
    args.hot_rows = args.rows // args.triggers  # as many as the others: no hot trigger
    workdir = Path(tempfile.mkdtemp(prefix="triggers-dashboard-"))
    url = args.database_url or f"sqlite:///{workdir / 'dashboard.sqlite'}"
    fresh_database(url)
    env = environment(url, workdir)
    config = workdir / "triggers.yaml"
    config.write_text(declarations(args.triggers))
    timed_run([TRIGGERS, "apply", str(config)], env)
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    populate_s = populate(url, args, int((now - timedelta(hours=1)).timestamp() * 1000))
    address = free_address()
    env["TRIGGERS_API_ADDRESS"] = address
    log = (workdir / "daemon.log").open("w")
    daemon = subprocess.Popen([TRIGGERS, "run", "--config", str(config)], env=env, stderr=log)
    result: dict[str, object] = {
        "database": "postgresql" if url.startswith("postgresql") else "sqlite",
        "triggers": args.triggers,
        "rows": args.rows,
        "populate_s": populate_s,
        "load_before": load_average(),
    }
    try:
        client = httpx.Client(base_url=f"http://{address}", timeout=60)
        wait_for_answers(client, daemon)
        timed_run([TRIGGERS, "fire", "t000042"], env)
        time.sleep(5)  # its run, and the daemon's first listing of every trigger
        run_id = json.loads(timed_run([TRIGGERS, "history", "t000042", "--json"], env).stdout)[0][
            "run_id"
        ]
        pages = {
            "overview": "/",
            "trigger_list": "/triggers",
            "trigger": "/triggers/t000042",
            "run": f"/runs/{run_id}",
            # The list's search and filters: none matches, so each looks at every trigger.
            "search_none": "/triggers?q=no_such%25trigger",
            "paused": "/triggers?state=paused",
            "failing": "/triggers?state=failing",
        }
        result["pages"] = {name: timed(client, path, args.repeat) for name, path in pages.items()}
        if url.startswith("postgresql"):
            result["trigger_page_transactions"] = transactions(url, client, "/triggers/t000042")
        result["idle_cpu_pct"] = share_of_core(daemon.pid, args.idle_s, None, [])
        result["open_tab_cpu_pct"] = share_of_core(
            daemon.pid, args.idle_s, client, ["/", "/triggers/t000042"]
        )
        idle_pct = float(result["idle_cpu_pct"])  # type: ignore[arg-type]
        refreshes = {
            path: refresh_cost(client, daemon.pid, path, idle_pct)
            for path in ("/", "/triggers/t000042")
        }
        result["refresh_304_cpu_ms"] = refreshes
        result["open_tab_estimate_pct"] = round(
            sum(refreshes.values()) / (REFRESH_S * 1000) * 100, 3
        )
        result["open_tab_statuses"] = {str(k): v for k, v in sorted(STATUSES.items())}
        result["dashboard_cost_pct"] = round(
            float(result["open_tab_cpu_pct"]) - float(result["idle_cpu_pct"]),
            3,  # type: ignore[arg-type]
        )
        client.close()
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
        log.close()
    result["load_after"] = load_average()
    shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
