"""The API's request bodies and, for its OpenAPI document, the shapes of its answers.

Answers are built by `triggers.documents` (the CLI's `--json`) and sent as they are;
the models here describe them, and the property test checks every answer against
them. Request bodies are validated: an unknown key is refused, as an unknown
option is on the command line.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from triggers.model import Overlap

Instant = str
"""RFC 3339 UTC with `Z`, e.g. `2026-01-01T02:30:00.000Z`."""

TIME_FORMAT = "triggers-time"
"""The format of a time argument: ISO-8601, `now`, `today`, `-2h`, `2h ago`, `in 90m`.
(Its grammar is `triggers.times`; JSON Schema cannot say it, so it has a name.)"""
TimeText = WithJsonSchema({"type": "string", "format": TIME_FORMAT})


def one_of(values: Iterable[str]) -> WithJsonSchema:
    """A text argument that names one of `values` (checked by the operation, whose
    message lists them, as the CLI's does)."""
    return WithJsonSchema({"type": "string", "enum": list(values)})


def some_of(values: Iterable[str]) -> WithJsonSchema:
    """A repeatable text argument, each one of `values`."""
    return WithJsonSchema({"type": "array", "items": {"type": "string", "enum": list(values)}})


Text = Annotated[str, Field(pattern="^[^\\x00]*$")]
"""Free text of a body: no NUL character (0x00), which no stored text can hold."""


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FireBody(Body):
    key: Text | None = Field(default=None, description="Idempotency key (default: the time).")
    overlap: Annotated[
        str | None,
        WithJsonSchema(
            {"anyOf": [{"type": "string", "enum": [o.value for o in Overlap]}, {"type": "null"}]}
        ),
    ] = Field(default=None, description="Override the overlap policy for this fire.")
    note: Text | None = Field(default=None, description="Why: kept in the audit log.")


class NoteBody(Body):
    note: Text | None = Field(default=None, description="Why: kept in the audit log.")


class CancelBody(Body):
    reason: Text | None = Field(default=None, description="Recorded with the cancellation.")
    note: Text | None = Field(default=None, description="The same as `reason` (as `--note`).")


class RetryBody(Body):
    effect_id: Text = Field(description="The step left `ambiguous` or `timed_out`.")
    note: Text | None = Field(default=None, description="Why: kept in the audit log.")


class SignalBody(Body):
    name: Text = Field(description="The signal a `wait_signal` step waits for.")
    payload: Any = Field(default=None, description="Any JSON value, handed to the step.")
    key: Text | None = Field(default=None, description="Idempotency key (applied once).")
    note: Text | None = Field(default=None, description="Why: kept in the audit log.")


class Document(BaseModel):
    """An answer; keys beyond those listed may be added by later releases."""

    model_config = ConfigDict(extra="allow")


class ErrorDetail(Document):
    code: str = Field(description="A code of docs/catalogue.md, e.g. TRG-112.")
    message: str
    details: dict[str, Any]


class ErrorDocument(Document):
    error: ErrorDetail


class WaitRow(Document):
    wait_id: str
    kind: str = Field(description="`signal` (a `wait_signal` step) or `sleep`.")
    signal: str | None
    until: Instant | None
    text: str = Field(description="In words, with the command that sends the signal.")
    command: str | None


class TriggerRow(Document):
    id: str
    schedule: str
    timezone: str
    overlap: str
    enabled: bool
    retired: bool
    paused: bool
    pause_note: str | None
    state: Literal["enabled", "paused", "disabled", "retired", "blocked"]
    blocked_by: str | None
    revision: int
    flow: str
    next_fire: Instant | None
    no_next_fire_reason: str | None
    next_fire_dst: str | None
    last_outcome: str | None
    last_occurrence: Instant | None
    active_run_id: str | None
    active_run_waiting: list[WaitRow] = Field(
        description="What the active run waits for now (a signal, a sleep)."
    )
    description: str | None


class FireRow(Document):
    trigger_id: str
    occurrence: Instant
    outcome: str
    reason: str | None
    run_id: str | None
    claimed_at: Instant | None
    launched_at: Instant | None
    settled_at: Instant | None
    error: str | None
    last_occurrence: Instant | None
    count: int
    revision: int | None
    host: str | None
    manual_key: str | None
    idempotency_key: str | None
    blocked_by: str | None
    reason_detail: str | None = Field(
        default=None, description="What the reason names: with `calendar`, the calendar and day."
    )
    upstream_run_id: str | None = Field(
        default=None,
        description=(
            "A dependent trigger's (`after:`) occurrence: the upstream run that caused it "
            "(for `after: {all: ...}`, the run that completed the set)."
        ),
    )
    upstream_run_ids: list[str] = Field(
        default_factory=list,
        description="Every upstream run the occurrence used: the set for `all:`, else the one run.",
    )


class LifeEventRow(Document):
    event: str = Field(description="`created`, `retired` or `revived`.")
    at: Instant | None = Field(
        description="When; null for a retirement whose apply the audit log no longer holds."
    )
    revision: int | None = Field(description="The trigger's revision in force from then on.")
    action_id: int | None = Field(description="The apply's id in the audit log.")
    host: str | None
    user: str | None
    note: str | None


class HistoryRow(FireRow):
    retirement: LifeEventRow | None = Field(
        default=None, description="The trigger's retirement in force; null while declared."
    )
    revival: LifeEventRow | None = Field(
        default=None, description="The trigger's latest return after a retirement, if any."
    )


class AlertRow(Document):
    id: str = Field(description="The alert's stable id (the webhook's `Idempotency-Key`).")
    channel: str
    kind: str | None
    event: str
    trigger_id: str
    occurrence: Instant
    status: str = Field(description="`pending`, `delivered` or `failed`.")
    attempts: int
    created_at: Instant
    next_attempt_at: Instant | None
    delivered_at: Instant | None
    last_error: str | None
    response: str | None
    text: str | None


class NextFire(Document):
    occurrence: Instant
    local: str = Field(description="ISO-8601 with the trigger's offset.")
    fires_at: Instant = Field(description="The occurrence plus its jitter.")
    dst: str | None = Field(description="What a daylight-saving change did to it, if anything.")
    dst_note: str | None
    stops_after: str | None = Field(description="On the last: why no fire follows it.")
    excluded: str | None = Field(
        default=None,
        description="The calendar that leaves it out, and the day: it is skipped, not run.",
    )


class ActorAt(Document):
    at: Instant
    host: str
    user: str


class AuditRow(Document):
    id: int | None
    at: Instant
    action: str
    trigger_id: str | None
    run_id: str | None
    host: str
    user: str
    note: str | None
    changes: dict[str, Any]


class FieldChangeRow(Document):
    key: str
    old: Any
    new: Any


class RevisionRow(Document):
    revision: int
    applied_at: Instant
    first: bool
    applied_by: ActorAt | None
    changes: list[FieldChangeRow]


class PoolRow(Document):
    name: str
    slots: int = Field(description="Runs its members may have active at once.")
    active: int = Field(description="Runs of its members active now (launching or launched).")
    waiting: int = Field(description="Occurrences buffered for a slot (reason pool_full).")
    members: list[str]


class TriggerDescription(Document):
    id: str
    state: str
    revision: int
    declaration: dict[str, Any]
    paused: bool
    paused_at: Instant | None
    pause_note: str | None
    paused_by: ActorAt | None
    blocked_by: str | None
    retired: bool
    retirement: LifeEventRow | None = None
    revival: LifeEventRow | None = None
    lifecycle: list[LifeEventRow] = Field(
        default_factory=list, description="Created, retired and revived, newest first."
    )
    alerts: list[AlertRow] = Field(
        default_factory=list, description="Its newest alerts (five), each to one channel."
    )
    watermark: Instant
    runs_launched: int
    active_runs: list[str]
    pool: PoolRow | None
    upstreams: list[DependencyRow] = Field(
        default_factory=list,
        description="What it follows (`after:`) and waits for (`requires:`).",
    )
    dependents: list[DependencyRow] = Field(
        default_factory=list,
        description="The live triggers whose `after:` or `requires:` name it.",
    )
    created_at: Instant
    updated_at: Instant
    revisions: list[RevisionRow]
    last_fires: list[FireRow]
    next_fires: list[NextFire]
    no_next_fire_reason: str | None
    actions: list[AuditRow]


class DependencyRow(Document):
    trigger: str = Field(description="The trigger at the other end of the dependency.")
    via: str = Field(description="`after` or `requires`.")
    outcome: str = Field(description="The outcome awaited: `completed`, `failed` or `settled`.")
    join: str | None = Field(
        description="`after:`'s form (`one`, `all`, `any`); null for requires."
    )
    within_s: float | None = Field(
        description="`after: {all: ...}`'s window or `requires:`'s `since`, in seconds."
    )


class Fired(Document):
    trigger_id: str
    idempotency_key: str
    action: str = Field(description="fire, skip, buffer, supersede or duplicate.")
    reason: str | None
    pending_launch: bool
    occurrence: Instant


class Paused(Document):
    id: str
    paused: bool
    pause_note: str | None


class RunRow(Document):
    run_id: str
    flow: str
    version: str
    status: str
    state: str
    idempotency_key: str | None
    attributes: dict[str, Any]
    created_at: Instant
    settled_at: Instant | None
    error: str | None
    waiting: list[WaitRow] = Field(description="What an active run waits for now.")


class AttemptRow(Document):
    effect_id: str
    attempt: int
    outcome: str
    at: Instant = Field(description="When the attempt ended (running: when dispatched).")
    recorded_at: Instant = Field(description="When its outcome was recorded.")
    error: str | None
    exit_code: int | None
    signal: int | str | None
    duration_ms: float | None
    timed_out: bool | None
    stdout: str
    stderr: str
    stdout_truncated_bytes: int
    stderr_truncated_bytes: int


class EffectRow(Document):
    effect_id: str
    step_id: str
    kind: str
    attempt: int
    status: str
    idempotent: bool
    dispatched_at: Instant | None
    deadline: Instant | None
    next_attempt_at: Instant | None
    last_error: str | None
    last_output: AttemptRow | None


class RunDocument(Document):
    run_id: str
    flow: str
    version: str
    status: str
    state: str
    idempotency_key: str | None
    input: Any
    attributes: dict[str, Any]
    owner: str | None
    last_seq: int
    first_seq: int
    completed_steps: int
    created_at: Instant
    updated_at: Instant
    settled_at: Instant | None
    next_wake_at: Instant | None
    error: str | None
    result: Any
    cancel_requested: bool
    park_reason: str | None
    effects: list[EffectRow]
    waiting: list[WaitRow] = Field(description="What the run waits for now.")
    awaited_signals: list[str] | None = Field(
        description="Signals the run can take: its open waits' and those of the steps "
        "still to come (null: a Python flow, whose waits are known as it reaches them)."
    )


class EventRow(Document):
    run_id: str
    seq: int
    type: str
    version: int
    payload: dict[str, Any]
    created_at: Instant


class RunStatus(Document):
    run_id: str
    status: str
    error: str | None
    settled_at: Instant | None


class HealthDocument(Document):
    status: Literal["ok", "failing"]
    failing: list[str] | None = Field(default=None, description="`ticks`, when failing.")
    reason: str | None = Field(default=None, description="Why it fails, in words.")
    last_tick_at: Instant | None = Field(
        default=None, description="When the scheduler last finished a tick (null: not yet)."
    )
    tick_age_s: float | None = Field(default=None, description="Seconds since that tick.")
    limit_s: float | None = Field(default=None, description="The age past which it fails.")


class ProbeCheck(Document):
    ok: bool
    reason: str | None = Field(default=None, description="Why it fails, in words.")


class ReadinessDocument(Document):
    status: Literal["ok", "failing"]
    failing: list[str] | None = Field(
        default=None, description="The checks that fail: `store`, `declarations`."
    )
    reason: str | None = None
    checks: dict[str, ProbeCheck] | None = Field(
        default=None,
        description="`store` (answers a query within 2 s) and `declarations` (the last "
        "apply succeeded; `result` is `applied`, `unchanged`, `refused`, `failed`, or "
        "null without a declarations file).",
    )
