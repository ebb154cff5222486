"""Calendars: which occurrences of a trigger its `exclude` and `only` calendars leave out.

Pure apart from the `holidays` package's tables, which are read once per country,
subdivision, language and year and kept. A day is the occurrence's local date in the
calendar's zone (by default the trigger's), so an exclusion follows the wall calendar
across daylight-saving changes; a `cron` rule matches the occurrence's wall time at
its own resolution (the minute for 5 fields, the second for 6).

The scheduler asks `TriggerCalendars.exclusion` while it plans an occurrence and hands
the answer to the claim, which records the occurrence `skipped` with reason `calendar`
(`store/_decide.py`): the decision stays with the claim, the computation with the
schedule, fenced together by the trigger's revision.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

from triggers.errors import ScheduleError
from triggers.model import CalendarSpec, HolidayRule, TriggerSpec
from triggers.scheduler._zone_offsets import load_zone

if TYPE_CHECKING:
    from triggers.scheduler._cron import CronRule

__all__ = [
    "CompiledCalendar",
    "TriggerCalendars",
    "check_calendar",
    "compile_calendars",
    "holiday_names",
]

_WALL_EPOCH = datetime(1970, 1, 1)  # noqa: DTZ001 (wall-clock seconds count from a naive instant)
_DAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class CompiledCalendar:
    """One calendar, ready to say whether it holds an instant."""

    spec: CalendarSpec
    zone: Any  # a ZoneInfo
    rules: tuple[CronRule, ...]

    def day_name(self, at: datetime) -> str | None:
        """Why this calendar holds `at` (the day's name), or None when it does not."""
        local = at.astimezone(self.zone)
        day = local.date()
        spec = self.spec
        if spec.holidays is not None:
            name = holiday_names(spec.holidays, day.year).get(day)
            if name is not None:
                return name
        for first, last in spec.dates:
            if first <= day <= last:
                return day.isoformat() if first == last else f"{first}..{last}"
        for span in spec.yearly:
            if _in_yearly(day, span):
                return f"{span[0]:02d}-{span[1]:02d}" + (
                    "" if span[:2] == span[2:] else f"..{span[2]:02d}-{span[3]:02d}"
                )
        if day.weekday() in spec.weekdays:
            return _DAY_NAMES[day.weekday()]
        if self.rules:
            wall = int((local.replace(tzinfo=None) - _WALL_EPOCH).total_seconds())
            for rule in self.rules:
                probe = wall if _has_seconds(rule) else wall - wall % 60
                if rule.next(probe) == probe:
                    return f"cron {rule.expression}"
        return None


def _has_seconds(rule: CronRule) -> bool:
    return len(rule.expression.split()) == 6  # noqa: PLR2004 (a leading seconds field)


def _in_yearly(day: date, span: tuple[int, int, int, int]) -> bool:
    key, first, last = (day.month, day.day), span[:2], span[2:]
    if first <= last:
        return first <= key <= last
    return key >= first or key <= last  # wraps the new year: 12-24..01-06


@dataclass(frozen=True, slots=True)
class TriggerCalendars:
    """A trigger's `exclude` and `only` calendars."""

    exclude: tuple[CompiledCalendar, ...]
    only: tuple[CompiledCalendar, ...]

    def exclusion(self, at: datetime) -> str | None:
        """What leaves the occurrence `at` out, as the ledger names it (`de-by
        (Allerheiligen)`, `only workdays (not Saturday 2026-12-05)`), or None."""
        for calendar in self.exclude:
            name = calendar.day_name(at)
            if name is not None:
                return f"{calendar.spec.name} ({name})"
        if self.only and all(calendar.day_name(at) is None for calendar in self.only):
            names = ", ".join(calendar.spec.name for calendar in self.only)
            local = at.astimezone(self.only[0].zone)
            day = f"{_DAY_NAMES[local.weekday()]} {local.date().isoformat()}"
            return f"only {names} (not {day})"
        return None

    def excluded(self, occurrences: Sequence[datetime]) -> list[str | None]:
        """`exclusion` of each occurrence."""
        return [self.exclusion(at) for at in occurrences]


def compile_calendars(spec: TriggerSpec) -> TriggerCalendars | None:
    """The trigger's calendars, or None when it names none (nothing to ask)."""
    if not spec.exclude and not spec.only:
        return None
    return TriggerCalendars(
        exclude=tuple(_compile(calendar, spec.timezone) for calendar in spec.exclude),
        only=tuple(_compile(calendar, spec.timezone) for calendar in spec.only),
    )


@functools.lru_cache(maxsize=256)
def _compile(calendar: CalendarSpec, timezone: str) -> CompiledCalendar:
    from triggers.scheduler._cron import parse_cron  # noqa: PLC0415 (croniter: cron rules only)

    zone = load_zone(calendar.timezone or timezone)
    rules = tuple(
        parse_cron(expression, trigger_id=calendar.name, check_fires=False)
        for expression in calendar.cron
    )
    return CompiledCalendar(spec=calendar, zone=zone, rules=rules)


def check_calendar(calendar: CalendarSpec) -> list[tuple[tuple[str | int, ...], str]]:
    """The calendar's problems as (key, message): an unknown country, subdivision,
    language or category, an unknown zone, a cron expression that does not parse."""
    problems: list[tuple[tuple[str | int, ...], str]] = []
    if calendar.holidays is not None:
        problems += [(("holidays",), message) for message in _check_holidays(calendar.holidays)]
    if calendar.timezone is not None:
        try:
            load_zone(calendar.timezone)
        except ScheduleError as exc:
            problems.append((("timezone",), exc.message))
    from triggers.scheduler._cron import parse_cron  # noqa: PLC0415 (croniter: cron rules only)

    for index, expression in enumerate(calendar.cron):
        try:
            parse_cron(expression, trigger_id=calendar.name)
        except ScheduleError as exc:
            problems.append((("cron", index), exc.message))
    return problems


def _check_holidays(rule: HolidayRule) -> list[str]:
    import holidays  # noqa: PLC0415 (half a second to import: only for holiday calendars)

    countries = holidays.list_supported_countries()
    if rule.country not in countries:
        return [f"unknown country {rule.country!r} (ISO 3166-1 alpha-2, such as DE or US)"]
    problems = []
    subdivisions = countries[rule.country]
    if rule.subdiv is not None and rule.subdiv not in subdivisions:
        shown = ", ".join(subdivisions[:40]) or "none"
        problems.append(f"unknown subdivision {rule.subdiv!r} of {rule.country} (known: {shown})")
        return problems
    entity = holidays.country_holidays(rule.country, subdiv=rule.subdiv)
    languages = entity.supported_languages
    if rule.language is not None and languages and rule.language not in languages:
        problems.append(
            f"unsupported language {rule.language!r} for {rule.country} "
            f"(supported: {', '.join(languages)})"
        )
    categories = entity.supported_categories
    unknown = [category for category in rule.categories if category not in categories]
    if unknown:
        problems.append(
            f"unknown holiday categor{'y' if len(unknown) == 1 else 'ies'} "
            f"{', '.join(unknown)} for {rule.country} (supported: {', '.join(categories)})"
        )
    return problems


def holiday_names(rule: HolidayRule, year: int) -> dict[date, str]:
    """The rule's holidays of `year`, by date, named in its language (the country's own
    by default, never the host's locale, so every daemon names a day alike)."""
    with _LOCK:
        return _holidays_of(rule, year)


@functools.lru_cache(maxsize=1024)
def _holidays_of(rule: HolidayRule, year: int) -> dict[date, str]:
    import holidays  # noqa: PLC0415 (see _check_holidays)

    entity_class = type(holidays.country_holidays(rule.country, subdiv=rule.subdiv))
    language = rule.language or getattr(entity_class, "default_language", None)
    options: dict[str, Any] = {"subdiv": rule.subdiv, "years": year, "language": language}
    if rule.categories:
        options["categories"] = rule.categories
    table = holidays.country_holidays(rule.country, **options)
    return {day: str(name) for day, name in sorted(table.items()) if day.year == year}
