"""`triggers simulate`'s options: each form, what it means, and how a bad one is refused."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest

from triggers.cli._scenario import (
    duration_option,
    edit_option,
    instant_option,
    jump_option,
    pause_option,
    read_scenario,
    span_option,
)
from triggers.clock import utc
from triggers.errors import ExitCode, InputError
from triggers.simulation import ClockJump, Downtime, Failure, Pause, Scenario

START = utc(2027, 3, 27)
HOUR = timedelta(hours=1)

FILE = """\
version: 1
flows:
  job: {steps: []}
triggers:
  - {id: backup, flow: job, cron: "30 2 * * *", timezone: Europe/Berlin}
  - {id: report, flow: job, every: 1h}
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("backup=70m", ("backup", timedelta(minutes=70))),
        ("5m", (None, timedelta(minutes=5))),
        (" backup = 1h30m ", ("backup", timedelta(minutes=90))),
        ("0s", (None, timedelta(0))),
        ("a.b-c=90", ("a.b-c", timedelta(seconds=90))),
    ],
    ids=["for-a-trigger", "the-default", "spaces", "instant-runs", "seconds"],
)
def test_a_duration_is_for_one_trigger_or_the_default(
    text: str, expected: tuple[str | None, timedelta]
) -> None:
    assert duration_option(text) == expected


@pytest.mark.parametrize(
    ("text", "says"),
    [("=5m", "give ID=DURATION"), ("backup=", "invalid duration"), ("backup=5M", "invalid")],
)
def test_a_bad_duration_is_refused_naming_the_option(text: str, says: str) -> None:
    with pytest.raises(InputError, match=says) as caught:
        duration_option(text)
    assert "--duration" in str(caught.value)
    assert caught.value.exit_code is ExitCode.BAD_INPUT


def test_a_span_reads_absolute_and_relative_times_from_the_start() -> None:
    assert span_option("2027-03-27T01:00Z..2027-03-27T03:00Z", option="--down", start=START) == (
        START + HOUR,
        START + 3 * HOUR,
    )
    assert span_option("+1d2h..+1d5h", option="--down", start=START) == (
        START + timedelta(hours=26),
        START + timedelta(hours=29),
    )
    assert span_option("+2h..", option="--pause", start=START, open_end=True) == (
        START + 2 * HOUR,
        None,
    )


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("+1h", "expected T1..T2"),
        ("+1h..", "expected T1..T2"),
        ("..+1h", "expected T1..T2"),
        ("+3h..+1h", "it ends before it starts"),
        ("+1h..soon", "cannot parse time 'soon'"),
    ],
)
def test_a_bad_span_is_refused_naming_the_option(text: str, says: str) -> None:
    with pytest.raises(InputError, match=says) as caught:
        span_option(text, option="--down", start=START)
    assert str(caught.value).startswith("--down")


def test_a_pause_names_a_trigger_and_a_span_open_or_closed() -> None:
    assert pause_option("backup@+1h..+2h", start=START) == (
        "backup",
        START + HOUR,
        START + 2 * HOUR,
    )
    assert pause_option("backup@+1h..", start=START) == ("backup", START + HOUR, None)


@pytest.mark.parametrize("text", ["backup", "@+1h..+2h", "backup@+1h"])
def test_a_bad_pause_is_refused(text: str) -> None:
    with pytest.raises(InputError, match="--pause"):
        pause_option(text, start=START)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("+2h=+30m", (START + 2 * HOUR, timedelta(minutes=30))),
        ("+2h=-1h", (START + 2 * HOUR, -HOUR)),
        ("2027-03-27T05:00Z=90m", (START + 5 * HOUR, timedelta(minutes=90))),
    ],
    ids=["forwards", "back", "unsigned-is-forwards"],
)
def test_a_jump_is_an_instant_and_a_signed_step(
    text: str, expected: tuple[object, timedelta]
) -> None:
    assert jump_option(text, start=START) == expected


@pytest.mark.parametrize("text", ["+2h", "=+1h", "+2h=+0s", "+2h=later"])
def test_a_bad_jump_is_refused(text: str) -> None:
    with pytest.raises(InputError, match="--jump"):
        jump_option(text, start=START)


def test_an_edit_is_an_instant_and_a_file() -> None:
    assert edit_option("+1d=v2.yaml", start=START) == (START + timedelta(days=1), Path("v2.yaml"))
    with pytest.raises(InputError, match="expected T=FILE"):
        edit_option("v2.yaml", start=START)


def test_relative_words_count_from_the_start() -> None:
    assert instant_option("now", option="--to", start=START) == START
    assert instant_option("tomorrow", option="--to", start=START) == START + timedelta(days=1)


def _scenario(tmp_path: Path, **options: list[str]) -> Scenario:
    path = tmp_path / "triggers.yaml"
    path.write_text(FILE)
    values: dict[str, list[str]] = {
        "durations": [],
        "downs": [],
        "pauses": [],
        "jumps": [],
        "edits": [],
        "failures": [],
        **options,
    }
    return read_scenario(path, start="2027-03-27T00:00:00Z", end="+3d", **values)


def test_the_options_make_one_scenario(tmp_path: Path) -> None:
    (tmp_path / "v2.yaml").write_text(FILE.replace("every: 1h", "every: 2h"))
    scenario = _scenario(
        tmp_path,
        durations=["backup=70m", "5m"],
        downs=["+1d1h..+1d4h", "+2d..+2d1h"],
        pauses=["report@+12h..+18h", "backup@+2d12h.."],
        jumps=["+1d12h=-30m"],
        edits=["+2d=" + str(tmp_path / "v2.yaml")],
    )

    assert (scenario.start_at, scenario.end_at) == (START, START + timedelta(days=3))
    assert [spec.id for spec in scenario.specs] == ["backup", "report"]
    assert scenario.durations == {"backup": timedelta(minutes=70)}
    assert scenario.default_duration == timedelta(minutes=5)
    assert scenario.downtimes == [
        Downtime(start_at=START + timedelta(hours=25), end_at=START + timedelta(hours=28)),
        Downtime(start_at=START + timedelta(days=2), end_at=START + timedelta(hours=49)),
    ]
    assert scenario.pauses == [
        Pause(trigger_id="report", start_at=START + 12 * HOUR, end_at=START + 18 * HOUR),
        Pause(trigger_id="backup", start_at=START + timedelta(hours=60), end_at=None),
    ]
    assert scenario.jumps == [ClockJump(at=START + timedelta(hours=36), by=-timedelta(minutes=30))]
    [edit] = scenario.edits
    assert edit.at == START + timedelta(days=2)
    assert [spec.schedule for spec in edit.specs][1].interval == 2 * HOUR  # type: ignore[union-attr]


def test_the_default_duration_is_none(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path)
    assert (scenario.durations, scenario.default_duration) == ({}, timedelta(0))


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"durations": ["nightly=70m"]}, "--duration nightly=...: no trigger 'nightly'"),
        ({"pauses": ["nightly@+1h..+2h"]}, "--pause nightly@...: no trigger 'nightly'"),
        ({"jumps": ["+1h=+1h", "+2h=-0.0005s"]}, "--jump '+2h=-0.0005s': duration"),
        ({"failures": ["nightly@+1h"]}, "--fail nightly@...: no trigger 'nightly'"),
    ],
    ids=[
        "duration-of-an-unknown-trigger",
        "pause-of-an-unknown-trigger",
        "a-jump-below-a-ms",
        "fail-of-an-unknown-trigger",
    ],
)
def test_a_scenario_naming_what_is_not_there_is_refused(
    tmp_path: Path, options: dict[str, list[str]], says: str
) -> None:
    with pytest.raises(InputError, match=re.escape(says)):
        _scenario(tmp_path, **options).check()


def test_a_range_that_ends_before_it_starts_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "triggers.yaml"
    path.write_text(FILE)
    scenario = read_scenario(
        path, start="2027-03-27", end="-1h", durations=[], downs=[], pauses=[], jumps=[], edits=[]
    )
    with pytest.raises(InputError, match=r"--to \(.*\) must be after --from"):
        scenario.check()


def test_fail_takes_one_start_or_a_range_of_starts(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path, failures=["backup@+1h", "report@2027-03-28T00:00:00Z..+1d12h"])

    assert scenario.failures == [
        Failure(trigger_id="backup", start_at=START + HOUR, end_at=START + HOUR),
        Failure(trigger_id="report", start_at=START + timedelta(days=1), end_at=START + 36 * HOUR),
    ]
    assert scenario.fails("backup", START + HOUR)
    assert not scenario.fails("backup", START + 2 * HOUR)
    assert not scenario.fails("report", START + HOUR)
    assert scenario.fails("report", START + timedelta(days=1))
    assert scenario.fails("report", START + 36 * HOUR)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("backup", "--fail 'backup': expected ID@T or ID@T1..T2"),
        ("@+1h", "--fail '@+1h': expected ID@T or ID@T1..T2"),
        ("backup@", "--fail 'backup@': expected ID@T or ID@T1..T2"),
        ("backup@soon", "--fail 'backup@soon': cannot parse time 'soon'"),
        ("backup@+2h..+1h", "--fail 'backup@+2h..+1h': it ends before it starts"),
    ],
    ids=["no-at", "no-id", "no-time", "bad-time", "backwards"],
)
def test_a_bad_fail_is_refused_naming_the_option(tmp_path: Path, value: str, says: str) -> None:
    with pytest.raises(InputError, match=re.escape(says)):
        _scenario(tmp_path, failures=[value])
