"""The runtime's housekeeping thread: owner heartbeat, takeover, requests from elsewhere.

- Heartbeat: this owner's row in `looms_owners` is renewed every third of the lease;
  runs whose owner's lease lapsed are orphans any runtime may take.
- Takeover: every half lease, orphaned runs (no owner, or an owner whose lease
  lapsed) are looked for by a read, then claimed (their lease epoch bumped, which
  fences any zombie owner) and driven here.
- Requests: cancels and signals recorded by other processes (a CLI) are noticed by a
  cheap indexed poll, since only the owner of a run may append to it.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable

import structlog
from sqlalchemy.engine import Connection

from looms_runtime._rows import driver_errors
from looms_runtime._store_control import any_orphans, claim_runs, heartbeat, release_owner
from looms_runtime._store_reads import runs_with_new_requests
from looms_runtime.db import Database
from looms_runtime.errors import LoomsError

log = structlog.get_logger()

REQUEST_POLL_S = 1.0
REQUEST_POLL_OVERLAP_MS = 2000
"""Requests are polled with some overlap: rows committed late by a slow writer are still seen."""


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
    ) -> None:
        self._db = db
        self._owner = owner
        self._clock_ms = clock_ms
        self._lease_ms = lease_ms
        self._drive = drive
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_heartbeat = 0
        self._next_takeover = 0
        self._polled_at = 0
        # A heartbeat must land well inside every lease, however short the lease is.
        self._period_s = min(REQUEST_POLL_S, lease_ms / 3000)

    def claim_at_start(self) -> list[str]:
        """Renew our lease and claim our own unsettled runs and every orphan, in one transaction."""
        now = self._clock_ms()
        with driver_errors(), self._db.write() as conn:
            self._heartbeat(conn, now, starting=True)
            claimed = claim_runs(conn, owner=self._owner, now_ms=now, include_own=True)
        self._polled_at = now
        self._next_heartbeat = now + self._lease_ms // 3
        self._next_takeover = now + self._lease_ms // 2
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

    def _tick(self) -> None:
        now = self._clock_ms()
        if now >= self._next_heartbeat:
            with driver_errors(), self._db.write() as conn:
                self._heartbeat(conn, now, starting=False)
            self._next_heartbeat = now + self._lease_ms // 3
        since = self._polled_at - REQUEST_POLL_OVERLAP_MS
        with driver_errors(), self._db.read() as conn:
            requested = runs_with_new_requests(conn, owner=self._owner, since_ms=since)
        self._polled_at = now
        if requested:
            self._drive(requested, True)
        if now < self._next_takeover:
            return
        self._next_takeover = now + self._lease_ms // 2
        with driver_errors(), self._db.read() as conn:
            orphans = any_orphans(conn, owner=self._owner, now_ms=now)
        if orphans:
            with driver_errors(), self._db.write() as conn:
                taken = claim_runs(conn, owner=self._owner, now_ms=now, include_own=False)
            if taken:
                log.warning("runs_taken_over", count=len(taken))
                self._drive([run_id for run_id, _ in taken], False)

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
        )
