"""What the scale benchmarks share: processes' CPU and memory, the machine's load, medians.

The machine these figures come from is shared, so every script reports CPU time beside
wall-clock time, the load average around the measurement, and medians of repeats.
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import make_url

TRIGGERS = shutil.which("triggers", path=str(Path(sys.executable).parent)) or "triggers"
ROOT = Path(__file__).resolve().parent.parent


def cpu_seconds(pid: int) -> float:
    """User plus system CPU of a live process (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_ns(pid: int) -> int:
    """CPU of a live process in nanoseconds, summed over its threads (schedstat: exact,
    where /proc/PID/stat counts 10 ms clock ticks, too coarse for an idle daemon)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended meanwhile
    return total


def memory_mb(pid: int) -> dict[str, float]:
    """Resident memory now (`rss_mb`) and its peak (`peak_rss_mb`)."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found["rss_mb" if key == "VmRSS" else "peak_rss_mb"] = round(
                int(value.split()[0]) / 1024, 1
            )
    return found


def load_average() -> float:
    """The 1-minute load average (this machine has 2 cores)."""
    return round(os.getloadavg()[0], 2)


@dataclass(frozen=True, slots=True)
class Timed:
    wall_s: float
    cpu_s: float
    stdout: str


def timed_run(command: Sequence[str], env: Mapping[str, str]) -> Timed:
    """Run a command to its end; its wall-clock time and its CPU (user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run(command, env=dict(env), check=True, capture_output=True, text=True)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Timed(wall_s=round(wall, 3), cpu_s=round(cpu, 3), stdout=done.stdout)


def environment(url: str, workdir: Path) -> dict[str, str]:
    """The daemon's and the CLI's environment: this database, quiet logs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIGGERS_")}
    env.update(
        {
            "TRIGGERS_DATABASE_URL": url,
            "TRIGGERS_LOG_LEVEL": "warning",
            "TRIGGERS_LOG_FORMAT": "json",
            "TRIGGERS_STATE_DIRECTORY": str(workdir / "state"),
            "PYTHONPATH": str(ROOT),
        }
    )
    return env


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def summarize(samples: Sequence[Mapping[str, object]]) -> dict[str, object]:
    """Each numeric figure's median over the repeats, and its range."""
    summary: dict[str, object] = {}
    for key in samples[0]:
        values = [s[key] for s in samples if isinstance(s.get(key), int | float)]
        if len(values) == len(samples) and not isinstance(samples[0][key], bool):
            numbers = [float(v) for v in values]  # type: ignore[arg-type]
            middle = statistics.median(numbers)
            whole = all(isinstance(v, int) for v in values) and middle.is_integer()
            summary[key] = int(middle) if whole else round(middle, 4)
            if len(numbers) > 1:
                summary[f"{key}_range"] = [min(numbers), max(numbers)]
        else:
            summary[key] = samples[0][key]
    return summary


def wait_for_launches(
    url: str,
    triggers: int,
    *,
    deadline: float,
    daemons: Sequence[subprocess.Popen[bytes]] = (),
) -> None:
    """Until the ledger holds a launched fire of `triggers` triggers (or `deadline`
    passes, or one of `daemons` exits: its log says why)."""
    engine = sa.create_engine(url)
    try:
        while time.monotonic() < deadline:
            if any(d.poll() is not None for d in daemons):
                raise SystemExit("a daemon exited before every trigger launched: see its log")
            try:
                with engine.connect() as conn:
                    found = conn.execute(
                        sa.text(
                            "SELECT COUNT(DISTINCT trigger_id) FROM fires "
                            "WHERE launched_at IS NOT NULL"
                        )
                    ).scalar_one()
            except sa.exc.DBAPIError:
                found = 0  # no schema yet: the daemon is still migrating
            if found >= triggers:
                return
            time.sleep(0.2)
        raise SystemExit("no fire of every trigger launched within --ready-timeout")
    finally:
        engine.dispose()


@contextmanager
def database(base_url: str | None, workdir: Path) -> Iterator[str]:
    """A fresh database: a SQLite file, or one created on the PostgreSQL server."""
    if base_url is None:
        yield f"sqlite:///{workdir / 'bench.sqlite'}"
        return
    name = f"bench_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(base_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(base_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
