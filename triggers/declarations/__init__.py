"""The declarations file: YAML in, validated flows and triggers out (docs/yaml.md).

`load_declarations` either returns every flow and trigger of the file or raises one
`DeclarationError` that lists every problem, each with its file, line, column and key
(`triggers[nightly-backup].catchup.window`). Validation reads the file and the time zone
database only: it never touches the store and never imports the flows' Python code.

Inside, by concern: `_yaml` (the YAML tree and where each key sits), `_values` (scalar
validators), `_models` (one pydantic model per mapping), `_problems` (problem
collection, pydantic's errors as located problems), `_specs` (building the specs from
valid mappings), `_messages` (how problems are worded).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from triggers.alert_rules import AlertChannel
from triggers.declarations._limits import LIMITS, check_size
from triggers.declarations._messages import declaration_error, problem
from triggers.durations import parse_duration
from triggers.model import FlowSpec, TriggerSpec

__all__ = [
    "Declarations",
    "load_declarations",
    "parse_declarations",
    "parse_duration",
    "read_declarations_text",
    "text_digest",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Declarations:
    """A valid declarations file: its flows by name and its triggers in file order."""

    flows: dict[str, FlowSpec]
    triggers: list[TriggerSpec]
    source: str
    digest: str = field(default="", compare=False)
    """A digest of the text the declarations came from (see `text_digest`)."""
    channels: dict[str, AlertChannel] = field(default_factory=dict)
    """The alert channels of `alerts.channels`, by name."""


def text_digest(text: str) -> str:
    """The digest of a declarations text: equal texts are the same declarations."""
    return hashlib.sha256(text.encode()).hexdigest()


def read_declarations_text(path: str | Path) -> str:
    """A declarations file's text.

    Raises:
        DeclarationError: the file cannot be read, is not UTF-8, or is larger than
            the limit (docs/yaml.md "Limits").
    """
    source = str(path)
    try:
        check_size(Path(path).stat().st_size, source)
        with Path(path).open("rb") as stream:
            # One byte past the limit is enough to refuse, and bounds what is read.
            data = stream.read(LIMITS.file_bytes + 1)
            if len(data) > LIMITS.file_bytes:
                check_size(max(len(data), Path(path).stat().st_size), source)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        found = problem(source, 0, 0, "", f"cannot read the file: {reason}")
        raise declaration_error([found]) from exc
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - data.rfind(b"\n", 0, exc.start)
        found = problem(source, line, column, "", "the file is not valid UTF-8")
        raise declaration_error([found]) from exc


def load_declarations(path: str | Path) -> Declarations:
    """Read and validate a declarations file.

    Raises:
        DeclarationError: the file cannot be read, is not UTF-8, or fails validation;
            `details["problems"]` holds every problem as `{"file", "line", "column",
            "key", "message"}` (line and column are 0 when the problem is the whole file).
    """
    return parse_declarations(read_declarations_text(path), source=str(path))


def parse_declarations(text: str, *, source: str) -> Declarations:
    """Validate declarations given as YAML text; `source` names them in problems.

    The text's bounds (depth, aliases, lengths; see `_limits`) are checked first, on
    its event stream, so a hostile text is refused before any tree is built from it.

    Raises:
        DeclarationError: listing every problem found (see `load_declarations`), or
            the first bound the text passes.
    """
    # The parser's modules load here, not with the package: a daemon restarted on the
    # file already in force only reads and digests its text.
    from triggers.declarations._events import check_limits  # noqa: PLC0415
    from triggers.declarations._problems import Collector, Tally  # noqa: PLC0415
    from triggers.declarations._specs import build_specs  # noqa: PLC0415
    from triggers.declarations._yaml import (  # noqa: PLC0415
        NOT_READ,
        SelfReferenceError,
        duplicate_keys,
        plain,
        read_plain,
        read_yaml,
    )

    check_limits(text, source)
    digest = text_digest(text)
    data = read_plain(text)
    if data is not NOT_READ:
        tally = Tally()
        flows, triggers, channels = build_specs(data, tally)
        if not tally.count:
            return Declarations(
                flows=flows, triggers=triggers, source=source, digest=digest, channels=channels
            )
    # Read again, keeping every position, to say where each problem is.
    node, tree = read_yaml(text, source)
    problems = Collector(source, tree)
    for loc, first_line, mark in duplicate_keys(node, (), set()):
        message = f"duplicate key '{loc[-1]}' (first at line {first_line})"
        problems.add_at(loc, message, line=mark.line, column=mark.column)
    try:
        data = plain(tree, frozenset())
    except SelfReferenceError:
        problems.add((), "the document contains itself through an alias")
        data = None
    flows, triggers, channels = build_specs(data, problems)
    problems.raise_if_any()
    return Declarations(
        flows=flows, triggers=triggers, source=source, digest=digest, channels=channels
    )
