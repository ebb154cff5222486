"""An idle daemon with many triggers: start-up time, idle CPU and resident memory.

Applies N triggers that are not due during the measurement (daily cron times
spread over the day with `H`), starts `triggers run`, and reports how long until
its first tick (the first heartbeat row), its CPU over a quiet window, and its
resident memory.

    .venv/bin/python bench/idle.py --triggers 10000 --seconds 30
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa

TRIGGERS = shutil.which("triggers", path=str(Path(sys.executable).parent)) or "triggers"


def declarations(count: int) -> str:
    lines = ["version: 1", "flows:", "  noop:", "    steps: []", "triggers:"]
    lines += [f"  - {{id: t{n:05d}, flow: noop, cron: 'H H * * *'}}" for n in range(count)]
    return "\n".join(lines) + "\n"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--triggers", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=30)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="triggers-idle-"))
    url = f"sqlite:///{workdir / 'idle.sqlite'}"
    config = workdir / "triggers.yaml"
    config.write_text(declarations(args.triggers))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIGGERS_")}
    env.update({"TRIGGERS_DATABASE_URL": url, "TRIGGERS_LOG_LEVEL": "warning"})
    # Applying (validation, store writes) is timed apart from the daemon's start-up.
    started = time.monotonic()
    subprocess.run([TRIGGERS, "apply", str(config)], env=env, check=True, capture_output=True)
    applied_s = time.monotonic() - started
    engine = sa.create_engine(url)
    started = time.monotonic()
    daemon = subprocess.Popen(
        [TRIGGERS, "run", "--config", str(config)], env=env, stderr=subprocess.DEVNULL
    )
    first_tick_s = None
    while first_tick_s is None and time.monotonic() - started < 60:
        with engine.connect() as conn:
            if conn.execute(sa.text("SELECT count(*) FROM heartbeats")).scalar():
                first_tick_s = time.monotonic() - started
        time.sleep(0.05)
    # Let start-up work finish, and the rows the apply just wrote age past the
    # listing margin (15 s), so that what is measured is the idle state.
    time.sleep(20)
    cpu_start, wall_start = cpu_seconds(daemon.pid), time.monotonic()
    time.sleep(args.seconds)
    cpu = cpu_seconds(daemon.pid) - cpu_start
    wall = time.monotonic() - wall_start
    memory = rss_mb(daemon.pid)
    daemon.send_signal(signal.SIGTERM)
    daemon.wait(timeout=60)
    engine.dispose()
    shutil.rmtree(workdir, ignore_errors=True)
    print(f"triggers: {args.triggers}")
    print(f"apply (validate + store) s: {applied_s:.2f}")
    print(f"daemon start to first tick s: {first_tick_s:.2f}" if first_tick_s else "no tick")
    print(f"idle cpu % of a core over {wall:.0f} s: {100 * cpu / wall:.2f}")
    print(f"resident memory MB: {memory:.1f}")


if __name__ == "__main__":
    main()
