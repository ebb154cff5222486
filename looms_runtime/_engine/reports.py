"""What the engine tells the world: settlement records for `on_settled`, and its logs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import structlog

from looms_runtime._history.events import EventType, NewEvent
from looms_runtime._history.outcome import EffectResult
from looms_runtime._store.loading import LoadedRun
from looms_runtime.records import RunSettled

log = structlog.get_logger()


def settled_record(run: LoadedRun) -> RunSettled:
    """What `on_settled` gets for a run whose final event is durable."""
    state, header = run.state, run.header
    return RunSettled(
        run_id=header.run_id,
        status=state.status,  # type: ignore[arg-type]  # settled() guarantees a terminal status
        error=state.error,
        idempotency_key=header.idempotency_key,
        attributes=header.attributes,
    )


def announce_settled(run: LoadedRun, on_settled: Callable[[RunSettled], None] | None) -> None:
    """Tell the host a run settled (its final event is durable); a failing hook only logs."""
    if on_settled is None:
        return
    try:
        on_settled(settled_record(run))
    except Exception:
        log.exception("on_settled_failed")


def bind_log_fields(run: LoadedRun, names: Sequence[str]) -> dict[str, Any]:
    """Bind those of the run's attributes named in `names` to the current log context;
    returns them, for the run's later operations."""
    attributes = run.header.attributes
    fields = {name: attributes[name] for name in names if name in attributes}
    if fields:
        structlog.contextvars.bind_contextvars(**fields)
    return fields


def log_outcome(result: EffectResult) -> None:
    fields = {"effect_id": result.effect_id, "attempt": result.attempt}
    if result.ok:
        log.debug("effect_succeeded", **fields)
    elif result.cancelled:
        # Asked for (a cancel or a supersede): not a failure anyone must look at.
        log.info("effect_failed", error=result.error, cancelled=True, **fields)
    else:
        log.warning("effect_failed", error=result.error, cancelled=False, **fields)


def log_emitted(events: tuple[NewEvent, ...]) -> None:
    for event in events:
        if event.type == EventType.EFFECT_AMBIGUOUS:
            # Not the output it left: a log line carries no step output.
            fields = {k: v for k, v in event.payload.items() if k != "output"}
            log.warning("effect_ambiguous", **fields)
        elif event.type == EventType.RUN_PARKED:
            # Parked: the run waits for an operator (`runs retry` or `runs cancel`).
            log.error("run_parked", **event.payload)
        elif event.type == EventType.CANCEL_REQUESTED:
            log.info("cancel_requested", reason=event.payload.get("reason"))
