"""Problem collection: every problem of a document, located, reported at once.

Validation never stops at the first problem: each goes to a `Problems` sink, and
pydantic's errors are translated into located problems with readable messages.
"""

from __future__ import annotations

import re
from typing import Any, Protocol, TypeVar, get_args

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from triggers.declarations._messages import (
    declaration_error,
    describe,
    problem,
    suggestion,
    unknown_key_message,
)
from triggers.declarations._models import DefaultsModel, TriggerModel
from triggers.declarations._yaml import Anchor, Loc, key_path, locate

M = TypeVar("M", bound=BaseModel)


class Problems(Protocol):
    """Where validation reports what it finds; it never stops at the first problem."""

    @property
    def count(self) -> int:
        """How many times a problem was reported so far (repeats included)."""
        ...

    def add(self, loc: Loc, message: str, *, at: Anchor = "value") -> None:
        """Report a problem at `loc`; a `loc` that is absent points at its parent."""
        ...

    def line_of(self, loc: Loc) -> int:
        """The 1-based line of the value at `loc`, for messages that cite another place."""
        ...


class Collector:
    """The problems of one document, located in its YAML tree (implements `Problems`)."""

    def __init__(self, source: str, tree: object) -> None:
        self._source = source
        self._tree = tree
        self._found: dict[tuple[Any, ...], dict[str, Any]] = {}
        self._count = 0

    @property
    def count(self) -> int:
        return self._count

    def add(self, loc: Loc, message: str, *, at: Anchor = "value") -> None:
        line, column, key_loc = locate(self._tree, loc, at)
        self.add_at(key_loc, message, line=line, column=column)

    def add_at(self, loc: Loc, message: str, *, line: int, column: int) -> None:
        """Add a problem at a 0-based position the caller already knows."""
        self._count += 1
        found = problem(self._source, line + 1, column + 1, key_path(self._tree, loc), message)
        # Each trigger that inherits a bad default reports it again; show it once.
        self._found.setdefault(tuple(found.values()), found)

    def line_of(self, loc: Loc) -> int:
        return locate(self._tree, loc, "value")[0] + 1

    def raise_if_any(self) -> None:
        if self._found:
            found = self._found.values()
            raise declaration_error(sorted(found, key=lambda item: (item["line"], item["column"])))


class Tally:
    """Counts problems without locating them (implements `Problems`): for a first pass
    over a document read without positions, which is read again if any is found."""

    def __init__(self) -> None:
        self.count = 0

    def add(self, loc: Loc, message: str, *, at: Anchor = "value") -> None:
        self.count += 1

    def line_of(self, loc: Loc) -> int:
        return 0


def validate_partial(
    model: type[M], raw: object, loc: Loc, problems: Problems
) -> tuple[M | None, frozenset[str]]:
    """Validate `raw`, report every error, and keep what is valid.

    Returns:
        The model built from the valid keys only (None when `raw` is not even a
        mapping), and the keys that were given but invalid.
    """
    try:
        return model.model_validate(raw), frozenset()
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
    for error in errors:
        _report(model, error, loc, problems)
    dropped = {error["loc"][0] for error in errors if error["loc"]}
    bad = frozenset(str(key) for key in dropped)
    if not isinstance(raw, dict) or any(not error["loc"] for error in errors):
        return None, bad
    # Dropping the invalid keys lets the valid ones still take part in later checks.
    try:
        return model.model_validate({k: v for k, v in raw.items() if k not in dropped}), bad
    except ValidationError:
        return None, bad


def _report(model: type[BaseModel], error: ErrorDetails, loc: Loc, problems: Problems) -> None:
    where = loc + tuple(error["loc"])
    kind = error["type"]
    if kind in {"extra_forbidden", "invalid_key"}:  # invalid_key: not even a string
        key = error["loc"][-1]
        parent = error["loc"][:-1]
        if model is DefaultsModel and not parent and key in TriggerModel.model_fields:
            message = f"'{key}' cannot be defaulted; set it on each trigger"
        else:
            message = unknown_key_message(key, _fields_at(model, parent))
        problems.add(where, message, at="key")
    elif kind == "missing":
        problems.add(where, f"missing required key '{error['loc'][-1]}'")
    else:
        problems.add(where, _error_message(error))


_EXPECTED = {
    "string_type": "a string",
    "int_type": "an integer",
    "bool_type": "true or false",
    "float_type": "a number",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
}


def _error_message(error: ErrorDetails) -> str:
    kind = error["type"]
    context = error.get("ctx", {})
    value = error["input"]
    if kind == "value_error":
        return str(context["error"])
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}, got {describe(value)}"
    if kind == "greater_than_equal":
        return f"must be at least {context['ge']}, got {describe(value)}"
    if kind == "less_than_equal":
        return f"must be at most {context['le']}, got {describe(value)}"
    if kind == "enum":
        choices = re.findall(r"'([^']*)'", str(context["expected"]))
        hint = suggestion(value, choices) if isinstance(value, str) else ""
        return f"expected one of {', '.join(choices)}, got {describe(value)}{hint}"
    message = error["msg"]
    return message[:1].lower() + message[1:]


def _fields_at(model: type[BaseModel], loc: tuple[str | int, ...]) -> list[str]:
    current = model
    for element in loc:
        field = _field(current, element) if isinstance(element, str) else None
        if field is None:
            continue  # a list index or a mapping key: the model stays the same
        nested = _model_in(field.annotation)
        if nested is None:
            return []
        current = nested
    # A key the YAML spells otherwise than the field (`all` for `all_of`) by its alias.
    return [field.alias or name for name, field in current.model_fields.items()]


def _field(model: type[BaseModel], key: str) -> FieldInfo | None:
    """The field the YAML key `key` sets: by its name, or by its alias."""
    found = model.model_fields.get(key)
    if found is not None:
        return found
    return next((f for f in model.model_fields.values() if f.alias == key), None)


def _model_in(annotation: object) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in get_args(annotation):
        found = _model_in(argument)
        if found is not None:
            return found
    return None
