"""Global options anywhere on the command line: where each one is moved before parsing."""

from __future__ import annotations

from typing import Any

import pytest
import typer

from triggers.cli import app
from triggers.cli._argv import arrange, wants_json_errors


@pytest.fixture(scope="module")
def root() -> Any:
    return typer.main.get_command(app)


@pytest.mark.parametrize(
    ("given", "arranged"),
    [
        (["list", "--database-url", "sqlite:///x"], ["--database-url", "sqlite:///x", "list"]),
        (["list", "--database-url=sqlite:///x"], ["--database-url=sqlite:///x", "list"]),
        (
            ["history", "job", "--local", "--limit", "5"],
            ["--local", "history", "job", "--limit", "5"],
        ),
        (["runs", "logs", "r1", "--utc"], ["--utc", "runs", "logs", "r1"]),
        (["--json", "list"], ["list", "--json"]),
        (["-o", "jsonl", "history"], ["history", "-o", "jsonl"]),
        (["--config", "t.yaml", "run"], ["run", "--config", "t.yaml"]),
        (
            ["list", "--log-format", "json", "-o", "json"],
            ["--log-format", "json", "list", "-o", "json"],
        ),
    ],
    ids=[
        "url-after",
        "url-equals",
        "local-after",
        "utc-after-nested",
        "json-before",
        "output-before",
        "config-before-run",
        "mixed",
    ],
)
def test_global_options_move_to_where_click_reads_them(
    root: Any, given: list[str], arranged: list[str]
) -> None:
    assert arrange(root, given) == arranged


@pytest.mark.parametrize(
    "given",
    [
        ["pause", "job", "--note", "--local"],  # an option's value is never moved
        ["history", "--", "--local"],  # after `--` everything is an argument
        ["nosuchcommand", "--local"],  # Click reports the unknown command
        ["--help"],
        ["runs"],  # a group without its command
    ],
    ids=["option-value", "double-dash", "unknown-command", "help", "group-only"],
)
def test_values_arguments_and_unknown_words_stay_put(root: Any, given: list[str]) -> None:
    assert arrange(root, given) == given


def test_a_command_keeps_its_own_option_of_a_global_name(root: Any) -> None:
    # `next --config FILE` reads the trigger from FILE: next's own option, not the global.
    assert arrange(root, ["next", "job", "--config", "t.yaml"]) == [
        "next",
        "job",
        "--config",
        "t.yaml",
    ]


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (["list", "--json"], True),
        (["--output", "json", "list"], True),
        (["list", "-o", "jsonl"], True),
        (["list", "--output=json"], True),
        (["list", "--output", "table"], False),
        (["list", "--", "--json"], False),
        (["list"], False),
    ],
)
def test_json_errors_follow_the_requested_output(given: list[str], expected: bool) -> None:
    assert wants_json_errors(given) is expected


def commands_of(args: list[str]) -> list[str]:
    from triggers.cli._app import _command

    return sorted(_command(args).commands)


def test_an_invocation_builds_only_the_command_it_runs() -> None:
    everything = commands_of([])
    assert {"list", "status", "runs", "db", "run"} <= set(everything)

    assert commands_of(["status"]) == ["status"]
    assert commands_of(["--database-url", "sqlite:///x", "list", "--json"]) == ["list"]
    assert commands_of(["runs", "logs", "r1"]) == ["runs"]
    assert commands_of(["list", "--help"]) == ["list"]


def test_what_names_no_command_plainly_gets_every_command() -> None:
    everything = commands_of([])

    assert commands_of(["--help"]) == everything
    assert commands_of(["lisst"]) == everything  # Click suggests `list`
    # "list" is the option's value here; the command is `status`.
    assert commands_of(["--database-url", "list", "status"]) == everything
