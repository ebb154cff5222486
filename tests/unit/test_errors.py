"""Every error has a stable, unique code, an exit code, and a line in the class tree."""

from __future__ import annotations

import re

import triggers.errors as errors_module
from triggers.errors import ExitCode, TriggersError


def _classes() -> list[type[TriggersError]]:
    found: list[type[TriggersError]] = []
    pending: list[type[TriggersError]] = [TriggersError]
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return [cls for cls in found if cls.__module__ == "triggers.errors"]


def test_every_error_has_a_unique_valid_code() -> None:
    codes = [cls.code for cls in _classes()]

    assert len(codes) == len(set(codes))
    assert all(re.fullmatch(r"TRG-\d{3}", code) for code in codes)


def test_the_class_tree_in_the_docstring_lists_every_class_with_its_code_and_exit() -> None:
    tree = errors_module.__doc__ or ""
    for cls in _classes():
        line = next((line for line in tree.splitlines() if f" {cls.__name__} " in line), None)
        assert line is not None, cls.__name__
        assert cls.code in line and f"exit {int(cls.exit_code)}" in line, line


def test_exit_codes_are_the_documented_ones() -> None:
    assert {code.name: int(code) for code in ExitCode} == {
        "OK": 0,
        "FAILED": 1,
        "BAD_INPUT": 2,
        "ATTENTION": 3,
        "TEMPORARY": 75,
        "CONFIG": 78,
    }
