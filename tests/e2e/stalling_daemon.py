"""`triggers` whose scheduler ticks block while a file exists: a test hook, not a feature.

Run as `python tests/e2e/stalling_daemon.py run --config FILE` with `STALL_FILE` set;
the daemon is the real one in every other respect: its scheduler is a subclass that
waits before each tick.
"""

from __future__ import annotations

import os
import threading
from datetime import datetime
from pathlib import Path

import triggers.daemon
from triggers.cli import main
from triggers.scheduler.engine import Scheduler

_GATE = Path(os.environ["STALL_FILE"])


class _StallingScheduler(Scheduler):
    def tick(self) -> datetime:
        pause = threading.Event()
        while _GATE.exists():
            pause.wait(0.05)
        return super().tick()


triggers.daemon.Scheduler = _StallingScheduler  # type: ignore[attr-defined]

if __name__ == "__main__":
    main()
