"""How long the CLI takes from exec to exit: `--help` and the query commands.

Each command runs `--warmup` times uncounted, then `--runs` times; every run is a
fresh process on an empty, migrated SQLite database in a temporary directory. The
figures (milliseconds of wall time, min / median / max, plus the children's CPU
time) are printed as one JSON document. Quote the median.

    .venv/bin/python bench/cli_startup.py --runs 20
    .venv/bin/python bench/cli_startup.py --runs 20 --command="list --json" --command=--help

The floors are measured alongside in the same way: `python3 -c pass` (this venv's
interpreter: no CLI in Python starts faster) and `systemctl list-timers` (a C tool
answering the same question; where systemd does not run it fails at once, which is
reported in its `exit_codes`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TRIGGERS = shutil.which("triggers", path=str(Path(sys.executable).parent)) or "triggers"
COMMANDS = [
    "--help",
    "--version",
    "list",
    "history",
    "list --json",
    "status",
    "describe t",
    "next t",
    "runs list",
]
FLOORS = [[sys.executable, "-c", "pass"], ["systemctl", "list-timers", "--no-pager"]]


def measure(
    args: list[str], env: dict[str, str], *, runs: int, warmup: int, program: str = TRIGGERS
) -> dict[str, Any]:
    codes = set()
    argv = [program, *args] if program else args
    for _ in range(warmup):
        subprocess.run(argv, env=env, capture_output=True, check=False)
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run(argv, env=env, capture_output=True, check=False)
        walls.append((time.perf_counter() - started) * 1000)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        cpus.append(cpu * 1000)
        codes.add(done.returncode)
    return {
        "command": " ".join(["triggers", *args] if program else args),
        "runs": runs,
        "exit_codes": sorted(codes),
        "wall_ms": _summary(walls),
        "cpu_ms": _summary(cpus),
    }


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "min": round(min(values), 1),
        "median": round(statistics.median(values), 1),
        "max": round(max(values), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument(
        "--command", action="append", help="a command line after `triggers` (repeatable)"
    )
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        env = {key: value for key, value in os.environ.items() if not key.startswith("TRIGGERS_")}
        env.update(
            {
                "TRIGGERS_DATABASE_URL": f"sqlite:///{directory}/triggers.sqlite",
                "TRIGGERS_ENV_FILE": "",
            }
        )
        subprocess.run([TRIGGERS, "db", "upgrade"], env=env, capture_output=True, check=True)
        declarations = Path(directory) / "t.yaml"
        declarations.write_text(
            "version: 1\nflows:\n  noop: {steps: []}\n"
            "triggers:\n  - {id: t, flow: noop, cron: '30 2 * * *'}\n"
        )
        subprocess.run(
            [TRIGGERS, "apply", str(declarations)], env=env, capture_output=True, check=True
        )
        results = [
            measure(shlex.split(command), env, runs=options.runs, warmup=options.warmup)
            for command in options.command or COMMANDS
        ]
        if not options.command:
            results += [
                measure(argv, env, runs=options.runs, warmup=options.warmup, program="")
                for argv in FLOORS
                if shutil.which(argv[0])
            ]
    document = {
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "load_average": [round(value, 2) for value in os.getloadavg()],
        "results": results,
    }
    json.dump(document, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
