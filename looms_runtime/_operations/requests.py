"""External requests (cancel, signal, operator retry): recorded, then delivered.

The inbox row is the request's durable form and its deduplication key; delivery to
the run's worker in this process is only the fast path. A run owned elsewhere (or a
request refused for a full queue) gets it through the owner's poll of the inbox.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import structlog

from looms_runtime._canonical import digest, json_copy
from looms_runtime._history.planner import InboxItem
from looms_runtime._operations.queries import read_statuses
from looms_runtime._operations.reads import RuntimeReads
from looms_runtime._store.control import record_request
from looms_runtime._workers.actors import REFRESH, Actors
from looms_runtime.db import Database
from looms_runtime.errors import EffectNotRetryableError, RunNotFoundError, RunOverloadedError
from looms_runtime.records import RunInfo, RunStatusInfo
from looms_runtime.statuses import UNSETTLED

log = structlog.get_logger()


def deliver_request(
    db: Database,
    actors: Actors | None,
    run_id: str,
    item: InboxItem,
    *,
    request_hash: str | None,
    now_ms: int,
) -> RunStatusInfo | None:
    """Record a request durably, then hand it to the run's worker (when `actors` run here).

    Returns:
        The run's status when it is settled (the request is then not recorded), else None.

    Raises:
        RunNotFoundError: no run has that id.
        RunOverloadedError: the run's queue of requests is full (checked before recording).
    """
    if actors is not None and item.kind != "cancel":
        actors.check_capacity(run_id)
    status, recorded = record_request(db, run_id, item, request_hash, now_ms=now_ms)
    if status is None:
        raise RunNotFoundError(f"no run {run_id!r}", run_id=run_id)
    if status not in UNSETTLED:
        return read_statuses(db, [run_id])[run_id]
    # A key recorded before woke the run then; a cancel wakes it again regardless (it
    # applies once whatever happens).
    if actors is not None and (recorded or item.kind == "cancel"):
        try:
            # Only a wake-up: the worker reads the run's pending requests from the
            # inbox, which alone knows which of them were consumed already.
            actors.submit(run_id, REFRESH, external=True)
        except RunOverloadedError:
            # The request is durable already: the maintenance poll delivers it later.
            log.warning("request_deferred_to_poll", run_id=run_id, kind=item.kind)
    return None


def cancel_item(reason: str | None, grace_s: float) -> InboxItem:
    """A cancel request (one per run: its key is fixed, so a second one changes nothing)."""
    return InboxItem(key="cancel", kind="cancel", name=reason, payload={"grace_s": grace_s})


def signal_item(name: str, payload: Any, idempotency_key: str | None) -> tuple[InboxItem, str]:
    """A signal request and the digest its key is checked against.

    Raises:
        InvalidRequestError: the payload is not JSON.
    """
    body = {"name": name, "payload": json_copy(payload)}
    key = f"signal:{idempotency_key or os.urandom(16).hex()}"
    return InboxItem(key=key, kind="signal", name=name, payload=body["payload"]), digest(body)


def retry_item(info: RunInfo, effect_id: str) -> InboxItem:
    """An operator's retry of an effect stuck `ambiguous` or `timed_out`.

    Raises:
        EffectNotRetryableError: the effect is not outstanding in one of those states.
    """
    effect = next((e for e in info.effects if e.effect_id == effect_id), None)
    if effect is None or effect.status not in {"ambiguous", "timed_out"}:
        raise EffectNotRetryableError(
            f"effect {effect_id!r} of run {info.run_id} is not ambiguous or timed out",
            run_id=info.run_id,
            effect_id=effect_id,
            status=effect.status if effect else None,
        )
    return InboxItem(key=f"retry:{effect_id}:{effect.attempt}", kind="retry", name=effect_id)


DEFAULT_CANCEL_GRACE = timedelta(seconds=10)


class RuntimeRequests(RuntimeReads):
    """Requests to runs from outside their log (cancel, signal, an operator's retry),
    for `Runtime`: recorded durably, then acted on by each run's owner."""

    _db: Database
    _actors: Actors
    _state: str

    def _check_open(self) -> None:
        raise NotImplementedError

    def _now_ms(self) -> int:
        raise NotImplementedError

    def cancel(
        self,
        run_id: str,
        *,
        reason: str | None = None,
        grace: timedelta = DEFAULT_CANCEL_GRACE,
    ) -> RunStatusInfo:
        """Request a graceful cancel; return once the request is durable.

        A running command gets SIGTERM, then SIGKILL after `grace`; an HTTP request is
        closed; a Python step sees `StepContext.cancel_requested`, and one still running
        when `grace` ends is abandoned (what it returns later is recorded, not applied).
        The run then settles `cancelled`. Cancelling a settled run changes nothing.

        Raises:
            RunNotFoundError: no run has that id.
        """
        self._check_open()
        settled = self._request(run_id, cancel_item(reason, grace.total_seconds()))
        if settled is not None:
            return settled
        for token in self._actors.tokens(run_id):
            token.cancel(grace.total_seconds())
        return RunStatusInfo(run_id=run_id, status="active")

    def signal(
        self, run_id: str, name: str, payload: Any = None, *, idempotency_key: str | None = None
    ) -> RunStatusInfo:
        """Deliver a named signal (deduplicated by key) to a run's `wait_signal` step.

        A signal that arrives before the step waits is kept until it does.

        Raises:
            RunNotFoundError: no run has that id.
            SignalConflictError: the key was used with another name or payload.
            RunOverloadedError: the run's request queue is full.
        """
        self._check_open()
        item, request_hash = signal_item(name, payload, idempotency_key)
        return self._request(run_id, item, request_hash=request_hash) or RunStatusInfo(
            run_id=run_id, status="active"
        )

    def retry_effect(self, run_id: str, effect_id: str) -> RunStatusInfo:
        """Re-dispatch an effect left `ambiguous` or `timed_out` (an operator's decision).

        Raises:
            RunNotFoundError: no run has that id.
            EffectNotRetryableError: the effect is not outstanding in one of those states.
        """
        self._check_open()
        item = retry_item(self.inspect_run(run_id), effect_id)
        return self._request(run_id, item) or RunStatusInfo(run_id=run_id, status="active")

    def _request(
        self, run_id: str, item: InboxItem, *, request_hash: str | None = None
    ) -> RunStatusInfo | None:
        actors = self._actors if self._state == "started" else None
        now_ms = self._now_ms()
        return deliver_request(
            self._db, actors, run_id, item, request_hash=request_hash, now_ms=now_ms
        )
