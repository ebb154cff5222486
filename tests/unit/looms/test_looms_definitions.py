"""Flow definitions: the daemon's JSON shapes, parsed or refused with every problem listed."""

from __future__ import annotations

from typing import Any

import pytest

from looms_runtime._canonical import definition_version
from looms_runtime._history.definitions import (
    CommandStep,
    HttpStep,
    PythonFlow,
    PythonStep,
    RetryPolicy,
    SleepStep,
    StepsFlow,
    WaitSignalStep,
)
from looms_runtime._history.parsing import parse_flow
from looms_runtime.errors import InvalidFlowError

FULL: dict[str, Any] = {
    "kind": "steps",
    "steps": [
        {
            "id": "dump",
            "type": "command",
            "argv": ["pg_dump", "-Fc"],
            "env": {"PGHOST": "db"},
            "cwd": "/var/backups",
            "timeout_s": 1800.0,
            "retry": {"max_attempts": 3, "backoff_s": 10.0, "max_backoff_s": 300.0},
            "idempotent": False,
        },
        {
            "id": "ping",
            "type": "http",
            "url": "https://example.invalid/ping",
            "method": "POST",
            "headers": {"X-A": "1"},
            "body": {"ok": True},
            "expect_status": [200, 204],
            "timeout_s": None,
            "retry": None,
            "idempotent": True,
        },
        {
            "id": "py",
            "type": "python",
            "ref": "pkg.mod:fn",
            "timeout_s": None,
            "retry": None,
            "idempotent": True,
        },
        {"id": "nap", "type": "sleep", "duration_s": 1.5},
        {"id": "gate", "type": "wait_signal", "signal": "go", "timeout_s": 60},
    ],
}


def test_a_full_steps_flow_parses_into_its_steps() -> None:
    flow = parse_flow(FULL)

    assert isinstance(flow, StepsFlow)
    dump, ping, py, nap, gate = flow.steps
    assert dump == CommandStep(
        id="dump",
        argv=("pg_dump", "-Fc"),
        env={"PGHOST": "db"},
        cwd="/var/backups",
        timeout_s=1800.0,
        retry=RetryPolicy(max_attempts=3, backoff_s=10.0, max_backoff_s=300.0),
        idempotent=False,
    )
    assert isinstance(ping, HttpStep)
    assert ping.expect_status == (200, 204)
    assert py == PythonStep(id="py", ref="pkg.mod:fn", idempotent=True)
    assert nap == SleepStep(id="nap", duration_s=1.5)
    assert gate == WaitSignalStep(id="gate", signal="go", timeout_s=60.0)


def test_a_python_flow_keeps_its_reference() -> None:
    assert parse_flow({"kind": "python", "ref": "myapp.jobs:build_report"}) == PythonFlow(
        ref="myapp.jobs:build_report"
    )


@pytest.mark.parametrize(
    ("step", "problem"),
    [
        ({"id": "a", "type": "command", "argv": []}, "$.steps[0].argv"),
        ({"id": "a", "type": "command", "argv": ["x"], "timeout_s": 0}, "$.steps[0].timeout_s"),
        (
            {"id": "a", "type": "command", "argv": ["x"], "idempotent": "yes"},
            "$.steps[0].idempotent",
        ),
        (
            {"id": "a", "type": "command", "argv": ["x"], "retry": {"max_attempts": 0}},
            "max_attempts",
        ),
        (
            {"id": "a", "type": "command", "argv": ["x"], "shell": True},
            "$.steps[0].shell: unknown key",
        ),
        ({"id": "a", "type": "http", "url": "ftp://x"}, "$.steps[0].url"),
        ({"id": "a", "type": "python", "ref": "no-colon"}, "$.steps[0].ref"),
        ({"id": "a", "type": "sleep", "duration_s": -1}, "$.steps[0].duration_s"),
        ({"id": "a", "type": "teleport"}, "$.steps[0].type"),
    ],
    ids=["argv", "timeout", "idempotent", "attempts", "unknown-key", "url", "ref", "sleep", "type"],
)
def test_an_invalid_step_is_refused_naming_the_path(step: dict[str, Any], problem: str) -> None:
    with pytest.raises(InvalidFlowError) as caught:
        parse_flow({"kind": "steps", "steps": [step]})

    assert any(problem in p for p in caught.value.details["problems"])  # type: ignore[attr-defined]


def test_every_problem_is_reported_at_once() -> None:
    definition = {
        "kind": "steps",
        "steps": [{"id": "a", "type": "sleep", "duration_s": 1}, {"id": "a", "type": "sleep"}],
    }

    with pytest.raises(InvalidFlowError) as caught:
        parse_flow(definition)

    assert caught.value.details["problems"] == [
        "$.steps[1].duration_s: must be a number",
        "$.steps[1].id: duplicate step id 'a'",
    ]


def test_the_version_is_the_canonical_digest_whatever_the_key_order() -> None:
    reordered = {"steps": FULL["steps"], "kind": "steps"}

    assert definition_version(reordered) == definition_version(FULL)
    assert len(definition_version(FULL)) == 16


def test_backoff_doubles_up_to_its_cap() -> None:
    policy = RetryPolicy(max_attempts=5, backoff_s=1.5, max_backoff_s=5.0)

    assert [policy.delay_ms(n) for n in (1, 2, 3, 4)] == [1500, 3000, 5000, 5000]
