"""One duration grammar: settings, declarations and the CLI accept and refuse the same text."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from triggers.clock import utc
from triggers.declarations import parse_declarations
from triggers.durations import format_duration, human_duration, parse_duration
from triggers.errors import ConfigError, DeclarationError, InvalidTimeError
from triggers.model import EverySchedule
from triggers.settings import load_settings
from triggers.times import parse_time

NOW = utc(2026, 1, 1)

# Accepted by at least one of the places before they shared the grammar, or refused
# by all of them for a reason worth keeping.
TEXTS = [
    "500ms",
    "90s",
    "5m",
    "2h",
    "1d",
    "1w",
    "1h30m",
    "1h 30m",
    " 2h ",
    "5 m",
    "90",
    "1.5",
    "1.5s",
    "0.5h",
    "soon",
    "",
    "5M",
    "1e3s",
    "m5",
    "\u0663s",
    "0",
    "0s",
    "-5s",
    "1.0005s",
    "100000000w",
    "5 minutes",
    "1.",
    ".5s",
]


def in_settings(text: str, monkeypatch: pytest.MonkeyPatch) -> timedelta | None:
    monkeypatch.setenv("TRIGGERS_LEASE", text)
    try:
        return load_settings().lease
    except ConfigError:
        return None


def in_declarations(text: str) -> timedelta | None:
    document = (
        "version: 1\nflows: {noop: {steps: []}}\n"
        f"triggers: [{{id: t, flow: noop, every: {json.dumps(text)}}}]\n"
    )
    try:
        declarations = parse_declarations(document, source="t.yaml")
    except DeclarationError:
        return None
    schedule = declarations.triggers[0].schedule
    assert isinstance(schedule, EverySchedule)
    return schedule.interval


def in_cli(text: str) -> timedelta | None:
    try:
        return NOW - parse_time(f"-{text}", now=NOW)
    except InvalidTimeError:
        return None


@pytest.mark.parametrize("text", TEXTS)
def test_duration_reads_the_same_in_settings_declarations_and_cli(
    text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    try:
        expected: timedelta | None = parse_duration(text)
    except ValueError:
        expected = None

    assert in_settings(text, monkeypatch) == expected
    assert in_declarations(text) == expected
    assert in_cli(text) == expected


def test_forms_each_place_accepted_before_are_accepted_everywhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Settings took spaces inside a part and fractions without a unit; declarations
    # took `ms` and whole numbers of seconds.
    for text, expected in [
        ("5 m", timedelta(minutes=5)),
        ("1.5", timedelta(milliseconds=1500)),
        ("500ms", timedelta(milliseconds=500)),
        ("90", timedelta(seconds=90)),
    ]:
        assert in_settings(text, monkeypatch) == expected
        assert in_declarations(text) == expected


@pytest.mark.parametrize(("number", "text"), [("90", "90"), ("1.5", "1.5"), ("0.25", "250ms")])
def test_yaml_number_reads_as_its_text(number: str, text: str) -> None:
    document = (
        "version: 1\nflows: {noop: {steps: []}}\ntriggers: [{id: t, flow: noop, every: %s}]\n"
    )

    as_number = parse_declarations(document % number, source="t.yaml")
    as_text = parse_declarations(document % json.dumps(text), source="t.yaml")

    assert as_number.triggers[0].schedule == as_text.triggers[0].schedule


def test_settings_refusal_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRIGGERS_POLL_INTERVAL", "5 minutes")

    with pytest.raises(ConfigError) as caught:
        load_settings()

    assert "TRIGGERS_POLL_INTERVAL" in caught.value.message
    assert "invalid duration '5 minutes'" in caught.value.message


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (90, timedelta(seconds=90)),
        (1.5, timedelta(milliseconds=1500)),
        (0.001, timedelta(0, 0, 1000)),
    ],
)
def test_numbers_count_seconds(value: float, expected: timedelta) -> None:
    assert parse_duration(value) == expected


@pytest.mark.parametrize("value", [True, float("inf"), float("nan"), -1, 0.0001])
def test_numbers_that_are_not_durations_are_refused(value: float) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(value)


def test_zero_is_refused_unless_allowed() -> None:
    with pytest.raises(ValueError, match="is zero"):
        parse_duration("0s")

    assert parse_duration("0s", allow_zero=True) == timedelta(0)


@pytest.mark.parametrize("text", ["45s", "5m", "2h", "1d", "1h30m", "1d2h3m4s"])
def test_format_duration_round_trips(text: str) -> None:
    assert format_duration(parse_duration(text)) == text


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (timedelta(milliseconds=12), "12ms"),
        (timedelta(milliseconds=999), "999ms"),
        (timedelta(milliseconds=2500), "2.5s"),
        (timedelta(seconds=45), "45s"),
        (timedelta(milliseconds=594505), "9m54s"),
        (timedelta(hours=1), "1h"),
        (timedelta(days=1, hours=2), "1d2h"),
        (timedelta(milliseconds=-30), "-30ms"),
    ],
)
def test_a_measured_duration_reads_as_a_person_writes_it(value: timedelta, shown: str) -> None:
    assert human_duration(value) == shown
