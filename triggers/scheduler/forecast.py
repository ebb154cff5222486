"""What a trigger fires next, by the rules the daemon's timetable follows.

`triggers next`, `list` and `describe` answer from here, and the timetable
(`timetable.py`) asks the same two questions before it schedules a trigger
(`stop_reason`, `fire_time`), so what they show is what the loop will do: no
occurrence while the trigger is retired, disabled or paused, none past `end` or
after its `max_runs` launches, each launched at its occurrence plus its jitter.
Each occurrence says what a daylight-saving change did to it (`DstShift`).

It cannot know what only the run-time will decide: an occurrence that meets an
active run follows the overlap policy (skipped, buffered...), and does not count
toward `max_runs` when it does not launch. `triggers simulate` answers that.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from triggers.model import AfterSchedule, TriggerSpec
from triggers.scheduler.calendars import compile_calendars
from triggers.scheduler.occurrences import CompiledSchedule, DstShift, dst_shift, jitter_delay


class Stop(enum.StrEnum):
    """Why a trigger fires no (more) occurrences."""

    RETIRED = "retired"
    """No longer declared in the file."""
    DISABLED = "disabled"
    """Declared `enabled: false`."""
    PAUSED = "paused"
    """Paused by an operator or by `pause_on_failure`, until resumed."""
    MAX_RUNS = "max_runs"
    """Launched `max_runs` times."""
    ENDED = "ended"
    """Its schedule has no occurrence left: past `end`, or an `at` that has passed."""
    UPSTREAM = "upstream"
    """A dependent trigger (`after:`): it fires on its upstream's settled runs, at no
    instant of its own."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UpcomingFire:
    """One occurrence the daemon will fire."""

    occurrence_at: datetime
    local: datetime
    """The occurrence in the trigger's zone."""
    fires_at: datetime
    """When the daemon launches it: the occurrence plus its jitter."""
    shift: DstShift | None
    """What a daylight-saving change did to it, if anything."""
    excluded: str | None = None
    """The calendar that leaves it out, with the day's name (`de-by (Allerheiligen)`):
    the daemon records it `skipped` with reason `calendar` and launches nothing."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Forecast:
    """The next fires of a trigger, and why none follow them (when none do)."""

    fires: list[UpcomingFire]
    stop: Stop | None
    """Why the trigger fires nothing after `fires`; None when it fires more than were
    asked for."""
    runs_left: int | None
    """Launches left before `max_runs` (None: no bound)."""


def stop_reason(
    spec: TriggerSpec, *, paused: bool = False, retired: bool = False, runs_launched: int = 0
) -> Stop | None:
    """Why a trigger in this state takes no scheduled occurrence now, or None."""
    if retired:
        return Stop.RETIRED
    if not spec.enabled:
        return Stop.DISABLED
    if paused:
        return Stop.PAUSED
    if spec.max_runs is not None and runs_launched >= spec.max_runs:
        return Stop.MAX_RUNS
    return None


def fire_time(spec: TriggerSpec, schedule: CompiledSchedule, occurrence_at: datetime) -> datetime:
    """When the daemon launches `occurrence_at`: its occurrence plus its jitter."""
    if not spec.jitter:
        return occurrence_at
    following = schedule.next_after(occurrence_at)
    return occurrence_at + jitter_delay(spec.id, occurrence_at, spec.jitter, following)


def forecast(
    spec: TriggerSpec,
    schedule: CompiledSchedule,
    *,
    after: datetime,
    count: int,
    paused: bool = False,
    retired: bool = False,
    runs_launched: int = 0,
) -> Forecast:
    """The next `count` occurrences after `after` that the daemon will fire.

    Each occurrence is assumed to launch (and so to count toward `max_runs`) unless a
    calendar excludes it, which is listed as such and counts toward `count` too; see
    the module doc for what only the run-time can tell."""
    runs_left = None if spec.max_runs is None else max(0, spec.max_runs - runs_launched)
    stop = stop_reason(spec, paused=paused, retired=retired, runs_launched=runs_launched)
    if stop is not None:
        return Forecast(fires=[], stop=stop, runs_left=runs_left)
    zone = ZoneInfo(spec.timezone)
    calendars = compile_calendars(spec)
    fires: list[UpcomingFire] = []
    launches = 0
    at = schedule.next_after(after)
    while at is not None and len(fires) < count:
        if runs_left is not None and launches >= runs_left:
            return Forecast(fires=fires, stop=Stop.MAX_RUNS, runs_left=runs_left)
        excluded = None if calendars is None else calendars.exclusion(at)
        launches += excluded is None
        fires.append(
            UpcomingFire(
                occurrence_at=at,
                local=at.astimezone(zone),
                fires_at=fire_time(spec, schedule, at),
                shift=dst_shift(schedule, at),
                excluded=excluded,
            )
        )
        at = schedule.next_after(at)
    if at is None:
        ended = Stop.UPSTREAM if isinstance(spec.schedule, AfterSchedule) else Stop.ENDED
        return Forecast(fires=fires, stop=ended, runs_left=runs_left)
    if runs_left is not None and launches >= runs_left:
        return Forecast(fires=fires, stop=Stop.MAX_RUNS, runs_left=runs_left)
    return Forecast(fires=fires, stop=None, runs_left=runs_left)
