"""What the tiers share: the logs test steps append to, and waiting for a condition."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path


def lines(path: Path) -> list[str]:
    """The lines a step appended to `path` (none when it never ran)."""
    return path.read_text().splitlines() if path.exists() else []


def in_middle_step(log: Path) -> bool:
    """Whether step `b` of the three-step flows has started its first attempt."""
    return any(line.startswith("b:1 start") for line in lines(log))


def wait_for(check: Callable[[], bool], timeout: float = 30.0) -> None:
    """Poll `check` until it holds, or fail after `timeout` seconds."""
    pause = threading.Event()
    for _ in range(int(timeout / 0.01)):
        if check():
            return
        pause.wait(0.01)
    raise AssertionError("condition not reached in time")
