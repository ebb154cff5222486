"""What a timeline picture is drawn from: ledger rows, downtime, upcoming fires, DST.

Everything here is a plain value. Ledger rows are the dicts `triggers history --json`
prints (`triggers.model.FireRecord.to_json`), so any producer of that shape (the store,
a simulation) can be drawn without a conversion of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class DstChange:
    """A change of a zone's UTC offset (daylight-saving time, or a change of rules)."""

    zone: str
    at: datetime
    """The first instant of the new offset (aware UTC)."""
    offset_before: timedelta
    offset_after: timedelta

    @property
    def label(self) -> str:
        """`+01:00→+02:00`."""
        return f"{offset_text(self.offset_before)}→{offset_text(self.offset_after)}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Downtime:
    """A stretch of time in which no daemon ticked on the database."""

    started_at: datetime
    ended_at: datetime
    ongoing: bool = False
    """No daemon has ticked since `started_at`: it lasts until now."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Branch:
    """One step of a run as its attempts left it: a graph flow's branches ran at once."""

    step: str
    state: str
    """succeeded, failed, cancelled, ambiguous, late or running."""
    started_at: datetime
    ended_at: datetime | None = None
    """None while it runs (drawn to the end of its run's bar)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LifeMark:
    """A turn in a trigger's life that its ledger cannot show, drawn on its lane."""

    event: str
    """`created`, `retired` (the trigger left the declarations) or `revived` (it came back)."""
    at: datetime


LIFE_EVENTS = ("created", "retired", "revived")


@dataclass(frozen=True, slots=True, kw_only=True)
class Timeline:
    """Everything one picture shows; the renderers are pure functions of it.

    Instants are aware datetimes (any zone; drawn in `display_zone`). Rows,
    downtime, upcoming fires and DST changes outside `since`..`until` are clipped
    away; a run that started before `since` is drawn from `since`."""

    since: datetime
    until: datetime
    rows: Sequence[Mapping[str, Any]] = ()
    """Ledger rows in the shape of `history --json`, of any triggers, in any order."""
    now: datetime | None = None
    """Drawn as a line; fires after it are upcoming, an unsettled run lasts until it.
    None (a simulation): no line, and an unsettled run lasts until `until`."""
    downtime: Sequence[Downtime] = ()
    upcoming: Mapping[str, Sequence[datetime]] = field(default_factory=dict)
    """Per trigger, its fires still to come (after `now`), drawn lighter."""
    trigger_ids: Sequence[str] = ()
    """The lanes, top to bottom; triggers found only in `rows` follow, sorted."""
    trigger_zones: Mapping[str, str] = field(default_factory=dict)
    """Per trigger, the IANA zone its schedule runs in (shown with its id)."""
    dst_changes: Mapping[str, Sequence[DstChange]] | None = None
    """Per trigger, the offset changes to draw on its lane; None: those of its zone
    in `trigger_zones` within the window, computed (`triggers.timeline.dst_changes`)."""
    branches: Mapping[str, Sequence[Branch]] = field(default_factory=dict)
    """Per run id, its steps (`runs show`'s `steps`), drawn as thin bars under the
    run's bar (runs of one step need none); a step waiting for a signal or a timer
    (`waiting`, `sleeping`, and once done `signalled`, `timed_out`, `slept`) and a step
    left `ambiguous` (its run parked until an operator decides) mark those stretches of
    the run's bar as waiting or parked."""
    lifecycle: Mapping[str, Sequence[LifeMark]] = field(default_factory=dict)
    """Per trigger, when it was created, retired and revived (any order, any instant:
    a retirement before the window shades its lane from the window's start)."""
    display_zone: tzinfo = UTC
    """The zone of the time axis."""
    title: str | None = None
    run_links: str | None = None
    """A link for each run's bar, `{run_id}` in it replaced (`/runs/{run_id}`): the SVG
    then draws each run on its own, wrapped in its link, with a tooltip (`<title>`)
    saying the run, its outcome and its times. None: runs that touch are merged."""

    def __post_init__(self) -> None:
        for name in ("since", "until", "now"):
            value = getattr(self, name)
            if value is not None and value.tzinfo is None:
                raise ValueError(f"Timeline.{name} must be an aware datetime")
        if self.until <= self.since:
            raise ValueError("Timeline.until must be after Timeline.since")
        for trigger_id, marks in self.lifecycle.items():
            for mark in marks:
                if mark.event not in LIFE_EVENTS:
                    raise ValueError(f"Timeline.lifecycle[{trigger_id!r}]: {mark.event!r}")

    @property
    def span(self) -> timedelta:
        return self.until - self.since


def offset_text(offset: timedelta) -> str:
    """`+01:00`, `-03:30`, `+05:45`."""
    minutes = int(offset.total_seconds() // 60)
    sign = "-" if minutes < 0 else "+"
    hours, rest = divmod(abs(minutes), 60)
    return f"{sign}{hours:02d}:{rest:02d}"


def parse_instant(value: Any, *, what: str) -> datetime | None:
    """An instant of a ledger row (RFC 3339 text, or a datetime); None stays None.

    Raises:
        ValueError: neither, naming `what`.
    """
    if value is None:
        return None
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"{what}: not an RFC 3339 instant: {value!r}") from None
    else:
        raise ValueError(f"{what}: not an instant: {value!r}")  # noqa: TRY004 (one error kind)
    if parsed.tzinfo is None:
        raise ValueError(f"{what}: an instant without an offset: {value!r}")
    return parsed.astimezone(UTC)


def window_words(timeline: Timeline, *, seconds: bool = False) -> str:
    """`2026-03-27 00:00 → 2026-03-30 12:00 UTC`, each end in its own offset's name
    when they differ (`... CET → ... CEST`)."""
    shape = "%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M"
    start = timeline.since.astimezone(timeline.display_zone)
    end = timeline.until.astimezone(timeline.display_zone)
    start_name, end_name = start.tzname() or "UTC", end.tzname() or "UTC"
    if start_name == end_name:
        return f"{start.strftime(shape)} → {end.strftime(shape)} {end_name}"
    return f"{start.strftime(shape)} {start_name} → {end.strftime(shape)} {end_name}"


def zone_words(timeline: Timeline) -> str:
    """The display zone's name: its IANA key (`Europe/Berlin`), else its offset's."""
    key = getattr(timeline.display_zone, "key", None)
    return str(key) if key else timeline.since.astimezone(timeline.display_zone).tzname() or "UTC"
