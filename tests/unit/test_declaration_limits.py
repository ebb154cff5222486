"""Hostile declarations are refused on their event stream, before any tree is built.

Each file here once took the process down or held it for minutes: a flow list nested
50,000 deep (a segfault in the C composer), nine levels of nine aliases (hundreds of
millions of values), a mapping nested 3,000 deep (`RecursionError`), a 100 MB string
and a 200,000-item list. Each is now one located problem naming the bound it passes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triggers.declarations import load_declarations, parse_declarations
from triggers.declarations._events import check_limits
from triggers.declarations._limits import LIMITS
from triggers.errors import DeclarationError

HEAD = "version: 1\nflows:\n  noop: {steps: []}\n"


def _refusal(text: str) -> dict[str, Any]:
    with pytest.raises(DeclarationError) as caught:
        parse_declarations(text, source="hostile.yaml")
    problems = caught.value.details["problems"]
    assert isinstance(problems, list)
    assert len(problems) == 1
    found: dict[str, Any] = problems[0]
    assert found["file"] == "hostile.yaml"
    return found


def _laughs(levels: int, fan: int) -> str:
    lines = ["version: 1", "a0: &a0 [lol]"]
    lines += [f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * fan)}]" for n in range(1, levels + 1)]
    return "\n".join([*lines, "flows: {}", ""])


def test_a_flow_list_nested_50000_deep_is_refused_at_the_depth_limit() -> None:
    found = _refusal("version: 1\nflows: " + "[" * 50_000 + "]" * 50_000 + "\n")
    assert found["line"] == 2
    assert found["column"] == 8 + LIMITS.depth - 1  # the bracket that opens one level too many
    assert found["key"].startswith("flows[0][0]")
    assert found["message"] == f"nested over the limit of {LIMITS.depth} levels"


def test_a_block_mapping_nested_3000_deep_is_refused_naming_its_keys() -> None:
    text = "version: 1\nflows:\n" + "".join("  " * (n + 1) + "a:\n" for n in range(3000))
    found = _refusal(text + "  " * 3001 + "1\n")
    assert found["line"] == 2 + LIMITS.depth  # where the mapping one level too deep starts
    assert found["key"] == "flows" + ".a" * (LIMITS.depth - 1)
    assert "limit of 64 levels" in found["message"]


def test_a_billion_laughs_is_refused_at_the_alias_limit() -> None:
    found = _refusal(_laughs(9, 9))
    assert found["line"] == 8  # a6 is the first level past a million repeated values
    assert found["key"].startswith("a6[")
    assert found["message"] == "aliases repeat over 1,000,000 values in all"


def test_a_few_aliases_are_read_as_before() -> None:
    text = HEAD + "defaults: &d {timezone: UTC}\ntriggers:\n"
    text += "".join(f"  - {{id: t{n}, flow: noop, every: 1h}}\n" for n in range(3))
    assert [t.id for t in parse_declarations(text, source="ok.yaml").triggers] == ["t0", "t1", "t2"]


def test_a_string_over_the_limit_is_refused_naming_its_key() -> None:
    long = "x" * (LIMITS.string_chars + 1)
    found = _refusal(f'version: 1\nflows:\n  f:\n    description: "{long}"\n    steps: []\n')
    assert (found["line"], found["key"]) == (4, "flows.f.description")
    assert found["message"] == "a string of 1,048,577 characters, over the limit of 1,048,576"


def test_a_file_over_the_size_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    with path.open("wb") as handle:  # 100 MB of description, sparse on disk
        handle.write(b'version: 1\nflows:\n  f:\n    description: "')
        handle.seek(100_000_000)
        handle.write(b'"\n')
    with pytest.raises(DeclarationError) as caught:
        load_declarations(path)
    [found] = cast("list[dict[str, Any]]", caught.value.details["problems"])
    assert found["file"] == str(path)
    assert found["message"] == "the file is 100,000,002 bytes, over the limit of 67,108,864 bytes"


def test_a_cron_list_of_200000_entries_is_refused_at_the_list_limit() -> None:
    minutes = ", ".join(["1"] * 200_000)
    text = HEAD + f"triggers:\n  - id: t\n    flow: noop\n    cron: {{minute: [{minutes}]}}\n"
    found = _refusal(text)
    assert (found["line"], found["key"]) == (7, f"triggers[0].cron.minute[{LIMITS.entries}]")
    assert found["message"] == "over 10,000 items in one list"


def test_top_level_lists_hold_far_more_than_nested_ones() -> None:
    items = ", ".join(["{id: t}"] * (LIMITS.entries + 5))
    check_limits(f"version: 1\ntriggers: [{items}]\n", "many.yaml")  # no bound passed
    with pytest.raises(DeclarationError):
        check_limits(f"version: 1\ntriggers: [[{items}]]\n", "many.yaml")


def test_a_mapping_with_too_many_keys_is_refused() -> None:
    keys = ", ".join(f"k{n}: 1" for n in range(LIMITS.entries + 1))
    found = _refusal(HEAD + f"triggers:\n  - {{{keys}}}\n")
    assert found["key"] == f"triggers[0].k{LIMITS.entries}"
    assert found["message"] == "over 10,000 keys in one mapping"


def test_text_that_is_not_yaml_is_still_located_by_the_reader() -> None:
    found = _refusal("version: 1\nflows: [\n")
    assert found["message"].startswith("invalid YAML")


# Hostile shapes, composed: nesting, anchors repeated through aliases, long scalars and
# long lists, in block or flow style. Whatever comes out, reading it either succeeds or
# raises one DeclarationError; no other exception, no crash, no unbounded work.
_SCALARS = st.sampled_from(["1", "x", "'q'", "*a", "~", "[", "{", "]", ":", "- "])


@st.composite
def _hostile(draw: st.DrawFn) -> str:
    depth = draw(st.integers(min_value=0, max_value=400))
    opener, closer = draw(st.sampled_from([("[", "]"), ("{a: ", "}"), ("[{b: ", "}]")]))
    body = draw(st.lists(_SCALARS, max_size=20).map(", ".join))
    fan = draw(st.integers(min_value=1, max_value=12))
    levels = draw(st.integers(min_value=0, max_value=12))
    lines = ["version: 1", "r0: &r0 [x]"]
    lines += [f"r{n}: &r{n} [{', '.join([f'*r{n - 1}'] * fan)}]" for n in range(1, levels + 1)]
    nested = opener * depth + body + closer * draw(st.integers(min_value=0, max_value=depth))
    return "\n".join([*lines, f"flows: {nested}", ""])


@settings(max_examples=60, deadline=None)
@given(_hostile())
def test_hostile_yaml_is_read_or_refused_never_crashes(text: str) -> None:
    try:
        parse_declarations(text, source="generated.yaml")
    except DeclarationError as exc:
        problems = cast("list[dict[str, Any]]", exc.details["problems"])
    else:
        return
    assert all(p["file"] == "generated.yaml" for p in problems)
