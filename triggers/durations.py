"""Durations as people write them, in one grammar for every place that reads one.

Declarations (`every: 90s`, `timeout: 30m`), settings (`TRIGGERS_LEASE=5m`) and the
CLI (`--since -2h`) all parse with `parse_duration`, so a string is a duration in
all of them or in none:

- one or more parts, each a number and a unit: `ms`, `s`, `m`, `h`, `d`, `w`
  (`500ms`, `90s`, `5m`, `2h`, `1d`, `1w`, `1h30m`); numbers are ASCII digits with an
  optional decimal fraction (`1.5s`); units are lower case (`M` is not a unit);
- a number without a unit counts seconds (`90` is `90s`, `1.5` is `1.5s`);
- whitespace is ignored (`1h 30m`, ` 2h `, `5 m`);
- the total is positive (zero only where a caller allows it, such as `jitter: 0s`),
  a whole number of milliseconds, and at most a century.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta
from decimal import Decimal

_PARTS = re.compile(r"(?:[0-9]+(?:\.[0-9]+)?(?:ms|s|m|h|d|w))+")
_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d|w)")
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_MAX_MS = 100 * 366 * _UNIT_MS["d"]


def parse_duration(value: str | int | float, *, allow_zero: bool = False) -> timedelta:
    """Parse a duration written as the module doc says; a number counts seconds.

    Raises:
        ValueError: not a duration; zero (unless `allow_zero`), negative, finer than a
            millisecond, or longer than a century. The message quotes the value.
    """
    milliseconds = _milliseconds(value)
    if milliseconds == 0 and not allow_zero:
        raise ValueError(f"duration {value!r} is zero; a duration must be positive")
    return timedelta(milliseconds=milliseconds)


def _milliseconds(value: str | int | float) -> int:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"{value!r} is not a duration")  # noqa: TRY004 (callers catch ValueError)
    if isinstance(value, int):
        total = Decimal(value) * 1000
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise _invalid(value)
        total = Decimal(repr(value)) * 1000
    else:
        total = _text_milliseconds(value)
    if total < 0:
        raise ValueError(f"duration {value!r} is negative; a duration must be positive")
    if total != total.to_integral_value():
        raise ValueError(f"duration {value!r} is not a whole number of milliseconds")
    if total > _MAX_MS:
        raise ValueError(f"duration {value!r} is longer than a century")
    return int(total)


def _text_milliseconds(text: str) -> Decimal:
    compact = "".join(text.split())
    sign = Decimal(1)
    if compact.startswith("-") and len(compact) > 1:
        # Parsed on, so that the message says "negative" rather than "invalid".
        sign, compact = Decimal(-1), compact[1:]
    if _NUMBER.fullmatch(compact):
        return sign * Decimal(compact) * 1000
    if _PARTS.fullmatch(compact):
        parts = _PART.findall(compact)
        return sign * sum((Decimal(number) * _UNIT_MS[unit] for number, unit in parts), Decimal(0))
    raise _invalid(text)


def _invalid(value: object) -> ValueError:
    return ValueError(
        f"invalid duration {value!r}: write a number with a unit (ms, s, m, h, d, w), "
        "like '90s', '5m' or '1h30m'"
    )


def human_duration(value: timedelta) -> str:
    """A table cell for a measured duration: `594ms` under a second, `2.5s` under a
    minute, else whole seconds as `format_duration` writes them (`9m54s`, `1h`);
    negative durations keep their sign. JSON keeps exact milliseconds instead."""
    milliseconds = round(value.total_seconds() * 1000)
    if milliseconds < 0:
        return "-" + human_duration(-value)
    if milliseconds < _UNIT_MS["s"]:
        return f"{milliseconds}ms"
    if milliseconds < _UNIT_MS["m"]:
        return f"{milliseconds / 1000:.1f}".removesuffix(".0") + "s"
    return format_duration(timedelta(seconds=milliseconds // 1000))


def format_duration(value: timedelta) -> str:
    """`90s`, `5m`, `2h`, `1d`, or `1h30m`: the YAML duration form (whole seconds)."""
    total = int(value.total_seconds())
    if total == 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        amount, total = divmod(total, size)
        if amount:
            parts.append(f"{amount}{unit}")
    return "".join(parts)
