"""The pending pass: launches the store holds for later, taken by the tick thread.

Pending are reservations whose lease expired (a start that failed or answered
too late, an operator's fire or backfill, whose claim is taken with an already
expired lease) or whose daemon is gone (see `liveness`: a dead daemon's
reservations are taken at once on its host, after the owner lease elsewhere), and
buffered occurrences, which the store resolves under each trigger's current
policy. The launcher and the monitor ask for a pass from their threads; the tick
runs it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime, timedelta

import structlog

from triggers.scheduler.launcher import Launcher
from triggers.scheduler.liveness import Host, UnknownHost, gone_owners
from triggers.store.protocol import Heartbeat, TriggerStore

log = structlog.get_logger()


class PendingPass:
    """When the next pending pass is due, and the pass itself."""

    def __init__(
        self,
        *,
        store: TriggerStore,
        launcher: Launcher,
        owner: str,
        host: str,
        lease: timedelta,
        wake: threading.Event,
        owner_lease: timedelta = timedelta(seconds=10),
        liveness: Host | None = None,
    ) -> None:
        self._store = store
        self._owner_lease = owner_lease
        self._liveness = liveness or UnknownHost()
        self._launcher = launcher
        self._owner = owner
        self._host = host
        self._lease = lease
        self._wake = wake
        self._wanted = threading.Event()
        self._due_at: datetime | None = None
        self._lock = threading.Lock()

    def want(self) -> None:
        """Any thread: run a pass at the next tick (a run settled or launched)."""
        self._wanted.set()
        self._wake.set()

    def retry_at(self, retry_at: datetime) -> None:
        """Launcher thread: a launch was given back, to be retried from `retry_at`."""
        with self._lock:
            if self._due_at is None or retry_at < self._due_at:
                self._due_at = retry_at
        self._wake.set()

    @property
    def wanted(self) -> bool:
        return self._wanted.is_set()

    # `_due_at` is read without the lock: one attribute read is atomic, and the lock
    # only keeps `retry_at`'s compare-and-set whole (both run at every tick).

    def due(self, now: datetime) -> bool:
        if self._wanted.is_set():
            return True
        due_at = self._due_at
        return due_at is not None and now >= due_at

    def next_at(self) -> datetime | None:
        """When a retry is next due (a wanted pass wakes the loop by itself)."""
        return self._due_at

    def take(self, now: datetime, *, beats: Sequence[Heartbeat] | None = None) -> int:
        """Take what is pending and hand it to the launcher; returns how many. `beats`:
        the heartbeats the caller has just read (else they are read here)."""
        self._wanted.clear()
        with self._lock:
            if self._due_at is not None and self._due_at <= now:
                self._due_at = None
        self._launcher.record_unrecorded(now)
        gone = gone_owners(
            self._store.heartbeats() if beats is None else beats,
            me=self._owner,
            now=now,
            owner_lease=self._owner_lease,
            host=self._liveness,
        )
        claims = self._store.take_pending(
            owner=self._owner, host=self._host, now=now, lease=self._lease, dead_owners=gone
        )
        if claims:
            log.info("pending_taken", count=len(claims))
            self._launcher.submit(claims)
        return len(claims)
