"""The fault scenarios: each drives real daemons and returns its JSON report.

Every scenario has the same shape: generate declarations whose triggers all end at
a known instant, start the daemon(s), inject faults until shortly before that end,
let a healthy daemon decide the last occurrences, settle (bounded: runs finish, or
not), stop every daemon with SIGTERM, and read everything back with no daemon
running. The CI tests call them with small figures, `bench/faults.py` with large ones.
"""

from __future__ import annotations

import os
import random
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.faults import plan as plans
from tests.faults.harness import Lab
from tests.faults.observations import Fault, Json
from tests.faults.report import build_report

STARTUP_LEAD_S = 3.0
"""Triggers end this long after the first spawn plus the fault window (start-up time)."""
START_TIMEOUT_S = 60.0
MOMENTS = ("mid_launch", "after_launch", "between_ticks", "inside_step")
LIBFAKETIME_GLOBS = (
    "/usr/lib/*/faketime/libfaketimeMT.so.1",
    "/usr/lib/faketime/libfaketimeMT.so.1",
    "/usr/local/lib/faketime/libfaketimeMT.so.1",
)


class ScenarioError(RuntimeError):
    """The scenario could not run at all (a daemon never started, a tool is missing)."""


def _end_at(seconds: float) -> float:
    # Half past a second: no `every` occurrence falls exactly on the end.
    return int(time.time() + STARTUP_LEAD_S + seconds) + 0.5


def _sleep_until(at: float) -> None:
    time.sleep(max(0.0, at - time.time()))


def _started(lab: Lab, slot: int = 0) -> None:
    if lab.current(slot).wait_started(START_TIMEOUT_S) is None:
        daemon = lab.current(slot)
        raise ScenarioError(
            f"daemon of slot {slot} did not start: exit {daemon.proc.poll()}\n"
            + daemon.log.read_text(errors="replace")[-3000:]
        )


def _position(lab: Lab, moment: str, rng: random.Random) -> None:
    """Wait for a moment of the kind asked (occurrences fall on whole seconds)."""
    now = time.time()
    if moment in {"mid_launch", "after_launch"}:
        # The daemon's recent launch latencies (occurrence to launch recorded) place
        # the launch: `mid_launch` aims between the claims' commit and the launch
        # records, `after_launch` just after them, while the first steps are dispatched.
        # (Catch-up launches after a restart are seconds late: not the launch's own time.)
        seen = [ms for i in lab.incarnations[-3:] for ms in i.launch_latencies_ms() if ms < 200]
        typical = sorted(seen[-40:])[len(seen[-40:]) // 2] / 1000 if seen else 0.012
        scale = rng.uniform(0.3, 0.95) if moment == "mid_launch" else rng.uniform(1.0, 2.5)
        _sleep_until(int(now) + 1 + scale * typical)
    elif moment == "between_ticks":
        _sleep_until(int(now) + 1 + rng.uniform(0.35, 0.65))
    else:
        lab.wait_new_start_line(3.0)
        time.sleep(rng.uniform(0.0, 0.25))


def _finish(
    lab: Lab,
    *,
    scenario: str,
    params: Json,
    settle_s: float,
    jumps: list[Json] | None = None,
    clock_offset: float = 0.0,
) -> Json:
    # The last occurrences are decided by a daemon that has been up since before the end.
    _sleep_until(lab.end_at - clock_offset + 1.5)
    for slot in sorted({i.slot for i in lab.incarnations}):
        if lab.current(slot).proc.poll() is not None:
            lab.notes.append(f"slot {slot} had no live daemon at the end: restarted to settle")
            lab.start(slot, host=lab.current(slot).host)
    settle = lab.settle(timeout=settle_s)
    lab.stop_all()
    collect_from = time.time()
    observations = lab.collect(settle=settle, jumps=jumps)
    settle["collect_s"] = round(time.time() - collect_from, 2)
    settle["total_s"] = round(time.time() - lab.incarnations[0].spawned_at, 2)
    return build_report(observations, scenario=scenario, backend=lab.backend.name, params=params)


def _kill_storm(
    lab: Lab,
    rng: random.Random,
    *,
    slots: int,
    up_s: tuple[float, float],
    moments: tuple[str, ...] = MOMENTS,
) -> None:
    stop_at = lab.end_at - 1.0
    cycle: list[str] = []
    while time.time() < stop_at:
        slot = rng.randrange(slots)
        _started(lab, slot)
        _sleep_until(min(time.time() + rng.uniform(*up_s), stop_at))
        if time.time() >= stop_at:
            return
        # Round-robin over a shuffled cycle: even a short storm has every kind of moment.
        if not cycle:
            cycle = rng.sample(moments, len(moments))
        moment = cycle.pop()
        if moment == "host_crash":
            _position(lab, "inside_step", rng)
            lab.crash_host(slot)
            continue
        _position(lab, moment, rng)
        lab.kill9(slot, detail=moment)


def kill9(
    *,
    backend: str = "sqlite",
    seconds: float = 25,
    seed: int | None = None,
    up_s: tuple[float, float] = (0.5, 3.0),
    settle_s: float = 20,
    moments: tuple[str, ...] = MOMENTS,
    burst: int = 0,
    storm: int = 0,
    keep: bool = False,
) -> Json:
    """SIGKILL the daemon at random moments (mid-launch, between ticks, inside a step)
    and restart it at once, until the triggers end.

    `storm` > 0 runs `plans.command_storm` instead of the mixed plan: that many
    every-second triggers of two short command steps each."""
    seed = random.randrange(1 << 30) if seed is None else seed
    rng = random.Random(seed)
    params = {
        "seconds": seconds,
        "seed": seed,
        "up_s": list(up_s),
        "settle_s": settle_s,
        "moments": list(moments),
        "burst": burst,
        "storm": storm,
    }
    plan = plans.command_storm(triggers=storm) if storm else plans.mixed(burst=burst)
    with Lab(plan=plan, backend_name=backend, keep=keep) as lab:
        lab.write_config(end_at=_end_at(seconds))
        lab.start(0)
        _kill_storm(lab, rng, slots=1, up_s=up_s, moments=moments)
        return _finish(lab, scenario="kill9", params=params, settle_s=settle_s)


def sigterm(
    *,
    backend: str = "sqlite",
    step_s: float = 12,
    terms: int = 2,
    seconds: float = 12,
    seed: int | None = None,
    settle_s: float = 25,
    keep: bool = False,
) -> Json:
    """SIGTERM while long steps run (longer than the shutdown grace), restart at once."""
    seed = random.randrange(1 << 30) if seed is None else seed
    rng = random.Random(seed)
    params = {
        "step_s": step_s,
        "terms": terms,
        "seconds": seconds,
        "seed": seed,
        "settle_s": settle_s,
    }
    with Lab(plan=plans.long_steps(seconds=step_s), backend_name=backend, keep=keep) as lab:
        lab.write_config(end_at=_end_at(seconds))
        lab.start(0)
        for term in range(terms):
            _started(lab)
            deadline = time.time() + step_s + 5
            while not _long_step_running(lab) and time.time() < deadline:
                time.sleep(0.05)
            time.sleep(rng.uniform(1.0, 3.0))
            last = term == terms - 1
            fault = lab.sigterm(detail="inside_long_step", restart=not last)
            if last:
                # What a user sees while no daemon runs (an upgrade in progress).
                lab.snapshot(after="sigterm")
                fault.restart_at = time.time()
                lab.start(0)
                fault.incarnation = len(lab.incarnations) - 1
        _started(lab)
        return _finish(lab, scenario="sigterm", params=params, settle_s=step_s + settle_s)


def _long_step_running(lab: Lab) -> bool:
    started: set[tuple[str, str, str]] = set()
    ended: set[tuple[str, str, str]] = set()
    for line in lab.exec_log.read_text().splitlines():
        parts = line.split()
        if len(parts) == 8 and parts[0].startswith("long-"):
            (started if parts[5] == "start" else ended).add((parts[2], parts[3], parts[4]))
    return bool(started - ended)


def three_daemons(
    *,
    seconds: float = 25,
    seed: int | None = None,
    up_s: tuple[float, float] = (1.0, 4.0),
    settle_s: float = 25,
    keep: bool = False,
) -> Json:
    """Three daemons (three host names) on one PostgreSQL database, random kills of one."""
    seed = random.randrange(1 << 30) if seed is None else seed
    rng = random.Random(seed)
    params = {"seconds": seconds, "seed": seed, "up_s": list(up_s), "settle_s": settle_s}
    with Lab(plan=plans.mixed(), backend_name="postgres", keep=keep) as lab:
        lab.write_config(end_at=_end_at(seconds))
        lab.start(0, host="fault-host-0")
        _started(lab, 0)  # the first one migrates the empty database
        for slot in (1, 2):
            lab.start(slot, host=f"fault-host-{slot}")
        _kill_storm(lab, rng, slots=3, up_s=up_s)
        return _finish(lab, scenario="three_daemons", params=params, settle_s=settle_s)


def pg_ctl(cluster: str, action: str) -> subprocess.CompletedProcess[str]:
    """`pg_ctlcluster` for a `VERSION/NAME` cluster, straight to pg_ctl (no systemd)."""
    version, name = cluster.split("/", 1)
    return subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, name, action],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def pg_restart(
    *,
    cluster: str = "15/main",
    seconds: float = 20,
    restarts: int = 1,
    settle_s: float = 25,
    keep: bool = False,
) -> Json:
    """Restart the PostgreSQL server under a running daemon; it must ride through it."""
    params = {"seconds": seconds, "restarts": restarts, "cluster": cluster, "settle_s": settle_s}
    with Lab(plan=plans.mixed(), backend_name="postgres", keep=keep) as lab:
        lab.write_config(end_at=_end_at(seconds))
        lab.start(0)
        _started(lab)
        gap = max(1.0, (lab.end_at - 2.0 - time.time()) / (restarts + 1))
        for _ in range(restarts):
            time.sleep(gap)
            fault = Fault(kind="pg_restart", at=time.time(), detail=cluster)
            try:
                result = pg_ctl(cluster, "restart")
            finally:
                # Whatever happened, the shared server must be up again.
                if pg_ctl(cluster, "status").returncode != 0:
                    pg_ctl(cluster, "start")
            fault.restart_at = time.time()
            fault.exit_code = result.returncode
            if result.returncode != 0:
                lab.notes.append(
                    f"pg_ctlcluster restart exit {result.returncode}: {result.stderr[-500:]}"
                )
            lab.faults.append(fault)
        return _finish(lab, scenario="pg_restart", params=params, settle_s=settle_s)


def libfaketime() -> str | None:
    """The multithreaded libfaketime (Debian `libfaketime`), or None."""
    given = os.environ.get("TRIGGERS_TEST_LIBFAKETIME")
    if given:
        return given
    for pattern in LIBFAKETIME_GLOBS:
        found = sorted(str(p) for p in Path("/").glob(pattern.lstrip("/")))
        if found:
            return found[0]
    return None


def clock_jump(
    *,
    backend: str = "sqlite",
    forward_s: float = 90,
    back_s: float = 8,
    hold_s: float = 4,
    after_s: float = 6,
    cycles: int = 1,
    settle_s: float = 20,
    keep: bool = False,
) -> Json:
    """The wall clock jumps forward (past the catch-up grace) and back under a daemon.

    libfaketime fakes CLOCK_REALTIME only (`FAKETIME_DONT_FAKE_MONOTONIC=1`): a
    stepped wall clock never moves the monotonic one, and the daemon's waits run on
    it. Steps run without libfaketime, so the execution log keeps real time.
    """
    lib = libfaketime()
    if lib is None:
        raise ScenarioError("libfaketime not found: install Debian's `faketime` (make faketime)")
    params: dict[str, Any] = {
        "forward_s": forward_s,
        "back_s": back_s,
        "hold_s": hold_s,
        "after_s": after_s,
        "cycles": cycles,
        "settle_s": settle_s,
        "monotonic_faked": False,
    }
    plan = plans.clock_jumps(step_env={"LD_PRELOAD": ""})
    with Lab(plan=plan, backend_name=backend, keep=keep) as lab:
        stamp = lab.root / "faketime"
        stamp.write_text("+0\n")
        lab.env.update(
            {
                "LD_PRELOAD": lib,
                "FAKETIME_TIMESTAMP_FILE": str(stamp),
                "FAKETIME_NO_CACHE": "1",
                "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            }
        )
        per_cycle = 2 * hold_s + back_s + after_s
        net = cycles * (forward_s - back_s)
        # Slack: a slow start-up shifts the jumps later, and the end (on the faked
        # clock) must still come after the last jump's horizon.
        lab.write_config(end_at=_end_at(cycles * per_cycle + 10) + net)
        lab.start(0)
        _started(lab)
        offset, jumps = 0.0, []

        def jump(delta: float) -> None:
            nonlocal offset
            jumps.append(
                {"at": time.time(), "offset_before": offset, "offset_after": offset + delta}
            )
            offset += delta
            stamp.write_text(f"{offset:+.0f}\n")
            lab.faults.append(Fault(kind="clock_jump", at=time.time(), detail=f"{delta:+.0f}s"))

        for _ in range(cycles):
            time.sleep(hold_s)
            jump(forward_s)
            time.sleep(hold_s)
            jump(-back_s)
            time.sleep(back_s + after_s)
        return _finish(
            lab,
            scenario="clock_jump",
            params=params,
            settle_s=settle_s,
            jumps=jumps,
            clock_offset=offset,
        )


SCENARIOS: dict[str, Callable[..., Json]] = {
    "kill9": kill9,
    "sigterm": sigterm,
    "three_daemons": three_daemons,
    "pg_restart": pg_restart,
    "clock_jump": clock_jump,
}
