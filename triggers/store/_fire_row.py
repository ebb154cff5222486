"""One row of the fire ledger as Python values, shared by both stores.

The claim batch (`_claim_batch.py`) writes its new ledger rows as `FireRow`s: the
memory store keeps them as they are, the SQL store hands their driver values to
the database. Instants are aware UTC datetimes cut to the millisecond (`cut`), as
`UtcDateTime` stores them, so both stores hand back equal values.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime, timedelta

from triggers.model import FireRecord, Outcome, Reason
from triggers.store.protocol import FireKind


def cut(at: datetime) -> datetime:
    """`at` to the millisecond below, as the SQL store keeps instants."""
    extra = at.microsecond % 1000
    return at - timedelta(microseconds=extra) if extra else at


def encode_runs(runs: tuple[str, ...]) -> str | None:
    """`fires.upstream_runs` of a row: a JSON list, or NULL for none."""
    return json.dumps(list(runs)) if runs else None


def decode_runs(value: str | None) -> tuple[str, ...]:
    """The runs `encode_runs` wrote."""
    return tuple(json.loads(value)) if value else ()


def new_reservation() -> str:
    """A fencing token for one reservation: unique, cheap (a tick takes a thousand)."""
    return os.urandom(12).hex()  # what secrets.token_hex(12) returns, three calls fewer


@dataclass(slots=True, kw_only=True)
class FireRow:
    """One row of `fires` (the ledger)."""

    id: int = 0
    trigger_id: str
    occurrence_at: datetime
    outcome: Outcome
    last_occurrence_at: datetime | None = None
    count: int = 1
    manual_key: str = ""
    idempotency_key: str | None = None
    kind: FireKind = "scheduled"
    reason: Reason | None = None
    run_id: str | None = None
    supersedes_run_id: str | None = None
    blocked_by: str | None = None
    reason_detail: str | None = None
    upstream_runs: tuple[str, ...] = ()
    revision: int | None = None
    host: str | None = None
    claimed_at: datetime | None = None
    launched_at: datetime | None = None
    settled_at: datetime | None = None
    error: str | None = None
    reservation: str | None = None
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None

    @property
    def identity(self) -> tuple[str, datetime, str]:
        return (self.trigger_id, self.occurrence_at, self.manual_key)

    @property
    def newest_at(self) -> datetime:
        """Its occurrence, or a range's last one."""
        return self.last_occurrence_at or self.occurrence_at

    def record(self) -> FireRecord:
        return FireRecord(
            trigger_id=self.trigger_id,
            occurrence_at=self.occurrence_at,
            outcome=self.outcome,
            reason=self.reason,
            run_id=self.run_id,
            revision=self.revision,
            host=self.host,
            claimed_at=self.claimed_at,
            launched_at=self.launched_at,
            settled_at=self.settled_at,
            error=self.error,
            last_occurrence_at=self.last_occurrence_at,
            count=self.count,
            manual_key=self.manual_key,
            idempotency_key=self.idempotency_key,
            blocked_by=self.blocked_by,
            reason_detail=self.reason_detail,
            upstream_runs=self.upstream_runs,
        )
