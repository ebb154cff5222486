"""libyaml's fast reading of a declarations file gives what the round-trip reading gives.

A valid file is read once by libyaml (`read_plain`); only a file with a problem is read
again by the round-trip loader, which knows where each key is. Both must see the same
document, or a file would mean one thing when valid and another when it is not.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, cast

import pytest

from triggers.declarations import parse_declarations
from triggers.declarations._yaml import NOT_READ, plain, read_plain, read_yaml
from triggers.errors import DeclarationError

ROOT = Path(__file__).resolve().parents[2]

SCALARS = [
    "a: yes",
    "a: on",
    "a: 0o17",
    "a: 017",
    "a: 09",
    "a: 0o8",
    "a: 1:30",
    "a: 12:30",
    "a: 2027-01-01T00:00:00+01:00",
    "a: 2027-01-01T10:00:00.5Z",
    "a: 2027-01-01 10:00:00",
    "a: 2027-01-01",
    "a: 1_000",
    "a: 0x_1f",
    "a: 0b101",
    "a: +1",
    "a: -.5",
    "a: 1.",
    "a: 1e3",
    "a: 1e",
    "a: .inf",
    "a: -.Inf",
    "a: ~",
    "a: Null",
    "a: TRUE",
    "a: y",
    "a: '0o17'",
    'a: "line\\nbreak"',
    "a: |\n  two\n  lines\n",
    "a: >-\n  folded\n  text\n",
    "a: &x {b: 1}\nc: *x",
    "a: [1, [2, {b: c}]]",
    "? [1, 2]\n: 3",
    "1: one\n2.5: two\ntrue: three",
    "a: &k key\n*k : v",
    "base: &b {x: [1, &s two]}\nuse: [*b, *s, *b]",
    "",
    "# only a comment",
]


def _documents() -> list[str]:
    """Every YAML document the docs and examples show, and the scalars above."""
    found = [path.read_text() for path in sorted((ROOT / "examples").rglob("*.yaml"))]
    fence = re.compile(r"```yaml\n(.*?)```", re.DOTALL)
    for path in [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]:
        found += fence.findall(path.read_text())
    return found + SCALARS


@pytest.mark.parametrize("text", _documents())
def test_libyaml_reads_what_the_round_trip_reads(text: str) -> None:
    fast = read_plain(text)
    try:
        _, tree = read_yaml(text, "x.yaml")
    except Exception:  # noqa: BLE001 - not YAML: the fast path must decline it too
        assert fast is NOT_READ
        return
    if fast is NOT_READ:
        return  # left to the round trip, which is always right
    assert repr(fast) == repr(plain(tree, frozenset()))


@pytest.mark.parametrize(
    "text",
    [
        "a: !!str 5",  # a tag: the round trip keeps it tagged
        "a: {<<: {b: 1}, c: 2}",  # a merge key: the merged keys' order differs
        "%YAML 1.1\n---\na: yes",  # a directive only the round trip obeys
        "a: 1\na: 2",  # a repeated key, reported by the round trip
        "a: [1",  # not YAML
        "a: &x [1, *x]",  # a document inside itself
    ],
)
def test_texts_the_two_could_read_apart_are_left_to_the_round_trip(text: str) -> None:
    assert read_plain(text) is NOT_READ


def test_a_problem_is_located_although_the_file_was_read_fast_first() -> None:
    text = "version: 1\nflows:\n  f: {steps: []}\ntriggers:\n"
    text += "  - {id: a, flow: f, cron: '61 * * * *'}\n"
    assert read_plain(text) is not NOT_READ
    with pytest.raises(DeclarationError) as caught:
        parse_declarations(text, source="x.yaml")
    problems = cast(list[dict[str, Any]], caught.value.details["problems"])
    assert [(p["line"], p["key"]) for p in problems] == [(5, "triggers[a].cron")]
