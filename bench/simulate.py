"""How fast `triggers simulate` runs: simulated days per second of real time.

Three files: a typical one (a nightly backup that takes 70 minutes, an hourly
report, a weekly clean-up and a month-end invoice run: about 26 occurrences a day),
one without the hourly report (`daily`: about 2 a day) and one of 100 triggers (50
daily, 40 hourly, 10 every 15 minutes, in five zones: about 2,000 a day). The cost
is per occurrence, so days per second follow occurrences per day. Each scenario has
a downtime of a few hours, so catch-up is part of the work. The simulation runs in
this process, as the command does (logging at error level); the figures are the
best of `--repeat` runs, in JSON, per second of wall-clock time and per second of
the process's CPU time (steadier on a shared machine), with the load average of
the last minute when the file was done.

    .venv/bin/python bench/simulate.py                      # every file
    .venv/bin/python bench/simulate.py --file hundred --days 365
"""

from __future__ import annotations

import argparse
import json
import os
import time
from datetime import UTC, datetime, timedelta

from triggers.declarations import parse_declarations
from triggers.log import configure_logging
from triggers.simulation import Downtime, Scenario, simulate

START = datetime(2027, 1, 1, tzinfo=UTC)
ZONES = ("UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo", "Australia/Lord_Howe")

TYPICAL = """\
version: 1
flows:
  backup: {steps: [{id: dump, run: [pg_dump, app]}]}
  report: {steps: [{id: build, run: [report]}]}
triggers:
  - {id: nightly-backup, flow: backup, cron: "30 2 * * *", timezone: Europe/Berlin}
  - {id: hourly-report, flow: report, cron: "0 * * * *"}
  - {id: weekly-cleanup, flow: report, cron: "0 4 * * SUN", timezone: Europe/Berlin}
  - {id: month-end, flow: report, calendar: {months: 1, day: 1, hour: 6}}
"""


def hundred() -> str:
    lines = ["version: 1", "flows:", "  job: {steps: [{id: run, run: [job]}]}", "triggers:"]
    for n in range(100):
        zone = ZONES[n % len(ZONES)]
        if n < 50:
            schedule = f'cron: "{n % 60} {n % 24} * * *"'
        elif n < 90:
            schedule = f'cron: "{n % 60} * * * *"'
        else:
            schedule = "every: 15m"
        lines.append(f"  - {{id: job-{n:03d}, flow: job, {schedule}, timezone: {zone}}}")
    return "\n".join(lines) + "\n"


DAILY = "\n".join(line for line in TYPICAL.splitlines() if "hourly" not in line) + "\n"
FILES = {"typical": TYPICAL, "daily": DAILY, "hundred": hundred()}
BACKUP = {"nightly-backup": timedelta(minutes=70)}
DURATIONS = {"typical": BACKUP, "daily": BACKUP, "hundred": {}}


def scenario(name: str, days: float) -> Scenario:
    declarations = parse_declarations(FILES[name], source=f"{name}.yaml")
    end = START + timedelta(days=days)
    down = START + timedelta(days=days / 2)
    return Scenario(
        specs=declarations.triggers,
        start_at=START,
        end_at=end,
        durations=DURATIONS[name],
        default_duration=timedelta(minutes=5),
        downtimes=[Downtime(start_at=down, end_at=down + timedelta(hours=3))],
    )


def measure(name: str, days: float, repeat: int) -> dict[str, object]:
    best = None
    for _ in range(repeat):
        started, cpu_started = time.perf_counter(), time.process_time()
        result = simulate(scenario(name, days))
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        if best is None or elapsed < best[0]:
            best = (elapsed, cpu, result)
    if best is None:
        raise SystemExit("--repeat must be at least 1")
    elapsed, cpu, result = best
    occurrences = sum(record.count for record in result.records)
    return {
        "file": name,
        "days": days,
        "seconds": round(elapsed, 3),
        "days_per_s": round(days / elapsed, 1),
        "cpu_seconds": round(cpu, 3),
        "days_per_cpu_s": round(days / cpu, 1),
        "occurrences": occurrences,
        "occurrences_per_s": round(occurrences / elapsed),
        "ledger_rows": len(result.records),
        "ticks": result.ticks,
        "runs": result.runs,
        "load_average": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", choices=[*FILES, "all"], default="all")
    parser.add_argument("--days", type=float, help="default: 3650, and 365 for hundred")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    configure_logging(json=True, level="error")
    names = list(FILES) if args.file == "all" else [args.file]
    for name in names:
        days = args.days or (365 if name == "hundred" else 3650)
        repeat = 1 if name == "hundred" else args.repeat
        print(json.dumps(measure(name, days, repeat)))


if __name__ == "__main__":
    main()
