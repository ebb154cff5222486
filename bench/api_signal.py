"""A signal's round trip over the HTTP API, on a real daemon and a temporary SQLite file.

Each round fires a trigger over HTTP (`POST .../fire`), waits until its run waits in
a `wait_signal` step, then times `POST /runs/{id}/signal` (the answer: the signal is
durable) and the run's completion as `GET /runs/{id}` reports it, polled every
millisecond. The figures (milliseconds: min / median / p90 / max) are printed as one
JSON document. Quote the medians.

    .venv/bin/python bench/api_signal.py --rounds 50
    .venv/bin/python bench/api_signal.py --database-url postgresql+psycopg://USER@HOST/EMPTY_DB
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

TRIGGERS = shutil.which("triggers", path=str(Path(sys.executable).parent)) or "triggers"
TOKEN = "bench-" + "t" * 32
CONFIG = """\
version: 1
flows:
  gated:
    steps:
      - {id: gate, wait_signal: {name: go}}
triggers:
  - {id: gated, flow: gated, cron: "0 3 * * *", overlap: allow, max_active: 1000}
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _until(check: Any, timeout: float = 30.0, pause: float = 0.001) -> Any:
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        found = check()
        if found:
            return found
        time.sleep(pause)
    raise SystemExit("timed out")


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "min": round(ordered[0], 1),
        "median": round(statistics.median(ordered), 1),
        "p90": round(ordered[int(len(ordered) * 0.9) - 1], 1),
        "max": round(ordered[-1], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument(
        "--database-url", help="an empty PostgreSQL database (default: a new SQLite file)"
    )
    options = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="api-bench-"))
    (work / "triggers.yaml").write_text(CONFIG)
    (work / "token").write_text(TOKEN + "\n")
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIGGERS_")}
    env |= {
        "TRIGGERS_DATABASE_URL": options.database_url or f"sqlite:///{work / 'triggers.sqlite'}",
        "TRIGGERS_ENV_FILE": "",
        "TRIGGERS_API_ADDRESS": f"127.0.0.1:{port}",
        "TRIGGERS_API_TOKEN_FILE": str(work / "token"),
        "TRIGGERS_LOG_LEVEL": "warning",
    }
    with (work / "daemon.log").open("w") as log:
        daemon = subprocess.Popen(
            [TRIGGERS, "run", "--config", str(work / "triggers.yaml")], env=env, stderr=log
        )
    client = httpx.Client(
        base_url=f"http://127.0.0.1:{port}/api/v1", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    acks, round_trips = [], []
    try:
        _until(lambda: _answers(client), timeout=60, pause=0.1)
        for number in range(options.rounds):
            key = f"round-{number}"
            client.post("/triggers/gated/fire", json={"key": key}).raise_for_status()
            run_id = _until(lambda k=key: _run_of(client, k))
            _until(lambda r=run_id: _waiting(client, r))
            started = time.perf_counter()
            client.post(f"/runs/{run_id}/signal", json={"name": "go"}).raise_for_status()
            acks.append((time.perf_counter() - started) * 1000)
            _until(lambda r=run_id: client.get(f"/runs/{r}").json()["status"] == "completed")
            round_trips.append((time.perf_counter() - started) * 1000)
    finally:
        client.close()
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)
    print(
        json.dumps(
            {
                "rounds": options.rounds,
                "database": "postgresql" if options.database_url else "sqlite",
                "signal_answered_ms": _summary(acks),
                "signal_to_completed_ms": _summary(round_trips),
            },
            indent=2,
        )
    )


def _answers(client: httpx.Client) -> bool:
    try:
        return client.get("/triggers").status_code == 200
    except httpx.TransportError:
        return False


def _run_of(client: httpx.Client, key: str) -> str | None:
    for row in client.get("/triggers/gated/history", params={"limit": 5}).json():
        if row["manual_key"] == key and row["run_id"]:
            return str(row["run_id"])
    return None


def _waiting(client: httpx.Client, run_id: str) -> bool:
    events = client.get(f"/runs/{run_id}/events").json()
    return any(event["type"] == "wait_started" for event in events)


if __name__ == "__main__":
    main()
