"""A Python flow for the crash tests, imported by the runtime process the tests kill.

Every step appends to the log file named in the run's input, so the tests read what
really ran; the middle step waits on its first attempt, which is when the process
is killed.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from looms_runtime import StepContext
from looms_runtime.flow import FlowContext


def append(log: str, line: str) -> None:
    with Path(log).open("a") as out:
        out.write(f"{line}\n")


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
