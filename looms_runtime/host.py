"""Facts of this host that ownership rests on: its boot, and whether a process still lives.

A runtime (or a daemon) that stopped on this host is provably gone when, on the same
boot, its pid no longer names a process started at the time it recorded: its runs and
reservations may then be taken at once instead of after their lease. A pid alone is
not enough, since pids are reused; the boot id tells a reboot apart, after which no
process of the earlier boot can still run.
"""

from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass
from pathlib import Path

BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")
_PR_SET_DUMPABLE = 4


def forbid_inspection() -> bool:
    """Make this process undumpable (prctl PR_SET_DUMPABLE 0): another process of the
    same user, a step among them, can no longer read its /proc/PID/environ or memory
    nor attach a debugger, and it leaves no core dump with its secrets. The commands it
    starts are not affected (exec resets it). False where it could not be done."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def boot_id() -> str:
    """This boot of this machine (a random id, new at every boot); "" where unknown."""
    try:
        return BOOT_ID_PATH.read_text().strip()
    except OSError:
        return ""


def process_start(pid: int) -> int | None:
    """When the process `pid` started (clock ticks after boot), or None when there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: fields follow the last ')'.
    fields = stat[stat.rfind(")") + 2 :].split()
    try:
        return int(fields[19])  # field 22, starttime
    except (IndexError, ValueError):
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessId:
    """A process as it can be told apart from any other, past or future, on this host."""

    boot: str
    pid: int
    started: int | None

    @classmethod
    def current(cls) -> ProcessId:
        pid = os.getpid()
        return cls(boot=boot_id(), pid=pid, started=process_start(pid))

    def gone(self) -> bool:
        """True only when the process provably no longer runs (same boot, pid dead or
        reused); False when it runs or when that cannot be told from here."""
        if not self.boot or self.boot != boot_id() or self.started is None:
            return False
        return process_start(self.pid) != self.started
