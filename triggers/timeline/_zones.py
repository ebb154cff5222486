"""The offset changes of a time zone within a window (for the DST marks of a lane)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from triggers.timeline._input import DstChange

# Zones change offset at most a few times a year, never twice within six hours.
_STEP = timedelta(hours=6)
_MAX_WINDOW = timedelta(days=366 * 20)


def dst_changes(zone: str, *, since: datetime, until: datetime) -> list[DstChange]:
    """Each change of `zone`'s UTC offset after `since` and at or before `until`, in
    order, to the second.

    Raises:
        zoneinfo.ZoneInfoNotFoundError: no such zone.
    """
    tz = ZoneInfo(zone)
    until = min(until, since + _MAX_WINDOW)
    found: list[DstChange] = []
    cursor = since
    before = _offset(cursor, tz)
    while cursor < until:
        step_end = min(cursor + _STEP, until)
        after = _offset(step_end, tz)
        if after != before:
            found.append(
                DstChange(
                    zone=zone,
                    at=_first_of(after, low=cursor, high=step_end, tz=tz),
                    offset_before=before,
                    offset_after=after,
                )
            )
            before = after
        cursor = step_end
    return found


def _offset(instant: datetime, tz: ZoneInfo) -> timedelta:
    offset = instant.astimezone(tz).utcoffset()
    return offset if offset is not None else timedelta(0)


def _first_of(offset: timedelta, *, low: datetime, high: datetime, tz: ZoneInfo) -> datetime:
    """The first whole second in (low, high] with `offset` (high has it, low has not)."""
    low_s, high_s = int(low.timestamp()), int(high.timestamp())
    while high_s - low_s > 1:
        middle = (low_s + high_s) // 2
        if _offset(datetime.fromtimestamp(middle, UTC), tz) == offset:
            high_s = middle
        else:
            low_s = middle
    return datetime.fromtimestamp(high_s, UTC)
