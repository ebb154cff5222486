"""`triggers timeline`: the fires of a window of time, as a picture or in the terminal."""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta, tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from triggers.cli._app import app, options
from triggers.cli._backend import open_reads, poll_interval_setting
from triggers.cli._common import clock, errors, output_of, when
from triggers.cli._output import JsonOpt, Output, emit
from triggers.clock import iso
from triggers.errors import InputError, InvalidTimeError
from triggers.times import local_zone

if TYPE_CHECKING:
    from triggers.inspection import TimelineReport
    from triggers.timeline import Branch

_DEFAULT_SPAN = timedelta(days=1)
_BRANCH_RUNS = 500
_TERMINAL = (100, 24)  # columns and lines when the terminal's size cannot be read


@app.command()
def timeline(
    trigger_ids: Annotated[
        list[str] | None,
        typer.Argument(metavar="[ID]...", help="Triggers to draw (default: every one)."),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(help="Start of the window (default: a day before now, or before --until)."),
    ] = None,
    until: Annotated[
        str | None,
        typer.Option(help="End of the window (default: now plus an eighth of the window)."),
    ] = None,
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            metavar="FILE",
            help="Write the picture to FILE.svg or FILE.png; `table` (default) draws it "
            "in the terminal, `json` prints what it shows.",
            show_default=False,
        ),
    ] = None,
    width: Annotated[
        int | None,
        typer.Option(min=40, max=1000, help="Columns in the terminal (default: its width)."),
    ] = None,
    limit: Annotated[
        int, typer.Option(min=1, max=100_000, help="Ledger rows per trigger (its newest).")
    ] = 10_000,
    links: Annotated[
        str | None,
        typer.Option(
            metavar="URL",
            help="In an SVG, link each run's bar to URL, {run_id} in it replaced (the "
            "dashboard's /runs/{run_id}), with a tooltip naming the run, its outcome and times.",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Draw fires over time: runs from launch to settlement by outcome (waiting and
    parked time apart), skipped and missed occurrences by reason, manual fires,
    backfilled occurrences, retirement and revival, arrows from a run to the runs it
    caused, DST changes, daemon downtime, fires to come."""
    picture, shape = _destination(output, as_json)
    with errors(shape):
        from triggers import inspection  # noqa: PLC0415
        from triggers.timeline import check_destination  # noqa: PLC0415

        if picture is not None:
            check_destination(picture)  # a typo fails before any work
        _check_links(links, picture)
        now = clock.now()
        since_at, until_at = _window(since, until, now=now)
        poll_interval = poll_interval_setting()
        with open_reads() as reads:
            report = inspection.timeline_report(
                reads.store,
                trigger_ids=trigger_ids or [],
                since=since_at,
                until=until_at,
                now=now,
                poll_interval=poll_interval,
                limit=limit,
                display_zone=_display_zone(now),
                audit=reads.audit,
            )
        for trigger_id in report.cut:
            sys.stderr.write(
                f"-- {trigger_id}: only its newest {limit} ledger rows in the window are "
                "drawn; narrow the window or raise --limit --\n"
            )
        if picture is not None:
            _write(
                dataclasses.replace(
                    report, timeline=dataclasses.replace(report.timeline, run_links=links)
                ),
                picture,
                shape,
            )
        elif shape.machine:
            emit(_timeline_json(report), shape)
        else:
            _draw(report, width)


def _destination(output: str | None, as_json: bool) -> tuple[Path | None, Output]:
    """The picture file, if any, and the shape of what goes to stdout."""
    if output is not None and output not in {o.value for o in Output}:
        return Path(output), Output.JSON if as_json else Output.TABLE
    return None, output_of(as_json, Output(output) if output is not None else None)


def _check_links(links: str | None, picture: Path | None) -> None:
    """Raises InputError: `--links` without an SVG to put them in, or without
    `{run_id}` (every bar would lead to one page)."""
    if links is None:
        return
    if picture is None or picture.suffix.lower() != ".svg":
        raise InputError(
            "--links: links are drawn in an SVG file only (--output FILE.svg)", links=links
        )
    if "{run_id}" not in links:
        raise InputError(
            f"--links {links!r}: the URL must hold {{run_id}}, replaced by each run's id",
            links=links,
        )


def _window(since: str | None, until: str | None, *, now: datetime) -> tuple[datetime, datetime]:
    since_at, until_at = when(since, now=now), when(until, now=now)
    if since_at is None:
        since_at = min(until_at or now, now) - _DEFAULT_SPAN
    if until_at is None:
        until_at = now + (now - since_at) / 8 if since_at < now else since_at + _DEFAULT_SPAN
    if until_at <= since_at:
        raise InvalidTimeError(
            f"the window must end after it starts: --until {iso(until_at)} is not after "
            f"--since {iso(since_at)}",
            since=iso(since_at),
            until=iso(until_at),
        )
    return since_at, until_at


def _branches(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[Branch]]:
    """The steps of the drawn runs, from the runtime's events: a graph flow's branches,
    drawn under their run, and the steps that waited or were left ambiguous, drawn on
    it. Only the newest `_BRANCH_RUNS` runs are read (a picture of thousands of runs
    shows no branches anyway)."""
    from triggers.step_output import attempt_outputs, step_states  # noqa: PLC0415
    from triggers.timeline import PARKED_STATE, WAITING_STATES, Branch  # noqa: PLC0415

    run_ids = [str(row["run_id"]) for row in rows if row.get("run_id")][:_BRANCH_RUNS]
    if not run_ids:
        return {}
    found: dict[str, list[Branch]] = {}
    with open_reads() as reads:
        runs = reads.runs
        for run_id in run_ids:
            events = runs.get_events(run_id)
            steps = step_states(attempt_outputs(events), events)
            held = any(s.state in WAITING_STATES or s.state == PARKED_STATE for s in steps)
            if len(steps) > 1 or held:
                found[run_id] = [
                    Branch(
                        step=step.step,
                        state=step.state,
                        started_at=step.started_at,
                        ended_at=step.ended_at,
                    )
                    for step in steps
                ]
    return found


def _display_zone(now: datetime) -> tzinfo:
    return local_zone(now=now) if options.local else UTC


def _write(report: TimelineReport, picture: Path, shape: Output) -> None:
    from triggers.timeline import render_file  # noqa: PLC0415

    timeline = dataclasses.replace(report.timeline, branches=_branches(report.timeline.rows))
    written = render_file(timeline, picture)
    rows = len(report.timeline.rows)
    lanes = len(report.timeline.trigger_ids)
    if shape.machine:
        emit({"output": str(picture), "bytes": written, "triggers": lanes, "rows": rows}, shape)
    else:
        sys.stdout.write(
            f"{picture}: {_counted(lanes, 'trigger')}, {_counted(rows, 'ledger row')} "
            f"({written} bytes)\n"
        )


def _counted(number: int, word: str) -> str:
    return f"{number} {word}{'' if number == 1 else 's'}"


def _draw(report: TimelineReport, width: int | None) -> None:
    from triggers.timeline import render_text  # noqa: PLC0415

    columns = width or shutil.get_terminal_size(_TERMINAL).columns
    sys.stdout.write(render_text(report.timeline, width=columns, color=_colour()))


def _colour() -> bool:
    """ANSI colours on a terminal, unless NO_COLOR (no-color.org) or TERM=dumb says no."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return sys.stdout.isatty()


def _timeline_json(report: TimelineReport) -> dict[str, Any]:
    from triggers.timeline import lanes  # noqa: PLC0415

    found = report.timeline
    rows: dict[str, list[Any]] = {}
    for row in found.rows:
        rows.setdefault(row["trigger_id"], []).append(row)
    return {
        "since": iso(found.since),
        "until": iso(found.until),
        "now": iso(found.now) if found.now else None,
        "triggers": [
            {
                "id": lane.trigger_id,
                "timezone": lane.zone,
                "rows": rows.get(lane.trigger_id, []),
                "rows_cut": lane.trigger_id in report.cut,
                "upcoming": [iso(at) for at in lane.upcoming],
                "lifecycle": [{"event": mark.event, "at": iso(mark.at)} for mark in lane.life],
                "dst_changes": [
                    {
                        "at": iso(change.at),
                        "zone": change.zone,
                        "offset_before_s": int(change.offset_before.total_seconds()),
                        "offset_after_s": int(change.offset_after.total_seconds()),
                    }
                    for change in lane.dst
                ],
            }
            for lane in lanes(found)
        ],
        "downtime": [
            {
                "started_at": iso(down.started_at),
                "ended_at": iso(down.ended_at),
                "ongoing": down.ongoing,
            }
            for down in found.downtime
        ],
    }
