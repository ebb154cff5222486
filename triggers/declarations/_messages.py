"""The wording of problems: how values are quoted, names suggested and problems rendered."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from datetime import date, datetime
from typing import Any

from triggers.errors import DeclarationError

_SHOWN_CHARS = 40
# Names people bring from other schedulers, which spelling distance does not catch.
_SYNONYMS = {"tz": "timezone", "command": "run", "cmd": "run", "interval": "every"}


def describe(value: object) -> str:
    """A short, YAML-flavoured rendering of an offending value for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value if len(value) <= _SHOWN_CHARS else value[: _SHOWN_CHARS - 3] + "...")
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, Mapping | list):
        return "a mapping" if isinstance(value, Mapping) else "a list"
    if isinstance(value, datetime | date):
        return f"the timestamp {value.isoformat()}"
    return f"a {type(value).__name__} value"


def suggestion(word: str, candidates: Iterable[str]) -> str:
    """` (did you mean 'x'?)` for the closest candidate, ignoring case, or an empty string."""
    by_lower = {candidate.lower(): candidate for candidate in candidates}
    matches = difflib.get_close_matches(word.lower(), by_lower, n=1, cutoff=0.6)
    return f" (did you mean '{by_lower[matches[0]]}'?)" if matches else ""


def unknown_key_message(key: object, known: Iterable[str]) -> str:
    """`unknown key 'overlpa' (did you mean 'overlap'?)`, or the list of known keys."""
    known = list(known)
    if isinstance(key, str):
        hint = suggestion(key, known)
        if not hint and _SYNONYMS.get(key) in known:
            hint = f" (did you mean '{_SYNONYMS[key]}'?)"
        if hint:
            return f"unknown key '{key}'{hint}"
    if not known:
        return f"unknown key {key!r}"
    return f"unknown key {key!r} (known keys: {', '.join(known)})"


def problem(source: str, line: int, column: int, key: str, message: str) -> dict[str, Any]:
    """One problem as `DeclarationError.details["problems"]` lists it (1-based position)."""
    return {"file": source, "line": line, "column": column, "key": key, "message": message}


def declaration_error(problems: list[dict[str, Any]]) -> DeclarationError:
    """The one error that reports `problems`, one `file:line:column: key: message` a line."""
    lines = []
    for found in problems:
        where = found["file"]
        if found["line"]:
            where += f":{found['line']}:{found['column']}"
        key = f" {found['key']}:" if found["key"] else ""
        lines.append(f"{where}:{key} {found['message']}")
    return DeclarationError("\n".join(lines), problems=problems)
