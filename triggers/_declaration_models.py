"""The declarations file's shapes and values, and pydantic's errors as located problems.

Pydantic checks each mapping on its own (types, ranges, unknown keys); the rules that
relate several keys live in `triggers.declarations`. Every problem goes to a `Problems`
sink instead of stopping the run, so one pass reports all of them.
"""

from __future__ import annotations

import difflib
import functools
import math
import re
import shlex
from collections.abc import Iterable, Mapping
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Annotated, Any, ClassVar, Literal, Protocol, TypeAlias, TypeVar, get_args
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    Strict,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from triggers.model import CatchupPolicy, JsonValue, Overlap, format_duration

Loc: TypeAlias = tuple[str | int, ...]
"""A path into the document: mapping keys and list indexes, from the top."""

Anchor: TypeAlias = Literal["key", "value"]
"""Whether a problem points at a key (unknown, duplicate, misplaced) or at its value."""

M = TypeVar("M", bound=BaseModel)


class Problems(Protocol):
    """Where validation reports what it finds; it never stops at the first problem."""

    @property
    def count(self) -> int:
        """How many times a problem was reported so far (repeats included)."""
        ...

    def add(self, loc: Loc, message: str, *, at: Anchor = "value") -> None:
        """Report a problem at `loc`; a `loc` that is absent points at its parent."""
        ...

    def line_of(self, loc: Loc) -> int:
        """The 1-based line of the value at `loc`, for messages that cite another place."""
        ...


# ---- scalar values ------------------------------------------------------------------

ID_PATTERN = re.compile(r"[a-z0-9][a-z0-9._-]*")
MAX_ID_LENGTH = 128
_REF_PATTERN = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
_ENV_NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DURATION_PATTERN = re.compile(r"(?:\s*[0-9]+(?:\.[0-9]+)?(?:ms|s|m|h|d|w))+\s*")
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d|w)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_HTTP_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
_MAX_DURATION_MS = 100 * 366 * _UNIT_MS["d"]


def parse_duration(text: str) -> timedelta:
    """Parse a positive duration: `500ms`, `90s`, `5m`, `2h`, `1d`, `1w`, `1h30m` or `90`.

    A bare integer counts seconds. Parts may carry decimals (`1.5s`) but the total must
    be whole milliseconds.

    Raises:
        ValueError: the text is not a duration, or is zero or negative.
    """
    milliseconds = _duration_ms(text)
    if milliseconds == 0:
        raise ValueError(f"duration {text!r} is zero; a duration must be positive")
    return timedelta(milliseconds=milliseconds)


def _duration_ms(text: str) -> int:
    stripped = text.strip()
    if stripped.startswith("-"):
        raise ValueError(f"duration {text!r} is negative; a duration must be positive")
    if stripped.isascii() and stripped.isdigit():
        total = Decimal(stripped) * 1000
    elif _DURATION_PATTERN.fullmatch(stripped):
        total = sum(
            (Decimal(number) * _UNIT_MS[unit] for number, unit in _DURATION_PART.findall(stripped)),
            Decimal(0),
        )
    else:
        raise ValueError(
            f"invalid duration {text!r}: write a number with a unit (ms, s, m, h, d, w), "
            "like '90s', '5m' or '1h30m'"
        )
    if total != total.to_integral_value():
        raise ValueError(f"duration {text!r} is not a whole number of milliseconds")
    if total > _MAX_DURATION_MS:
        raise ValueError(f"duration {text!r} is longer than a century")
    return int(total)


def _duration(value: object, *, allow_zero: bool = False) -> timedelta:
    if isinstance(value, float):
        message = f"a bare number needs a unit: write '{value}s' or whole milliseconds"
    elif isinstance(value, bool) or not isinstance(value, int | str):
        message = f"expected a duration like '90s' or '5m', got {describe(value)}"
    elif allow_zero:
        return timedelta(milliseconds=_duration_ms(str(value)))
    else:
        return parse_duration(str(value))
    raise ValueError(message)


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


def _every_shorthand(value: object) -> object:
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
Status = Annotated[int, Field(ge=100, le=599)]


# ---- models -------------------------------------------------------------------------


class _Model(BaseModel):
    # Strict: YAML already types its scalars, so "yes" or "1" where a bool or an integer
    # belongs is a mistake to report, not to coerce.
    model_config = ConfigDict(extra="forbid", strict=True)

    nullable: ClassVar[frozenset[str]] = frozenset()
    """Keys whose explicit `null` means something; elsewhere `null` is an error."""

    @field_validator("*", mode="before")
    @classmethod
    def _reject_null(cls, value: object, info: ValidationInfo) -> object:
        if value is None and info.field_name not in cls.nullable:
            raise ValueError("needs a value (leave the key out to use the default)")
        return value


class CatchupModel(_Model):
    """`catchup:` of a trigger or of `defaults`; unset keys fall back key by key."""

    policy: Annotated[CatchupPolicy, Strict(False)] | None = None
    window: Duration | None = None
    grace: Span | None = None


class TriggerFieldsModel(_Model):
    """The trigger keys `defaults` may set too; `None` means "not given"."""

    nullable = frozenset({"input", "description", "start", "end", "max_runs"})

    timezone: Zone | None = None
    overlap: Annotated[Overlap, Strict(False)] | None = None
    max_active: Count | None = None
    max_buffer: Count | None = None
    catchup: CatchupModel | None = None
    jitter: Span | None = None
    input: Any = None
    enabled: bool | None = None
    description: str | None = None
    start: Instant | None = None
    end: Instant | None = None
    max_runs: Count | None = None
    pause_on_failure: bool | None = None


class DefaultsModel(TriggerFieldsModel):
    """`defaults:` of the document."""


class EveryModel(_Model):
    """`every:`; a bare duration is shorthand for `{interval: ...}`."""

    interval: Duration
    start: Instant | None = None


class CalendarModel(_Model):
    """`calendar:`: an interval of years/months/weeks/days at a wall-clock time."""

    years: Annotated[int, Field(ge=0)] = 0
    months: Annotated[int, Field(ge=0)] = 0
    weeks: Annotated[int, Field(ge=0)] = 0
    days: Annotated[int, Field(ge=0)] = 0
    day: Annotated[int, Field(ge=1, le=31)] | None = None
    hour: Annotated[int, Field(ge=0, le=23)] = 0
    minute: Annotated[int, Field(ge=0, le=59)] = 0
    second: Annotated[int, Field(ge=0, le=59)] = 0
    start: Instant | None = None

    @model_validator(mode="after")
    def _has_interval(self) -> CalendarModel:
        if not (self.years or self.months or self.weeks or self.days):
            raise ValueError("a calendar needs an interval: years, months, weeks or days")
        return self


class TriggerModel(TriggerFieldsModel):
    """One item of `triggers:`; required keys are checked by the caller."""

    id: Id | None = None
    flow: str | None = None
    cron: NonEmpty | None = None
    every: Annotated[EveryModel, BeforeValidator(_every_shorthand)] | None = None
    calendar: CalendarModel | None = None
    at: Instant | None = None


class RetryModel(_Model):
    """`retry:` of a step; unset keys take the documented defaults."""

    max_attempts: Count = 3
    backoff: Duration = timedelta(seconds=10)
    max_backoff: Duration = timedelta(minutes=5)
    non_retryable_exit_codes: list[Annotated[int, Field(ge=0, le=255)]] = []
    deadline: Duration | None = None

    @model_validator(mode="after")
    def _ordered(self) -> RetryModel:
        if self.max_backoff < self.backoff:
            raise ValueError(
                f"max_backoff ({format_duration(self.max_backoff)}) is shorter than "
                f"backoff ({format_duration(self.backoff)})"
            )
        return self


class HttpModel(_Model):
    """`http:` of a step."""

    nullable = frozenset({"body", "expect_status"})

    url: Annotated[str, AfterValidator(_check_url)]
    method: Annotated[str, AfterValidator(_check_method)] = "GET"
    headers: dict[str, Text] = Field(default_factory=dict)
    body: Any = None
    expect_status: list[Status] | None = None
    timeout: Duration | None = None


class WaitSignalModel(_Model):
    """`wait_signal:` of a step."""

    name: NonEmpty
    timeout: Duration | None = None


class StepModel(_Model):
    """One item of a flow's `steps:`; which keys go together is checked by the caller."""

    id: Id | None = None
    run: Argv | None = None
    http: HttpModel | None = None
    python: Ref | None = None
    sleep: Duration | None = None
    wait_signal: WaitSignalModel | None = None
    timeout: Duration | None = None
    retry: RetryModel | None = None
    env: dict[EnvName, Text] | None = None
    cwd: NonEmpty | None = None
    idempotent: bool | None = None


class FlowModel(_Model):
    """One value of `flows:`: `steps` (validated one by one) or `python`."""

    steps: list[Any] | None = None
    python: Ref | None = None
    version: Annotated[str, StringConstraints(min_length=1, max_length=64)] | None = None


class DocumentModel(_Model):
    """The top level; sections are validated item by item by the caller."""

    nullable = frozenset({"version", "defaults", "flows", "triggers"})

    version: Any = None
    defaults: Any = None
    flows: dict[Any, Any] | None = None
    triggers: list[Any] | None = None


# ---- pydantic errors as problems ----------------------------------------------------


def validate_partial(
    model: type[M], raw: object, loc: Loc, problems: Problems
) -> tuple[M | None, frozenset[str]]:
    """Validate `raw`, report every error, and keep what is valid.

    Returns:
        The model built from the valid keys only (None when `raw` is not even a
        mapping), and the keys that were given but invalid.
    """
    try:
        return model.model_validate(raw), frozenset()
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
    for error in errors:
        _report(model, error, loc, problems)
    dropped = {error["loc"][0] for error in errors if error["loc"]}
    bad = frozenset(str(key) for key in dropped)
    if not isinstance(raw, dict) or any(not error["loc"] for error in errors):
        return None, bad
    # Dropping the invalid keys lets the valid ones still take part in later checks.
    try:
        return model.model_validate({k: v for k, v in raw.items() if k not in dropped}), bad
    except ValidationError:
        return None, bad


def _report(model: type[BaseModel], error: ErrorDetails, loc: Loc, problems: Problems) -> None:
    where = loc + tuple(error["loc"])
    kind = error["type"]
    if kind in {"extra_forbidden", "invalid_key"}:  # invalid_key: not even a string
        key = error["loc"][-1]
        parent = error["loc"][:-1]
        if model is DefaultsModel and not parent and key in TriggerModel.model_fields:
            message = f"'{key}' cannot be defaulted; set it on each trigger"
        else:
            message = unknown_key_message(key, _fields_at(model, parent))
        problems.add(where, message, at="key")
    elif kind == "missing":
        problems.add(where, f"missing required key '{error['loc'][-1]}'")
    else:
        problems.add(where, _error_message(error))


_EXPECTED = {
    "string_type": "a string",
    "int_type": "an integer",
    "bool_type": "true or false",
    "float_type": "a number",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
}


def _error_message(error: ErrorDetails) -> str:
    kind = error["type"]
    context = error.get("ctx", {})
    value = error["input"]
    if kind == "value_error":
        return str(context["error"])
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}, got {describe(value)}"
    if kind == "greater_than_equal":
        return f"must be at least {context['ge']}, got {describe(value)}"
    if kind == "less_than_equal":
        return f"must be at most {context['le']}, got {describe(value)}"
    if kind == "enum":
        choices = re.findall(r"'([^']*)'", str(context["expected"]))
        hint = suggestion(value, choices) if isinstance(value, str) else ""
        return f"expected one of {', '.join(choices)}, got {describe(value)}{hint}"
    message = error["msg"]
    return message[:1].lower() + message[1:]


def _fields_at(model: type[BaseModel], loc: tuple[str | int, ...]) -> list[str]:
    current = model
    for element in loc:
        field = current.model_fields.get(element) if isinstance(element, str) else None
        if field is None:
            continue  # a list index or a mapping key: the model stays the same
        nested = _model_in(field.annotation)
        if nested is None:
            return []
        current = nested
    return list(current.model_fields)


def _model_in(annotation: object) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in get_args(annotation):
        found = _model_in(argument)
        if found is not None:
            return found
    return None


# Names people bring from other schedulers, which spelling distance does not catch.
_SYNONYMS = {"tz": "timezone", "command": "run", "cmd": "run", "interval": "every"}


def unknown_key_message(key: object, known: Iterable[str]) -> str:
    """`unknown key 'overlpa' (did you mean 'overlap'?)`, or the list of known keys."""
    known = list(known)
    if isinstance(key, str):
        hint = suggestion(key, known)
        if not hint and _SYNONYMS.get(key) in known:
            hint = f" (did you mean '{_SYNONYMS[key]}'?)"
        if hint:
            return f"unknown key '{key}'{hint}"
    if not known:
        return f"unknown key {key!r}"
    return f"unknown key {key!r} (known keys: {', '.join(known)})"


def suggestion(word: str, candidates: Iterable[str]) -> str:
    """` (did you mean 'x'?)` for the closest candidate, ignoring case, or an empty string."""
    by_lower = {candidate.lower(): candidate for candidate in candidates}
    matches = difflib.get_close_matches(word.lower(), by_lower, n=1, cutoff=0.6)
    return f" (did you mean '{by_lower[matches[0]]}'?)" if matches else ""


_SHOWN_CHARS = 40


def describe(value: object) -> str:
    """A short, YAML-flavoured rendering of an offending value for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value if len(value) <= _SHOWN_CHARS else value[: _SHOWN_CHARS - 3] + "...")
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, Mapping | list):
        return "a mapping" if isinstance(value, Mapping) else "a list"
    if isinstance(value, datetime | date):
        return f"the timestamp {value.isoformat()}"
    return f"a {type(value).__name__} value"


def report_duplicate_ids(items: list[Any], loc: Loc, problems: Problems, *, what: str) -> None:
    """Report each item whose `id` an earlier item of `items` already has."""
    first: dict[str, int] = {}
    for index, item in enumerate(items):
        ident = item.get("id") if isinstance(item, dict) else None
        if not isinstance(ident, str):
            continue
        if ident in first:
            line = problems.line_of((*loc, first[ident], "id"))
            problems.add((*loc, index, "id"), f"duplicate {what} '{ident}' (first at line {line})")
        else:
            first[ident] = index


def to_json(value: object, loc: Loc, problems: Problems) -> JsonValue:
    """`value` as JSON (timestamps as ISO 8601 strings); report what JSON cannot hold."""
    if isinstance(value, dict):
        result: dict[str, JsonValue] = {}
        for key, item in value.items():
            if isinstance(key, str):
                result[key] = to_json(item, (*loc, key), problems)
            else:
                problems.add(
                    (*loc, key), f"a JSON key must be a string, got {describe(key)}", at="key"
                )
        return result
    if isinstance(value, list):
        return [to_json(item, (*loc, index), problems) for index, item in enumerate(value)]
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        problems.add(loc, f"{describe(value)} is not a JSON number")
        return None
    if value is None or isinstance(value, str | int | float):
        return value
    problems.add(loc, f"{describe(value)} is not a JSON value")
    return None
