"""What a run started within a claim answered, written onto its ledger row: once,
for every store.

The claim decides, the runner starts the fires' runs in the claim's own
transaction, and each answer becomes the fire's new ledger row and its claim
(`record_start`): a fire is one commit, and no reservation is taken (there is no
moment when the runtime holds a run the ledger does not name, or the reverse).
A start the runtime refuses for good is recorded `failed` in the same commit; one
it could not answer stays `launching`, to be started again from `START_RETRY` by
the pending pass (as the launcher does after a failed start).
"""

from __future__ import annotations

from datetime import datetime

from triggers.errors import RunnerRefusedError
from triggers.model import Outcome
from triggers.store._fire_row import FireRow, cut, new_reservation
from triggers.store.protocol import (
    START_RETRY,
    Claim,
    Claimed,
    Completed,
    CompletedRun,
    Deferred,
    Launched,
    Refused,
    StartResult,
)


def record_start(row: FireRow, claimed: Claimed, answer: StartResult, *, now: datetime) -> Claim:
    """Write `answer`, the start of `claimed`'s run, onto its new ledger row (`launching`
    until now, and not yet inserted) and return the claim it makes.

    `now` is the claim's instant, cut to the millisecond."""
    trigger, at, action = claimed.trigger, claimed.occurrence_at, claimed.action
    key, kind, manual_key = claimed.idempotency_key, claimed.kind, claimed.manual_key
    if isinstance(answer, str):
        row.outcome, row.run_id, row.launched_at = Outcome.LAUNCHED, answer, now
        row.lease_owner = row.lease_expires_at = None
        return Launched(
            trigger=trigger,
            occurrence_at=at,
            action=action,
            idempotency_key=key,
            kind=kind,
            manual_key=manual_key,
            run_id=answer,
        )
    if isinstance(answer, CompletedRun):
        row.outcome, row.run_id = Outcome.COMPLETED, answer.run_id
        row.launched_at = row.settled_at = now
        row.lease_owner = row.lease_expires_at = None
        return Completed(
            trigger=trigger,
            occurrence_at=at,
            action=action,
            idempotency_key=key,
            kind=kind,
            manual_key=manual_key,
            run_id=answer.run_id,
        )
    error = str(answer)
    if isinstance(answer, RunnerRefusedError):
        row.outcome, row.error, row.settled_at = Outcome.FAILED, error, now
        row.lease_owner = row.lease_expires_at = None
        return Refused(
            trigger=trigger,
            occurrence_at=at,
            action=action,
            idempotency_key=key,
            kind=kind,
            manual_key=manual_key,
            error=error,
        )
    # Not answered for good: the row stays `launching` under a reservation no daemon
    # holds, its lease ending when it is to be tried again.
    retry_at = now + START_RETRY
    row.error, row.reservation, row.lease_owner = error, new_reservation(), None
    row.lease_expires_at = cut(retry_at)
    return Deferred(
        trigger=trigger,
        occurrence_at=at,
        action=action,
        idempotency_key=key,
        kind=kind,
        manual_key=manual_key,
        retry_at=retry_at,
        error=error,
    )
