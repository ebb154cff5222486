"""External requests (cancel, signal, operator retry): recorded, then delivered.

The inbox row is the request's durable form and its deduplication key; delivery to
the run's worker in this process is only the fast path. A run owned elsewhere (or a
request refused for a full queue) gets it through the owner's poll of the inbox.
"""

from __future__ import annotations

import os
from typing import Any

import structlog

from looms_runtime._canonical import digest, json_copy
from looms_runtime._history.planner import InboxItem
from looms_runtime._operations.queries import read_statuses
from looms_runtime._store.control import record_request
from looms_runtime._workers.actors import REFRESH, Actors
from looms_runtime.db import Database
from looms_runtime.errors import EffectNotRetryableError, RunNotFoundError, RunOverloadedError
from looms_runtime.records import RunInfo, RunStatusInfo
from looms_runtime.schema import UNSETTLED

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
