"""The SQL claim's reads of the ledger before it decides (the twin of the memory
store's `_memory_lookups.py`): the operator requests' occurrences it holds already,
the active runs a `supersede` decision needs, and which request of a trigger is the
one `supersede` decides. Inside the claim's transaction, after the trigger locks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from triggers.errors import StoreError
from triggers.model import Outcome, Overlap, Trigger, idempotency_key
from triggers.store._decide import may_supersede
from triggers.store._shared import chunks
from triggers.store.protocol import ClaimRequest
from triggers.store.schema import fires


def held(
    conn: Connection, requests: Sequence[ClaimRequest]
) -> tuple[set[tuple[str, datetime, str]], set[str]]:
    """The operator requests' occurrences the ledger holds, and their manual keys it
    holds."""
    # A scheduled occurrence after the watermark has no ledger row yet: every row at
    # or before it moved the watermark past it (claims, ranges), and manual and
    # backfill rows sit at or before it or under their own key. So only operator
    # requests are looked up; scheduled ones are fenced by the watermark (and, as
    # a last resort, by the unique index).
    by_trigger: dict[str, list[datetime]] = {}
    for request in requests:
        if request.kind != "scheduled":
            by_trigger.setdefault(request.trigger_id, []).append(request.occurrence_at)
    if not by_trigger:
        return set(), set()
    earliest = min(min(times) for times in by_trigger.values())
    latest = max(max(times) for times in by_trigger.values())
    found: set[tuple[str, datetime, str]] = set()
    for part in chunks(sorted(by_trigger)):
        rows = conn.execute(
            sa.select(fires.c.trigger_id, fires.c.occurrence_at, fires.c.manual_key).where(
                fires.c.trigger_id.in_(part),
                fires.c.occurrence_at.between(earliest, latest),
            )
        )
        found.update((row[0], row[1], row[2]) for row in rows)
    manual = [
        idempotency_key(r.trigger_id, r.occurrence_at, r.manual_key)
        for r in requests
        if r.manual_key
    ]
    keys: set[str] = set()
    for part in chunks(manual):
        keys.update(
            conn.execute(
                sa.select(fires.c.idempotency_key).where(fires.c.idempotency_key.in_(part))
            ).scalars()
        )
    return found, keys


def active_runs(
    conn: Connection,
    requests: Sequence[ClaimRequest],
    stored: Mapping[str, Trigger | StoreError],
) -> dict[str, list[str | None]]:
    """Active run ids (None for a reservation) of triggers that may supersede."""
    overridden = {r.trigger_id for r in requests if r.overlap is Overlap.SUPERSEDE}
    wanted = [
        trigger_id
        for trigger_id, trigger in stored.items()
        if isinstance(trigger, Trigger)
        and trigger.active_count > 0
        and (trigger.spec.overlap is Overlap.SUPERSEDE or trigger_id in overridden)
    ]
    active: dict[str, list[str | None]] = {}
    for part in chunks(wanted):
        rows = conn.execute(
            sa.select(fires.c.trigger_id, fires.c.run_id)
            .where(
                fires.c.trigger_id.in_(part),
                fires.c.outcome.in_([Outcome.LAUNCHING.value, Outcome.LAUNCHED.value]),
            )
            .order_by(fires.c.occurrence_at)
        )
        for trigger_id, run_id in rows:
            active.setdefault(trigger_id, []).append(run_id)
    return active


def newest_superseding(
    requests: Sequence[ClaimRequest],
    stored: Mapping[str, Trigger | StoreError],
    existing: set[tuple[str, datetime, str]],
    covered: set[tuple[str, datetime]],
) -> dict[str, int]:
    """Per trigger, the index of the last request the `supersede` policy will
    decide; every earlier supersede request of that trigger is replaced by it."""
    newest: dict[str, int] = {}
    for index, request in enumerate(requests):
        trigger = stored.get(request.trigger_id)
        if isinstance(trigger, Trigger) and may_supersede(
            request, trigger, existing=existing, covered=covered
        ):
            newest[trigger.id] = index
    return newest
