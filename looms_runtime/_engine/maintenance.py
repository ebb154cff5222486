"""The runtime's housekeeping thread: owner heartbeat, takeover, requests from elsewhere.

- Heartbeat: this owner's row in `looms_owners` is renewed every third of the lease;
  runs whose owner's lease lapsed are orphans any runtime may take.
- Takeover: every second, owners whose lease lapsed are looked for (a read of the
  small owners table); their runs, and every half lease any run without a live
  owner, are claimed (their lease epoch bumped, which fences a zombie owner) and
  driven here. A dead daemon's runs move within about one lease. An owner on this
  boot of this host whose process is provably gone (`looms_runtime.host`) lapses at
  once: a daemon restarted after a crash takes its predecessor's runs at its start.
- Requests: cancels and signals recorded by other processes (a CLI) are noticed by a
  cheap indexed poll, since only the owner of a run may append to it.
- Sweep: our runs that should be moving but are not known to any worker here (a
  start whose commit answer was lost, a wake-up lost to a failure) are driven again.
- Retention: hourly, when configured, settled runs past it are purged in batches; and
  hourly, owners whose lease ended a week ago and that hold no unsettled run are
  forgotten (every process is an owner: the table would only grow).
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import structlog
from sqlalchemy.engine import Connection

from looms_runtime._clock import duration_ms
from looms_runtime._store.control import (
    any_orphans,
    claim_runs,
    heartbeat,
    lapse_owners,
    lapsed_owner_runs,
    local_owners,
    prune_owners,
    release_owner,
    stranded_runs,
)
from looms_runtime._store.driver import driver_errors
from looms_runtime._store.reads import runs_with_new_requests
from looms_runtime._store.retention import drop_tombstones, purge_settled
from looms_runtime.db import Database
from looms_runtime.errors import LoomsError
from looms_runtime.host import ProcessId

log = structlog.get_logger()

REQUEST_POLL_S = 1.0
REQUEST_POLL_OVERLAP_MS = 2000
"""Requests are polled with some overlap: rows committed late by a slow writer are still seen."""
SWEEP_EVERY_MS = 10_000
STRANDED_AFTER_MS = 10_000
"""A run is stranded only this long after it should have moved: a busy worker is not a loss."""
SWEEP_LIMIT = 1000
RETENTION_EVERY_MS = 3_600_000
OWNERS_KEPT_MS = 7 * 24 * 3_600_000
"""An owner whose lease ended is forgotten a week later, once it holds no unsettled run
(its row only says who holds a run, and a restarted process is a new owner)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Retention:
    """How long settled runs (and their tombstones) are kept; None keeps them forever."""

    runs_ms: int | None = None
    tombstones_ms: int | None = None
    batch_size: int = 500

    @classmethod
    def of(cls, runs: timedelta | None, tombstones: timedelta | None) -> Retention:
        return cls(
            runs_ms=None if runs is None else duration_ms(runs),
            tombstones_ms=None if tombstones is None else duration_ms(tombstones),
        )


class Maintenance:
    """See the module docstring; `drive(run_ids, refresh)` hands runs to the actors."""

    def __init__(
        self,
        *,
        db: Database,
        owner: str,
        clock_ms: Callable[[], int],
        lease_ms: int,
        drive: Callable[[list[str], bool], None],
        known: Callable[[str], bool],
        retention: Retention,
    ) -> None:
        self._db = db
        self._owner = owner
        self._clock_ms = clock_ms
        self._lease_ms = lease_ms
        self._drive = drive
        self._known = known
        self._retention = retention
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_heartbeat = 0
        self._next_takeover = 0
        self._next_sweep = 0
        self._next_purge = 0
        self._next_owner_prune = 0
        self._polled_at = 0
        self._process = ProcessId.current()
        # A heartbeat must land well inside every lease, however short the lease is.
        self._period_s = min(REQUEST_POLL_S, lease_ms / 3000)

    def claim_at_start(self) -> list[str]:
        """Renew our lease and claim our own unsettled runs and every orphan, in one transaction."""
        now = self._clock_ms()
        with driver_errors(), self._db.write() as conn:
            self._heartbeat(conn, now, starting=True)
            self._lapse_dead(conn, now)
            claimed = claim_runs(conn, owner=self._owner, now_ms=now, include_own=True)
        self._polled_at = now
        self._next_heartbeat = now + self._lease_ms // 3
        self._next_takeover = now + self._lease_ms // 2
        self._next_sweep = now + SWEEP_EVERY_MS
        return [run_id for run_id, _ in claimed]

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="looms-maintenance", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def release(self) -> None:
        """End this owner's lease now, so another runtime may take its runs at once."""
        try:
            with driver_errors(), self._db.write() as conn:
                release_owner(conn, owner=self._owner, now_ms=self._clock_ms())
        except LoomsError as exc:
            log.warning("owner_release_failed", error=exc.message)

    def _loop(self) -> None:
        while not self._stop.wait(self._period_s):
            try:
                self._tick()
            except LoomsError as exc:
                log.warning("maintenance_failed", error_code=exc.code, error=exc.message)

    def _lapse_dead(self, conn: Connection, now: int) -> bool:
        """Lapse the leases of owners on this host whose process is gone; True if any."""
        found = local_owners(conn, owner=self._owner, boot_id=self._process.boot, now_ms=now)
        gone = [owner for owner, process in found if process.gone()]
        if gone:
            log.warning("owners_gone", owners=gone)
            lapse_owners(conn, gone, now_ms=now)
        return bool(gone)

    def _tick(self) -> None:
        now = self._clock_ms()
        if now >= self._next_heartbeat:
            with driver_errors(), self._db.write() as conn:
                self._heartbeat(conn, now, starting=False)
            self._next_heartbeat = now + self._lease_ms // 3
        since = self._polled_at - REQUEST_POLL_OVERLAP_MS
        # One read transaction a second for all the questions: an idle runtime's cost
        # is mostly transactions, not the (indexed, small) queries in them.
        with driver_errors(), self._db.read() as conn:
            local = local_owners(conn, owner=self._owner, boot_id=self._process.boot, now_ms=now)
            requested = runs_with_new_requests(conn, owner=self._owner, since_ms=since)
            full = now >= self._next_takeover
            orphans = (
                any_orphans(conn, owner=self._owner, now_ms=now)
                if full
                else lapsed_owner_runs(conn, owner=self._owner, now_ms=now)
            )
        self._polled_at = now
        if any(process.gone() for _, process in local):
            with driver_errors(), self._db.write() as conn:
                # Lapsed owners' runs are ours to take now.
                orphans = self._lapse_dead(conn, now) or orphans
        if requested:
            self._drive(requested, True)
        if full:
            self._next_takeover = now + self._lease_ms // 2
        if orphans:
            self._take_over(now)
        if now >= self._next_sweep:
            self._next_sweep = now + SWEEP_EVERY_MS
            self._sweep(now)
        if now >= self._next_purge and self._retention.runs_ms is not None:
            self._next_purge = now + RETENTION_EVERY_MS
            self.purge(now)
        if now >= self._next_owner_prune:
            self._next_owner_prune = now + RETENTION_EVERY_MS
            with driver_errors(), self._db.write() as conn:
                forgotten = prune_owners(conn, owner=self._owner, before_ms=now - OWNERS_KEPT_MS)
            if forgotten:
                log.info("owners_forgotten", count=forgotten)

    def _take_over(self, now: int) -> None:
        with driver_errors(), self._db.write() as conn:
            taken = claim_runs(conn, owner=self._owner, now_ms=now, include_own=False)
        if taken:
            log.warning("runs_taken_over", count=len(taken))
            self._drive([run_id for run_id, _ in taken], False)

    def _sweep(self, now: int) -> None:
        with driver_errors(), self._db.read() as conn:
            found = stranded_runs(
                conn, owner=self._owner, before_ms=now - STRANDED_AFTER_MS, limit=SWEEP_LIMIT
            )
        stranded = [run_id for run_id in found if not self._known(run_id)]
        if stranded:
            log.warning("stranded_runs_driven", count=len(stranded))
            self._drive(stranded, False)

    def purge(self, now: int) -> int:
        """Apply the retention now; return how many runs were purged."""
        retention = self._retention
        purged = 0
        if retention.runs_ms is not None:
            purged = purge_settled(
                self._db,
                cutoff_ms=now - retention.runs_ms,
                now_ms=now,
                batch_size=retention.batch_size,
                max_batches=None,
            )
        if retention.tombstones_ms is not None:
            drop_tombstones(
                self._db, cutoff_ms=now - retention.tombstones_ms, batch_size=retention.batch_size
            )
        if purged:
            log.info("runs_purged", count=purged)
        return purged

    def _heartbeat(self, conn: Connection, now: int, *, starting: bool) -> None:
        heartbeat(
            conn,
            conn.dialect.name,
            owner=self._owner,
            host=socket.gethostname(),
            pid=os.getpid(),
            now_ms=now,
            expires_at=now + self._lease_ms,
            starting=starting,
            boot_id=self._process.boot or None,
            process_start=self._process.started,
        )
