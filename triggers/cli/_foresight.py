"""Commands that tell what will happen: next (a trigger's next fires), simulate."""

from __future__ import annotations

import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from triggers.cli._app import app
from triggers.cli._backend import open_reads
from triggers.cli._commands import FileArg, declarations_file
from triggers.cli._common import (
    FIRE_HEADERS,
    clock,
    errors,
    fire_json,
    fire_table_row,
    output_of,
    quiet_logging,
)
from triggers.cli._output import JsonOpt, Output, OutputOpt, emit, table
from triggers.cli._scenario import read_scenario
from triggers.clock import iso
from triggers.documents import next_json
from triggers.durations import format_duration
from triggers.times import parse_time

if TYPE_CHECKING:
    from triggers.declarations import Declarations
    from triggers.model import Trigger, TriggerSpec
    from triggers.scheduler.forecast import Forecast
    from triggers.simulation import Scenario, SimulationResult


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

    shape = output_of(as_json, output)
    with errors(shape):
        now = clock.now()
        trigger: Trigger | None = None
        if config is not None:
            # Only a file needs the declarations' models (pydantic), not the store.
            from triggers.declarations import load_declarations  # noqa: PLC0415

            declarations: Declarations = load_declarations(config)
            spec = services.find_spec(declarations, trigger_id)
            start = parse_time(after, now=now) if after else now
        else:
            with open_reads() as reads:
                trigger = services.require_trigger(reads.store, trigger_id)
            spec = trigger.spec
            # Occurrences up to the watermark are decided already (in the ledger).
            start = parse_time(after, now=now) if after else max(now, trigger.watermark_at)
        found = services.upcoming(spec, trigger=trigger, after=start, count=count)
        if shape.machine:
            emit(next_json(found), shape)
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
    excluded = any(fire.excluded is not None for fire in found.fires)
    headers = ["occurrence (utc)", f"local ({spec.timezone})"]
    headers += ["fires at"] if jittered else []
    headers += ["dst"] if shifted else []
    headers += ["excluded"] if excluded else []
    rows = []
    for fire in found.fires:
        row: list[str | None] = [iso(fire.occurrence_at), fire.local.isoformat()]
        row += [iso(fire.fires_at)] if jittered else []
        row += [describe_shift(fire.shift) if fire.shift else None] if shifted else []
        row += [f"skipped: calendar {fire.excluded}" if fire.excluded else None] if excluded else []
        rows.append(row)
    table(headers, rows)


def stop_text(found: Forecast, spec: TriggerSpec, trigger: Trigger | None) -> str:
    """Why a trigger fires no (more) occurrences, for people."""
    from triggers.model import AfterSchedule  # noqa: PLC0415
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
    if stop is Stop.UPSTREAM and isinstance(spec.schedule, AfterSchedule):
        after = spec.schedule
        listed = [f"{u.trigger} ({u.outcome})" for u in after.upstreams]
        if after.join == "all":
            within = format_duration(after.within) if after.within else "its window"
            return f"it fires once {' and '.join(listed)} have each run within {within}"
        if after.join == "any":
            return f"it fires after each run of {' or '.join(listed)}"
        upstream = after.upstreams[0]
        return f"it fires after each {upstream.outcome} run of {upstream.trigger}"
    if spec.end_at is not None:
        return f"its schedule ended (end: {iso(spec.end_at)})"
    return "its schedule has no occurrence left"


@app.command()
def simulate(
    start: Annotated[
        str,
        typer.Option("--from", metavar="T", help="First instant (the file is applied then)."),
    ],
    end: Annotated[
        str,
        typer.Option("--to", metavar="T", help="Last instant, inclusive (+3d counts from --from)."),
    ],
    file: FileArg = None,
    duration: Annotated[
        list[str] | None,
        typer.Option(
            "--duration",
            metavar="[ID=]D",
            help="How long ID's runs last (70m); without ID, every other's (default 0s: no time).",
            show_default=False,
        ),
    ] = None,
    down: Annotated[
        list[str] | None,
        typer.Option(
            "--down", metavar="T1..T2", help="No daemon runs from T1 to T2.", show_default=False
        ),
    ] = None,
    pause: Annotated[
        list[str] | None,
        typer.Option(
            "--pause",
            metavar="ID@T1..T2",
            help="ID paused at T1, resumed at T2 (ID@T1.. to the end).",
            show_default=False,
        ),
    ] = None,
    jump: Annotated[
        list[str] | None,
        typer.Option(
            "--jump", metavar="T=±D", help="The daemon's clock steps by D at T.", show_default=False
        ),
    ] = None,
    edit: Annotated[
        list[str] | None,
        typer.Option(
            "--edit",
            metavar="T=FILE",
            help="FILE applied at T (as triggers apply).",
            show_default=False,
        ),
    ] = None,
    picture: Annotated[
        Path | None,
        typer.Option(
            "--timeline",
            metavar="FILE",
            help="Also draw the simulated ledger as `timeline` does (.svg or .png).",
            show_default=False,
        ),
    ] = None,
    fail: Annotated[
        list[str] | None,
        typer.Option(
            "--fail",
            metavar="ID@T",
            help="ID's run starting at T fails (ID@T1..T2: each starting then).",
            show_default=False,
        ),
    ] = None,
    alerts: Annotated[
        bool,
        typer.Option(
            "--alerts", help="Print the alerts the ledger would raise (none is sent) instead."
        ),
    ] = False,
    as_json: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """The ledger the real scheduler would write over a range, on a simulated clock.

    Nothing runs and no store is opened: runs only take the time --duration gives
    them. Relative times of --to and the events count from --from.
    """
    shape = output_of(as_json, output)
    with errors(shape):
        # The simulated daemon's own logs are not the answer (a run failed by --fail
        # is logged as an error by the daemon).
        quiet_logging(level="critical")
        if picture is not None:
            from triggers.timeline import check_destination  # noqa: PLC0415

            check_destination(picture)  # a typo fails before the simulation, not after
        scenario = read_scenario(
            declarations_file(file),
            start=start,
            end=end,
            durations=duration or [],
            downs=down or [],
            pauses=pause or [],
            jumps=jump or [],
            edits=edit or [],
            failures=fail or [],
        )
        from triggers.simulation import simulate as run  # noqa: PLC0415

        for warning in [] if shape.machine else scenario.warnings():
            sys.stderr.write(f"warning: {warning}\n")  # for a reader: JSON goes on as it is
        result = run(scenario)
        for failure in [] if shape.machine else result.unmatched(scenario.failures):
            span = iso(failure.start_at)
            if failure.end_at != failure.start_at:
                span = f"{span}..{iso(failure.end_at)}"
            sys.stderr.write(
                f"warning: --fail {failure.trigger_id}@{span}: no run of {failure.trigger_id}"
                " started then; nothing failed\n"
            )
        if picture is not None:
            _draw(scenario, result, picture)
        if alerts:
            _alerts(scenario, result, shape)
            return
        if shape.machine:
            emit([fire_json(record) for record in result.records], shape)
            return
        _simulation_table(result)
        _alerts_said(scenario, result)


def _alerts(scenario: Scenario, result: SimulationResult, shape: Output) -> None:
    from triggers.alert_rules import alert_payload, alert_text  # noqa: PLC0415
    from triggers.simulation import forecast_alerts  # noqa: PLC0415

    found = forecast_alerts(result.records, scenario, end_at=result.end_at)
    if shape.machine:
        emit([{**alert_payload(a.facts), "to": list(a.channels)} for a in found], shape)
        return
    table(
        ["AT", "EVENT", "TRIGGER", "TO", "TEXT"],
        [
            [
                iso(a.facts.at),
                a.facts.event.value,
                a.facts.trigger_id,
                ",".join(a.channels),
                alert_text(a.facts),
            ]
            for a in found
        ],
    )
    sys.stdout.write(f"{len(found)} alerts would be raised; none is sent by a simulation\n")


def _alerts_said(scenario: Scenario, result: SimulationResult) -> None:
    """Under the ledger, for a file that declares alerts: how many it would raise."""
    if not any(spec.alert is not None for spec in scenario.specs):
        return
    from triggers.simulation import forecast_alerts  # noqa: PLC0415

    found = forecast_alerts(result.records, scenario, end_at=result.end_at)
    counts: dict[str, int] = {}
    for alert in found:
        counts[alert.facts.event.value] = counts.get(alert.facts.event.value, 0) + 1
    said = ", ".join(f"{n} {event}" for event, n in sorted(counts.items(), key=lambda i: -i[1]))
    more = ": --alerts lists them" if found else ""
    sys.stdout.write(f"would alert: {len(found)}{f' ({said})' if said else ''}{more}\n")


def _draw(scenario: Scenario, result: SimulationResult, path: Path) -> None:
    """The simulated ledger as a timeline picture: no "now" (all of it is foresight),
    the simulated downtime hatched, DST changes of each trigger's zone."""
    from triggers.timeline import Downtime, Timeline, render_file  # noqa: PLC0415

    ids = [spec.id for spec in scenario.specs]
    render_file(
        Timeline(
            since=result.start_at,
            until=result.end_at,
            now=None,
            rows=[fire_json(record) for record in result.records],
            downtime=[
                Downtime(started_at=span.start_at, ended_at=span.end_at) for span in result.downtime
            ],
            upcoming={},
            trigger_ids=ids,
            trigger_zones={spec.id: spec.timezone for spec in scenario.specs},
        ),
        path,
    )


def simulated_history(
    scenario: Scenario,
) -> tuple[list[dict[str, Any]], list[tuple[datetime, datetime]]]:
    """Simulate `scenario`: its ledger as `history --json` rows (oldest first), and
    when its daemon was down (on the ledger's clock), for a renderer of both.

    Raises:
        InputError: the scenario cannot be simulated (see `Scenario.check`).
    """
    from triggers.simulation import simulate as run  # noqa: PLC0415

    result = run(scenario)
    rows = [fire_json(record) for record in result.records]
    return rows, [(span.start_at, span.end_at) for span in result.downtime]


def _simulation_table(result: SimulationResult) -> None:
    table(FIRE_HEADERS, [fire_table_row(record) for record in result.records])
    counts: dict[str, int] = {}
    for record in result.records:
        counts[record.outcome.value] = counts.get(record.outcome.value, 0) + record.count
    said = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items(), key=lambda i: -i[1]))
    down = sum((span.end_at - span.start_at for span in result.downtime), timedelta(0))
    downs = f"; no daemon for {format_duration(down)}" if result.downtime else ""
    sys.stdout.write(
        f"simulated {iso(result.start_at)} .. {iso(result.end_at)}: "
        f"{sum(counts.values())} occurrences ({said or 'none'}){downs}\n"
    )
