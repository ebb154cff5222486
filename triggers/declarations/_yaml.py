"""The YAML tree of a declarations file, and where each of its keys and values sits.

ruamel's round-trip loader keeps every key's and value's line and column, so a
problem found on the plain data can be pointed at in the file.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any, Literal, TypeAlias

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from ruamel.yaml.scalarbool import ScalarBoolean

from triggers.declarations._messages import declaration_error, problem
from triggers.declarations._values import ID_PATTERN, MAX_ID_LENGTH

Loc: TypeAlias = tuple[str | int, ...]
"""A path into the document: mapping keys and list indexes, from the top."""

Anchor: TypeAlias = Literal["key", "value"]
"""Whether a problem points at a key (unknown, duplicate, misplaced) or at its value."""

_QUOTE_HINT = "; quote a value that starts with '*', '@' or '`', like cron: \"*/5 * * * *\""


def read_yaml(text: str, source: str) -> tuple[Node | None, Any]:
    """The node tree (for duplicate keys) and the round-trip tree (values with positions).

    Raises:
        DeclarationError: the text is not YAML; the one problem points at the fault.
    """
    yaml = YAML(typ="rt")
    # Duplicate keys are found on the node tree instead, so every one of them is reported.
    yaml.allow_duplicate_keys = True
    try:
        node = yaml.compose(text)
        # What `yaml.load` does after composing; composing once serves both uses.
        return node, None if node is None else yaml.constructor.construct_document(node)
    except MarkedYAMLError as exc:
        message = ": ".join(str(part) for part in (exc.context, exc.problem) if part)
        mark = exc.problem_mark or exc.context_mark
        if exc.context == "while scanning an alias" or "'@'" in message or "'`'" in message:
            message += _QUOTE_HINT
            mark = exc.context_mark or mark
        line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        raise declaration_error(
            [problem(source, line, column, "", f"invalid YAML: {message}")]
        ) from None
    except YAMLError as exc:
        raise declaration_error([problem(source, 1, 1, "", f"invalid YAML: {exc}")]) from None


def duplicate_keys(node: Node | None, loc: Loc, seen: set[int]) -> Iterator[tuple[Loc, int, Any]]:
    """Every repeated key: its path, the line of its first use, and its own mark."""
    # An alias shares its node: visiting it once reports its duplicates once.
    if node is None or id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, MappingNode):
        first: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, ScalarNode) else None
            if key is None or key == "<<":
                continue
            if key in first:
                yield (*loc, key), first[key], key_node.start_mark
            else:
                first[key] = key_node.start_mark.line + 1
            yield from duplicate_keys(value_node, (*loc, key), seen)
    elif isinstance(node, SequenceNode):
        for index, item in enumerate(node.value):
            yield from duplicate_keys(item, (*loc, index), seen)


def plain(value: object, active: frozenset[int]) -> object:
    """The YAML tree as builtins, keys and order kept: what the validators see."""
    if isinstance(value, Mapping | list):
        if id(value) in active:
            raise SelfReferenceError
        inner = active | {id(value)}
        if isinstance(value, Mapping):
            return {_plain_key(key): plain(item, inner) for key, item in value.items()}
        return [plain(item, inner) for item in value]
    # ruamel's scalar subclasses carry formatting state; strict validation wants builtins.
    if isinstance(value, bool | ScalarBoolean):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, datetime):
        return datetime.combine(value.date(), value.timetz())
    return value  # dates, null, and what JSON cannot hold (bytes, sets, tags) for validators


def _plain_key(key: object) -> object:
    return plain(key, frozenset()) if isinstance(key, bool | int | float | str) else key


class SelfReferenceError(Exception):
    """The YAML tree contains itself (a recursive alias), so it has no plain form."""


def locate(tree: object, loc: Loc, at: Anchor) -> tuple[int, int, Loc]:
    """The 0-based line and column of `loc`, and the part of `loc` that names a key.

    A key that is absent (a missing key) points at the mapping that lacks it; a path
    that runs below a scalar (shorthands like `every: 90s`) points at the scalar.
    """
    node, key_at, value_at = tree, (0, 0), (0, 0)
    for depth, element in enumerate(loc):
        if element == "[key]":  # pydantic's marker for a problem with a mapping key
            return (*key_at, loc[:depth])
        if isinstance(node, CommentedMap) and element in node:
            where = node.lc.data.get(element)  # absent for keys brought in by a `<<` merge
            if where is not None:
                key_at, value_at = (where[0], where[1]), (where[2], where[3])
        elif isinstance(node, CommentedSeq) and isinstance(element, int) and element < len(node):
            where = node.lc.data.get(element)
            if where is not None:
                key_at = value_at = (where[0], where[1])
        elif isinstance(node, Mapping):
            return (*key_at, tuple(part for part in loc if part != "[key]"))
        else:
            return (*value_at, loc[:depth])
        node = node[element]
    # A mapping or list value starts on the line after its key in block style, and a
    # null value has no position of its own: both read better at their key.
    use_key = at == "key" or node is None or isinstance(node, Mapping | list)
    return (*(key_at if use_key else value_at), loc)


def key_path(tree: object, loc: Loc) -> str:
    """`triggers[nightly-backup].catchup.window`: list items by their unique id, else index."""
    text, node = "", tree
    for element in loc:
        if isinstance(element, int) and isinstance(node, list):
            text += f"[{_item_label(node, element)}]"
        else:
            text += f".{element}" if text else str(element)
        node = _child(node, element)
    return text


def _child(node: object, element: str | int) -> object:
    if isinstance(node, Mapping) and element in node:
        return node[element]
    if isinstance(node, list) and isinstance(element, int) and element < len(node):
        return node[element]
    return None


def _item_label(items: list[Any], index: int) -> str:
    item = items[index] if index < len(items) else None
    ident = item.get("id") if isinstance(item, Mapping) else None
    if not isinstance(ident, str) or len(ident) > MAX_ID_LENGTH or not ID_PATTERN.fullmatch(ident):
        return str(index)
    same = [other for other in items if isinstance(other, Mapping) and other.get("id") == ident]
    return ident if len(same) == 1 else str(index)
