"""The scheduler's tunables and their defaults, the one place those defaults are written.

`triggers.settings` takes its defaults for the settings of the same names from here,
and `Settings.scheduler_options` copies them back by name, so a default cannot differ
between `TRIGGERS_*` and the scheduler a test or a benchmark builds directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

RETRY_SOON = timedelta(seconds=1)
"""How soon the scheduler tries again what a store or planning error interrupted: a
tick, a trigger's plan, the ledger rows of launched runs. (A start the runtime did not
answer waits `START_RETRY` instead: the runtime is busy, not the database.)"""


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerOptions:
    """Tunables of the scheduler (built from Settings by the daemon)."""

    owner: str
    host: str
    version: str = "0"
    poll_interval: timedelta = timedelta(seconds=5)
    lease: timedelta = timedelta(minutes=5)
    run_poll_interval: timedelta = timedelta(seconds=15)
    start_timeout: timedelta = timedelta(minutes=4)
    inspect_timeout: timedelta = timedelta(seconds=30)
    cancel_timeout: timedelta = timedelta(seconds=30)
    concurrency: int = 8
    fire_retention: timedelta = timedelta(days=30)
    heartbeat_interval: timedelta | None = None
    """A tick records the daemon's heartbeat when the last one is this old; None: four
    beats within the owner lease, at most one a second and at least one a poll."""
    heartbeat_retention: timedelta = timedelta(days=1)
    """Heartbeats of daemons silent for this long are deleted (hourly, with the ledger)."""
    shutdown_grace: timedelta = timedelta(seconds=10)
    owner_lease: timedelta = timedelta(seconds=10)
    """How long a daemon that stopped ticking keeps its runs and launch reservations
    before another host takes them (its heartbeat renews it; on the same host a dead
    daemon's are taken at once)."""
    plan_limit: int = 10_000
    housekeeping_delay: timedelta = timedelta(milliseconds=200)
    """After a tick that launched, how long heartbeat/listing/pending wait (0: never)."""
    inline: bool = False
    """Launch, record and inspect on the calling thread, with no worker threads and no
    deadlines, for a runner that answers at once (`triggers simulate`): the launcher
    starts each batch as it is submitted, and the monitor records what the runner
    reports when the loop asks (`Monitor.record_reported`), not on a thread of its own."""
