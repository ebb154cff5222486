"""Scalar values of the declarations file: ids, references, zones, durations, instants.

Each validator returns the value or raises ValueError saying why it is not one;
pydantic turns that into a located problem (`_problems.py`).
"""

from __future__ import annotations

import functools
import re
import shlex
from datetime import date, datetime, time, timedelta
from typing import Annotated
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from pydantic import AfterValidator, BeforeValidator, Field, PlainValidator

from triggers.declarations._messages import describe, suggestion
from triggers.durations import parse_duration
from triggers.model import WEEKDAYS

ID_PATTERN = re.compile(r"[a-z0-9][a-z0-9._-]*")
MAX_ID_LENGTH = 128
_REF_PATTERN = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
_ENV_NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HTTP_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def _duration(value: object, *, allow_zero: bool = False) -> timedelta:
    # The grammar is the one settings and the CLI read (`triggers.durations`); a YAML
    # number is read as the same number written as text.
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        message = f"expected a duration like '90s' or '5m', got {describe(value)}"
        raise ValueError(message)  # noqa: TRY004 - pydantic reports ValueError, not TypeError
    return parse_duration(value, allow_zero=allow_zero)


def _span(value: object) -> timedelta:
    # Jitter and grace may be zero: zero switches them off, e.g. against a default.
    return _duration(value, allow_zero=True)


def check_id(value: str, *, what: str = "id") -> str:
    """Return `value` if it is a valid id; raise ValueError saying why it is not."""
    if len(value) > MAX_ID_LENGTH:
        raise ValueError(f"{what} is {len(value)} characters long; the limit is {MAX_ID_LENGTH}")
    if not ID_PATTERN.fullmatch(value):
        raise ValueError(
            f"invalid {what} {value!r}: use lower-case letters, digits, '.', '_' and '-', "
            "starting with a letter or digit"
        )
    return value


def _check_ref(value: str) -> str:
    if not _REF_PATTERN.fullmatch(value):
        raise ValueError(f"invalid reference {value!r}: write 'package.module:function'")
    return value


def check_zone(name: str) -> str:
    """Return `name` if it is a known IANA time zone; raise ValueError otherwise."""
    try:
        ZoneInfo(name)
    # OSError and ValueError: names like "Europe" (a directory) or "../x" (a path).
    except (ZoneInfoNotFoundError, ValueError, OSError):
        hint = suggestion(name, _zone_names())
        raise ValueError(f"unknown time zone {name!r}{hint}") from None
    return name


@functools.cache
def _zone_names() -> frozenset[str]:
    # Listing the zone database walks a directory tree; do it once per process.
    return frozenset(available_timezones())


def _instant(value: object) -> datetime:
    # Naive results are wall times in the trigger's zone, resolved once the zone is known.
    if isinstance(value, datetime):
        result = value
    elif isinstance(value, date):
        result = datetime.combine(value, time())
    elif isinstance(value, str):
        try:
            result = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError(
                f"invalid time {value!r}: write ISO 8601, like '2026-01-01T00:00:00Z' "
                "or '2026-01-01T02:30:00' (in the trigger's time zone)"
            ) from None
    else:
        message = f"expected a time like '2026-01-01T00:00:00Z', got {describe(value)}"
        raise ValueError(message)  # noqa: TRY004 - pydantic reports ValueError, not TypeError
    if result.microsecond % 1000:
        raise ValueError("a time must be a whole number of milliseconds")
    return result


def _text(value: object) -> object:
    # `[sleep, 5]` and `PORT: 5432` are common; integers stand for their digits.
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


def _argv(value: object) -> object:
    if isinstance(value, str):
        try:
            return shlex.split(value)
        except ValueError as exc:
            raise ValueError(f"cannot split the command: {exc}") from None
    return value


def _check_argv(argv: list[str]) -> list[str]:
    if not argv or not argv[0]:
        raise ValueError("a command needs at least the program to run")
    return argv


def _check_env_name(name: str) -> str:
    if not _ENV_NAME_PATTERN.fullmatch(name):
        raise ValueError(f"invalid environment variable name {name!r}")
    return name


def _not_a_setting(name: str) -> str:
    if name.startswith("TRIGGERS_"):
        raise ValueError(f"{name} is the daemon's setting; no step gets the daemon's settings")
    return name


def _check_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in {"http", "https"} or not parts.netloc:
        raise ValueError(f"invalid url {url!r}: write an absolute http:// or https:// URL")
    return url


def _check_method(method: str) -> str:
    upper = method.upper()
    if upper not in _HTTP_METHODS:
        hint = suggestion(upper, _HTTP_METHODS)
        raise ValueError(f"unknown HTTP method {method!r}{hint}")
    return upper


def _non_empty(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value


_ALERT_EVENTS = ("failed", "missed", "skipped", "blocked", "late", "stuck", "recovered")


def _check_alert_event(name: str) -> str:
    if name not in _ALERT_EVENTS:
        hint = suggestion(name, _ALERT_EVENTS) or f" (one of: {', '.join(_ALERT_EVENTS)})"
        raise ValueError(f"unknown alert event {name!r}{hint}")
    return name


def _day(value: object) -> date:
    if isinstance(value, datetime):
        raise ValueError(  # noqa: TRY004 - pydantic reports ValueError, not TypeError
            f"expected a date like 2026-12-24, got the time {value.isoformat()}"
        )
    if isinstance(value, date):
        return value
    if isinstance(value, str):
        try:
            return date.fromisoformat(value.strip())
        except ValueError:
            pass
    raise ValueError(f"expected a date like 2026-12-24, got {describe(value)}")


def _dates(value: object) -> tuple[date, date]:
    # `2026-12-24` (YAML reads it as a date) or `"2026-12-24..2026-12-31"`.
    if isinstance(value, str) and ".." in value:
        first_text, _, last_text = value.partition("..")
        first, last = _day(first_text), _day(last_text)
        if last < first:
            raise ValueError(f"the range {value!r} ends before it starts")
        return first, last
    one = _day(value)
    return one, one


_MONTH_DAY = re.compile(r"(\d{1,2})-(\d{1,2})")
_DAYS_IN_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _month_day(text: str, whole: str) -> tuple[int, int]:
    found = _MONTH_DAY.fullmatch(text.strip())
    if found is None:
        raise ValueError(f"expected a yearly date like '12-24' or '12-24..12-26', got {whole!r}")
    month, day = int(found[1]), int(found[2])
    if not 1 <= month <= 12 or not 1 <= day <= _DAYS_IN_MONTH[month - 1]:  # noqa: PLR2004
        raise ValueError(f"no such day of the year: {text.strip()!r} (month-day)")
    return month, day


def _yearly(value: object) -> tuple[int, int, int, int]:
    if not isinstance(value, str):
        message = f"expected a yearly date like '12-24' in quotes, got {describe(value)}"
        raise ValueError(message)  # noqa: TRY004 - pydantic reports ValueError, not TypeError
    first_text, dots, last_text = value.partition("..")
    first = _month_day(first_text, value)
    last = _month_day(last_text, value) if dots else first
    return (*first, *last)


def _weekday(value: object) -> int:
    text = value.strip().lower()[:3] if isinstance(value, str) else None
    if text not in WEEKDAYS:
        raise ValueError(f"expected a weekday ({', '.join(WEEKDAYS)}), got {describe(value)}")
    return WEEKDAYS.index(text)


def every_shorthand(value: object) -> object:
    """`every: 90s` is shorthand for `every: {interval: 90s}`."""
    return value if isinstance(value, dict) else {"interval": value}


Duration = Annotated[timedelta, PlainValidator(_duration)]
Span = Annotated[timedelta, PlainValidator(_span)]
Instant = Annotated[datetime, PlainValidator(_instant)]
Id = Annotated[str, AfterValidator(check_id)]
Ref = Annotated[str, AfterValidator(_check_ref)]
Zone = Annotated[str, AfterValidator(check_zone)]
Count = Annotated[int, Field(ge=1)]
Text = Annotated[str, BeforeValidator(_text)]
NonEmpty = Annotated[str, AfterValidator(_non_empty)]
Argv = Annotated[list[Text], BeforeValidator(_argv), AfterValidator(_check_argv)]
EnvName = Annotated[str, AfterValidator(_check_env_name)]
InheritedName = Annotated[str, AfterValidator(_check_env_name), AfterValidator(_not_a_setting)]
Url = Annotated[str, AfterValidator(_check_url)]
HttpMethod = Annotated[str, AfterValidator(_check_method)]
Status = Annotated[int, Field(ge=100, le=599)]
AlertEventName = Annotated[str, AfterValidator(_check_alert_event)]
DateRange = Annotated[tuple[date, date], PlainValidator(_dates)]
YearlyRange = Annotated[tuple[int, int, int, int], PlainValidator(_yearly)]
Weekday = Annotated[int, PlainValidator(_weekday)]
