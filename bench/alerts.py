"""Alerts at scale: N every-second triggers failing at once raise N alerts, delivered,
and what that costs the fires beside the same run with alerts off.

Runs the daemon twice in one invocation, each on a fresh database (a SQLite file, or
a database of its own on the PostgreSQL server of --database-url), with N
`every: 1s` triggers (`overlap: allow`, as bench/fire_latency.py) whose one Python
step records when it started and, once a flag file exists, fails. The first run
declares no alerts; the second sends `failed` to a webhook served here (HTTP/1.1,
keep-alive, as a real receiver). The window opens once every trigger has launched;
--fail-after seconds into it the flag file is created: every trigger fails from its
next occurrence, which is one state change each, so one alert each.

Per run: the fire figures of bench/fire_latency.py (launch and step start
p50/p95/p99/max, the share of expected fires whose step started within 50 ms and
1 s) over the whole window, and apart before the flag, over the "burst" (the 5 s from
the flag on) and after it; and with
alerts, how many distinct alerts arrived, how long after being raised (the
payload's `at`), when they were raised and when the last one arrived (both counted
from the flag: a busy daemon settles the failures late, and raises late). Prints the two
runs and the alerts-on figures relative to the alerts-off ones.

    .venv/bin/python bench/alerts.py --triggers 1000 --seconds 20 --repeat 2
    .venv/bin/python bench/alerts.py --triggers 1000 --seconds 20 --repeat 2 \
        --database-url postgresql+psycopg://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _measure import (
    TRIGGERS,
    cpu_seconds,
    database,
    environment,
    load_average,
    percentile,
    wait_for_launches,
)

BURST_S = 5.0
FIGURES = (
    "launch_ms_p50",
    "launch_ms_p95",
    "launch_ms_p99",
    "step_start_ms_p50",
    "step_start_ms_p95",
    "step_start_ms_p99",
    "within_50ms",
    "within_1s",
)


def declarations(triggers: int, port: int | None) -> str:
    lines = ["version: 1"]
    if port is not None:
        lines += [
            "alerts:",
            "  channels:",
            f'    hook: {{webhook: {{url: "http://127.0.0.1:{port}/hook"}}}}',
            "defaults:",
            "  alert: {to: [hook], on: [failed]}",
        ]
    lines += [
        "flows:",
        "  flaky: {steps: [{id: work, python: 'bench.steps:mark_then_fail'}]}",
        "triggers:",
    ]
    lines += [
        f"  - {{id: t{n:05d}, flow: flaky, every: 1s, overlap: allow, max_active: 5}}"
        for n in range(triggers)
    ]
    return "\n".join(lines) + "\n"


class Receiver:
    """A webhook served on a thread; each POST's arrival time and body."""

    def __init__(self) -> None:
        self.arrivals: list[tuple[float, dict[str, object]]] = []
        lock = threading.Lock()
        arrivals = self.arrivals

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as any real receiver
            # As real servers do: without it each answer's body waits for the
            # client's delayed ACK of its headers (40 ms an alert, not the sender's).
            disable_nagle_algorithm = True

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    arrivals.append((time.time(), body))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def run(args: argparse.Namespace, *, alerts: bool) -> dict[str, object]:
    workdir = Path(tempfile.mkdtemp(prefix="triggers-bench-alerts-"))
    receiver = Receiver() if alerts else None
    flag = workdir / "fail-now"
    step_log = workdir / "steps.log"
    config = workdir / "triggers.yaml"
    config.write_text(declarations(args.triggers, receiver.port if receiver else None))
    try:
        with database(args.database_url, workdir) as url:
            env = environment(url, workdir)
            env.update({"BENCH_STEP_LOG": str(step_log), "BENCH_FAIL_FLAG": str(flag)})
            with (workdir / "daemon.log").open("w") as log:
                daemon = subprocess.Popen(
                    [TRIGGERS, "run", "--config", str(config)],
                    env=env,
                    stderr=log,
                    stdout=subprocess.DEVNULL,
                )
                try:
                    time.sleep(args.warmup)
                    wait_for_launches(url, args.triggers, deadline=time.monotonic() + 300)
                    load = [load_average()]
                    cpu_start = cpu_seconds(daemon.pid)
                    window_start = time.time()
                    time.sleep(args.fail_after)
                    flag.touch()
                    failing_from = time.time()
                    time.sleep(max(0.0, window_start + args.seconds - time.time()))
                    window_end = time.time()
                    cpu_used = cpu_seconds(daemon.pid) - cpu_start
                    load.append(load_average())
                finally:
                    daemon.send_signal(signal.SIGTERM)
                    daemon.wait(timeout=120)
            result = figures(url, args, step_log, (window_start, failing_from, window_end))
        result.update(
            {
                "alerts": "on" if alerts else "off",
                "load_average": load,
                "cpu_percent_of_core": round(100 * cpu_used / (window_end - window_start), 1),
            }
        )
        if receiver is not None:
            result.update(received(receiver.arrivals, failing_from))
        return result
    finally:
        if receiver is not None:
            receiver.close()
        shutil.rmtree(workdir, ignore_errors=True)


def figures(
    url: str, args: argparse.Namespace, step_log: Path, times: tuple[float, float, float]
) -> dict[str, object]:
    window_start, failing_from, window_end = times
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT occurrence_at, launched_at, outcome, run_id FROM fires "
                "WHERE occurrence_at >= :a AND occurrence_at < :b"
            ),
            {"a": int(window_start * 1000) + 1000, "b": int(window_end * 1000) - 1000},
        ).all()
        failed = conn.execute(
            sa.text("SELECT count(*), count(DISTINCT trigger_id) FROM fires WHERE outcome='failed'")
        ).one()
        outbox = {
            str(status): int(count)
            for status, count in conn.execute(
                sa.text("SELECT status, count(*) FROM alerts GROUP BY status")
            )
        }
        created = [
            int(at) / 1000 - failing_from
            for (at,) in conn.execute(sa.text("SELECT created_at FROM alerts"))
        ]
    engine.dispose()
    starts: dict[str, float] = {}
    if step_log.exists():
        for line in step_log.read_text().splitlines():
            run_id, _, ns = line.partition(" ")
            starts[run_id] = int(ns) / 1_000_000
    burst_from, burst_to = failing_from * 1000, failing_from * 1000 + BURST_S * 1000
    return {
        "triggers": args.triggers,
        "database": "postgresql" if url.startswith("postgresql") else "sqlite",
        "window_s": round(window_end - window_start, 1),
        "window": fire_figures(rows, starts, args.triggers),
        "before": fire_figures([r for r in rows if r[0] < burst_from], starts, args.triggers),
        "burst": fire_figures(
            [r for r in rows if burst_from <= r[0] < burst_to], starts, args.triggers
        ),
        "after": fire_figures([r for r in rows if r[0] >= burst_to], starts, args.triggers),
        "failed_fires": int(failed[0]),
        "triggers_failed": int(failed[1]),
        "outbox": outbox,
        # When the failures were settled (and their alerts raised), after the flag:
        # how far the fires lag, apart from how long delivery takes.
        "raised_after_flag_s_p50": round(statistics.median(created), 3) if created else None,
        "raised_after_flag_s_max": round(max(created), 3) if created else None,
    }


def fire_figures(
    rows: Sequence[Sequence[object]], starts: dict[str, float], triggers: int
) -> dict[str, object]:
    expected = len({r[0] for r in rows}) * triggers
    launches = [float(r[1]) - float(r[0]) for r in rows if r[1] is not None]  # type: ignore[arg-type]
    begun = [starts[str(r[3])] - float(r[0]) for r in rows if str(r[3]) in starts]  # type: ignore[arg-type]
    found: dict[str, object] = {"expected": expected, "launched": len(launches)}
    if launches:
        found.update(
            {f"launch_ms_p{q}": percentile(launches, q / 100) for q in (50, 95, 99)},
            launch_ms_max=max(launches),
        )
    if begun:
        found.update(
            {f"step_start_ms_p{q}": round(percentile(begun, q / 100), 1) for q in (50, 95, 99)},
            step_start_ms_max=round(max(begun), 1),
        )
    found["within_50ms"] = round(sum(1 for v in begun if v <= 50) / max(1, expected), 4)
    found["within_1s"] = round(sum(1 for v in begun if v <= 1000) / max(1, expected), 4)
    return found


def received(
    arrivals: list[tuple[float, dict[str, object]]], failing_from: float
) -> dict[str, object]:
    def raised(body: dict[str, object]) -> float:
        return datetime.fromisoformat(str(body["at"]).replace("Z", "+00:00")).timestamp()

    lags = [at - raised(body) for at, body in arrivals]
    return {
        "alerts_received": len(arrivals),
        "distinct_alerts": len({str(body["id"]) for _, body in arrivals}),
        "triggers_alerted": len({body["trigger_id"] for _, body in arrivals}),
        "raised_to_received_s_p50": round(statistics.median(lags), 3) if lags else None,
        "raised_to_received_s_max": round(max(lags), 3) if lags else None,
        "last_received_after_flag_s": round(max(a for a, _ in arrivals) - failing_from, 3)
        if arrivals
        else None,
    }


def compare(off: dict[str, Any], on: dict[str, Any]) -> dict[str, object]:
    """Each fire figure with alerts on relative to off: +0.05 is 5 % more (worse for
    latencies, better for the shares)."""
    found: dict[str, object] = {}
    for part in ("window", "before", "burst", "after"):
        before, after = off[part], on[part]
        found[part] = {
            key: round(after[key] / before[key] - 1, 3)
            for key in FIGURES
            if isinstance(before.get(key), int | float) and before[key] and key in after
        }
    return found


def median(samples: Sequence[Any]) -> Any:
    """The median of each number over the samples (alike dicts), the rest the first's."""
    first = samples[0]
    if isinstance(first, dict):
        return {key: median([s[key] for s in samples if key in s]) for key in first}
    numbers = [s for s in samples if isinstance(s, int | float) and not isinstance(s, bool)]
    if numbers:
        return round(statistics.median(numbers), 4)
    return first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--triggers", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=20, help="the measured window")
    parser.add_argument("--warmup", type=float, default=5)
    parser.add_argument("--fail-after", type=float, default=5, help="into the window")
    parser.add_argument(
        "--database-url",
        help="a PostgreSQL server (any database on it): each run creates its own there",
    )
    parser.add_argument("--only", choices=["on", "off"], help="one run only")
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs of each, alternating; medians printed"
    )
    parser.add_argument("--json", action="store_true", help="one JSON document")
    args = parser.parse_args()
    modes = [m for m in ("off", "on") if args.only in (None, m)]
    samples: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    for n in range(args.repeat):
        for mode in modes if n % 2 == 0 else reversed(modes):
            samples[mode].append(run(args, alerts=mode == "on"))
            print(json.dumps(samples[mode][-1]), file=sys.stderr)  # kept if a later run fails
    results: dict[str, object] = {m: median(found) for m, found in samples.items()}
    if args.repeat > 1:
        results["samples"] = samples
    if len(modes) == 2:
        results["on_vs_off"] = compare(median(samples["off"]), median(samples["on"]))
    if args.json:
        print(json.dumps(results))
        return
    print(f"# {datetime.now().astimezone():%Y-%m-%d %H:%M} alerts at scale")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
