"""`triggers` whose clock starts at a chosen instant: a test hook, not a feature.

Run as `python tests/e2e/clocked_daemon.py run --config FILE` with `CLOCK_START` set
(ISO-8601 UTC): the daemon's one clock (its scheduler's, its store's and its
runtime's) reads `CLOCK_START` when the process starts and goes on at the real
pace, so a test can place a holiday, a midnight or a schedule's second a few
seconds ahead. The daemon is the real one in every other respect.
"""

from __future__ import annotations

import os
from datetime import datetime

import triggers.daemon
from triggers.cli import main
from triggers.clock import SystemClock

_OFFSET = datetime.fromisoformat(os.environ["CLOCK_START"]) - SystemClock().now()


class _OffsetClock(SystemClock):
    def now(self) -> datetime:
        return super().now() + _OFFSET


# The daemon builds its clock from this name (`clock or SystemClock()`).
triggers.daemon.SystemClock = _OffsetClock  # type: ignore[attr-defined]

if __name__ == "__main__":
    main()
