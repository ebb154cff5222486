"""`triggers` whose scheduler ticks block while a file exists: a test hook, not a feature.

Run as `python tests/e2e/stalling_daemon.py run --config FILE` with `STALL_FILE` set;
the daemon is the real one in every other respect.
"""

from __future__ import annotations

import os
import threading
from datetime import datetime
from pathlib import Path

from triggers.cli import main
from triggers.scheduler.engine import Scheduler

_GATE = Path(os.environ["STALL_FILE"])
_tick = Scheduler.tick


def _stalling_tick(self: Scheduler) -> datetime:
    pause = threading.Event()
    while _GATE.exists():
        pause.wait(0.05)
    return _tick(self)


Scheduler.tick = _stalling_tick  # type: ignore[method-assign]

if __name__ == "__main__":
    main()
