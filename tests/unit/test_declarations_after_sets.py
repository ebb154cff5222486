"""`after: {all: [...], within: ...}` and `after: {any: [...]}` in the declarations
file: several upstreams, and what `validate` refuses about them, at file:line."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, cast

import pytest

from triggers.cli._foresight import stop_text
from triggers.clock import from_ms
from triggers.declarations import parse_declarations
from triggers.errors import DeclarationError
from triggers.model import AfterSchedule, TriggerSpec, Upstream, describe_schedule
from triggers.scheduler.forecast import Stop, forecast
from triggers.scheduler.occurrences import compile_schedule

GOOD = """\
version: 1
flows:
  f: {steps: []}
triggers:
  - {id: a, flow: f, cron: "0 2 * * *"}
  - {id: b, flow: f, cron: "0 3 * * *"}
  - id: both
    flow: f
    after:
      all: [{trigger: a, outcome: completed}, {trigger: b}]
      within: 6h
  - id: either
    flow: f
    after: {any: [{trigger: a, outcome: failed}, {trigger: b, outcome: settled}]}
"""


def problems_of(text: str) -> list[dict[str, Any]]:
    with pytest.raises(DeclarationError) as caught:
        parse_declarations(text, source="t.yaml")
    return cast("list[dict[str, Any]]", caught.value.details["problems"])


def _file(*triggers: str) -> str:
    lines = "".join(f"  - {t}\n" for t in triggers)
    return f"version: 1\nflows:\n  f: {{steps: []}}\ntriggers:\n{lines}"


def test_all_and_any_are_read_and_round_trip() -> None:
    found = {t.id: t for t in parse_declarations(GOOD, source="t.yaml").triggers}

    assert found["both"].schedule == AfterSchedule(
        upstreams=(Upstream(trigger="a"), Upstream(trigger="b")),
        join="all",
        within=timedelta(hours=6),
    )
    assert found["either"].schedule == AfterSchedule(
        upstreams=(
            Upstream(trigger="a", outcome="failed"),
            Upstream(trigger="b", outcome="settled"),
        ),
        join="any",
    )
    assert describe_schedule(found["both"].schedule) == (
        "after all of a completed, b completed within 6h"
    )
    for trigger in found.values():
        assert TriggerSpec.from_json(trigger.to_json()) == trigger


def test_the_single_upstream_form_keeps_its_encoding() -> None:
    found = {t.id: t for t in parse_declarations(GOOD, source="t.yaml").triggers}
    single = AfterSchedule.of("a", "failed")
    spec = TriggerSpec.from_json(
        {
            **found["both"].to_json(),
            "schedule": {"kind": "after", "trigger": "a", "outcome": "failed"},
        }
    )
    assert spec.schedule == single
    assert spec.to_json()["schedule"] == {"kind": "after", "trigger": "a", "outcome": "failed"}


@pytest.mark.parametrize(
    ("triggers", "line", "key", "message"),
    [
        (
            [
                "{id: a, flow: f, every: 1h}",
                "{id: b, flow: f, after: {all: [{trigger: a}, {trigger: nope}], within: 1h}}",
            ],
            6,
            "triggers[b].after.all[1].trigger",
            "unknown upstream trigger 'nope'",
        ),
        (
            ["{id: a, flow: f, every: 1h}", "{id: b, flow: f, after: {any: [{trigger: b}]}}"],
            6,
            "triggers[b].after.any[0].trigger",
            "trigger 'b' cannot run after itself",
        ),
        (
            [
                "{id: x, flow: f, every: 1h}",
                "{id: a, flow: f, after: {any: [{trigger: x}, {trigger: b}]}}",
                "{id: b, flow: f, after: {all: [{trigger: x}, {trigger: a}], within: 1h}}",
            ],
            6,
            "triggers[a].after.any[1].trigger",
            "the dependencies form a cycle: a after b after a",
        ),
        (
            ["{id: a, flow: f, every: 1h}", "{id: b, flow: f, after: {all: [{trigger: a}]}}"],
            6,
            "triggers[b].after",
            "all needs within",
        ),
        (
            [
                "{id: a, flow: f, every: 1h}",
                "{id: b, flow: f, after: {all: [{trigger: a}], within: 0s}}",
            ],
            6,
            "triggers[b].after.within",
            "",
        ),
        (
            [
                "{id: a, flow: f, every: 1h}",
                "{id: b, flow: f, after: {any: [{trigger: a}], within: 1h}}",
            ],
            6,
            "triggers[b].after",
            "within goes with all",
        ),
        (
            [
                "{id: a, flow: f, every: 1h}",
                "{id: b, flow: f, after: {all: [{trigger: a}, {trigger: a}], within: 1h}}",
            ],
            6,
            "triggers[b].after",
            "all lists a more than once",
        ),
        (
            ["{id: a, flow: f, every: 1h}", "{id: b, flow: f, after: {any: []}}"],
            6,
            "triggers[b].after",
            "any needs at least one upstream",
        ),
        (
            [
                "{id: a, flow: f, every: 1h}",
                "{id: b, flow: f, after: {trigger: a, any: [{trigger: a}]}}",
            ],
            6,
            "triggers[b].after",
            "give one of trigger, all or any, not trigger and any",
        ),
        (
            [
                "{id: a, flow: f, every: 1h}",
                "{id: b, flow: f, after: {any: [{trigger: a}], outcome: failed}}",
            ],
            6,
            "triggers[b].after",
            "outcome goes with trigger",
        ),
        (
            ["{id: a, flow: f, every: 1h}", "{id: b, flow: f, after: {alll: [{trigger: a}]}}"],
            6,
            "triggers[b].after.alll",
            "unknown key 'alll' (did you mean 'all'?)",
        ),
        (
            [
                "{id: a, flow: f, every: 1h}",
                "{id: b, flow: f, after: {any: [{trigger: a, what: 1}]}}",
            ],
            6,
            "triggers[b].after.any[0].what",
            "unknown key 'what' (known keys: trigger, outcome)",
        ),
    ],
    ids=[
        "unknown",
        "itself",
        "cycle",
        "no-within",
        "zero-within",
        "within-any",
        "twice",
        "empty",
        "two-forms",
        "outcome",
        "misspelled",
        "unknown-in-list",
    ],
)
def test_validate_refuses_bad_upstream_lists(
    triggers: list[str], line: int, key: str, message: str
) -> None:
    [found] = problems_of(_file(*triggers))
    assert (found["file"], found["line"], found["key"]) == ("t.yaml", line, key)
    assert message in found["message"]


def test_next_says_when_all_and_any_fire() -> None:
    found = {t.id: t for t in parse_declarations(GOOD, source="t.yaml").triggers}
    said = {}
    for trigger_id in ("both", "either"):
        trigger = found[trigger_id]
        schedule = compile_schedule(trigger.schedule, trigger_id=trigger_id)
        forecast_ = forecast(trigger, schedule, after=from_ms(0), count=5)
        assert (forecast_.fires, forecast_.stop) == ([], Stop.UPSTREAM)
        said[trigger_id] = stop_text(forecast_, trigger, None)

    assert said == {
        "both": "it fires once a (completed) and b (completed) have each run within 6h",
        "either": "it fires after each run of a (failed) or b (settled)",
    }
