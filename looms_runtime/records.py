"""The values the runtime's public API takes and returns (frozen, keyword-only)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, TypeAlias

from looms_runtime._cancel import CancelToken

PublicStatus: TypeAlias = Literal["active", "completed", "failed", "cancelled", "missing"]
"""A run's status as callers see it: `active` is anything not settled."""

SettledStatus: TypeAlias = Literal["completed", "failed", "cancelled"]
"""The statuses a run can end in."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StartRequest:
    """One run to start.

    Attributes:
        flow: the registered flow's name.
        version: the definition version `register_flow` returned; the run finishes on it.
        input: the run's JSON input, handed to every step.
        idempotency_key: the run's permanent identity; the same key returns the same run.
        env: extra environment for command steps (part of the run's identity).
        attributes: caller metadata stored with the run (not part of its identity).
    """

    flow: str
    version: str
    input: Any = None
    idempotency_key: str
    env: Mapping[str, str] | None = None
    attributes: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RunHandle:
    """The run a start request resolved to; `created` is False for an existing run.

    `completed` is True when the start completed the run too, in the same commit: its
    flow had nothing to run (see `Runtime.start_within`)."""

    run_id: str
    created: bool
    completed: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class RunStatusInfo:
    """A run's public status, its error when it failed, and when it settled."""

    run_id: str
    status: PublicStatus
    error: str | None = None
    settled_at: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSettled:
    """Passed to `on_settled` once a run's final event is durable."""

    run_id: str
    status: SettledStatus
    error: str | None
    idempotency_key: str | None
    attributes: Mapping[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunTransition:
    """A change of a run's status, handed to `transition_hook` inside the transaction
    that makes it durable: the run parks (waits for an operator), leaves `parked`
    again, or settles.

    `status` and `previous` are internal statuses: `active`, `parked`, `completed`,
    `failed` or `cancelled`.
    """

    run_id: str
    status: str
    previous: str
    error: str | None
    idempotency_key: str | None
    attributes: Mapping[str, Any]

    @property
    def settled(self) -> bool:
        return self.status in ("completed", "failed", "cancelled")


@dataclass(frozen=True, slots=True, kw_only=True)
class EffectInfo:
    """An outstanding effect of a run (a step not yet completed).

    `status` is one of `dispatched` (running, or its outcome not yet recorded),
    `retry_wait`, `ambiguous` (in flight at a crash), `timed_out` (in flight at a
    crash and past its deadline), `failed` or `cancelled`.
    """

    effect_id: str
    step_id: str
    kind: str
    attempt: int
    status: str
    idempotent: bool
    dispatched_at: datetime | None
    deadline: datetime | None
    next_attempt_at: datetime | None
    last_error: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitInfo:
    """A run's durable wait: a `sleep` until `until`, or a `signal` named `signal`
    (until `until`, its timeout, when it has one).

    `wait_id` is the step's id in a steps flow (the call's position in a Python flow).
    """

    wait_id: str
    kind: str
    signal: str | None
    until: datetime | None


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSummary:
    """One row of `list_runs`; `state` is the internal status (e.g. `parked`)."""

    run_id: str
    flow: str
    version: str
    status: PublicStatus
    state: str
    idempotency_key: str | None
    attributes: Mapping[str, Any]
    created_at: datetime
    settled_at: datetime | None
    error: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class RunInfo:
    """A run's header and its outstanding effects, as `inspect_run` reads them.

    `first_seq` is the oldest event kept (above 1 once the log was trimmed behind a
    snapshot); `completed_steps` counts, for a Python flow, its finished steps and waits.
    `waits` are the waits open now; `awaited_signals` the signals its open waits and the
    steps still to come in its flow as declared wait for (None: the flow is Python code,
    whose waits are known only as it reaches them; empty for a settled run).
    """

    run_id: str
    flow: str
    version: str
    status: PublicStatus
    state: str
    idempotency_key: str | None
    input: Any
    attributes: Mapping[str, Any]
    owner: str | None
    last_seq: int
    first_seq: int
    completed_steps: int
    created_at: datetime
    updated_at: datetime
    settled_at: datetime | None
    next_wake_at: datetime | None
    error: str | None
    result: Any
    cancel_requested: bool
    park_reason: str | None
    effects: tuple[EffectInfo, ...] = field(default_factory=tuple)
    waits: tuple[WaitInfo, ...] = field(default_factory=tuple)
    awaited_signals: tuple[str, ...] | None = field(default_factory=tuple)


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """One recorded event of a run's log."""

    run_id: str
    seq: int
    type: str
    version: int
    payload: Mapping[str, Any]
    created_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class StepContext:
    """Passed to a Python step whose function takes a `context` keyword.

    `idempotency_key` is stable across attempts of the step: hand it to external
    systems so a re-run after a crash is recognised as the same request.

    Cancellation is cooperative: a Python call cannot be interrupted, so a long step
    checks `cancel_requested` (or waits with `wait_cancelled`) and returns early.
    A step still running when the cancel's grace ends is abandoned: the run settles
    `cancelled` and the step's late result is recorded for information only.
    """

    run_id: str
    step_id: str
    attempt: int
    idempotency_key: str
    _token: CancelToken | None = field(default=None, repr=False, compare=False)

    @property
    def cancel_requested(self) -> bool:
        """Whether the run is being cancelled (the step should stop soon)."""
        return self._token is not None and self._token.cancelled

    def wait_cancelled(self, timeout: timedelta | float) -> bool:
        """Sleep up to `timeout`, waking early on a cancel; True when one was requested."""
        seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
        if self._token is None:
            threading.Event().wait(seconds)
            return False
        return self._token.wait(seconds)
