"""Times as operators write them (`--since`, `--from`, the API's `since`), and table cells.

Accepted: `now`; `today`, `yesterday`, `tomorrow` (midnight); a duration from now,
`+1h`, `in 1h`, `-2h` or `2h ago` (the grammar of `triggers.durations`); ISO-8601,
`2026-01-01`, `2026-01-01T02:30`, `2026-01-01T02:30:00Z` or with an offset. A time
without an offset, and midnight, are UTC unless `--local` is given (the HTTP API
has no such option): then they are the local time of this machine (`TZ`, else the
system zone). Tables show times in UTC (`Z`) by default and in local time with
`--local`; JSON is always UTC.
"""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime, timedelta, tzinfo
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from triggers.clock import iso
from triggers.durations import parse_duration
from triggers.errors import InvalidTimeError

_DAYS = {"today": 0, "yesterday": -1, "tomorrow": 1}
# The duration keeps its case: `5M` is not a duration (`M` is no unit), as everywhere.
_AGO = re.compile(r"(?P<amount>.+?)\s+ago", re.IGNORECASE)
_IN = re.compile(r"in\s+(?P<amount>.+)", re.IGNORECASE)
EARLIEST = datetime(1900, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)
"""The range of a time an operator types: far past any schedule's horizon, and far
enough from the calendar's end (year 9999) that schedule math after it cannot overflow."""
_FORMS = "use 'now', 'today', '+1h', '2h ago', '-2h' or ISO-8601 like 2026-01-01T00:00:00Z"


def parse_time(text: str, *, now: datetime, local: bool = False) -> datetime:
    """The instant `text` names (see the module doc), as an aware UTC datetime.

    Raises:
        InvalidTimeError: not one of the accepted forms, or outside `EARLIEST`..`LATEST`.
    """
    try:
        instant = _parsed(text, now=now, local=local)
    except OverflowError:  # `+99999999d`, or an offset that crosses the calendar's end
        instant = LATEST + timedelta(days=1)
    if not EARLIEST <= instant <= LATEST:
        raise InvalidTimeError(
            f"time {text!r} is out of range: use one from {iso(EARLIEST)} to {iso(LATEST)}",
            value=text,
        )
    return instant


def _parsed(text: str, *, now: datetime, local: bool) -> datetime:
    value = " ".join(text.strip().split())
    word = value.lower()
    if word == "now":
        return now
    if word in _DAYS:
        return _midnight(now, local=local) + timedelta(days=_DAYS[word])
    relative = _relative(value)
    if relative is not None:
        sign, amount = relative
        try:
            return now + sign * parse_duration(amount)
        except ValueError as exc:
            raise InvalidTimeError(f"cannot parse time {text!r}: {exc}", value=text) from exc
    try:
        parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise InvalidTimeError(f"cannot parse time {text!r}: {_FORMS}", value=text) from None
    if parsed.tzinfo is None:
        # A naive datetime's astimezone() reads it as this machine's local time.
        parsed = parsed.astimezone() if local else parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def _relative(value: str) -> tuple[int, str] | None:
    """(sign, duration text) of `+1h`, `-2h`, `in 1h`, `2h ago`; None for other forms."""
    if value.startswith(("+", "-")):  # an ISO-8601 time starts with its year
        return (1 if value[0] == "+" else -1), value[1:]
    ago = _AGO.fullmatch(value)
    if ago:
        return -1, ago.group("amount")
    ahead = _IN.fullmatch(value)
    if ahead:
        return 1, ahead.group("amount")
    return None


def _midnight(now: datetime, *, local: bool) -> datetime:
    if not local:
        return now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    wall = now.astimezone().replace(hour=0, minute=0, second=0, microsecond=0, tzinfo=None)
    return wall.astimezone().astimezone(UTC)  # the offset midnight itself has (DST)


def show_time(value: datetime | None, *, local: bool = False) -> str | None:
    """A table cell: RFC 3339 UTC with `Z`, or this machine's local time with its offset."""
    if value is None:
        return None
    if local:
        return value.astimezone().isoformat(timespec="milliseconds")
    return iso(value)


def local_zone(*, now: datetime) -> tzinfo:
    """This machine's zone, with its DST rules where they can be read: `TZ` naming an
    IANA zone, else /etc/localtime; else (a POSIX `TZ` string) the fixed offset the C
    library gives `now`."""
    name = os.environ.get("TZ", "").removeprefix(":")
    try:
        if name:
            return ZoneInfo(name)
        with Path("/etc/localtime").open("rb") as file:
            return ZoneInfo.from_file(file, key="localtime")
    except (ZoneInfoNotFoundError, OSError, ValueError):
        return now.astimezone().tzinfo or UTC
