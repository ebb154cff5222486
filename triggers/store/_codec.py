"""Row <-> record conversion for the SQL trigger store."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from triggers.errors import CorruptRowError
from triggers.model import FireRecord, Outcome, Reason, Trigger, TriggerSpec
from triggers.store._fire_row import decode_runs
from triggers.store.protocol import Heartbeat


def spec_from_json(trigger_id: str, declaration: Any, digest: str) -> TriggerSpec:
    """Decode a stored declaration and check it against its digest.

    Raises:
        CorruptRowError: undecodable, or not the declaration its digest names.
    """
    try:
        spec = TriggerSpec.from_json(declaration)
    except (KeyError, ValueError, TypeError, AttributeError) as exc:
        raise CorruptRowError(
            f"trigger {trigger_id!r} has an undecodable row: {exc}", trigger_id=trigger_id
        ) from exc
    if spec.digest() != digest:
        raise CorruptRowError(
            f"trigger {trigger_id!r} has a declaration that does not match its digest",
            trigger_id=trigger_id,
        )
    return spec


def trigger_from_state(row: Mapping[Any, Any], spec: TriggerSpec) -> Trigger:
    """A trigger from its state columns and its (already decoded) declaration."""
    return Trigger(
        spec=spec,
        revision=row["revision"],
        paused=bool(row["paused"]),
        pause_note=row["pause_note"],
        paused_at=row["paused_at"],
        retired=bool(row["retired"]),
        watermark_at=row["watermark_at"],
        active_count=row["active_count"],
        buffered_count=row["buffered_count"],
        runs_launched=row["runs_launched"],
        blocked_by=row["blocked_by"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def fire_from_row(row: Mapping[Any, Any]) -> FireRecord:
    """Decode a `fires` row."""
    return FireRecord(
        trigger_id=row["trigger_id"],
        occurrence_at=row["occurrence_at"],
        outcome=Outcome(row["outcome"]),
        reason=Reason(row["reason"]) if row["reason"] else None,
        run_id=row["run_id"],
        revision=row["revision"],
        host=row["host"],
        claimed_at=row["claimed_at"],
        launched_at=row["launched_at"],
        settled_at=row["settled_at"],
        error=row["error"],
        last_occurrence_at=row["last_occurrence_at"],
        count=int(row["count"]),
        manual_key=row["manual_key"],
        idempotency_key=row["idempotency_key"],
        blocked_by=row["blocked_by"],
        reason_detail=row["reason_detail"],
        upstream_runs=decode_runs(row.get("upstream_runs")),
    )


def heartbeat_from_row(row: Mapping[Any, Any]) -> Heartbeat:
    return Heartbeat(
        owner=row["owner"],
        host=row["host"],
        pid=int(row["pid"]),
        version=row["version"],
        started_at=row["started_at"],
        last_tick_at=row["last_tick_at"],
        stopped_at=row["stopped_at"],
        boot_id=row["boot_id"],
        process_start=row["process_start"],
    )
