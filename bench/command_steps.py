"""The CPU a command step costs: the daemon and everything it starts, in one cgroup.

N every-second triggers whose flow is S command steps `run: ['true']` (`--steps 0`:
`steps: []`, the fire without a step), on a fresh SQLite file. The daemon is started
inside a cgroup of its own (cgroup v2 where /sys/fs/cgroup is writable, else the v1
`cpuacct` hierarchy), so its CPU, its supervisor's and every command's are counted
together; once every trigger has launched and a warm-up has passed, the cgroup's CPU
over `--seconds` is divided by the fires of that window (the ledger's completed
rows). Without a writable cgroup the script makes itself the subreaper of everything
the daemon starts and counts its reaped children's CPU (`getrusage(RUSAGE_CHILDREN)`)
over the daemon's whole life instead; the report says which (`accounting`).

Each variant runs in the same invocation, alternating over `--repeat`: with steps,
without (the fire's own cost), with as many no-op Python steps (`--python`: what a
step costs the runtime whatever its kind), and a plain fork/exec of `true` from
Python (the step's own process). A step's supervision is then

    (CPU per fire with S steps - CPU per fire without) / S - one fork/exec of `true`

`--checkout DIR` adds the same runs on another checkout's code (its daemon started
with PYTHONPATH=DIR), alternating with this one's: a before/after in one invocation.

    .venv/bin/python bench/command_steps.py --triggers 10 --seconds 20
    .venv/bin/python bench/command_steps.py --triggers 20 --steps 2 --seconds 30
    .venv/bin/python bench/command_steps.py --triggers 10 --seconds 20 --checkout /tmp/main
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _measure import ROOT, environment, load_average, wait_for_launches

PR_SET_CHILD_SUBREAPER = 36


def declarations(triggers: int, steps: int, kind: str = "command") -> str:
    lines = ["version: 1", "flows:", "  work:"]
    if steps:
        lines.append("    steps:")
        step = "run: ['true']" if kind == "command" else "python: 'json:dumps'"
        lines += [f"      - {{id: s{n}, {step}}}" for n in range(steps)]
    else:
        lines.append("    steps: []")
    lines.append("triggers:")
    lines += [
        f"  - {{id: t{n:04d}, flow: work, every: 1s, overlap: allow, max_active: 5}}"
        for n in range(triggers)
    ]
    return "\n".join(lines) + "\n"


HIERARCHIES = {
    "v2": ((Path("/sys/fs/cgroup"), 2), (Path("/sys/fs/cgroup/unified"), 2)),
    "v1": ((Path("/sys/fs/cgroup/cpuacct"), 1),),
    "none": (),
}


class Cgroup:
    """A cgroup of this run's own; its CPU in nanoseconds."""

    def __init__(self, name: str, kind: str) -> None:
        self.path: Path | None = None
        self.version = 0
        order = (*HIERARCHIES["v2"], *HIERARCHIES["v1"]) if kind == "auto" else HIERARCHIES[kind]
        for base, version in order:
            marker = "cgroup.controllers" if version == 2 else "cpuacct.usage"
            if not (base / marker).exists():
                continue
            try:
                (base / name).mkdir()
            except OSError:
                continue
            self.path, self.version = base / name, version
            return

    @property
    def accounting(self) -> str:
        if self.path is None:
            return "getrusage(RUSAGE_CHILDREN), subreaper, whole daemon life"
        return f"cgroup v{self.version} {self.path}"

    def cpu_ns(self) -> int:
        if self.path is None:
            raise RuntimeError("no cgroup")
        if self.version == 1:
            return int((self.path / "cpuacct.usage").read_text())
        for line in (self.path / "cpu.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) * 1000
        raise RuntimeError("no usage_usec in cpu.stat")

    def command(self, argv: list[str]) -> list[str]:
        """`argv` started inside the cgroup (a shell moves itself in, then execs it)."""
        if self.path is None:
            return argv
        procs = self.path / "cgroup.procs"
        return ["sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh", *argv]

    def remove(self) -> None:
        if self.path is None:
            return
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if not (self.path / "cgroup.procs").read_text().strip():
                break
            time.sleep(0.2)
        try:
            self.path.rmdir()
        except OSError as exc:
            print(f"cgroup {self.path} left behind: {exc}", file=sys.stderr)


def children_cpu_ns() -> int:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return round((usage.ru_utime + usage.ru_stime) * 1e9)


def reap_all() -> bool:
    """Reap every exited descendant handed to us as their subreaper: True once none is
    left (exited or running)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return True
        if pid == 0:
            return False


def fires_between(url: str, start_ms: int, end_ms: int) -> dict[str, int]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT outcome, count(*) FROM fires WHERE occurrence_at >= :a "
                "AND occurrence_at < :b GROUP BY outcome"
            ),
            {"a": start_ms, "b": end_ms},
        ).all()
    engine.dispose()
    return {str(outcome): int(count) for outcome, count in rows}


def daemon_run(
    args: argparse.Namespace, steps: int, checkout: Path, kind: str = "command"
) -> dict[str, Any]:
    """One daemon on a fresh database: CPU per fire over the window."""
    workdir = Path(tempfile.mkdtemp(prefix="triggers-bench-steps-"))
    url = f"sqlite:///{workdir / 'bench.sqlite'}"
    config = workdir / "triggers.yaml"
    config.write_text(declarations(args.triggers, steps, kind))
    env = environment(url, workdir)
    # The checkout's code, and `bench.steps` (this checkout's) for Python steps.
    env["PYTHONPATH"] = f"{checkout}{os.pathsep}{ROOT}"
    group = Cgroup(f"triggers-bench-{os.getpid()}-{time.monotonic_ns()}", args.cgroup)
    # -P: no working directory in front of PYTHONPATH, which names the checkout.
    argv = [
        sys.executable,
        "-P",
        "-c",
        "import sys; from triggers.cli import main; sys.exit(main())",
    ]
    before_children = children_cpu_ns()
    with (workdir / "daemon.log").open("w") as log:
        daemon = subprocess.Popen(
            group.command([*argv, "run", "--config", str(config)]),
            env=env,
            stderr=log,
            stdout=subprocess.DEVNULL,
            cwd=workdir,
        )
    load_before = load_average()
    # The warm-up starts once every trigger launches, however long a busy machine takes
    # to start the daemon (migrate, apply, first tick, the supervisor).
    wait_for_launches(url, args.triggers, deadline=time.monotonic() + args.ready_timeout)
    time.sleep(args.warmup)
    start_ms = (time.time_ns() // 1_000_000 // 1000 + 1) * 1000
    time.sleep(max(0.0, start_ms / 1000 - time.time()))
    cpu_start = group.cpu_ns() if group.path else 0
    time.sleep(args.seconds)
    cpu_window = (group.cpu_ns() - cpu_start) if group.path else 0
    end_ms = start_ms + round(args.seconds * 1000)
    # The window's last fires still run their steps: a second to finish.
    time.sleep(1.5)
    daemon.send_signal(signal.SIGTERM)
    daemon.wait(timeout=60)
    load_after = load_average()
    outcomes = fires_between(url, start_ms, end_ms)
    total = fires_between(url, 0, 1 << 62)
    if group.path is None:
        deadline = time.monotonic() + 30
        # The supervisor lingers, then exits: until every descendant is reaped.
        while not reap_all() and time.monotonic() < deadline:
            time.sleep(0.1)
        cpu_total = children_cpu_ns() - before_children
        fires, cpu = sum(total.values()), cpu_total
    else:
        fires, cpu = sum(outcomes.values()), cpu_window
    group.remove()
    result = {
        "checkout": str(checkout),
        "kind": kind if steps else "none",
        "steps_per_fire": steps,
        "triggers": args.triggers,
        "window_s": args.seconds,
        "fires": fires,
        "outcomes": outcomes,
        "cpu_s": round(cpu / 1e9, 3),
        "cpu_ms_per_fire": round(cpu / 1e6 / max(1, fires), 3),
        "cpu_percent_of_core": round(100 * cpu / 1e9 / args.seconds, 1),
        "load_average": [load_before, load_after],
        "accounting": group.accounting,
    }
    if args.keep:
        result["workdir"] = str(workdir)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return result


def fork_exec_ms(count: int) -> float:
    """CPU of one fork/exec of `true` from Python, the step's own process (children's CPU
    plus this process's own share of the spawn)."""
    true = shutil.which("true") or "/bin/true"
    self_before = time.process_time_ns()
    children_before = children_cpu_ns()
    for _ in range(count):
        subprocess.run([true], check=True)
    spent = (time.process_time_ns() - self_before) + (children_cpu_ns() - children_before)
    return round(spent / 1e6 / count, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--triggers", type=int, default=10)
    parser.add_argument("--steps", type=int, default=1, help="command steps per fire")
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument(
        "--warmup", type=float, default=5, help="seconds once every trigger launches"
    )
    parser.add_argument("--ready-timeout", type=float, default=300)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--checkout", type=Path, help="also run another checkout's code")
    parser.add_argument("--no-baseline", action="store_true", help="skip the steps: [] runs")
    parser.add_argument(
        "--python", action="store_true", help="also no-op Python steps (the runtime's step cost)"
    )
    parser.add_argument("--cgroup", choices=["auto", "v2", "v1", "none"], default="auto")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    checkouts = [ROOT] + ([args.checkout.resolve()] if args.checkout else [])
    runs: list[dict[str, Any]] = []
    fork_exec: list[float] = []
    for _ in range(args.repeat):
        for checkout in checkouts:
            runs.append(daemon_run(args, args.steps, checkout))
            if not args.no_baseline:
                runs.append(daemon_run(args, 0, checkout))
            if args.python:
                runs.append(daemon_run(args, args.steps, checkout, "python"))
        fork_exec.append(fork_exec_ms(200))
    summary: dict[str, Any] = {"fork_exec_true_ms": statistics.median(fork_exec)}
    for checkout in checkouts:
        mine = [r for r in runs if r["checkout"] == str(checkout)]
        with_steps = [r["cpu_ms_per_fire"] for r in mine if r["kind"] == "command"]
        without = [r["cpu_ms_per_fire"] for r in mine if r["kind"] == "none"]
        python = [r["cpu_ms_per_fire"] for r in mine if r["kind"] == "python"]
        entry: dict[str, Any] = {"cpu_ms_per_fire_with_steps": statistics.median(with_steps)}
        if without and args.steps:
            base = statistics.median(without)
            per_step = (statistics.median(with_steps) - base) / args.steps
            entry.update(
                cpu_ms_per_fire_without_steps=base,
                cpu_ms_per_step=round(per_step, 3),
                supervision_ms_per_step=round(per_step - summary["fork_exec_true_ms"], 3),
            )
        if python and args.steps:
            entry.update(
                cpu_ms_per_fire_python_steps=statistics.median(python),
                command_over_python_ms_per_step=round(
                    (statistics.median(with_steps) - statistics.median(python)) / args.steps, 3
                ),
            )
        summary[str(checkout)] = entry
    print(json.dumps({"summary": summary, "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
