"""`pools` and `pool` in the declarations file."""

from __future__ import annotations

from typing import Any, cast

import pytest

from triggers.declarations import parse_declarations
from triggers.diffs import declaration_view, field_changes
from triggers.errors import DeclarationError
from triggers.model import PoolSpec, TriggerSpec

GOOD = """\
version: 1
pools:
  db-heavy: {slots: 2}
  light: {slots: 5}
flows:
  f: {steps: []}
defaults:
  pool: db-heavy
triggers:
  - {id: a, flow: f, every: 1h}
  - {id: b, flow: f, every: 1h, pool: light}
"""


def problems_of(text: str) -> list[dict[str, Any]]:
    with pytest.raises(DeclarationError) as caught:
        parse_declarations(text, source="t.yaml")
    return cast("list[dict[str, Any]]", caught.value.details["problems"])


def test_pools_resolve_into_triggers_and_defaults() -> None:
    found = {t.id: t for t in parse_declarations(GOOD, source="t.yaml").triggers}

    assert found["a"].pool == PoolSpec(name="db-heavy", slots=2)
    assert found["b"].pool == PoolSpec(name="light", slots=5)
    for trigger in found.values():
        assert TriggerSpec.from_json(trigger.to_json()) == trigger


def test_trigger_without_pool_keeps_its_stored_form() -> None:
    text = "version: 1\nflows: {f: {steps: []}}\ntriggers: [{id: a, flow: f, every: 1h}]\n"
    [trigger] = parse_declarations(text, source="t.yaml").triggers
    assert trigger.pool is None
    assert "pool" not in trigger.to_json()


@pytest.mark.parametrize(
    ("section", "key", "message"),
    [
        ("pools: {p: {slots: 0}}", "pools.p.slots", "must be at least 1"),
        ("pools: {p: {slots: two}}", "pools.p.slots", "integer"),
        ("pools: {p: {}}", "pools.p.slots", "missing required key 'slots'"),
        ("pools: {p: {slots: 2, size: 3}}", "pools.p.size", "unknown key"),
        ("pools: {P Q: {slots: 2}}", "pools.P Q", "pool name"),
    ],
    ids=["zero", "not-a-number", "missing", "unknown-key", "bad-name"],
)
def test_bad_pool_is_reported_at_its_key(section: str, key: str, message: str) -> None:
    text = f"version: 1\n{section}\nflows: {{f: {{steps: []}}}}\n"
    [found] = problems_of(text)
    assert found["line"] == 2
    assert found["key"] == key
    assert message in found["message"]


def test_unknown_pool_is_reported_with_a_suggestion() -> None:
    text = GOOD.replace("pool: light", "pool: lihgt")
    [found] = problems_of(text)
    assert (found["line"], found["key"]) == (11, "triggers[b].pool")
    assert "unknown pool 'lihgt' (did you mean 'light'?)" in found["message"]


def test_unknown_pool_in_defaults_is_reported_there() -> None:
    text = GOOD.replace("  pool: db-heavy", "  pool: nowhere")
    problems = problems_of(text)
    assert {(p["line"], p["key"]) for p in problems} == {(8, "defaults.pool")}
    assert "unknown pool 'nowhere'" in problems[0]["message"]


def test_pool_in_a_file_without_pools_says_so() -> None:
    text = "version: 1\nflows: {f: {steps: []}}\ntriggers: [{id: a, flow: f, every: 1h, pool: x}]\n"
    [found] = problems_of(text)
    assert found["key"] == "triggers[a].pool"
    assert "this file declares no pools" in found["message"]


def test_a_resized_pool_is_a_change_of_its_members_declaration() -> None:
    [before] = [t for t in parse_declarations(GOOD, source="t.yaml").triggers if t.id == "a"]
    edited = GOOD.replace("db-heavy: {slots: 2}", "db-heavy: {slots: 3}")
    [after] = [t for t in parse_declarations(edited, source="t.yaml").triggers if t.id == "a"]

    assert before.digest() != after.digest()
    [change] = field_changes(declaration_view(before), declaration_view(after))
    assert (change.key, change.old, change.new) == ("pool_slots", 2, 3)


FLOWS = """\
version: 1
pools:
  db-heavy: {slots: 2}
  light: {slots: 5}
flows:
  heavy: {steps: [], pool: db-heavy}
  plain: {steps: []}
defaults:
  pool: light
triggers:
  - {id: by-flow, flow: heavy, every: 1h}
  - {id: own, flow: heavy, every: 1h, pool: light}
  - {id: by-default, flow: plain, every: 1h}
"""


def test_a_flows_pool_comes_before_the_defaults_and_after_the_triggers_own() -> None:
    parsed = parse_declarations(FLOWS, source="t.yaml")
    found = {t.id: t.pool for t in parsed.triggers}

    assert found == {
        "by-flow": PoolSpec(name="db-heavy", slots=2),
        "own": PoolSpec(name="light", slots=5),
        "by-default": PoolSpec(name="light", slots=5),
    }
    # The pool is the scheduler's, not the runtime's: the flow's version ignores it.
    unpooled = parse_declarations(FLOWS.replace(", pool: db-heavy}", "}"), source="t.yaml")
    assert parsed.flows["heavy"].version == unpooled.flows["heavy"].version


def test_unknown_pool_of_a_flow_is_reported_at_the_flow() -> None:
    problems = problems_of(FLOWS.replace("pool: db-heavy}", "pool: db-hevy}"))
    assert [(p["line"], p["key"]) for p in problems] == [(6, "flows.heavy.pool")]
    assert "did you mean 'db-heavy'?" in problems[0]["message"]
