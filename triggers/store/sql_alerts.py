"""The alert outbox of the SQL store: what the sender leases and records, what operators list.

Alerts are written by the store's own write paths, in the transaction of the ledger
change that raises them (`_alerts.py`); this class only delivers and reads them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Protocol

from looms_runtime.dbapi import read_source, writer
from triggers.alert_rules import AlertRecord
from triggers.store import _read_sql
from triggers.store._driver_errors import translated

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from looms_runtime.db import Database
    from looms_runtime.dbapi import ReadSource
    from triggers.store import _alerts


class AttemptLike(Protocol):
    """A delivery attempt (`triggers.delivery.Attempt`)."""

    @property
    def record(self) -> AlertRecord: ...
    @property
    def at(self) -> datetime: ...
    @property
    def delivered(self) -> bool: ...
    @property
    def error(self) -> str | None: ...
    @property
    def response(self) -> str | None: ...
    @property
    def retry_at(self) -> datetime | None: ...


class SqlAlertOutbox:
    """The `alerts` table on a `Database`: lease, record and list deliveries. Listing
    is a read of the read seam (a `ReadSource` will do); the rest are the daemon's, on
    SQLAlchemy Core (`_alerts`, loaded on first use)."""

    def __init__(self, db: Database | ReadSource) -> None:
        self._db = db
        self._reads = read_source(db)

    def claim(
        self, *, owner: str, now: datetime, lease: timedelta, limit: int = 100
    ) -> list[AlertRecord]:
        """Lease up to `limit` alerts due now, each channel's oldest first.

        Raises:
            StoreUnavailableError: the database cannot be reached.
        """
        from triggers.store import _alerts  # noqa: PLC0415 (the writes' statements)

        with self._write() as conn:
            taken = _alerts.lease_alerts(conn, owner=owner, now=now, lease=lease, limit=limit)
        return self._read(taken)

    def record(
        self,
        record: AlertRecord,
        *,
        owner: str,
        now: datetime,
        delivered: bool,
        error: str | None = None,
        response: str | None = None,
        retry_at: datetime | None = None,
    ) -> bool:
        """Record one attempt: delivered, retried at `retry_at`, or failed for good.

        Returns False when the lease was lost (another sender took the alert over).
        """
        from triggers.store import _alerts  # noqa: PLC0415 (the writes' statements)

        with self._write() as conn:
            return _alerts.record_alert(
                conn,
                record_id=record.id,
                owner=owner,
                now=now,
                delivered=delivered,
                error=error,
                response=response,
                retry_at=retry_at,
            )

    def record_all(self, attempts: Sequence[AttemptLike], *, owner: str) -> int:
        """Record a round's attempts in one transaction; how many were still leased."""
        from triggers.store import _alerts  # noqa: PLC0415 (the writes' statements)

        with self._write() as conn:
            return _alerts.record_alerts(conn, _answers(attempts), owner=owner)

    def due(self, *, owner: str, now: datetime, limit: int = 100) -> bool:
        """Whether `claim` would lease an alert now (a read: no write lock taken)."""
        from triggers.store import _alerts  # noqa: PLC0415 (the writes' statements)

        with translated(), writer(self._db).read() as conn:
            return _alerts.alerts_due(conn, owner=owner, now=now, limit=limit)

    def exchange(
        self,
        attempts: Sequence[AttemptLike],
        *,
        owner: str,
        now: datetime,
        lease: timedelta,
        limit: int = 100,
    ) -> list[AlertRecord]:
        """Record the last round's attempts and lease the next round's alerts, in one
        transaction (`record_all`, then `claim`).

        Raises:
            StoreUnavailableError: the database cannot be reached.
        """
        from triggers.store import _alerts  # noqa: PLC0415 (the writes' statements)

        with self._write() as conn:
            _alerts.record_alerts(conn, _answers(attempts), owner=owner)
            taken = _alerts.lease_alerts(conn, owner=owner, now=now, lease=lease, limit=limit)
        return self._read(taken)

    def _read(self, ids: Sequence[int]) -> list[AlertRecord]:
        """The leased alerts whole: read after the lease's commit, out of the write lock."""
        if not ids:
            return []
        with translated(), self._reads.read() as rows:
            return _read_sql.read_alerts(rows, ids)

    def check_deadlines(self, *, now: datetime) -> int:
        """Raise `late` and `stuck` alerts whose deadline passed (once each, whoever
        looks); how many were found (before deduplication). Looking is a read: the
        write lock is taken only when there is something to raise."""
        from triggers.store import _alerts  # noqa: PLC0415 (the writes' statements)

        with translated(), writer(self._db).read() as conn:
            raised = _alerts.deadline_alerts(conn, now)
        if raised:
            with self._write() as conn:
                _alerts.raise_alerts(conn, raised, now)
        return len(raised)

    def list(
        self, *, trigger_id: str | None = None, status: str | None = None, limit: int = 100
    ) -> list[AlertRecord]:
        """The newest alerts first."""
        with translated(), self._reads.read() as rows:
            return _read_sql.list_alerts(rows, trigger_id=trigger_id, status=status, limit=limit)

    def counts(self) -> dict[str, int]:
        """Alerts by status: `pending`, `delivered`, `failed`."""
        from triggers.store import _alerts  # noqa: PLC0415 (the writes' statements)

        with translated(), writer(self._db).read() as conn:
            return _alerts.count_alerts(conn)

    def prune(self, *, older_than: datetime, limit: int = 10_000) -> int:
        """Delete delivered and failed alerts raised before `older_than`; how many.

        Raises:
            StoreUnavailableError: the database cannot be reached.
        """
        from triggers.store import _alerts  # noqa: PLC0415 (the writes' statements)

        with self._write(urgent=False) as conn:
            return _alerts.prune_alerts(conn, older_than=older_than, limit=limit)

    @contextmanager
    def _write(self, *, urgent: bool = True) -> Iterator[Connection]:
        # Urgent, as the scheduler's claims: a sender's round is one short transaction
        # per few hundred alerts, and behind a busy daemon's claims it would wait for
        # as long as they keep coming (its alerts with it). Pruning can wait.
        with translated(), writer(self._db).write(urgent=urgent) as conn:
            yield conn


def _answers(attempts: Sequence[AttemptLike]) -> list[_alerts.DeliveryAnswer]:
    from triggers.store import _alerts  # noqa: PLC0415 (the writes' statements)

    return [
        _alerts.DeliveryAnswer(
            record_id=attempt.record.id,
            at=attempt.at,
            delivered=attempt.delivered,
            error=attempt.error,
            response=attempt.response,
            retry_at=attempt.retry_at,
        )
        for attempt in attempts
    ]


__all__ = ["SqlAlertOutbox"]
