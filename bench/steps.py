"""Python steps the benchmarks run: each records when it started, and does nothing else."""

from __future__ import annotations

import os
import time
from pathlib import Path

from looms_runtime import StepContext


def mark(_input: object, context: StepContext) -> None:
    """Append `run_id start_ns` to the file `BENCH_STEP_LOG` names (one line, one write)."""
    line = f"{context.run_id} {time.time_ns()}\n".encode()
    fd = os.open(os.environ["BENCH_STEP_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def noop(_input: object) -> None:
    """Nothing: what a step costs the runtime, whatever it does."""


def fail(_input: object) -> None:
    """Fail at once: what a failing job costs, for the alert benchmark."""
    raise RuntimeError("disk full")


def mark_then_fail(input_: object, context: StepContext) -> None:
    """`mark`, then fail once the file `BENCH_FAIL_FLAG` names exists: the alert
    benchmark turns every trigger failing at one moment."""
    mark(input_, context)
    if Path(os.environ["BENCH_FAIL_FLAG"]).exists():
        raise RuntimeError("disk full")
