"""How long a restarted daemon takes to claim what came due while it was down.

A daemon with `--triggers` every-second triggers (one command step, `true`) runs on a
SQLite file, is stopped, stays down `--down` seconds and is started again, `--runs`
times, with the API and metrics listeners on (`--no-api`: off). From the spawn of
each restarted process, the figures (milliseconds, min / median / max) are when its
log says the declarations were read (`declarations_unchanged`), the runtime started,
the first run launched (the first claim of an occurrence that came due while no
daemon ran), the API started and `daemon_started`. The floor is measured alongside:
`python3 -c pass` with this venv's interpreter. Quote the medians.

    .venv/bin/python bench/daemon_startup.py --runs 10
    .venv/bin/python bench/daemon_startup.py --runs 10 --no-api
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
import threading
import time
from datetime import datetime
from pathlib import Path

TRIGGERS = shutil.which("triggers", path=str(Path(sys.executable).parent)) or "triggers"
PHASES = (
    "declarations_unchanged",
    "runtime_started",
    "run_launched",
    "api_started",
    "daemon_started",
)
_DEADLINE_S = 120.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _declarations(count: int) -> str:
    lines = ["version: 1", "flows:", "  ok: {steps: [{id: s, run: ['true']}]}", "triggers:"]
    lines += [f"  - {{id: t{n}, flow: ok, every: 1s}}" for n in range(count)]
    return "\n".join(lines) + "\n"


def _start(env: dict[str, str], config: Path) -> tuple[subprocess.Popen[str], float]:
    started = time.time()
    process = subprocess.Popen(
        [TRIGGERS, "run", "--config", str(config)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    return process, started


def _phases(
    process: subprocess.Popen[str], started: float, *, api: bool, until: str | None = None
) -> dict[str, float]:
    """Milliseconds from the spawn to each phase's first log line (stops once all are
    seen, or `until` is)."""
    seen: dict[str, float] = {}
    deadline = time.monotonic() + _DEADLINE_S
    # A daemon that hangs silent would leave the read below waiting: killed instead.
    watchdog = threading.Timer(_DEADLINE_S, process.kill)
    watchdog.daemon = True
    watchdog.start()
    assert process.stderr is not None  # noqa: S101 - piped above
    try:
        return _read_phases(process, started, seen, api=api, until=until, deadline=deadline)
    finally:
        watchdog.cancel()


def _read_phases(
    process: subprocess.Popen[str],
    started: float,
    seen: dict[str, float],
    *,
    api: bool,
    until: str | None,
    deadline: float,
) -> dict[str, float]:
    assert process.stderr is not None  # noqa: S101 - piped above
    for line in process.stderr:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        name = event.get("event")
        if name in PHASES and name not in seen:
            at = datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()
            seen[name] = round((at - started) * 1000, 1)
        wanted = [until] if until else [p for p in PHASES if api or p != "api_started"]
        if all(p in seen for p in wanted) or time.monotonic() > deadline:
            break
    return seen


def _stop(process: subprocess.Popen[str]) -> None:
    """SIGTERM, and SIGKILL if it has not exited within a minute."""
    process.send_signal(signal.SIGTERM)
    try:
        # The log is read no further: drained so the daemon never blocks on the pipe.
        process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()


def _summary(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {
        "min": round(min(values), 1),
        "median": round(statistics.median(values), 1),
        "max": round(max(values), 1),
    }


def _floor(runs: int) -> dict[str, float] | None:
    walls = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        walls.append((time.perf_counter() - started) * 1000)
    return _summary(walls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--triggers", type=int, default=10)
    parser.add_argument("--down", type=float, default=2.0, help="seconds without a daemon")
    parser.add_argument("--no-api", action="store_true", help="no API or metrics listener")
    options = parser.parse_args()
    found: dict[str, list[float]] = {phase: [] for phase in PHASES}
    with tempfile.TemporaryDirectory() as directory:
        config = Path(directory) / "t.yaml"
        config.write_text(_declarations(options.triggers))
        env = {key: value for key, value in os.environ.items() if not key.startswith("TRIGGERS_")}
        env.update(
            {
                "TRIGGERS_DATABASE_URL": f"sqlite:///{directory}/triggers.sqlite",
                "TRIGGERS_ENV_FILE": "",
                "TRIGGERS_LOG_FORMAT": "json",
            }
        )
        if not options.no_api:
            env["TRIGGERS_API_ADDRESS"] = f"127.0.0.1:{_free_port()}"
            env["TRIGGERS_METRICS_ADDRESS"] = f"127.0.0.1:{_free_port()}"
        # The first start applies the declarations and migrates: not a restart.
        process, started = _start(env, config)
        try:
            _phases(process, started, api=not options.no_api, until="daemon_started")
        finally:
            _stop(process)
        for _ in range(options.runs):
            time.sleep(options.down)
            process, started = _start(env, config)
            try:
                for phase, at in _phases(process, started, api=not options.no_api).items():
                    found[phase].append(at)
            finally:
                _stop(process)
    document = {
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "load_average": [round(value, 2) for value in os.getloadavg()],
        "api": not options.no_api,
        "triggers": options.triggers,
        "runs": options.runs,
        "from_spawn_ms": {phase: _summary(values) for phase, values in found.items()},
        "floor_python_ms": _floor(options.runs),
    }
    json.dump(document, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
