"""Operator actions, each done and then recorded in the audit log.

Every function here is one thing an operator does (apply, pause, resume, fire,
backfill, and a run's cancel, retry or signal): it performs the action through
`triggers.services` or the runtime, then records who did it, from where, why, and
what it changed. An action that fails is not recorded; one that succeeds and
then cannot be recorded reports the store's error (the action stands).
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from triggers import services
from triggers.clock import iso
from triggers.declarations import Declarations
from triggers.diffs import DeclarationsDiff, changed_ids, diff_digests
from triggers.model import Overlap, Trigger
from triggers.runner.runs import RunInfo, RunStatusInfo
from triggers.scheduler.backfill import BackfillResult
from triggers.store.audit_log import ActionKind, Actor, AuditEntry, AuditLog
from triggers.store.protocol import ApplyResult, Claim, TriggerReads, TriggerStore


class RunControl(Protocol):
    """The runtime's operations on a run that an operator requests."""

    def inspect_run(self, run_id: str) -> RunInfo: ...
    def get_events(self, run_id: str) -> Any: ...
    def cancel(self, run_id: str, *, reason: str) -> RunStatusInfo: ...
    def retry_effect(self, run_id: str, effect_id: str) -> RunStatusInfo: ...
    def signal(
        self, run_id: str, name: str, payload: object, *, idempotency_key: str | None = None
    ) -> RunStatusInfo: ...


def local_actor(host: str) -> Actor:
    """This process as an actor: `host`, and the OS user (with the one who ran `sudo`)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container, DynamicUser=)
        user = f"uid {os.getuid()}"
    invoker = os.environ.get("SUDO_USER")
    if invoker and invoker != user:
        user = f"{user} (sudo by {invoker})"
    return Actor(host=host, user=user)


@dataclass(frozen=True, slots=True, kw_only=True)
class Applied:
    """What `apply` did: the change it was planned as, and the store's account of it."""

    diff: DeclarationsDiff
    result: ApplyResult


def plan_apply(store: TriggerReads, declarations: Declarations) -> DeclarationsDiff:
    """What applying `declarations` would change; writes nothing (`apply --dry-run`)."""
    digests = store.declared_digests()
    wanted = changed_ids(digests, declarations.triggers)
    stored = store.list_triggers(ids=wanted) if wanted else []
    changed = {row.id: row for row in stored if isinstance(row, Trigger)}
    return diff_digests(digests, changed, declarations.triggers)


def apply(
    store: TriggerStore,
    audit: AuditLog,
    register_flow: services.RegisterFlow,
    declarations: Declarations,
    *,
    now: datetime,
    actor: Actor,
    note: str | None = None,
    record_unchanged: bool = True,
) -> Applied:
    """Apply declarations (flows first) and record the change with its diff; an apply
    that changes nothing is recorded only with `record_unchanged` (an operator's is,
    the daemon's restart on an edited comment is not)."""
    diff = plan_apply(store, declarations)
    with store.writing():  # the apply and its audit entry commit together
        result = services.apply_declarations(store, register_flow, declarations, now=now)
        if record_unchanged or not diff.empty:
            changes = diff.to_json() | {"file": declarations.source, "digest": declarations.digest}
            audit.record(_entry(ActionKind.APPLY, actor, now, note=note, changes=changes))
    return Applied(diff=diff, result=result)


def pause(
    store: TriggerStore,
    audit: AuditLog,
    trigger_id: str,
    *,
    note: str | None,
    actor: Actor,
    now: datetime,
) -> Trigger:
    with store.writing():  # the pause and its audit entry commit together
        before = services.require_trigger(store, trigger_id)
        trigger = services.pause_trigger(store, trigger_id, note=note, now=now)
        changes = {"paused": True, "was_paused": before.paused, "previous_note": before.pause_note}
        audit.record(
            _entry(ActionKind.PAUSE, actor, now, trigger_id=trigger_id, note=note, changes=changes)
        )
    return trigger


def resume(
    store: TriggerStore,
    audit: AuditLog,
    trigger_id: str,
    *,
    note: str | None,
    actor: Actor,
    now: datetime,
) -> Trigger:
    """Resume claims; the record keeps the pause's note and time, which the trigger drops."""
    with store.writing():  # the resume and its audit entry commit together
        before = services.require_trigger(store, trigger_id)
        trigger = services.resume_trigger(store, trigger_id, now=now)
        changes = {
            "paused": False,
            "was_paused": before.paused,
            "paused_at": iso(before.paused_at) if before.paused_at else None,
            "pause_note": before.pause_note,
        }
        audit.record(
            _entry(ActionKind.RESUME, actor, now, trigger_id=trigger_id, note=note, changes=changes)
        )
    return trigger


def fire(
    store: TriggerStore,
    audit: AuditLog,
    trigger_id: str,
    *,
    now: datetime,
    key: str | None,
    overlap: Overlap | None,
    owner: str,
    actor: Actor,
    note: str | None = None,
    host: str | None = None,
) -> Claim:
    """Fire one manual occurrence now; `host` (default: the actor's) is the ledger's."""
    claim = services.claim_manual_fire(
        store, trigger_id, now=now, key=key, overlap=overlap, owner=owner, host=host or actor.host
    )
    changes = services.claim_summary(claim) | {
        "occurrence": iso(claim.occurrence_at),
        "overlap": overlap.value if overlap else None,
    }
    audit.record(
        _entry(ActionKind.FIRE, actor, now, trigger_id=trigger_id, note=note, changes=changes)
    )
    return claim


def backfill(
    store: TriggerStore,
    audit: AuditLog,
    trigger_id: str,
    *,
    start_at: datetime,
    end_at: datetime,
    now: datetime,
    overlap: Overlap | None,
    max_count: int | None,
    owner: str,
    actor: Actor,
    note: str | None = None,
) -> BackfillResult:
    result = services.claim_backfill(
        store,
        trigger_id,
        start_at=start_at,
        end_at=end_at,
        now=now,
        overlap=overlap,
        max_count=max_count,
        owner=owner,
        host=actor.host,
    )
    changes = {
        "from": iso(start_at),
        "to": iso(end_at),
        "overlap": result.overlap.value,
        "occurrences": len(result.items),
        "counts": result.counts(),
    }
    audit.record(
        _entry(ActionKind.BACKFILL, actor, now, trigger_id=trigger_id, note=note, changes=changes)
    )
    return result


def cancel(
    runtime: RunControl,
    audit: AuditLog,
    run_id: str,
    *,
    reason: str | None,
    actor: Actor,
    now: datetime,
) -> RunStatusInfo:
    trigger_id = _trigger_of(runtime, run_id)
    status = runtime.cancel(run_id, reason=reason or "cancelled by an operator")
    _record_run(audit, ActionKind.CANCEL, actor, now, run_id, trigger_id, reason, {})
    return status


def retry(
    runtime: RunControl,
    audit: AuditLog,
    run_id: str,
    effect_id: str,
    *,
    note: str | None,
    actor: Actor,
    now: datetime,
) -> RunStatusInfo:
    trigger_id = _trigger_of(runtime, run_id)
    status = runtime.retry_effect(run_id, effect_id)
    _record_run(
        audit, ActionKind.RETRY, actor, now, run_id, trigger_id, note, {"effect_id": effect_id}
    )
    return status


def signal(
    runtime: RunControl,
    audit: AuditLog,
    run_id: str,
    name: str,
    payload: object,
    *,
    key: str | None,
    note: str | None,
    actor: Actor,
    now: datetime,
) -> RunStatusInfo:
    from triggers.waits import check_signal  # noqa: PLC0415

    info = runtime.inspect_run(run_id)
    check_signal(info, name, key=key, events=lambda: runtime.get_events(run_id))
    trigger_id = _attribute_trigger(info)
    status = runtime.signal(run_id, name, payload, idempotency_key=key)
    # The payload is the operator's data: it may hold secrets, so only its name is kept.
    changes = {"signal": name, "idempotency_key": key}
    _record_run(audit, ActionKind.SIGNAL, actor, now, run_id, trigger_id, note, changes)
    return status


def _trigger_of(runtime: RunControl, run_id: str) -> str | None:
    return _attribute_trigger(runtime.inspect_run(run_id))


def _attribute_trigger(info: RunInfo) -> str | None:
    found = info.attributes.get("trigger_id")
    return str(found) if found is not None else None


def _record_run(
    audit: AuditLog,
    kind: ActionKind,
    actor: Actor,
    now: datetime,
    run_id: str,
    trigger_id: str | None,
    note: str | None,
    changes: Mapping[str, Any],
) -> None:
    audit.record(
        _entry(kind, actor, now, trigger_id=trigger_id, run_id=run_id, note=note, changes=changes)
    )


def _entry(
    kind: ActionKind,
    actor: Actor,
    now: datetime,
    *,
    trigger_id: str | None = None,
    run_id: str | None = None,
    note: str | None = None,
    changes: Mapping[str, Any] | None = None,
) -> AuditEntry:
    return AuditEntry(
        at=now,
        action=kind,
        actor=actor,
        trigger_id=trigger_id,
        run_id=run_id,
        note=note,
        changes=dict(changes or {}),
    )
