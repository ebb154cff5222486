"""The JSON documents of `--json` and of the HTTP API: one function per shape.

The CLI prints them and the API answers with them, so `triggers list --json` and
`GET /api/v1/triggers` are the same document. Keys are snake_case, instants RFC 3339
UTC with `Z`, durations in keys ending `_s`. docs/cli.md lists every key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, is_dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from triggers.clock import from_ms, iso
from triggers.step_output import attempt_outputs, step_states
from triggers.waits import wait_json

if TYPE_CHECKING:
    from triggers.inspection import DaemonView, StatusReport, TriggerDescription
    from triggers.lifecycle import Lifecycle, LifeEvent
    from triggers.model import FireRecord, Trigger
    from triggers.scheduler.forecast import Forecast, UpcomingFire
    from triggers.services import TriggerView
    from triggers.store.audit_log import AuditEntry
    from triggers.store.protocol import Claim


MAX_COUNT = 1_000_000_000
"""The largest sequence number or count an operator may ask for (the databases' integers
are bounded; a larger one is refused as bad input, never an overflow)."""


def opt_iso(value: datetime | None) -> str | None:
    return None if value is None else iso(value)


def plain(value: Any) -> Any:
    """A JSON-ready copy of a runtime record: dataclasses to objects, instants to RFC 3339."""
    if is_dataclass(value) and not isinstance(value, type):
        return plain(asdict(value))
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    if isinstance(value, datetime):
        return opt_iso(value)
    return value


def event_json(event: Any) -> dict[str, Any]:
    """A run's event, as `runs events --json` lists them: `plain`, and the instants in
    its payload (`dispatched_at`, `until`, ...: epoch milliseconds in the log) as RFC
    3339 too, to the millisecond, so nothing is lost."""
    document: dict[str, Any] = plain(event)
    document["payload"] = _payload_instants(document.get("payload"))
    return document


def _payload_instants(value: Any, key: str = "") -> Any:
    if isinstance(value, dict):
        return {name: _payload_instants(item, name) for name, item in value.items()}
    if isinstance(value, list):
        return [_payload_instants(item) for item in value]
    instant = key.endswith("_at") or key == "until"
    if instant and isinstance(value, int) and not isinstance(value, bool):
        try:
            return iso(from_ms(value))
        except (OverflowError, ValueError, OSError):
            return value  # not an instant after all: as it is
    return value


def fire_json(record: FireRecord) -> dict[str, Any]:
    """A ledger row, as `history --json` lists them (`FireRecord.to_json`)."""
    return record.to_json()


def history_json(record: FireRecord, life: Lifecycle | None) -> dict[str, Any]:
    """A ledger row as `history --json` lists it: `fire_json`, plus the trigger's
    `retirement` in force (the ledger's last word on a trigger no longer declared) and
    its latest `revival`, each null when there is none."""
    return fire_json(record) | {
        "retirement": _event_json(life.retirement if life else None),
        "revival": _event_json(life.revival if life else None),
    }


def trigger_json(view: TriggerView) -> dict[str, Any]:
    """A trigger, as `list --json` lists them."""
    from triggers import services  # noqa: PLC0415 (its schedule code loads on use)

    trigger, spec = view.trigger, view.trigger.spec
    return {
        "id": trigger.id,
        "schedule": services.describe(trigger),
        "timezone": spec.timezone,
        "overlap": spec.overlap.value,
        "enabled": spec.enabled and not trigger.retired,
        "retired": trigger.retired,
        "paused": trigger.paused,
        "pause_note": trigger.pause_note,
        "state": trigger.state,
        "blocked_by": trigger.blocked_by,
        "revision": trigger.revision,
        "flow": spec.flow,
        "next_fire": opt_iso(view.next_fire_at),
        "no_next_fire_reason": view.no_next_fire,
        "next_fire_dst": view.next_fire.shift.kind
        if view.next_fire and view.next_fire.shift
        else None,
        "last_outcome": view.last.outcome.value if view.last else None,
        "last_occurrence": opt_iso(view.last.occurrence_at) if view.last else None,
        "active_run_id": view.active_run_id,
        "description": spec.description,
    }


def upcoming_json(fire: UpcomingFire, *, stops_after: str | None = None) -> dict[str, Any]:
    """An upcoming fire, as `next --json` lists them (also `describe`'s `next_fires`)."""
    from triggers.scheduler.occurrences import describe_shift  # noqa: PLC0415

    return {
        "occurrence": iso(fire.occurrence_at),
        "local": fire.local.isoformat(),
        "fires_at": iso(fire.fires_at),
        "dst": fire.shift.kind if fire.shift else None,
        "dst_note": describe_shift(fire.shift) if fire.shift else None,
        "stops_after": stops_after,
        "excluded": fire.excluded,
    }


def next_json(found: Forecast) -> list[dict[str, Any]]:
    """`next --json`: the upcoming fires, the last saying why none follow (when none do)."""
    last = len(found.fires) - 1
    return [
        upcoming_json(fire, stops_after=found.stop.value if found.stop and index == last else None)
        for index, fire in enumerate(found.fires)
    ]


def describe_json(found: TriggerDescription) -> dict[str, Any]:
    """One trigger whole, as `describe --json` prints it."""
    trigger = found.trigger
    return {
        "id": trigger.id,
        "state": found.state,
        "revision": trigger.revision,
        "declaration": found.declaration,
        "paused": trigger.paused,
        "paused_at": opt_iso(trigger.paused_at),
        "pause_note": trigger.pause_note,
        "paused_by": _actor_json(found.paused_by) if found.paused_by else None,
        "blocked_by": trigger.blocked_by,
        "retired": trigger.retired,
        "retirement": _event_json(found.lifecycle.retirement),
        "revival": _event_json(found.lifecycle.revival),
        "lifecycle": [event.to_json() for event in found.lifecycle.events],
        "alerts": [alert.to_json() for alert in found.alerts],
        "watermark": iso(trigger.watermark_at),
        "runs_launched": trigger.runs_launched,
        "active_runs": found.active_runs,
        "pool": found.pool.to_json() if found.pool else None,
        "upstreams": [link.to_json() for link in found.upstreams],
        "dependents": [link.to_json() for link in found.dependents],
        "created_at": iso(trigger.created_at),
        "updated_at": iso(trigger.updated_at),
        "revisions": [
            {
                "revision": view.revision,
                "applied_at": iso(view.applied_at),
                "first": view.first,
                "applied_by": _actor_json(view.applied_by) if view.applied_by else None,
                "changes": [change.to_json() for change in view.changes],
            }
            for view in found.revisions
        ],
        "last_fires": [fire_json(record) for record in found.last_fires],
        "next_fires": [upcoming_json(fire) for fire in found.next_fires],
        "no_next_fire_reason": found.no_next_fire,
        "actions": [entry_json(entry) for entry in found.actions],
    }


def entry_json(entry: AuditEntry) -> dict[str, Any]:
    """An operator action, as `audit-log --json` lists them."""
    return {
        "id": entry.id,
        "at": iso(entry.at),
        "action": entry.action.value,
        "trigger_id": entry.trigger_id,
        "run_id": entry.run_id,
        "host": entry.actor.host,
        "user": entry.actor.user,
        "note": entry.note,
        "changes": dict(entry.changes),
    }


def _event_json(event: LifeEvent | None) -> dict[str, Any] | None:
    return None if event is None else event.to_json()


def _actor_json(entry: AuditEntry) -> dict[str, Any]:
    return {"at": iso(entry.at), "host": entry.actor.host, "user": entry.actor.user}


def paused_json(trigger: Trigger) -> dict[str, Any]:
    """What `pause --json` and `resume --json` print."""
    return {"id": trigger.id, "paused": trigger.paused, "pause_note": trigger.pause_note}


def fired_json(claim: Claim) -> dict[str, Any]:
    """What `fire --json` prints: the decision on the manual occurrence."""
    from triggers import services  # noqa: PLC0415

    return services.claim_summary(claim) | {"occurrence": iso(claim.occurrence_at)}


def triggers_json(views: Sequence[TriggerView], waits: Any) -> list[dict[str, Any]]:
    """`list --json`: each trigger, with what its active run waits for now
    (`active_run_waiting`, as `runs list --json`'s `waiting`; `waits` by run id)."""
    rows = []
    for view in views:
        row = trigger_json(view)
        run_id = view.active_run_id
        found = waits.get(run_id, ()) if run_id else ()
        row["active_run_waiting"] = [wait_json(str(run_id), wait) for wait in found]
        rows.append(row)
    return rows


def run_row_json(run: Any, waits: Any) -> dict[str, Any]:
    """A run of `runs list --json`, with what it waits for now (`waits`: its open waits)."""
    document: dict[str, Any] = plain(run)
    document["waiting"] = [wait_json(run.run_id, wait) for wait in waits]
    return document


def run_json(info: Any, events: Sequence[Any]) -> dict[str, Any]:
    """A run, as `runs show --json` prints it: each outstanding effect with its last
    attempt's output (`last_output`, as `runs logs` shows it), and every step dispatched
    so far with its state (`steps`: a graph flow's branches side by side)."""
    attempts = attempt_outputs(events)
    last = {attempt.effect_id: attempt for attempt in attempts}
    document: dict[str, Any] = plain(info)
    for effect in document.get("effects", []):
        attempt = last.get(effect["effect_id"])
        effect["last_output"] = attempt.to_json() if attempt else None
    document["steps"] = [state.to_json() for state in step_states(attempts, events)]
    document["waiting"] = [wait_json(info.run_id, wait) for wait in info.waits]
    return document


def status_json(report: StatusReport) -> dict[str, Any]:
    """`status --json` (without the version and database the CLI adds)."""
    return {
        "healthy": not report.problems,
        "problems": report.problems,
        "daemons_alive": report.alive,
        "daemons": [daemon_json(view) for view in report.daemons],
        "triggers": report.triggers,
        "blocked_triggers": report.blocked,
        "occurrences": report.occurrences,
        "pools": [pool.to_json() for pool in report.pools],
        "parked_runs": [
            {
                "run_id": run.run_id,
                "flow": run.flow,
                "trigger_id": run.attributes.get("trigger_id"),
                "occurrence": run.attributes.get("occurrence"),
                "created_at": iso(run.created_at),
                "error": run.error,
            }
            for run in report.parked_runs
        ],
        "waiting_runs": [
            {
                "run_id": run.run_id,
                "flow": run.flow,
                "trigger_id": run.attributes.get("trigger_id"),
                "occurrence": run.attributes.get("occurrence"),
                "created_at": iso(run.created_at),
                "waiting": [wait_json(run.run_id, wait) for wait in waits],
            }
            for run, waits in report.waiting_runs
        ],
    }


def daemon_json(view: DaemonView) -> dict[str, Any]:
    """A daemon's heartbeat judged, as `status --json` lists them."""
    return {
        "owner": view.beat.owner,
        "host": view.beat.host,
        "pid": view.beat.pid,
        "version": view.beat.version,
        "state": view.state,
        "alive": view.state == "alive",
        "started_at": iso(view.beat.started_at),
        "last_tick_at": iso(view.beat.last_tick_at),
        "last_tick_age_s": round(view.age.total_seconds(), 3),
        "stopped_at": opt_iso(view.beat.stopped_at),
        "replaced_by": view.replaced_by,
    }
