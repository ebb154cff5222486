"""Many concurrent API requests against a real daemon: every one answered, none closed.

A daemon (SQLite, 20 every-second triggers of no step) serves the API on loopback;
`--in-flight` threads, each with its own keep-alive client, send `--requests` GETs
in all over the query routes (and a manual fire every fiftieth), pausing at random
now and then for about the server's keep-alive timeout (and httpx's), so that
requests also meet connections the server is closing. Printed as one JSON document: answers by
status code, transport failures by kind (a request closed without an answer is a
`RemoteProtocolError`), latency percentiles, and whether the triggers kept firing.

    .venv/bin/python bench/api_storm.py --requests 10000 --in-flight 50
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

TRIGGERS = shutil.which("triggers", path=str(Path(sys.executable).parent)) or "triggers"
ROUTES = (
    "/triggers",
    "/triggers/t0",
    "/triggers/t1/history",
    "/triggers/t2/next",
    "/history?limit=50",
    "/runs?limit=20",
    "/alerts",
    "/audit-log",
    "/pools",
)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _declarations(count: int) -> str:
    lines = ["version: 1", "flows:", "  noop: {steps: []}", "triggers:"]
    lines += [f"  - {{id: t{n}, flow: noop, every: 1s}}" for n in range(count)]
    return "\n".join(lines) + "\n"


class _Tally:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.codes: Counter[int] = Counter()
        self.failures: Counter[str] = Counter()
        self.examples: dict[str, str] = {}
        self.latencies: list[float] = []

    def answer(self, code: int, seconds: float) -> None:
        with self.lock:
            self.codes[code] += 1
            self.latencies.append(seconds)

    def failure(self, error: Exception, route: str) -> None:
        kind = type(error).__name__
        with self.lock:
            self.failures[kind] += 1
            self.examples.setdefault(kind, f"{route}: {error}")


def _worker(
    base: str,
    jobs: list[int],
    tally: _Tally,
    rng: random.Random,
    *,
    idle_s: float,
    idle_share: float,
) -> None:
    with httpx.Client(base_url=base, timeout=30) as client:
        for job in jobs:
            if rng.random() < idle_share:
                # About the keep-alive timeout: the server may close as the request goes.
                time.sleep(idle_s + rng.uniform(-0.05, 0.05))
            route = ROUTES[job % len(ROUTES)]
            started = time.perf_counter()
            try:
                if job % 50 == 0:
                    response = client.post("/triggers/t3/fire", json={"key": f"storm-{job}"})
                else:
                    response = client.get(route)
            except httpx.HTTPError as exc:
                tally.failure(exc, route)
                continue
            tally.answer(response.status_code, time.perf_counter() - started)


def _percentile(values: list[float], share: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(share * len(ordered)))] * 1000, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10000)
    parser.add_argument("--in-flight", type=int, default=50)
    parser.add_argument(
        "--idle", type=float, default=5.0, help="seconds of a pause (+-50 ms): keep-alive's"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--idle-share", type=float, default=0.01, help="requests after a pause")
    options = parser.parse_args()
    tally = _Tally()
    with tempfile.TemporaryDirectory() as directory:
        config = Path(directory) / "t.yaml"
        config.write_text(_declarations(20))
        address = f"127.0.0.1:{_free_port()}"
        env = {key: value for key, value in os.environ.items() if not key.startswith("TRIGGERS_")}
        env.update(
            {
                "TRIGGERS_DATABASE_URL": f"sqlite:///{directory}/triggers.sqlite",
                "TRIGGERS_ENV_FILE": "",
                "TRIGGERS_LOG_FORMAT": "json",
                "TRIGGERS_API_ADDRESS": address,
            }
        )
        with (Path(directory) / "daemon.log").open("w") as log:
            daemon = subprocess.Popen(
                [TRIGGERS, "run", "--config", str(config)], env=env, stderr=log
            )
        base = f"http://{address}/api/v1"
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    if httpx.get(f"http://{address}/readyz", timeout=5).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise SystemExit("the daemon did not become ready")
                time.sleep(0.2)
            before = _fired(base)
            jobs = list(range(options.requests))
            threads = [
                threading.Thread(
                    target=_worker,
                    args=(base, jobs[n :: options.in_flight], tally),
                    kwargs={
                        "rng": random.Random(options.seed + n),
                        "idle_s": options.idle,
                        "idle_share": options.idle_share,
                    },
                )
                for n in range(options.in_flight)
            ]
            started = time.monotonic()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            elapsed = time.monotonic() - started
            after = _fired(base)
        finally:
            daemon.send_signal(signal.SIGTERM)
            try:
                code = daemon.wait(timeout=60)
            except subprocess.TimeoutExpired:
                daemon.kill()
                code = daemon.wait()
        errors = [
            line
            for line in (Path(directory) / "daemon.log").read_text().splitlines()
            if '"level": "error"' in line
        ]
    document: dict[str, Any] = {
        "requests": options.requests,
        "in_flight": options.in_flight,
        "seconds": round(elapsed, 1),
        "load_average": [round(value, 2) for value in os.getloadavg()],
        "answers": dict(sorted(tally.codes.items())),
        "failures": dict(tally.failures),
        "failure_examples": tally.examples,
        "latency_ms": {
            "p50": _percentile(tally.latencies, 0.5),
            "p99": _percentile(tally.latencies, 0.99),
            "max": _percentile(tally.latencies, 1.0),
            "mean": round(statistics.fmean(tally.latencies) * 1000, 1) if tally.latencies else None,
        },
        "fires_during": after - before,
        "daemon_exit_code": code,
        "daemon_error_lines": errors[:5],
    }
    json.dump(document, sys.stdout, indent=2)
    sys.stdout.write("\n")


def _fired(base: str) -> int:
    rows = httpx.get(f"{base}/history", params={"limit": 100000}, timeout=60).json()
    return len(rows)


if __name__ == "__main__":
    main()
