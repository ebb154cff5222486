"""Alerts at scale: N every-second triggers failing at once raise N alerts, delivered.

Starts the daemon on a fresh SQLite file (or --database-url) with N triggers whose
one Python step fails, every alert going to a webhook served here; after --seconds
it reports how many distinct alerts arrived (one per trigger is right, however many
times each failed), and how long after being raised (the payload's `at`) and after
the first failure each arrived.

    .venv/bin/python bench/alerts.py --triggers 1000 --seconds 20
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
import threading
import time
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]
TRIGGERS = shutil.which("triggers", path=str(Path(sys.executable).parent)) or "triggers"


def declarations(triggers: int, port: int) -> str:
    lines = [
        "version: 1",
        "alerts:",
        "  channels:",
        f'    hook: {{webhook: {{url: "http://127.0.0.1:{port}/hook"}}}}',
        "defaults:",
        "  alert: {to: [hook], on: [failed]}",
        "flows:",
        "  bad: {steps: [{id: boom, python: 'bench.steps:fail'}]}",
        "triggers:",
    ]
    lines += [f"  - {{id: t{n:05d}, flow: bad, every: 1s}}" for n in range(triggers)]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--triggers", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--database-url")
    args = parser.parse_args()
    arrivals: list[tuple[float, dict[str, object]]] = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                arrivals.append((time.time(), body))
            self.send_response(200)
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    workdir = Path(tempfile.mkdtemp(prefix="triggers-bench-alerts-"))
    config = workdir / "triggers.yaml"
    config.write_text(declarations(args.triggers, server.server_address[1]))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIGGERS_")}
    env.update(
        {
            "TRIGGERS_DATABASE_URL": args.database_url or f"sqlite:///{workdir / 'b.sqlite'}",
            "TRIGGERS_LOG_LEVEL": "warning",
            "TRIGGERS_STATE_DIRECTORY": str(workdir / "state"),
            "PYTHONPATH": str(ROOT),
        }
    )
    with (workdir / "daemon.log").open("w") as log:
        daemon = subprocess.Popen([TRIGGERS, "run", "--config", str(config)], env=env, stderr=log)
        time.sleep(args.seconds)
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)
    server.shutdown()
    engine = sa.create_engine(env["TRIGGERS_DATABASE_URL"])
    with engine.connect() as conn:
        outbox = dict(
            conn.execute(sa.text("SELECT status, count(*) FROM alerts GROUP BY status")).all()
        )
        failed_fires = conn.execute(
            sa.text(
                "SELECT count(*), count(DISTINCT trigger_id) FROM fires WHERE outcome = 'failed'"
            )
        ).one()
    engine.dispose()
    ids = [str(body["id"]) for _, body in arrivals]
    lags = [
        at - datetime.fromisoformat(str(body["at"]).replace("Z", "+00:00")).timestamp()
        for at, body in arrivals
    ]
    first_raised = min(
        (
            datetime.fromisoformat(str(b["at"]).replace("Z", "+00:00")).timestamp()
            for _, b in arrivals
        ),
        default=0.0,
    )
    report = {
        "triggers": args.triggers,
        "alerts_received": len(arrivals),
        "distinct_alerts": len(set(ids)),
        "triggers_alerted": len({body["trigger_id"] for _, body in arrivals}),
        "raised_to_received_p50_s": round(statistics.median(lags), 3) if lags else None,
        "raised_to_received_max_s": round(max(lags), 3) if lags else None,
        "last_received_after_first_raised_s": round(max(a for a, _ in arrivals) - first_raised, 3)
        if arrivals
        else None,
        "outbox": {str(k): int(v) for k, v in outbox.items()},
        "failed_fires": int(failed_fires[0]),
        "triggers_failed": int(failed_fires[1]),
        "load": os.getloadavg()[0],
    }
    print(json.dumps(report, indent=2))
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
