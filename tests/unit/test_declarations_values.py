"""The declarations file: what a valid file becomes, and the duration syntax."""

from __future__ import annotations

import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from triggers.declarations import (
    Declarations,
    load_declarations,
    parse_declarations,
    parse_duration,
)
from triggers.errors import DeclarationError
from triggers.model import (
    AtSchedule,
    CalendarSchedule,
    Catchup,
    CatchupPolicy,
    CronSchedule,
    EverySchedule,
    FlowSpec,
    Overlap,
    TriggerSpec,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "triggers.yaml"

FULL = """\
version: 1
defaults:
  timezone: Europe/Berlin
  overlap: buffer
  catchup: {policy: all, window: 2h}
  max_runs: 5
flows:
  backup:
    steps:
      - id: dump
        run: [pg_dump, -Fc, -f, /var/backups/app.dump, app]   # argv, no shell
        timeout: 30m
        retry: {max_attempts: 4, backoff: 5s}
        env: {PGHOST: db.internal, PGPORT: 5432}
        cwd: /var/backups
      - id: ping
        http:
          url: https://example.invalid/ping
          method: post
          headers: {X-Token: abc}
          body: {ok: true}
          expect_status: [200, 204]
          timeout: 10s
      - id: nap
        sleep: 500ms
      - id: approval
        wait_signal: {name: approve, timeout: 1h}
      - id: summarise
        python: myapp.jobs:summarise
  report:
    python: myapp.jobs:build_report
triggers:
  - id: nightly-backup
    flow: backup
    cron: "30  2 * * *"
    overlap: skip
    max_active: 2
    max_buffer: 10
    catchup: {grace: 5m}
    jitter: 2m
    input: {full: true, since: 2026-01-01T00:00:00Z}
    enabled: false
    description: Nightly database backup
    start: 2026-01-01T00:00:00
    end: 2027-01-01T00:00:00Z
    max_runs:
    pause_on_failure: true
  - id: heartbeat
    flow: backup
    timezone: UTC
    every: 90s
  - id: month-end
    flow: report
    calendar: {months: 1, day: 1, hour: 6, start: 2026-01-01}
  - id: once
    flow: report
    at: "2027-01-01T00:00:00+01:00"
"""

BACKUP_DEFINITION = {
    "kind": "steps",
    "steps": [
        {
            "id": "dump",
            "type": "command",
            "argv": ["pg_dump", "-Fc", "-f", "/var/backups/app.dump", "app"],
            "env": {"PGHOST": "db.internal", "PGPORT": "5432"},
            "cwd": "/var/backups",
            "timeout_s": 1800.0,
            "retry": {"max_attempts": 4, "backoff_s": 5.0, "max_backoff_s": 300.0},
            "idempotent": False,
        },
        {
            "id": "ping",
            "type": "http",
            "url": "https://example.invalid/ping",
            "method": "POST",
            "headers": {"X-Token": "abc"},
            "body": {"ok": True},
            "expect_status": [200, 204],
            "timeout_s": 10.0,
            "retry": None,
            "idempotent": False,
        },
        {"id": "nap", "type": "sleep", "duration_s": 0.5},
        {"id": "approval", "type": "wait_signal", "signal": "approve", "timeout_s": 3600.0},
        {
            "id": "summarise",
            "type": "python",
            "ref": "myapp.jobs:summarise",
            "timeout_s": None,
            "retry": None,
            "idempotent": False,
        },
    ],
}


def test_valid_document_becomes_flow_specs() -> None:
    declarations = parse_declarations(FULL, source="full.yaml")

    backup, report = declarations.flows["backup"], declarations.flows["report"]
    assert backup == FlowSpec(
        name="backup", definition=BACKUP_DEFINITION, version=FlowSpec.digest(BACKUP_DEFINITION)
    )
    assert report.definition == {"kind": "python", "ref": "myapp.jobs:build_report"}
    assert report.version == FlowSpec.digest(report.definition)
    assert declarations.source == "full.yaml"


def test_valid_document_becomes_trigger_specs_with_defaults_merged() -> None:
    declarations = parse_declarations(FULL, source="full.yaml")

    backup, report = declarations.flows["backup"].version, declarations.flows["report"].version
    berlin_defaults: dict[str, Any] = {
        "timezone": "Europe/Berlin",
        "overlap": Overlap.BUFFER,
        "catchup": Catchup(policy=CatchupPolicy.ALL, window=timedelta(hours=2)),
        "max_runs": 5,
    }
    assert declarations.triggers == [
        TriggerSpec(
            id="nightly-backup",
            flow="backup",
            flow_version=backup,
            schedule=CronSchedule(expression="30 2 * * *"),
            timezone="Europe/Berlin",
            overlap=Overlap.SKIP,
            max_active=2,
            max_buffer=10,
            catchup=Catchup(
                policy=CatchupPolicy.ALL, window=timedelta(hours=2), grace=timedelta(minutes=5)
            ),
            jitter=timedelta(minutes=2),
            input={"full": True, "since": "2026-01-01T00:00:00+00:00"},
            enabled=False,
            description="Nightly database backup",
            start_at=datetime(2025, 12, 31, 23, 0, tzinfo=UTC),  # Berlin midnight
            end_at=datetime(2027, 1, 1, tzinfo=UTC),
            max_runs=None,  # an explicit null lifts the default's limit
            pause_on_failure=True,
        ),
        TriggerSpec(
            id="heartbeat",
            flow="backup",
            flow_version=backup,
            schedule=EverySchedule(interval=timedelta(seconds=90)),
            **{**berlin_defaults, "timezone": "UTC"},
        ),
        TriggerSpec(
            id="month-end",
            flow="report",
            flow_version=report,
            schedule=CalendarSchedule(
                months=1, day=1, hour=6, start=datetime(2025, 12, 31, 23, 0, tzinfo=UTC)
            ),
            **berlin_defaults,
        ),
        TriggerSpec(
            id="once",
            flow="report",
            flow_version=report,
            schedule=AtSchedule(at=datetime(2026, 12, 31, 23, 0, tzinfo=UTC)),
            **berlin_defaults,
        ),
    ]


def test_naive_times_are_wall_times_in_the_triggers_zone() -> None:
    text = """\
    version: 1
    flows: {f: {python: "a:b"}}
    triggers:
      - {id: a, flow: f, timezone: America/New_York, at: "2027-07-01T09:00:00"}
      - id: b
        flow: f
        timezone: America/New_York
        every: {interval: 1h, start: 2027-01-01T09:00:00}
    """

    first, second = parse_declarations(textwrap.dedent(text), source="t.yaml").triggers

    assert first.schedule == AtSchedule(at=datetime(2027, 7, 1, 13, 0, tzinfo=UTC))  # EDT
    assert second.schedule == EverySchedule(
        interval=timedelta(hours=1),
        start=datetime(2027, 1, 1, 14, 0, tzinfo=UTC),  # EST
    )


BACKUP_REWRITTEN = """\
# The same backup flow as FULL's: other quoting, flow style, key order and comments.
version: 1
flows:
  report: {python: "myapp.jobs:build_report"}
  backup:
    steps:
      - cwd: "/var/backups"
        env:
          PGPORT: "5432"
          PGHOST: db.internal
        retry:
          backoff: 5000ms
          max_attempts: 4
        timeout: 0.5h
        run: pg_dump -Fc -f /var/backups/app.dump app
        idempotent: false
        id: dump
      - {id: ping, http: {timeout: 10s, expect_status: [200, 204], body: {ok: true},
          headers: {X-Token: abc}, method: POST, url: "https://example.invalid/ping"}}
      - {id: nap, sleep: 0.5s}
      - {id: approval, wait_signal: {timeout: 60m, name: approve}}
      - {id: summarise, python: "myapp.jobs:summarise"}
"""


def test_flow_digest_ignores_yaml_formatting_and_order() -> None:
    original = parse_declarations(FULL, source="a.yaml").flows
    rewritten = parse_declarations(BACKUP_REWRITTEN, source="b.yaml").flows

    assert rewritten["backup"].version == original["backup"].version
    assert rewritten["report"].version == original["report"].version


def test_flow_digest_changes_when_a_step_changes() -> None:
    original = parse_declarations(BACKUP_REWRITTEN, source="a.yaml").flows["backup"]
    changed_text = BACKUP_REWRITTEN.replace("timeout: 0.5h", "timeout: 31m")

    changed = parse_declarations(changed_text, source="b.yaml").flows["backup"]

    assert changed.version != original.version
    assert changed.definition["steps"][0]["timeout_s"] == 1860.0


@pytest.mark.parametrize(
    ("method", "idempotent", "expected"),
    [("GET", None, True), ("HEAD", None, True), ("POST", None, False), ("GET", False, False)],
)
def test_http_step_is_idempotent_by_default_only_for_get_and_head(
    method: str, idempotent: bool | None, expected: bool
) -> None:
    flag = "" if idempotent is None else f", idempotent: {str(idempotent).lower()}"
    text = f"""\
    version: 1
    flows:
      f:
        steps:
          - {{id: a, http: {{url: "https://example.invalid/", method: {method}}}{flag}}}
    """

    flows = parse_declarations(textwrap.dedent(text), source="t.yaml").flows

    assert flows["f"].definition["steps"][0]["idempotent"] is expected


def test_merge_key_values_are_used() -> None:
    text = """\
    version: 1
    flows: {f: {python: "a:b"}}
    triggers:
      - &first {id: a, flow: f, overlap: allow, max_active: 3, every: 1m}
      - {<<: *first, id: b}
    """

    first, second = parse_declarations(textwrap.dedent(text), source="t.yaml").triggers

    assert (second.id, second.overlap, second.max_active) == ("b", Overlap.ALLOW, 3)
    assert second.schedule == first.schedule


@pytest.mark.parametrize(
    "text",
    ["version: 1\n", "version: 1\ntriggers: []\nflows: {}\n", "version: 1\ntriggers:\n"],
    ids=["version-only", "empty-sections", "null-triggers"],
)
def test_document_without_triggers_is_valid(text: str) -> None:
    assert parse_declarations(text, source="t.yaml") == Declarations(
        flows={}, triggers=[], source="t.yaml"
    )


def test_load_reads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "triggers.yaml"
    path.write_text(FULL, encoding="utf-8")

    declarations = load_declarations(path)

    assert declarations.source == str(path)
    assert [trigger.id for trigger in declarations.triggers] == [
        "nightly-backup",
        "heartbeat",
        "month-end",
        "once",
    ]


def test_load_reports_a_missing_file_with_its_path(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"

    with pytest.raises(DeclarationError) as caught:
        load_declarations(path)

    assert str(path) in caught.value.message
    assert caught.value.details["problems"] == [
        {
            "file": str(path),
            "line": 0,
            "column": 0,
            "key": "",
            "message": "cannot read the file: No such file or directory",
        }
    ]


def test_load_reports_where_a_file_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"version: 1\n# caf\xe9\n")

    with pytest.raises(DeclarationError) as caught:
        load_declarations(path)

    assert caught.value.message == f"{path}:2:6: the file is not valid UTF-8"


def test_shipped_example_is_valid() -> None:
    declarations = load_declarations(EXAMPLE)

    assert [trigger.id for trigger in declarations.triggers] == [
        "heartbeat",
        "every-minute",
        "daily-stamp",
    ]
    for flow in declarations.flows.values():  # commands only: no network, no Python imports
        for step in flow.definition["steps"]:
            assert step["type"] == "command"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500ms", timedelta(milliseconds=500)),
        ("90s", timedelta(seconds=90)),
        ("5m", timedelta(minutes=5)),
        ("2h", timedelta(hours=2)),
        ("1d", timedelta(days=1)),
        ("1w", timedelta(weeks=1)),
        ("1h30m", timedelta(minutes=90)),
        ("1h 30m", timedelta(minutes=90)),
        ("1.5s", timedelta(milliseconds=1500)),
        ("90", timedelta(seconds=90)),
        (" 2h ", timedelta(hours=2)),
        ("5 m", timedelta(minutes=5)),
        ("1.5", timedelta(milliseconds=1500)),
    ],
)
def test_parse_duration_accepts(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "invalid duration"),
        ("soon", "invalid duration 'soon': write a number with a unit"),
        ("5M", "invalid duration"),
        ("1e3s", "invalid duration"),
        ("m5", "invalid duration"),
        ("\u0663s", "invalid duration"),  # a non-ASCII digit
        ("0", "is zero"),
        ("0s", "is zero"),
        ("-5s", "is negative"),
        ("-5", "is negative"),
        ("1.0005s", "not a whole number of milliseconds"),
        ("100000000w", "longer than a century"),
    ],
)
def test_parse_duration_rejects(text: str, fragment: str) -> None:
    with pytest.raises(ValueError, match="duration") as caught:
        parse_duration(text)

    assert fragment in str(caught.value)
