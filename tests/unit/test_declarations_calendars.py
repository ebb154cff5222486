"""`calendars`, `exclude` and `only` in the declarations file."""

from __future__ import annotations

from datetime import date
from typing import Any, cast

import pytest

from triggers.declarations import parse_declarations
from triggers.errors import DeclarationError
from triggers.model import CalendarSpec, HolidayRule, TriggerSpec

GOOD = """\
version: 1
calendars:
  de-by: {holidays: {country: DE, subdiv: BY}}
  shutdown:
    dates: ["2026-12-24..2026-12-31", 2027-01-02]
    yearly: ["12-31..01-02"]
    weekdays: [sat, Sunday]
  nights: {cron: ["*  0-5 * * *"], timezone: Europe/Berlin}
flows:
  f: {steps: []}
defaults:
  exclude: [de-by]
triggers:
  - {id: a, flow: f, every: 1h}
  - {id: b, flow: f, every: 1h, exclude: [shutdown, nights]}
  - {id: c, flow: f, every: 1h, exclude: [], only: [shutdown]}
"""


def problems_of(text: str) -> list[dict[str, Any]]:
    with pytest.raises(DeclarationError) as caught:
        parse_declarations(text, source="t.yaml")
    return cast("list[dict[str, Any]]", caught.value.details["problems"])


def test_calendars_resolve_into_triggers_and_defaults() -> None:
    found = {t.id: t for t in parse_declarations(GOOD, source="t.yaml").triggers}

    de_by = CalendarSpec(name="de-by", holidays=HolidayRule(country="DE", subdiv="BY"))
    shutdown = CalendarSpec(
        name="shutdown",
        dates=((date(2026, 12, 24), date(2026, 12, 31)), (date(2027, 1, 2), date(2027, 1, 2))),
        yearly=((12, 31, 1, 2),),
        weekdays=(5, 6),
    )
    assert found["a"].exclude == (de_by,)
    assert [c.name for c in found["b"].exclude] == ["shutdown", "nights"]
    assert found["b"].exclude[0] == shutdown
    assert found["b"].exclude[1].cron == ("* 0-5 * * *",)
    assert (found["c"].exclude, found["c"].only) == ((), (shutdown,))
    for trigger in found.values():
        assert TriggerSpec.from_json(trigger.to_json()) == trigger


def test_trigger_without_calendars_keeps_its_stored_form() -> None:
    text = "version: 1\nflows: {f: {steps: []}}\ntriggers: [{id: a, flow: f, every: 1h}]\n"
    [trigger] = parse_declarations(text, source="t.yaml").triggers
    assert "exclude" not in trigger.to_json() and "only" not in trigger.to_json()


BAD = [
    pytest.param(
        "calendars: {x: {holidays: {country: DE, subdiv: XX}}}",
        "calendars.x.holidays",
        "unknown subdivision 'XX' of DE",
        id="subdivision",
    ),
    pytest.param(
        "calendars: {x: {holidays: {country: ZZ}}}",
        "calendars.x.holidays",
        "unknown country 'ZZ'",
        id="country",
    ),
    pytest.param(
        "calendars: {x: {holidays: {country: DE, language: xx}}}",
        "calendars.x.holidays",
        "unsupported language 'xx'",
        id="language",
    ),
    pytest.param("calendars: {x: {}}", "calendars.x", "needs at least one of", id="empty"),
    pytest.param(
        'calendars: {x: {dates: ["2026-12-31..2026-12-01"]}}',
        "calendars.x.dates[0]",
        "ends before it starts",
        id="backwards-range",
    ),
    pytest.param(
        'calendars: {x: {yearly: ["02-30"]}}',
        "calendars.x.yearly[0]",
        "no such day of the year",
        id="yearly",
    ),
    pytest.param(
        "calendars: {x: {weekdays: [funday]}}",
        "calendars.x.weekdays[0]",
        "expected a weekday",
        id="weekday",
    ),
    pytest.param(
        'calendars: {x: {cron: ["99 * * * *"]}}',
        "calendars.x.cron[0]",
        "invalid cron expression",
        id="cron",
    ),
]


@pytest.mark.parametrize(("section", "key", "message"), BAD)
def test_bad_calendar_is_reported_at_its_key(section: str, key: str, message: str) -> None:
    text = f"version: 1\n{section}\nflows: {{f: {{steps: []}}}}\n"
    [found] = problems_of(text)
    assert found["line"] == 2
    assert found["key"] == key
    assert message in found["message"]


def test_unknown_calendar_is_reported_with_a_suggestion() -> None:
    text = GOOD.replace("exclude: [shutdown, nights]", "exclude: [shutdwn, nights]")
    [found] = problems_of(text)
    assert (found["line"], found["key"]) == (15, "triggers[b].exclude[0]")
    assert "unknown calendar 'shutdwn' (did you mean 'shutdown'?)" in found["message"]


@pytest.mark.parametrize(
    ("trigger", "message"),
    [
        ("{id: d, flow: f, every: 1h, exclude: [shutdown], only: [shutdown]}", "never fire"),
        ("{id: d, flow: f, every: 1h, exclude: [all]}", "holds every weekday"),
    ],
    ids=["excluded-and-only", "every-weekday"],
)
def test_trigger_that_could_never_fire_is_refused(trigger: str, message: str) -> None:
    text = GOOD.replace(
        "  nights:", "  all: {weekdays: [mon, tue, wed, thu, fri, sat, sun]}\n  nights:"
    )
    [found] = problems_of(text + f"  - {trigger}\n")
    assert found["key"].startswith("triggers[d]")
    assert message in found["message"]
