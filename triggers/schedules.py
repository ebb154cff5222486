"""How a trigger's occurrences come: its schedule (`cron`, `every`, `calendar`, `at`,
or `after:` the runs of other triggers), as frozen values, their stored JSON and
their short human form.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, TypeAlias

from triggers.clock import from_ms, iso_key, to_ms
from triggers.durations import format_duration

JsonValue: TypeAlias = Any
"""A JSON-serialisable value (dicts, lists, str, int, float, bool, None)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CronSchedule:
    """A cron expression, evaluated in the trigger's time zone."""

    expression: str
    kind: Literal["cron"] = "cron"


@dataclass(frozen=True, slots=True, kw_only=True)
class EverySchedule:
    """A fixed interval of elapsed time, anchored at `start` (default: the Unix epoch)."""

    interval: timedelta
    start: datetime | None = None
    kind: Literal["every"] = "every"


@dataclass(frozen=True, slots=True, kw_only=True)
class CalendarSchedule:
    """A calendar interval (years/months/weeks/days) at a wall-clock time, DST-aware."""

    years: int = 0
    months: int = 0
    weeks: int = 0
    days: int = 0
    day: int | None = None
    hour: int = 0
    minute: int = 0
    second: int = 0
    start: datetime | None = None
    kind: Literal["calendar"] = "calendar"


@dataclass(frozen=True, slots=True, kw_only=True)
class AtSchedule:
    """One instant."""

    at: datetime
    kind: Literal["at"] = "at"


DEPENDENCY_OUTCOMES = ("completed", "failed", "settled")
"""The outcomes of an upstream run that `after:` may wait for (`settled`: either)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Upstream:
    """One upstream of a dependent trigger: its `trigger` and the `outcome` awaited."""

    trigger: str
    outcome: str = "completed"

    def matches(self, outcome: str) -> bool:
        """Whether a run of `trigger` that settled `outcome` counts for this upstream."""
        if self.outcome == "settled":
            return outcome in ("completed", "failed", "cancelled")
        return outcome == self.outcome


Join: TypeAlias = Literal["one", "all", "any"]
"""How a dependent trigger combines its upstreams: `one` (the single-upstream form),
`all` (once every upstream has a matching run within `within`), `any` (once per
matching run of any upstream)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AfterSchedule:
    """No instants of its own: occurrences from the settled runs of its `upstreams`.

    `one` and `any`: an occurrence per settled run of an upstream whose outcome
    matches. `all`: an occurrence each time every upstream has a matching run settled
    within `within` that no earlier occurrence of this trigger used (each run is used
    at most once; the oldest such run of each upstream is taken)."""

    upstreams: tuple[Upstream, ...]
    join: Join = "one"
    within: timedelta | None = None
    kind: Literal["after"] = "after"

    @classmethod
    def of(cls, upstream: str, outcome: str = "completed") -> AfterSchedule:
        """The single-upstream form: `after: {trigger: upstream, outcome: outcome}`."""
        return cls(upstreams=(Upstream(trigger=upstream, outcome=outcome),))

    @property
    def triggers(self) -> tuple[str, ...]:
        """The upstream triggers' ids, in declaration order."""
        return tuple(upstream.trigger for upstream in self.upstreams)

    def matches(self, trigger_id: str, outcome: str) -> bool:
        """Whether a run of `trigger_id` that settled `outcome` counts for an upstream."""
        return any(
            upstream.trigger == trigger_id and upstream.matches(outcome)
            for upstream in self.upstreams
        )

    def describe(self) -> str:
        """`after import completed`, `after all of a completed, b failed within 6h`."""
        listed = ", ".join(f"{u.trigger} {u.outcome}" for u in self.upstreams)
        if self.join == "one":
            return f"after {listed}"
        within = f" within {format_duration(self.within)}" if self.within else ""
        return f"after {self.join} of {listed}{within}"


Schedule: TypeAlias = CronSchedule | EverySchedule | CalendarSchedule | AtSchedule | AfterSchedule


def _opt_ms(instant: datetime | None) -> int | None:
    return None if instant is None else to_ms(instant)


def _opt_dt(ms: int | None) -> datetime | None:
    return None if ms is None else from_ms(ms)


def schedule_to_json(schedule: Schedule) -> dict[str, JsonValue]:
    """The stored form of a schedule (part of its trigger's declaration and digest)."""
    match schedule:
        case CronSchedule(expression=expression):
            return {"kind": "cron", "expression": expression}
        case EverySchedule(interval=interval, start=start):
            return {
                "kind": "every",
                "interval_s": interval.total_seconds(),
                "start": _opt_ms(start),
            }
        case CalendarSchedule():
            return {
                "kind": "calendar",
                "years": schedule.years,
                "months": schedule.months,
                "weeks": schedule.weeks,
                "days": schedule.days,
                "day": schedule.day,
                "hour": schedule.hour,
                "minute": schedule.minute,
                "second": schedule.second,
                "start": _opt_ms(schedule.start),
            }
        case AtSchedule(at=at):
            return {"kind": "at", "at": to_ms(at)}
        case AfterSchedule(upstreams=upstreams, join=join, within=within):
            if join == "one":
                # The single-upstream form keeps its first encoding: its digest, and
                # so its revision, stay as they were.
                return {
                    "kind": "after",
                    "trigger": upstreams[0].trigger,
                    "outcome": upstreams[0].outcome,
                }
            return {
                "kind": "after",
                "join": join,
                "upstreams": [{"trigger": u.trigger, "outcome": u.outcome} for u in upstreams],
                "within_s": None if within is None else within.total_seconds(),
            }


def schedule_from_json(data: Mapping[str, JsonValue]) -> Schedule:
    """The schedule `schedule_to_json` stored."""
    kind = data["kind"]
    if kind == "cron":
        return CronSchedule(expression=data["expression"])
    if kind == "every":
        return EverySchedule(
            interval=timedelta(seconds=data["interval_s"]), start=_opt_dt(data["start"])
        )
    if kind == "calendar":
        return CalendarSchedule(
            years=data["years"],
            months=data["months"],
            weeks=data["weeks"],
            days=data["days"],
            day=data["day"],
            hour=data["hour"],
            minute=data["minute"],
            second=data["second"],
            start=_opt_dt(data["start"]),
        )
    if kind == "at":
        return AtSchedule(at=from_ms(data["at"]))
    if kind == "after":
        if "join" not in data:
            return AfterSchedule.of(data["trigger"], data["outcome"])
        within_s = data["within_s"]
        return AfterSchedule(
            upstreams=tuple(
                Upstream(trigger=u["trigger"], outcome=u["outcome"]) for u in data["upstreams"]
            ),
            join=data["join"],
            within=None if within_s is None else timedelta(seconds=within_s),
        )
    raise ValueError(f"unknown schedule kind {kind!r}")


def describe_schedule(schedule: Schedule) -> str:
    """A short human form: `cron 30 2 * * *`, `every 90s`, `at 2027-01-01T00:00:00Z`."""
    match schedule:
        case CronSchedule(expression=expression):
            return f"cron {expression}"
        case EverySchedule(interval=interval):
            return f"every {format_duration(interval)}"
        case CalendarSchedule():
            parts = [
                f"{value}{unit}"
                for value, unit in (
                    (schedule.years, "y"),
                    (schedule.months, "mo"),
                    (schedule.weeks, "w"),
                    (schedule.days, "d"),
                )
                if value
            ]
            day = f" day {schedule.day}" if schedule.day else ""
            clock = f"{schedule.hour:02d}:{schedule.minute:02d}:{schedule.second:02d}"
            return f"calendar every {' '.join(parts)}{day} at {clock}"
        case AtSchedule(at=at):
            return f"at {iso_key(at)}"
        case AfterSchedule():
            return schedule.describe()
