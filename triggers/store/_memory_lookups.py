"""What a claim batch of the memory store reads of the ledger beyond its triggers.

Private to `_memory_claims.py`: the operators' requests the ledger holds already,
backfills that lie inside a range row, the active runs of triggers that may
supersede, and which request of a batch the `supersede` policy decides. A tick's
batch of scheduled occurrences, none under `supersede`, needs none of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from triggers.model import Outcome, Overlap, idempotency_key
from triggers.store._decide import may_supersede
from triggers.store._memory_rows import Tables, TriggerRow
from triggers.store.protocol import ClaimRequest


def held(
    tables: Tables, requests: Sequence[ClaimRequest]
) -> tuple[set[tuple[str, datetime, str]], set[str]]:
    """The operator requests' occurrences the ledger holds, and their manual keys
    it holds. Scheduled occurrences are fenced by the watermark, as in SQL."""
    found: set[tuple[str, datetime, str]] = set()
    keys: set[str] = set()
    if all(request.kind == "scheduled" for request in requests):
        return found, keys
    for request in requests:
        if request.kind == "scheduled":
            continue
        identity = (request.trigger_id, request.occurrence_at, request.manual_key)
        if identity in tables.by_identity:
            found.add(identity)
        if request.manual_key:
            key = idempotency_key(request.trigger_id, request.occurrence_at, request.manual_key)
            if key in tables.by_key:
                keys.add(key)
    return found, keys


def covered_backfills(
    tables: Tables, requests: Sequence[ClaimRequest]
) -> set[tuple[str, datetime]]:
    """Backfill occurrences that lie inside a range row, past its first one."""
    wanted = [r for r in requests if r.kind == "backfill"]
    if not wanted:
        return set()
    ranges: dict[str, list[tuple[datetime, datetime]]] = {}
    ids = {r.trigger_id for r in wanted}
    for row in tables.fires.values():
        if row.trigger_id in ids and row.last_occurrence_at is not None:
            ranges.setdefault(row.trigger_id, []).append(
                (row.occurrence_at, row.last_occurrence_at)
            )
    return {
        (r.trigger_id, r.occurrence_at)
        for r in wanted
        if any(first < r.occurrence_at <= last for first, last in ranges.get(r.trigger_id, ()))
    }


def active_runs(
    tables: Tables, requests: Sequence[ClaimRequest], stored: dict[str, TriggerRow]
) -> dict[str, list[str | None]]:
    """Active run ids (None for a reservation) of triggers that may supersede."""
    overridden = {r.trigger_id for r in requests if r.overlap is Overlap.SUPERSEDE}
    wanted = {
        trigger_id
        for trigger_id, trigger in stored.items()
        if trigger.active_count > 0
        and (trigger.spec.overlap is Overlap.SUPERSEDE or trigger_id in overridden)
    }
    if not wanted:
        return {}
    rows = [
        row
        for row in tables.with_outcome(Outcome.LAUNCHING, Outcome.LAUNCHED)
        if row.trigger_id in wanted
    ]
    active: dict[str, list[str | None]] = {}
    for row in sorted(rows, key=lambda r: r.occurrence_at):
        active.setdefault(row.trigger_id, []).append(row.run_id)
    return active


def newest_superseding(
    requests: Sequence[ClaimRequest],
    stored: dict[str, TriggerRow],
    existing: set[tuple[str, datetime, str]],
    covered: set[tuple[str, datetime]],
) -> dict[str, int]:
    """By trigger, the index of its newest request the policy decides under
    `supersede` (the older ones of the batch are superseded without starting)."""
    newest: dict[str, int] = {}
    for index, request in enumerate(requests):
        trigger = stored.get(request.trigger_id)
        if trigger is not None and may_supersede(
            request, trigger, existing=existing, covered=covered
        ):
            newest[request.trigger_id] = index
    return newest
