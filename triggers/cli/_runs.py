"""`triggers runs list|show|events|logs|cancel|retry|signal`: the embedded runtime's runs.

A request that changes a run (cancel, retry, signal) is recorded durably, with an
entry in the audit log, and the daemon that owns the run acts on it within about
a second.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated, Any

import typer

from triggers.cli._app import runs_app
from triggers.cli._backend import actor, open_reads, open_runtime
from triggers.cli._common import clock, errors, output_of, quiet_logging, shown
from triggers.cli._output import JsonOpt, Output, OutputOpt, emit, listing, table
from triggers.documents import MAX_COUNT, event_json, plain, run_json, run_row_json
from triggers.durations import human_duration
from triggers.errors import InputError
from triggers.step_output import attempt_outputs, step_attempts, step_states, tail
from triggers.waits import decision_lines, waiting_text, waits_by_run

if TYPE_CHECKING:
    from triggers.runner.runs import RunStatusInfo

RunArg = Annotated[str, typer.Argument(metavar="RUN_ID")]
NoteOpt = Annotated[str | None, typer.Option(help="Why: kept in the audit log.")]


@runs_app.command("list")
def list_runs(
    status: Annotated[
        str | None,
        typer.Option(help="active, completed, failed, cancelled, or parked (waiting for you)."),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=100_000)] = 50,
    as_json: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """The newest runs first."""
    shape = output_of(as_json, output)
    with errors(shape), open_reads() as reads:
        runs = reads.runs.list_runs(status=status, limit=limit + 1)
        # Reading an active run's waits folds its log (whose logging goes to stderr).
        waits = waits_by_run(reads.runs, runs[:limit], prepare=quiet_logging)

        def to_json(run: Any) -> Any:
            return run_row_json(run, waits.get(run.run_id, ()))

        def to_table(rows: Sequence[Any]) -> None:
            _runs_table(rows, waits)

        listing(runs, shape, limit=limit, to_json=to_json, to_table=to_table, what="runs")


def _runs_table(runs: Sequence[Any], waits: Mapping[str, tuple[Any, ...]]) -> None:
    table(
        ["run", "flow", "state", "trigger", "occurrence", "created", "error"],
        [
            [
                r.run_id,
                r.flow,
                _state_cell(r.state, waits.get(r.run_id, ())),
                r.attributes.get("trigger_id"),
                r.attributes.get("occurrence"),
                shown(r.created_at),
                r.error,
            ]
            for r in runs
        ],
    )


def _state_cell(state: str, waits: Sequence[Any]) -> str:
    """`active`, or what an active run waits for: `waiting for 'approved' until ...`."""
    for wait in waits:
        if wait.kind == "signal":
            until = f" until {shown(wait.until)}" if wait.until is not None else ""
            return f"waiting for {wait.signal!r}{until}"
    for wait in waits:
        return f"sleeping until {shown(wait.until)}"
    return state


@runs_app.command("show")
def show(run_id: RunArg, as_json: JsonOpt = False, output: OutputOpt = None) -> None:
    """A run: its state, every outstanding step (attempt, status, deadline, error), and the
    stderr tail of a failed step."""
    shape = output_of(as_json, output)
    with errors(shape), open_reads() as reads:
        quiet_logging()  # folding the run logs a snapshot it cannot use
        info = reads.runs.inspect_run(run_id)
        events = reads.runs.get_events(run_id)
        if shape.machine:
            emit(run_json(info, events), shape)
            return
        attempts = attempt_outputs(events)
        last = {a.effect_id: a for a in attempts}
        steps = step_states(attempts, events)
        write = sys.stdout.write
        write(
            f"run {info.run_id}\n  flow {info.flow} (version {info.version})\n"
            f"  state {info.state} ({info.status}); steps completed {info.completed_steps}\n"
            f"  key {info.idempotency_key}\n  owner {info.owner or '-'}\n"
            f"  created {shown(info.created_at)}; settled {shown(info.settled_at) or '-'}\n"
        )
        for wait in info.waits:
            write(f"  {waiting_text(info.run_id, wait, show=shown)}\n")
        if info.park_reason:
            write(f"  parked: {info.park_reason}\n")
            decisions = decision_lines(info.run_id, info.effects)
            if decisions:
                write("  decide with one of:\n")
                for line in decisions:
                    write(f"    {line}\n")
        if info.error:
            write(f"  error: {info.error}\n")
        if info.effects:
            table(
                ["step", "effect", "kind", "attempt", "status", "deadline", "last error"],
                [
                    [
                        e.step_id,
                        e.effect_id,
                        e.kind,
                        e.attempt,
                        e.status,
                        shown(e.deadline),
                        e.last_error,
                    ]
                    for e in info.effects
                ],
            )
        if len(steps) > 1 or info.waits:
            write("steps (branches that ran at once overlap in time):\n")
            table(
                ["step", "state", "attempts", "started", "ended"],
                [
                    [s.step, s.state, s.attempts, shown(s.started_at), shown(s.ended_at) or "-"]
                    for s in steps
                ],
            )
        for effect in info.effects:
            _output_tail(info.run_id, effect.effect_id, last.get(effect.effect_id))


def _output_tail(run_id: str, effect_id: str, attempt: Any) -> None:
    """The last lines of a failed or ambiguous attempt's stderr (or, for an ambiguous
    one that wrote none, of what it printed before its supervisor was lost)."""
    if attempt is None or attempt.outcome not in ("failed", "ambiguous"):
        return
    stream, text = "stderr", attempt.stderr
    if not text and attempt.outcome == "ambiguous":
        stream, text = "stdout", attempt.stdout
    if not text:
        return
    write = sys.stdout.write
    write(f"{stream} of {effect_id} (attempt {attempt.attempt}, last lines):\n")
    for line in tail(text):
        write(f"  {line}\n")
    write(f"  (all of it: triggers runs logs {run_id} {effect_id})\n")


@runs_app.command("logs")
def logs(
    run_id: RunArg,
    step: Annotated[
        str | None, typer.Argument(metavar="[STEP]", help="Only this step (its effect id).")
    ] = None,
    as_json: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """The output of a run's steps: each attempt's outcome and the bounded tails of its
    stdout and stderr, oldest first."""
    shape = output_of(as_json, output)
    with errors(shape), open_reads() as reads:
        attempts = attempt_outputs(reads.runs.get_events(run_id))
        if step is not None:
            attempts = step_attempts(attempts, step, run_id=run_id)
        if shape.machine:
            emit([a.to_json() for a in attempts], shape)
            return
        _logs_text(attempts)


def _logs_text(attempts: list[Any]) -> None:
    write = sys.stdout.write
    for attempt in attempts:
        data = attempt.to_json()
        facts = [f for f in (attempt.error, _ms(data["duration_ms"])) if f]
        write(
            f"== {attempt.effect_id}, attempt {attempt.attempt}: {attempt.outcome}"
            + (f" ({', '.join(facts)})" if facts else "")
            + f" at {shown(attempt.at)}\n"
        )
        for stream in ("stdout", "stderr"):
            text, cut = data[stream], data[f"{stream}_truncated_bytes"]
            if not text and not cut:
                continue
            write(f"-- {stream}" + (f" (first {cut} bytes not kept)" if cut else "") + "\n")
            write(text if text.endswith("\n") else text + "\n")
    if not attempts:
        write("no step has run yet\n")


def _ms(value: object) -> str | None:
    """A step's duration as a person reads it (`45s`, `2m3s`, `120ms`)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    return human_duration(timedelta(milliseconds=value))


@runs_app.command("events")
def events(
    run_id: RunArg,
    from_seq: Annotated[
        int, typer.Option("--from", min=1, max=MAX_COUNT, help="First sequence number.")
    ] = 1,
    limit: Annotated[int | None, typer.Option(min=1, max=MAX_COUNT)] = None,
    as_json: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """A run's event log, oldest first."""
    shape = output_of(as_json, output)
    with errors(shape), open_reads() as reads:
        found = reads.runs.get_events(run_id, from_seq=from_seq, limit=limit)
        if shape.machine:
            emit([event_json(event) for event in found], shape)
            return
        documents = [event_json(event) for event in found]
        table(
            ["seq", "at", "type", "payload"],
            [
                [
                    e.seq,
                    shown(e.created_at),
                    e.type,
                    json.dumps(document["payload"], sort_keys=True)[:120],
                ]
                for e, document in zip(found, documents, strict=True)
            ],
        )


@runs_app.command("cancel")
def cancel(
    run_id: RunArg,
    reason: Annotated[
        str | None, typer.Option("--reason", "--note", help="Recorded with the cancellation.")
    ] = None,
    as_json: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Cancel a run gracefully (SIGTERM to a running command, SIGKILL after a grace)."""
    from triggers import actions  # noqa: PLC0415

    shape = output_of(as_json, output)
    with errors(shape), open_runtime() as session:
        status = actions.cancel(
            session.runs, session.audit, run_id, reason=reason, actor=actor(), now=clock.now()
        )
        _status_output(status, shape, "cancel requested")


@runs_app.command("retry")
def retry(
    run_id: RunArg,
    effect_id: Annotated[str, typer.Argument(metavar="EFFECT_ID")],
    note: NoteOpt = None,
    as_json: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Run again a step left `ambiguous` or `timed_out` by a crash (your decision)."""
    from triggers import actions  # noqa: PLC0415

    shape = output_of(as_json, output)
    with errors(shape), open_runtime() as session:
        status = actions.retry(
            session.runs,
            session.audit,
            run_id,
            effect_id,
            note=note,
            actor=actor(),
            now=clock.now(),
        )
        _status_output(status, shape, "retry requested")


@runs_app.command("signal")
def signal(
    run_id: RunArg,
    name: Annotated[str, typer.Argument(metavar="NAME")],
    payload: Annotated[str | None, typer.Option(help="A JSON value.")] = None,
    key: Annotated[
        str | None, typer.Option(help="Idempotency key (a repeat is applied once).")
    ] = None,
    note: NoteOpt = None,
    as_json: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Deliver a named signal to a run waiting for it (`wait_signal` steps)."""
    from triggers import actions  # noqa: PLC0415

    shape = output_of(as_json, output)
    with errors(shape):
        try:
            value = json.loads(payload) if payload is not None else None
        except json.JSONDecodeError as exc:
            raise InputError(f"--payload is not JSON: {exc}") from exc
        with open_runtime() as session:
            status = actions.signal(
                session.runs,
                session.audit,
                run_id,
                name,
                value,
                key=key,
                note=note,
                actor=actor(),
                now=clock.now(),
            )
        _status_output(status, shape, f"signal {name!r} delivered")


def _status_output(status: RunStatusInfo, shape: Output, what: str) -> None:
    if shape.machine:
        emit(plain(status), shape)
    else:
        sys.stdout.write(f"{status.run_id}: {what} (run is {status.status})\n")
