"""`after:` in the declarations file: a dependent trigger's upstream and outcome."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, cast

import pytest

from triggers.cli._foresight import stop_text
from triggers.clock import from_ms
from triggers.declarations import parse_declarations
from triggers.diffs import declaration_view
from triggers.errors import DeclarationError
from triggers.model import AfterSchedule, Requirement, TriggerSpec, describe_schedule
from triggers.scheduler.forecast import Stop, forecast
from triggers.scheduler.occurrences import compile_schedule, next_occurrences

SIX_HOURS = timedelta(hours=6)
GOOD = """\
version: 1
flows:
  f: {steps: []}
triggers:
  - {id: nightly-import, flow: f, cron: "0 2 * * *"}
  - {id: report, flow: f, after: {trigger: nightly-import, outcome: completed}}
  - id: cleanup
    flow: f
    after: {trigger: report, outcome: settled}
  - {id: alarm, flow: f, after: {trigger: nightly-import, outcome: failed}}
  - {id: plain, flow: f, after: {trigger: nightly-import}}
"""


def problems_of(text: str) -> list[dict[str, Any]]:
    with pytest.raises(DeclarationError) as caught:
        parse_declarations(text, source="t.yaml")
    return cast("list[dict[str, Any]]", caught.value.details["problems"])


def test_after_is_a_schedule_kind_that_round_trips() -> None:
    found = {t.id: t for t in parse_declarations(GOOD, source="t.yaml").triggers}

    assert found["report"].schedule == AfterSchedule.of("nightly-import", "completed")
    assert found["cleanup"].schedule == AfterSchedule.of("report", "settled")
    assert found["alarm"].schedule == AfterSchedule.of("nightly-import", "failed")
    assert found["plain"].schedule == AfterSchedule.of("nightly-import", "completed")
    assert describe_schedule(found["cleanup"].schedule) == "after report settled"
    for trigger in found.values():
        assert TriggerSpec.from_json(trigger.to_json()) == trigger


def test_a_dependent_trigger_owes_no_instant() -> None:
    schedule = compile_schedule(AfterSchedule.of("a"), trigger_id="b")
    assert next_occurrences(schedule, after=from_ms(0), count=3) == []


@pytest.mark.parametrize(
    ("outcome", "fires_on"),
    [
        ("completed", {"completed"}),
        ("failed", {"failed"}),
        ("settled", {"completed", "failed", "cancelled"}),
    ],
)
def test_which_upstream_outcomes_fire(outcome: str, fires_on: set[str]) -> None:
    schedule = AfterSchedule.of("a", outcome)
    every = {"completed", "failed", "cancelled", "skipped", "missed", "launched", "superseded"}
    assert {o for o in every if schedule.matches("a", o)} == fires_on


def _file(*triggers: str) -> str:
    lines = "".join(f"  - {t}\n" for t in triggers)
    return f"version: 1\nflows:\n  f: {{steps: []}}\ntriggers:\n{lines}"


@pytest.mark.parametrize(
    ("triggers", "line", "key", "message"),
    [
        (
            ["{id: a, flow: f, every: 1h}", "{id: b, flow: f, after: {trigger: imprt}}"],
            6,
            "triggers[b].after.trigger",
            "unknown upstream trigger 'imprt' (declared: a)",
        ),
        (
            ["{id: import, flow: f, every: 1h}", "{id: b, flow: f, after: {trigger: imprt}}"],
            6,
            "triggers[b].after.trigger",
            "unknown upstream trigger 'imprt' (did you mean 'import'?)",
        ),
        (
            ["{id: a, flow: f, every: 1h, after: {trigger: b}}", "{id: b, flow: f, every: 1h}"],
            5,
            "triggers[a].after",
            "after replaces a schedule: give either every or after, not both",
        ),
        (
            ["{id: a, flow: f, after: {trigger: a}}"],
            5,
            "triggers[a].after.trigger",
            "trigger 'a' cannot run after itself",
        ),
        (
            ["{id: a, flow: f, after: {trigger: b}}", "{id: b, flow: f, after: {trigger: a}}"],
            5,
            "triggers[a].after.trigger",
            "the dependencies form a cycle: a after b after a",
        ),
        (
            [
                "{id: x, flow: f, every: 1h}",
                "{id: a, flow: f, after: {trigger: c}}",
                "{id: b, flow: f, after: {trigger: a}}",
                "{id: c, flow: f, after: {trigger: b}}",
            ],
            6,
            "triggers[a].after.trigger",
            "the dependencies form a cycle: a after c after b after a",
        ),
        (
            ["{id: a, flow: f, every: 1h}", "{id: b, flow: f, after: {trigger: a, outcome: done}}"],
            6,
            "triggers[b].after.outcome",
            "completed",
        ),
        (
            ["{id: a, flow: f, every: 1h}", "{id: b, flow: f, after: {outcome: failed}}"],
            6,
            "triggers[b].after",
            "needs its upstream: trigger, or a list under all or any",
        ),
    ],
    ids=[
        "unknown",
        "unknown-suggested",
        "both",
        "itself",
        "cycle",
        "long-cycle",
        "outcome",
        "no-upstream",
    ],
)
def test_validate_refuses_bad_dependencies(
    triggers: list[str], line: int, key: str, message: str
) -> None:
    [found] = problems_of(_file(*triggers))
    assert (found["file"], found["line"], found["key"]) == ("t.yaml", line, key)
    assert message in found["message"]


def test_an_upstream_invalid_for_another_reason_still_counts_as_declared() -> None:
    problems = problems_of(
        _file("{id: a, flow: nope, every: 1h}", "{id: b, flow: f, after: {trigger: a}}")
    )
    assert [p["key"] for p in problems] == ["triggers[a].flow"]


def test_next_says_a_dependent_trigger_fires_after_its_upstream() -> None:
    found = {t.id: t for t in parse_declarations(GOOD, source="t.yaml").triggers}
    report = found["report"]
    schedule = compile_schedule(report.schedule, trigger_id="report")

    forecast_ = forecast(report, schedule, after=from_ms(0), count=5)

    assert (forecast_.fires, forecast_.stop) == ([], Stop.UPSTREAM)
    assert (
        stop_text(forecast_, report, None) == "it fires after each completed run of nightly-import"
    )


def test_requires_is_kept_in_the_declaration_and_refused_when_unknown() -> None:
    text = _file(
        "{id: import, flow: f, every: 1h}",
        "{id: report, flow: f, cron: '0 9 * * *', requires: {trigger: import, since: 6h}}",
    )
    [_, report] = parse_declarations(text, source="t.yaml").triggers
    assert report.requires == Requirement(trigger="import", outcome="completed", since=SIX_HOURS)
    assert TriggerSpec.from_json(report.to_json()) == report
    assert declaration_view(report)["requires"] == "import completed within 6h"
    assert "requires" not in declaration_view(parse_declarations(GOOD, source="t.yaml").triggers[0])
    assert "requires" not in parse_declarations(text, source="t.yaml").triggers[0].to_json()

    [unknown] = problems_of(
        _file("{id: b, flow: f, every: 1h, requires: {trigger: imp, since: 1h}}")
    )
    assert (unknown["line"], unknown["key"]) == (5, "triggers[b].requires.trigger")
    assert unknown["message"] == "unknown required trigger 'imp'"
    [itself] = problems_of(_file("{id: b, flow: f, every: 1h, requires: {trigger: b, since: 1h}}"))
    assert itself["message"] == "trigger 'b' cannot require itself"
    [no_since] = problems_of(
        _file("{id: a, flow: f, every: 1h}", "{id: b, flow: f, every: 1h, requires: {trigger: a}}")
    )
    assert no_since["key"] == "triggers[b].requires.since"
