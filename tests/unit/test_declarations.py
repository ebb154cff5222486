"""The declarations file: every problem located by file, line, column and key."""

from __future__ import annotations

import textwrap
from typing import Any, cast

import pytest

from triggers.declarations import parse_declarations
from triggers.errors import DeclarationError

# Seven lines, so the first trigger of a case starts on line 8.
HEAD = """\
version: 1
flows:
  backup:
    steps:
      - id: dump
        run: [echo, hi]
triggers:
"""


def problems_of(text: str, *, source: str = "t.yaml") -> list[dict[str, Any]]:
    with pytest.raises(DeclarationError) as caught:
        parse_declarations(text, source=source)
    return cast("list[dict[str, Any]]", caught.value.details["problems"])


def trigger_doc(body: str) -> str:
    return HEAD + textwrap.indent(textwrap.dedent(body), "  ")


# (document, line, column, key, message fragment): each document has exactly one problem.
BAD_TRIGGERS = [
    pytest.param(
        """\
        - id: t
          flow: backup
          cron: "* * * * *"
          overlpa: skip
        """,
        11,
        5,
        "triggers[t].overlpa",
        "unknown key 'overlpa' (did you mean 'overlap'?)",
        id="unknown-key-with-suggestion",
    ),
    pytest.param(
        """\
        - id: t
          flow: backup
          cron: "* * * * *"
          frobnicate: 1
        """,
        11,
        5,
        "triggers[t].frobnicate",
        "known keys: ",
        id="unknown-key-lists-known-keys",
    ),
    pytest.param(
        """\
        - id: t
          flow: backup
          cron: "61 * * * *"
        """,
        10,
        11,
        "triggers[t].cron",
        "61 * * * *",
        id="invalid-cron",
    ),
    pytest.param(
        """\
        - id: t
          flow: backup
          cron: "0 0 30 2 *"
        """,
        10,
        11,
        "triggers[t].cron",
        "0 0 30 2 *",
        id="cron-that-never-fires",
    ),
    pytest.param(
        """\
        - id: t
          flow: backup
          cron: "* * * * *"
          timezone: Mars/Olympus
        """,
        11,
        15,
        "triggers[t].timezone",
        "unknown time zone 'Mars/Olympus'",
        id="unknown-zone",
    ),
    pytest.param(
        """\
        - id: t
          flow: backup
          cron: "* * * * *"
          timezone: Europe/Berln
        """,
        11,
        15,
        "triggers[t].timezone",
        "(did you mean 'Europe/Berlin'?)",
        id="misspelt-zone",
    ),
    pytest.param(
        """\
        - id: t
          flow: backup
          cron: "* * * * *"
          jitter: 5 minutes
        """,
        11,
        13,
        "triggers[t].jitter",
        "invalid duration '5 minutes'",
        id="bad-duration",
    ),
    pytest.param(
        """\
        - id: t
          flow: backup
          cron: "* * * * *"
          catchup: {policy: latest, window: 0s}
        """,
        11,
        39,
        "triggers[t].catchup.window",
        "must be positive",
        id="zero-window",
    ),
    pytest.param(
        """\
        - id: t
          flow: backup
          cron: "* * * * *"
          catchup:
            policy: lates
        """,
        12,
        15,
        "triggers[t].catchup.policy",
        "(did you mean 'latest'?)",
        id="bad-catchup-policy",
    ),
    pytest.param(
        """\
        - id: t
          flow: backup
          cron: "* * * * *"
          overlap: skipp
        """,
        11,
        14,
        "triggers[t].overlap",
        "expected one of skip, buffer, buffer_all, supersede, allow",
        id="bad-overlap",
    ),
    pytest.param(
        """\
        - id: t
          flow: bakup
          cron: "* * * * *"
        """,
        9,
        11,
        "triggers[t].flow",
        "unknown flow 'bakup' (did you mean 'backup'?)",
        id="unknown-flow",
    ),
    pytest.param(
        """\
        - id: t
          cron: "* * * * *"
        """,
        8,
        5,
        "triggers[t].flow",
        "missing required key 'flow'",
        id="missing-flow",
    ),
    pytest.param(
        """\
        - flow: backup
          cron: "* * * * *"
        """,
        8,
        5,
        "triggers[0].id",
        "missing required key 'id'",
        id="missing-id",
    ),
    pytest.param(
        """\
        - id: t
          flow: backup
        """,
        8,
        5,
        "triggers[t]",
        "no schedule: give one of cron, every, calendar, at",
        id="no-schedule",
    ),
    pytest.param(
        """\
        - id: t
          flow: backup
          cron: "* * * * *"
          every: 10s
        """,
        11,
        5,
        "triggers[t].every",
        "several schedules (cron, every)",
        id="two-schedules",
    ),
    pytest.param(
        """\
        - id: Nightly
          flow: backup
          cron: "* * * * *"
        """,
        8,
        9,
        "triggers[0].id",
        "invalid id 'Nightly'",
        id="upper-case-id",
    ),
    pytest.param(
        f"""\
        - id: {"a" * 129}
          flow: backup
          cron: "* * * * *"
        """,
        8,
        9,
        "triggers[0].id",
        "the limit is 128",
        id="long-id",
    ),
    pytest.param(
        """\
        - id: t
          flow: backup
          cron: "* * * * *"
        - id: t
          flow: backup
          every: 1m
        """,
        11,
        9,
        "triggers[1].id",
        "duplicate trigger id 't' (first at line 8)",
        id="duplicate-trigger-id",
    ),
    pytest.param(
        """\
        - id: t
          flow: backup
          cron: "* * * * *"
          start: 2026-06-01T00:00:00Z
          end: 2026-01-01T00:00:00Z
        """,
        12,
        10,
        "triggers[t].end",
        "is not after start",
        id="end-before-start",
    ),
    pytest.param(
        """\
        - id: t
          flow: backup
          at: next tuesday
        """,
        10,
        9,
        "triggers[t].at",
        "invalid time 'next tuesday'",
        id="bad-time",
    ),
    pytest.param(
        """\
        - id: t
          flow: backup
          every: 0.0001
        """,
        10,
        12,
        "triggers[t].every",
        "duration 0.0001 is not a whole number of milliseconds",
        id="every-float",
    ),
    pytest.param(
        """\
        - id: t
          flow: backup
          every: {interval: 1m, strat: 2026-01-01T00:00:00Z}
        """,
        10,
        27,
        "triggers[t].every.strat",
        "(did you mean 'start'?)",
        id="every-unknown-key",
    ),
    pytest.param(
        """\
        - id: t
          flow: backup
          calendar: {hour: 6}
        """,
        10,
        5,
        "triggers[t].calendar",
        "needs an interval",
        id="calendar-without-interval",
    ),
    pytest.param(
        """\
        - id: t
          flow: backup
          calendar: {days: 1, hour: 25}
        """,
        10,
        31,
        "triggers[t].calendar.hour",
        "must be at most 23, got 25",
        id="calendar-hour-out-of-range",
    ),
    pytest.param(
        """\
        - id: t
          flow: backup
          cron: "* * * * *"
          enabled: "yes"
        """,
        11,
        14,
        "triggers[t].enabled",
        "expected true or false, got 'yes'",
        id="string-for-bool",
    ),
    pytest.param(
        """\
        - id: t
          flow: backup
          cron: "* * * * *"
          overlap:
        """,
        11,
        5,
        "triggers[t].overlap",
        "needs a value",
        id="null-value",
    ),
    pytest.param(
        """\
        - id: t
          flow: backup
          cron: "* * * * *"
          input: {blob: !!binary aGk=}
        """,
        11,
        19,
        "triggers[t].input.blob",
        "is not a JSON value",
        id="input-not-json",
    ),
    pytest.param(
        """\
        - id: t
          flow: backup
          cron: "* * * * *"
          timezone: UTC
          timezone: UTC
        """,
        12,
        5,
        "triggers[t].timezone",
        "duplicate key 'timezone' (first at line 11)",
        id="duplicate-key",
    ),
    pytest.param(
        """\
        - just a string
        """,
        8,
        5,
        "triggers[0]",
        "expected a mapping, got 'just a string'",
        id="trigger-not-a-mapping",
    ),
]


@pytest.mark.parametrize(("body", "line", "column", "key", "fragment"), BAD_TRIGGERS)
def test_bad_trigger_is_reported_at_its_key(
    body: str, line: int, column: int, key: str, fragment: str
) -> None:
    [problem] = problems_of(trigger_doc(body))

    assert (problem["file"], problem["line"], problem["column"]) == ("t.yaml", line, column)
    assert problem["key"] == key
    assert fragment in problem["message"]


@pytest.mark.parametrize("key", ["max_active", "max_buffer", "max_runs"])
def test_limit_below_one_is_reported(key: str) -> None:
    body = f'- id: t\n  flow: backup\n  cron: "* * * * *"\n  {key}: 0\n'

    [problem] = problems_of(trigger_doc(body))

    assert (problem["line"], problem["column"], problem["key"]) == (
        11,
        5 + len(key) + 2,
        f"triggers[t].{key}",
    )
    assert problem["message"] == "must be at least 1, got 0"


def flow_doc(flow: str) -> str:
    header = "version: 1\nflows:\n  f:\n"
    return header + textwrap.indent(textwrap.dedent(flow), "    ")


# Flow `f` starts on line 3, its body on line 4.
BAD_FLOWS = [
    pytest.param(
        """\
        steps:
          - id: a
            run: [echo]
            sleep: 1s
        """,
        7,
        9,
        "flows.f.steps[a].sleep",
        "a step does one thing; this one has run and sleep",
        id="step-with-two-kinds",
    ),
    pytest.param(
        """\
        steps:
          - id: a
        """,
        5,
        9,
        "flows.f.steps[a]",
        "a step needs one of: run, http, python, sleep, wait_signal",
        id="step-without-kind",
    ),
    pytest.param(
        """\
        steps:
          - run: [echo]
        """,
        5,
        9,
        "flows.f.steps[0].id",
        "missing required key 'id'",
        id="step-without-id",
    ),
    pytest.param(
        """\
        steps:
          - id: a
            run: [echo]
            comand: x
        """,
        7,
        9,
        "flows.f.steps[a].comand",
        "unknown key 'comand'",
        id="step-unknown-key",
    ),
    pytest.param(
        """\
        steps:
          - id: a
            http: {url: "https://example.invalid/"}
            env: {A: b}
        """,
        7,
        9,
        "flows.f.steps[a].env",
        "'env' does not apply to an http step",
        id="env-on-http-step",
    ),
    pytest.param(
        """\
        steps:
          - id: a
            wait_signal: {name: go}
            timeout: 1h
        """,
        7,
        9,
        "flows.f.steps[a].timeout",
        "(use wait_signal.timeout)",
        id="timeout-on-wait-signal-step",
    ),
    pytest.param(
        """\
        steps:
          - id: a
            http: {url: "ftp://example.invalid/"}
        """,
        6,
        21,
        "flows.f.steps[a].http.url",
        "write an absolute http:// or https:// URL",
        id="http-bad-url",
    ),
    pytest.param(
        """\
        steps:
          - id: a
            http: {url: "https://example.invalid/", method: PSOT}
        """,
        6,
        57,
        "flows.f.steps[a].http.method",
        "(did you mean 'POST'?)",
        id="http-bad-method",
    ),
    pytest.param(
        """\
        steps:
          - id: a
            run: "echo 'unbalanced"
        """,
        6,
        14,
        "flows.f.steps[a].run",
        "cannot split the command",
        id="command-string-unbalanced-quote",
    ),
    pytest.param(
        """\
        steps:
          - id: a
            run: []
        """,
        6,
        9,
        "flows.f.steps[a].run",
        "needs at least the program",
        id="empty-command",
    ),
    pytest.param(
        """\
        steps:
          - id: a
            run: [echo]
            retry: {backoff: 10m}
        """,
        7,
        9,
        "flows.f.steps[a].retry",
        "max_backoff (5m) is shorter than backoff (10m)",
        id="retry-backoff-above-default-max",
    ),
    pytest.param(
        """\
        steps:
          - id: a
            run: [echo]
            retry: {max_attempts: 0}
        """,
        7,
        31,
        "flows.f.steps[a].retry.max_attempts",
        "must be at least 1",
        id="retry-zero-attempts",
    ),
    pytest.param(
        """\
        steps:
          - id: a
            run: [echo]
          - id: a
            sleep: 1s
        """,
        7,
        13,
        "flows.f.steps[1].id",
        "duplicate step id 'a' (first at line 5)",
        id="duplicate-step-id",
    ),
    pytest.param(
        """\
        python: app.jobs:run
        steps:
          - id: a
            run: [echo]
        """,
        4,
        5,
        "flows.f.python",
        "either 'steps' or 'python', not both",
        id="steps-and-python",
    ),
    pytest.param(
        """\
        python: app.jobs:run
        description: nothing
        """,
        5,
        5,
        "flows.f.description",
        "unknown key 'description'",
        id="flow-unknown-key",
    ),
    pytest.param(
        """\
        python: app.jobs.run
        """,
        4,
        13,
        "flows.f.python",
        "write 'package.module:function'",
        id="bad-python-reference",
    ),
]


@pytest.mark.parametrize(("flow", "line", "column", "key", "fragment"), BAD_FLOWS)
def test_bad_flow_is_reported_at_its_key(
    flow: str, line: int, column: int, key: str, fragment: str
) -> None:
    [problem] = problems_of(flow_doc(flow))

    assert (problem["line"], problem["column"], problem["key"]) == (line, column, key)
    assert fragment in problem["message"]


BAD_DOCUMENTS = [
    pytest.param("flows: {}\n", 1, 1, "version", "missing required key 'version'", id="no-version"),
    pytest.param("version: 2\n", 1, 10, "version", "unsupported version 2", id="version-2"),
    pytest.param("version: '1'\n", 1, 10, "version", "unsupported version '1'", id="version-str"),
    pytest.param(
        "version: 1\ntrigger: []\n", 2, 1, "trigger", "(did you mean 'triggers'?)", id="top-typo"
    ),
    pytest.param(
        "version: 1\ndefaults:\n  cron: '* * * * *'\n",
        3,
        3,
        "defaults.cron",
        "'cron' cannot be defaulted",
        id="defaulted-schedule",
    ),
    pytest.param(
        "version: 1\ndefaults:\n  tz: UTC\n",
        3,
        3,
        "defaults.tz",
        "(did you mean 'timezone'?)",
        id="defaults-synonym",
    ),
    pytest.param(
        "version: 1\nflows:\n  Backup:\n    python: a:b\n",
        3,
        3,
        "flows.Backup",
        "invalid flow name 'Backup'",
        id="bad-flow-name",
    ),
    pytest.param(
        "version: 1\ntriggers: {}\n", 2, 1, "triggers", "expected a list", id="triggers-map"
    ),
    pytest.param("- version: 1\n", 1, 1, "", "expected a mapping, got a list", id="root-list"),
    pytest.param("", 1, 1, "", "the file is empty", id="empty"),
    pytest.param(
        "version: 1\ntriggers:\n  - cron: */5 * * * *\n",
        3,
        15,
        "",
        "quote a value that starts with '*'",
        id="unquoted-cron",
    ),
    pytest.param("version: 1\nflows: [\n", 3, 1, "", "invalid YAML", id="syntax-error"),
    pytest.param("version: 1\n---\nversion: 1\n", 2, 1, "", "single document", id="two-documents"),
]


@pytest.mark.parametrize(("text", "line", "column", "key", "fragment"), BAD_DOCUMENTS)
def test_bad_document_is_reported(
    text: str, line: int, column: int, key: str, fragment: str
) -> None:
    [problem] = problems_of(text)

    assert (problem["line"], problem["column"], problem["key"]) == (line, column, key)
    assert fragment in problem["message"]


MANY_PROBLEMS = """\
version: 1
defaults:
  timezone: Europe/Berln
flows:
  backup:
    steps:
      - id: dump
        run: [pg_dump]
        timeout: 30x
triggers:
  - id: nightly
    flow: bakup
    cron: "61 * * * *"
    timezone: UTC
    overlpa: skip
  - id: nightly
    flow: backup
    every: 10s
    max_runs: 0
"""


def test_every_problem_of_a_document_is_reported_at_once() -> None:
    with pytest.raises(DeclarationError) as caught:
        parse_declarations(MANY_PROBLEMS, source="many.yaml")

    problems = caught.value.details["problems"]
    assert isinstance(problems, list)
    assert [(p["line"], p["column"], p["key"]) for p in problems] == [
        (3, 13, "defaults.timezone"),
        (9, 18, "flows.backup.steps[dump].timeout"),
        (12, 11, "triggers[0].flow"),
        (13, 11, "triggers[0].cron"),
        (15, 5, "triggers[0].overlpa"),
        (16, 9, "triggers[1].id"),
        (19, 15, "triggers[1].max_runs"),
    ]
    lines = caught.value.message.splitlines()
    assert len(lines) == len(problems)
    assert lines[0] == (
        "many.yaml:3:13: defaults.timezone: unknown time zone 'Europe/Berln' "
        "(did you mean 'Europe/Berlin'?)"
    )
    assert caught.value.code == "TRG-111"
    assert int(caught.value.exit_code) == 2


def test_invalid_schedule_is_reported_next_to_other_problems_of_its_trigger() -> None:
    body = '- id: t\n  flow: backup\n  cron: "61 * * * *"\n  jitter: soon\n'

    problems = problems_of(trigger_doc(body))

    assert [p["key"] for p in problems] == ["triggers[t].cron", "triggers[t].jitter"]


def test_a_valid_schedule_with_an_invalid_zone_reports_only_the_zone() -> None:
    body = '- id: t\n  flow: backup\n  cron: "30 2 * * *"\n  timezone: Nowhere/Land\n'

    problems = problems_of(trigger_doc(body))

    assert [p["key"] for p in problems] == ["triggers[t].timezone"]


def test_an_invalid_cron_is_reported_beside_an_invalid_zone_of_its_trigger() -> None:
    body = '- id: t\n  flow: backup\n  cron: "61 2 * * *"\n  timezone: Nowhere/Land\n'

    problems = problems_of(trigger_doc(body))

    assert [p["key"] for p in problems] == ["triggers[t].cron", "triggers[t].timezone"]
    assert problems[0]["message"].endswith("minute 61 is out of range 0-59")


def test_invalid_flow_is_not_also_an_unknown_flow() -> None:
    text = "version: 1\nflows:\n  f: {steps: 3}\ntriggers:\n  - {id: t, flow: f, every: 1m}\n"

    problems = problems_of(text)

    assert [p["key"] for p in problems] == ["flows.f.steps"]


def test_flow_without_steps_is_a_flow_that_only_records_the_fire() -> None:
    declarations = parse_declarations(
        "version: 1\nflows:\n  noop:\n    steps: []\ntriggers: []\n", source="t.yaml"
    )
    assert declarations.flows["noop"].definition == {"kind": "steps", "steps": []}


def test_python_flow_version_label_and_retry_limits_reach_the_definition() -> None:
    declarations = parse_declarations(
        textwrap.dedent(
            """\
            version: 1
            flows:
              report: {python: "app.jobs:build", version: "2"}
              cmd:
                steps:
                  - id: a
                    run: ["false"]
                    retry: {non_retryable_exit_codes: [2, 1, 2], deadline: 10m}
            triggers: []
            """
        ),
        source="t.yaml",
    )
    assert declarations.flows["report"].definition == {
        "kind": "python",
        "ref": "app.jobs:build",
        "version": "2",
    }
    [step] = declarations.flows["cmd"].definition["steps"]
    assert step["retry"]["non_retryable_exit_codes"] == [1, 2]
    assert step["retry"]["deadline_s"] == 600.0


def test_version_label_on_a_steps_flow_is_refused() -> None:
    text = "version: 1\nflows:\n  f:\n    version: '2'\n    steps: []\ntriggers: []\n"
    [problem] = problems_of(text)
    assert (problem["key"], problem["line"]) == ("flows.f.version", 4)


GRAPH = """\
version: 1
flows:
  backup:
    max_parallel: 2
    steps:
      - {id: dump-a, run: [pg_dump, a], needs: []}
      - {id: dump-b, run: [pg_dump, b], needs: []}
      - {id: upload, run: [upload], needs: [dump-a, dump-b]}
triggers: []
"""


def test_needs_and_max_parallel_reach_the_definition_only_when_given() -> None:
    flows = parse_declarations(GRAPH, source="t.yaml").flows
    plain = parse_declarations(
        "version: 1\nflows:\n  f:\n    steps:\n      - {id: a, run: [x]}\ntriggers: []\n",
        source="t.yaml",
    ).flows

    definition = flows["backup"].definition
    assert definition["max_parallel"] == 2
    assert [step.get("needs") for step in definition["steps"]] == [[], [], ["dump-a", "dump-b"]]
    # A flow without needs is the definition (and so the version) it always was.
    assert plain["f"].definition == {
        "kind": "steps",
        "steps": [
            {
                "id": "a",
                "type": "command",
                "argv": ["x"],
                "env": {},
                "cwd": None,
                "timeout_s": None,
                "retry": None,
                "idempotent": False,
            }
        ],
    }


@pytest.mark.parametrize(
    ("steps", "key", "message"),
    [
        (
            "      - {id: a, run: [x], needs: [nope]}\n",
            "flows.f.steps[a].needs[0]",
            "no step 'nope' in this flow",
        ),
        (
            "      - {id: a, run: [x], needs: [a]}\n",
            "flows.f.steps[a].needs[0]",
            "a step cannot need itself",
        ),
        (
            "      - {id: a, run: [x], needs: [b]}\n      - {id: b, run: [x], needs: [a]}\n",
            "flows.f.steps[a].needs",
            "the needs form a cycle: a -> b -> a",
        ),
    ],
    ids=["unknown", "itself", "cycle"],
)
def test_needs_that_cannot_be_met_are_reported_at_their_key(
    steps: str, key: str, message: str
) -> None:
    text = f"version: 1\nflows:\n  f:\n    steps:\n{steps}triggers: []\n"

    [problem] = problems_of(text)

    assert (problem["key"], problem["message"], problem["line"]) == (key, message, 5)
