"""Commands that tell what will happen: next (a trigger's next fires), simulate."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from triggers.cli._app import app
from triggers.cli._backend import open_store
from triggers.cli._common import clock, errors, output_of, quiet_logging, upcoming_json
from triggers.cli._output import JsonOpt, OutputOpt, emit, table
from triggers.cli._times import parse_time
from triggers.clock import iso

if TYPE_CHECKING:
    from triggers.declarations import Declarations
    from triggers.model import Trigger, TriggerSpec
    from triggers.scheduler.forecast import Forecast


@app.command("next")
def next_command(
    trigger_id: Annotated[str, typer.Argument(metavar="ID")],
    count: Annotated[int, typer.Option("-n", "--count", min=1, max=10_000)] = 5,
    after: Annotated[
        str | None, typer.Option("--after", help="Start after this time (as if it were now).")
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="Read the trigger from this file, not the store."),
    ] = None,
    as_json: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """The next N occurrences the daemon will fire (UTC, local, what DST did to them)."""
    from triggers import services  # noqa: PLC0415
    from triggers.declarations import load_declarations  # noqa: PLC0415

    shape = output_of(as_json, output)
    with errors(shape):
        quiet_logging()
        now = clock.now()
        trigger: Trigger | None = None
        if config is not None:
            declarations: Declarations = load_declarations(config)
            spec = services.find_spec(declarations, trigger_id)
            start = parse_time(after, now=now) if after else now
        else:
            with open_store() as store:
                trigger = services.require_trigger(store, trigger_id)
            spec = trigger.spec
            # Occurrences up to the watermark are decided already (in the ledger).
            start = parse_time(after, now=now) if after else max(now, trigger.watermark_at)
        found = services.upcoming(spec, trigger=trigger, after=start, count=count)
        last = len(found.fires) - 1
        if shape.machine:
            emit(
                [
                    upcoming_json(
                        fire,
                        stops_after=found.stop.value if found.stop and index == last else None,
                    )
                    for index, fire in enumerate(found.fires)
                ],
                shape,
            )
            return
        _upcoming_table(spec, found)
        if found.stop is not None:
            what = "no next fire" if not found.fires else "no fire after these"
            sys.stdout.write(f"{spec.id}: {what}: {stop_text(found, spec, trigger)}\n")


def _upcoming_table(spec: TriggerSpec, found: Forecast) -> None:
    if not found.fires:
        return
    from triggers.scheduler.occurrences import describe_shift  # noqa: PLC0415

    jittered = any(fire.fires_at != fire.occurrence_at for fire in found.fires)
    shifted = any(fire.shift is not None for fire in found.fires)
    headers = ["occurrence (utc)", f"local ({spec.timezone})"]
    headers += ["fires at"] if jittered else []
    headers += ["dst"] if shifted else []
    rows = []
    for fire in found.fires:
        row: list[str | None] = [iso(fire.occurrence_at), fire.local.isoformat()]
        row += [iso(fire.fires_at)] if jittered else []
        row += [describe_shift(fire.shift) if fire.shift else None] if shifted else []
        rows.append(row)
    table(headers, rows)


def stop_text(found: Forecast, spec: TriggerSpec, trigger: Trigger | None) -> str:
    """Why a trigger fires no (more) occurrences, for people."""
    from triggers.scheduler.forecast import Stop  # noqa: PLC0415

    stop = found.stop
    if stop is Stop.PAUSED:
        note = f" ({trigger.pause_note})" if trigger is not None and trigger.pause_note else ""
        return f"paused{note}; `triggers resume {spec.id}` restarts it"
    if stop is Stop.DISABLED:
        return "disabled (enabled: false in its declaration)"
    if stop is Stop.RETIRED:
        return "retired (no longer in the declarations file)"
    if stop is Stop.MAX_RUNS:
        so_far = (
            f"{trigger.runs_launched} launched so far"
            if trigger is not None
            else "counted from a new trigger"
        )
        return f"max_runs {spec.max_runs} reached ({so_far})"
    if spec.end_at is not None:
        return f"its schedule ended (end: {iso(spec.end_at)})"
    return "its schedule has no occurrence left"
