"""Python flows for the crash tests, imported by the runtime process the tests kill.

Every step appends to the log file named in the run's input, so the tests read what
really ran; the slow step waits on its first attempt, which is when the process
is killed.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from looms_runtime import StepContext
from looms_runtime.flow import FlowContext, Retry


def append(log: str, line: str) -> str:
    with Path(log).open("a") as out:
        out.write(f"{line}\n")
    return line


def slow(log: str, context: StepContext) -> str:
    append(log, f"b:{context.attempt} start {os.getpid()}")
    if context.attempt == 1:
        threading.Event().wait(60)
    append(log, f"b:{context.attempt} end")
    return f"b{context.attempt}"


def three_steps(ctx: FlowContext, data: dict[str, Any]) -> str:
    log = data["log"]
    ctx.step("a", append, log, "a")
    middle = ctx.step("b", slow, log, idempotent=data["idempotent"])
    ctx.step("c", append, log, "c")
    return str(middle)


def flaky(log: str, context: StepContext) -> str:
    append(log, f"flaky:{context.attempt}")
    if context.attempt == 1:
        raise RuntimeError("first attempt fails")
    return f"flaky{context.attempt}"


def three_branches(ctx: FlowContext, data: dict[str, Any]) -> list[str]:
    """A completed branch, one in flight at the crash, one waiting for its retry."""
    log = data["log"]
    retry = Retry(max_attempts=3, backoff=data["backoff_s"])
    joined = ctx.parallel(
        ctx.branch("quick", append, log, "quick"),
        ctx.branch("b", slow, log, idempotent=data["idempotent"]),
        ctx.branch("flaky", flaky, log, retry=retry),
    )
    ctx.step("upload", append, log, "upload")
    return [str(result) for result in joined]
