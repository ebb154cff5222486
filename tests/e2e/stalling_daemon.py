"""`triggers` whose scheduler ticks block while a file exists: a test hook, not a feature.

Run as `python tests/e2e/stalling_daemon.py run --config FILE` with `STALL_FILE` set;
the daemon is the real one in every other respect: its scheduler is a subclass that
waits before each tick. With `STALL_SKIP_S`, the daemon's wall clock also steps that
many seconds forward when a stall begins, so that a limit of tens of seconds is
passed in a few.
"""

from __future__ import annotations

import os
import threading
from datetime import datetime, timedelta
from pathlib import Path

import triggers.daemon
from triggers.cli import main
from triggers.clock import SystemClock
from triggers.scheduler.engine import Scheduler

_GATE = Path(os.environ["STALL_FILE"])
_SKIP = timedelta(seconds=float(os.environ.get("STALL_SKIP_S", "0")))
_skipped = timedelta(0)


class _SkippingClock(SystemClock):
    def now(self) -> datetime:
        return super().now() + _skipped


class _StallingScheduler(Scheduler):
    def tick(self) -> datetime:
        global _skipped  # noqa: PLW0603 - the one clock of this test process
        pause = threading.Event()
        if _GATE.exists():
            _skipped += _SKIP
        while _GATE.exists():
            pause.wait(0.05)
        return super().tick()


triggers.daemon.Scheduler = _StallingScheduler  # type: ignore[attr-defined]
triggers.daemon.SystemClock = _SkippingClock  # type: ignore[attr-defined]

if __name__ == "__main__":
    main()
