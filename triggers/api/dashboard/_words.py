"""What the pages say in words: schedules, relative times, outcomes with their icons.

Pure functions of the documents' values (RFC 3339 text, schedule strings) and `now`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


@dataclass(frozen=True, slots=True)
class Look:
    """How an outcome or state is shown: an icon and a word (colour is never alone)."""

    icon: str
    word: str
    tone: str
    """A CSS class: good, bad, warn, busy, quiet."""


LOOKS = {
    "completed": Look("✓", "completed", "good"),
    "failed": Look("✗", "failed", "bad"),
    "cancelled": Look("⊘", "cancelled", "warn"),
    "superseded": Look("↷", "superseded", "warn"),
    "skipped": Look("»", "skipped", "quiet"),
    "missed": Look("◌", "missed", "warn"),
    "buffered": Look("◔", "buffered", "busy"),
    "launching": Look("…", "launching", "busy"),
    "launched": Look("▶", "running", "busy"),
    "running": Look("▶", "running", "busy"),
    "active": Look("▶", "active", "busy"),
    "dispatched": Look("▶", "running", "busy"),
    "succeeded": Look("✓", "succeeded", "good"),
    "ambiguous": Look("?", "ambiguous", "bad"),
    "timed_out": Look("◷", "timed out", "bad"),
    "retry_wait": Look("↻", "waiting to retry", "warn"),
    "parked": Look("‖", "parked: needs you", "bad"),
    "late": Look("◷", "late", "warn"),
    "waiting": Look("◷", "waiting", "warn"),
    "enabled": Look("●", "enabled", "good"),
    "paused": Look("‖", "paused", "warn"),
    "blocked": Look("■", "blocked", "bad"),
    "disabled": Look("○", "disabled", "quiet"),
    "retired": Look("○", "retired", "quiet"),
    "alive": Look("●", "alive", "good"),
    "stale": Look("✗", "stale", "bad"),
    "stopped": Look("○", "stopped", "quiet"),
}


def look(name: str | None) -> Look:
    """The look of an outcome, a step's or a run's state, or a trigger's or daemon's."""
    if name is None:
        return Look("-", "none yet", "quiet")
    return LOOKS.get(name, Look("•", name.replace("_", " "), "quiet"))


def parse(value: str | datetime | None) -> datetime | None:
    """An RFC 3339 instant of a document (None stays None)."""
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)


def utc_words(value: str | datetime | None) -> str:
    """`2026-12-02 04:21:12 UTC`."""
    instant = parse(value)
    return "-" if instant is None else instant.strftime("%Y-%m-%d %H:%M:%S UTC")


def relative(value: str | datetime | None, *, now: datetime) -> str:
    """`3 min ago`, `in 2 h`, `just now`."""
    instant = parse(value)
    if instant is None:
        return "-"
    seconds = (instant - now).total_seconds()
    words = span_words(timedelta(seconds=abs(seconds)))
    if words == "now":
        return "just now"
    return f"in {words}" if seconds > 0 else f"{words} ago"


def span_words(span: timedelta) -> str:
    """A duration, rounded to its largest unit: `45 s`, `3 min`, `2 h`, `5 d`."""
    seconds = span.total_seconds()
    if seconds < 1:
        return "now"
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit}"
    return f"{int(seconds)} s"


def zone_words(zone: str | None) -> str:
    """`Berlin time`, `New York time`, `UTC`."""
    if not zone or zone in ("UTC", "Etc/UTC"):
        return "UTC"
    return zone.rsplit("/", 1)[-1].replace("_", " ") + " time"


def schedule_words(schedule: str, zone: str | None) -> str:
    """A trigger's schedule (`list`'s `schedule`) in words, with its zone:
    `cron 30 2 * * *` in Europe/Berlin is `At 02:30, every day, Berlin time`."""
    kind, _, rest = schedule.partition(" ")
    if kind == "cron":
        said = _cron_words(rest)
        return f"{said}, {zone_words(zone)}" if said else f"cron {rest}, {zone_words(zone)}"
    if kind == "every":
        return f"Every {rest}"
    if kind == "calendar":
        return f"{rest[0].upper()}{rest[1:]}, {zone_words(zone)}" if rest else schedule
    if kind == "at":
        return f"Once, at {utc_words(rest)}"
    return schedule


@lru_cache(maxsize=4096)
def _cron_words(expression: str) -> str | None:
    """English for a cron expression (cron-descriptor), or None when it cannot say
    (`H` hashing)."""
    from cron_descriptor import (  # noqa: PLC0415 (only the trigger pages need it)
        Options,
        get_description,
    )

    fields = _MACROS.get(expression.strip(), expression).split()
    options = Options()
    options.use_24hour_time_format = True
    options.verbose = False
    try:
        said = str(get_description(" ".join(fields), options))
    except Exception:  # noqa: BLE001 (any expression it cannot read: the expression is shown)
        return None
    days = fields[-3:] if len(fields) >= 5 else []  # noqa: PLR2004 (day-of-month month day-of-week)
    if days == ["*", "*", "*"] and not said.lower().startswith("every"):
        said += ", every day"
    return said
