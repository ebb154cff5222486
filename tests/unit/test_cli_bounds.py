"""Every number an operator can type on the command line has a range, checked where it
is read: exit 2 naming the option, never an overflow deep in a query."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import typer

from triggers.cli import app


def _commands(command: Any, path: str = "triggers") -> Iterator[tuple[str, Any]]:
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, f"{path} {name}")


def test_every_integer_option_has_a_lower_and_an_upper_bound() -> None:
    unbounded = []
    integers = 0
    for path, command in _commands(typer.main.get_command(app)):
        for param in command.params:
            kind = type(param.type).__name__
            if kind == "IntParamType":
                unbounded.append(f"{path} {param.opts[0] if param.opts else param.name}")
            elif kind == "IntRange":
                integers += 1
                if param.type.min is None or param.type.max is None:
                    unbounded.append(f"{path} {param.opts[0]}")
    assert integers > 10  # the walk reaches the commands' options
    assert unbounded == []
