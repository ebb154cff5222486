"""`/api/v1/runs`: the runtime's runs, as `triggers runs list|show|events|logs|cancel|retry|signal`.

The daemon's own runtime answers: a signal, cancel or retry of a run this daemon
owns is acted on at once (a `wait_signal` step resumes as the request commits); a
run owned by another daemon gets the request durably and its owner acts within
about a second.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query

from triggers import actions
from triggers.api._context import Reader, Services, Writer
from triggers.api._routing import WRITE_ERRORS, Json, router
from triggers.api._schemas import (
    AttemptRow,
    CancelBody,
    EventRow,
    RetryBody,
    RunDocument,
    RunRow,
    RunStatus,
    SignalBody,
    one_of,
)
from triggers.documents import MAX_COUNT, event_json, plain, run_json, run_row_json
from triggers.step_output import attempt_outputs, step_attempts
from triggers.waits import waits_by_run

RunId = Annotated[str, Path(description="A run's id, as `history` and `runs list` show it.")]


@router.get("/runs", response_model=list[RunRow], tags=["runs"])
def list_runs(
    ctx: Services,
    _caller: Reader,
    status: Annotated[
        str | None,
        Query(description="active, completed, failed, cancelled, or parked (waiting for you)."),
        one_of(["active", "completed", "failed", "cancelled", "parked"]),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=100_000, description="At most this many.")] = 50,
) -> Json:
    """The newest runs first, each active one with what it waits for
    (`triggers runs list --json`)."""
    runs = ctx.runs.list_runs(status=status, limit=limit)
    waits = waits_by_run(ctx.runs, runs)
    return Json([run_row_json(run, waits.get(run.run_id, ())) for run in runs])


@router.get("/runs/{run_id}", response_model=RunDocument, tags=["runs"])
def show(ctx: Services, _caller: Reader, run_id: RunId) -> Json:
    """A run: its state and every outstanding step with its last output
    (`triggers runs show RUN --json`)."""
    info = ctx.runs.inspect_run(run_id)
    return Json(run_json(info, ctx.runs.get_events(run_id)))


@router.get("/runs/{run_id}/events", response_model=list[EventRow], tags=["runs"])
def events(
    ctx: Services,
    _caller: Reader,
    run_id: RunId,
    from_seq: Annotated[
        int, Query(alias="from", ge=1, le=MAX_COUNT, description="First sequence number.")
    ] = 1,
    limit: Annotated[
        int | None, Query(ge=1, le=MAX_COUNT, description="At most this many.")
    ] = None,
) -> Json:
    """A run's event log, oldest first (`triggers runs events RUN --json`)."""
    found = ctx.runs.get_events(run_id, from_seq=from_seq, limit=limit)
    return Json([event_json(event) for event in found])


@router.get("/runs/{run_id}/logs", response_model=list[AttemptRow], tags=["runs"])
def logs(
    ctx: Services,
    _caller: Reader,
    run_id: RunId,
    step: Annotated[str | None, Query(description="Only this step (its effect id).")] = None,
) -> Json:
    """Each attempt's outcome and the tails of its stdout and stderr, oldest first
    (`triggers runs logs RUN [STEP] --json`)."""
    attempts = attempt_outputs(ctx.runs.get_events(run_id))
    if step is not None:
        attempts = step_attempts(attempts, step, run_id=run_id)
    return Json([attempt.to_json() for attempt in attempts])


@router.post(
    "/runs/{run_id}/cancel", responses=WRITE_ERRORS, response_model=RunStatus, tags=["operations"]
)
def cancel(ctx: Services, caller: Writer, run_id: RunId, body: CancelBody | None = None) -> Json:
    """Cancel a run gracefully: SIGTERM to a running command, SIGKILL after a grace
    (`triggers runs cancel RUN --json`)."""
    body = body or CancelBody()
    status = actions.cancel(
        ctx.runs,
        ctx.audit,
        run_id,
        reason=body.reason or body.note,
        actor=caller.actor(),
        now=ctx.clock.now(),
    )
    return Json(plain(status))


@router.post(
    "/runs/{run_id}/retry", responses=WRITE_ERRORS, response_model=RunStatus, tags=["operations"]
)
def retry(ctx: Services, caller: Writer, run_id: RunId, body: RetryBody) -> Json:
    """Run again a step a crash left `ambiguous` or `timed_out`
    (`triggers runs retry RUN EFFECT_ID --json`)."""
    status = actions.retry(
        ctx.runs,
        ctx.audit,
        run_id,
        body.effect_id,
        note=body.note,
        actor=caller.actor(),
        now=ctx.clock.now(),
    )
    return Json(plain(status))


@router.post(
    "/runs/{run_id}/signal", responses=WRITE_ERRORS, response_model=RunStatus, tags=["operations"]
)
def signal(ctx: Services, caller: Writer, run_id: RunId, body: SignalBody) -> Json:
    """Deliver a named signal to a run waiting for it in a `wait_signal` step; a repeated
    `key` is applied once (`triggers runs signal RUN NAME --json`)."""
    status = actions.signal(
        ctx.runs,
        ctx.audit,
        run_id,
        body.name,
        body.payload,
        key=body.key,
        note=body.note,
        actor=caller.actor(),
        now=ctx.clock.now(),
    )
    return Json(plain(status))
