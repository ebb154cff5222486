"""Builders of domain values for tests."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from looms_runtime import Runtime
from triggers.model import (
    Catchup,
    CatchupPolicy,
    CronSchedule,
    EverySchedule,
    FlowSpec,
    Overlap,
    Schedule,
    TriggerSpec,
)

MakeRuntime = Callable[..., Runtime]
"""The `make_runtime` fixture: a runtime on the test's database, closed at teardown."""

NOOP_FLOW: dict[str, Any] = {"kind": "steps", "steps": []}
NOOP_VERSION = FlowSpec.digest(NOOP_FLOW)


def spec(
    trigger_id: str = "t1",
    *,
    schedule: Schedule | None = None,
    every: timedelta | None = None,
    cron: str | None = None,
    overlap: Overlap = Overlap.SKIP,
    catchup: CatchupPolicy = CatchupPolicy.LATEST,
    window: timedelta = timedelta(days=1),
    grace: timedelta = timedelta(minutes=1),
    **extra: Any,
) -> TriggerSpec:
    """A trigger spec; `every=` or `cron=` pick the schedule (default every minute)."""
    if schedule is None:
        if cron is not None:
            schedule = CronSchedule(expression=cron)
        else:
            schedule = EverySchedule(interval=every or timedelta(minutes=1))
    return TriggerSpec(
        id=trigger_id,
        flow=extra.pop("flow", "noop"),
        flow_version=extra.pop("flow_version", NOOP_VERSION),
        schedule=schedule,
        overlap=overlap,
        catchup=Catchup(policy=catchup, window=window, grace=grace),
        **extra,
    )


def minutes(n: float) -> timedelta:
    return timedelta(minutes=n)


def at(base: datetime, **delta: float) -> datetime:
    return base + timedelta(**delta)
