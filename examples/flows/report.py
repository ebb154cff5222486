"""A durable Python flow: gather figures, render a report, publish it, wait for a reviewer.

Declared in `examples/python-flow.yaml` as `python: examples.flows.report:build`; the
daemon started from the project root (`make run CONFIG=examples/python-flow.yaml`)
imports it from there. Each `ctx.step` runs once per run: if the daemon stops in
the middle, the next start replays the steps already done from the run's log and
goes on from the first one that is not.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

from looms_runtime import StepContext
from looms_runtime.flow import FlowContext, Retry, WaitTimeoutError


def gather(host: str) -> dict[str, Any]:
    """The figures the report shows (here: the machine's load, no network needed)."""
    one, five, fifteen = os.getloadavg()
    return {"host": host, "load": [round(one, 2), round(five, 2), round(fifteen, 2)]}


def render(title: str, figures: dict[str, Any], at: str) -> str:
    load = ", ".join(str(value) for value in figures["load"])
    return f"{title}\nhost: {figures['host']}\nat: {at}\nload (1m, 5m, 15m): {load}\n"


def publish(out_dir: str, name: str, text: str, context: StepContext) -> str:
    """Write the report; the file is named after the run, so a re-run rewrites it."""
    path = Path(out_dir) / f"{name}-{context.run_id}.txt"
    path.write_text(text)
    return str(path)


def build(ctx: FlowContext, data: dict[str, Any] | None) -> dict[str, Any]:
    """The flow: input `{title, out_dir, review_timeout_s}` (all optional)."""
    data = data or {}
    title = data.get("title", "Load report")
    at = ctx.now().isoformat()
    figures = ctx.step("gather", gather, os.uname().nodename, idempotent=True)
    text = ctx.step("render", render, title, figures, at, idempotent=True)
    path = ctx.step(
        "publish",
        publish,
        data.get("out_dir", "/tmp"),  # noqa: S108 - an example that must run anywhere
        "triggers-report",
        text,
        idempotent=True,
        retry=Retry(max_attempts=3, backoff=timedelta(seconds=2)),
    )
    try:
        # `triggers runs signal RUN_ID reviewed --payload '{"by": "ops"}'` answers it; nobody
        # has to: after the timeout the report is simply not reviewed.
        review = ctx.wait_signal("reviewed", timeout=data.get("review_timeout_s", 30))
    except WaitTimeoutError:
        review = None
    return {"report": path, "reviewed_by": (review or {}).get("by")}
