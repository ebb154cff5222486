"""The YAML tree of a declarations file, and where each of its keys and values sits.

ruamel's round-trip loader keeps every key's and value's line and column, so a
problem found on the plain data can be pointed at in the file. It is pure Python,
about 0.3 ms a trigger; a valid file needs no positions, so `read_plain` reads it
first with libyaml (ruamel's C parser, the same YAML 1.2 resolver), about ten
times faster, and only a file with a problem is read again to locate it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any, Literal, TypeAlias

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.constructor import SafeConstructor
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from ruamel.yaml.resolver import VersionedResolver
from ruamel.yaml.scalarbool import ScalarBoolean
from ruamel.yaml.tag import Tag

try:
    from ruamel.yaml.cyaml import CParser  # type: ignore[attr-defined] # re-exported from libyaml's build
except ImportError:  # no libyaml build (`ruamel.yaml.clibz`) for this platform
    CParser = None

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


# Where the C path and the round-trip path could read the same text differently: tags
# (`!!str 5` is a plain string to one, a tagged scalar to the other), merge keys (the
# merged keys' order) and directives (`%YAML 1.1`, which only the round trip obeys).
_NOT_PLAIN = re.compile(r"!|<<|^%", re.MULTILINE)
NOT_READ = object()
"""What `read_plain` returns for a text it leaves to `read_yaml`."""


def read_plain(text: str) -> object:
    """The document as builtins, read by libyaml, or `NOT_READ`.

    `NOT_READ` when libyaml is not installed, when the text is not YAML, repeats a
    key, contains itself, or uses what the two paths might read apart (tags, merge
    keys, directives): `read_yaml` then reads it, and reports what is wrong where."""
    if CParser is None or _NOT_PLAIN.search(text):
        return NOT_READ
    loader = _PlainLoader(text)
    try:
        node = loader.get_single_node()
        if any(True for _ in duplicate_keys(node, (), set())):
            return NOT_READ
        return None if node is None else _built(node, loader, {}, set())
    except (YAMLError, SelfReferenceError, TypeError, ValueError):
        return NOT_READ
    finally:
        loader.dispose()


_STR = "tag:yaml.org,2002:str"


def _built(node: Node, loader: Any, done: dict[int, object], active: set[int]) -> object:
    """The plain value of a node, as the safe constructor and `plain` would make it.

    Most nodes are strings, mappings and lists, built here directly (the constructor's
    generic machinery costs more than libyaml's parsing); other scalars (numbers,
    booleans, null, timestamps) go to the safe constructor. An alias is the value of
    its anchor; one inside itself is a `SelfReferenceError`, as in `plain`."""
    key = id(node)
    if key in done:
        if key in active:
            raise SelfReferenceError
        return done[key]
    if isinstance(node, ScalarNode):
        return node.value if node.tag == _STR else loader.construct_object(node, deep=True)
    active.add(key)
    if isinstance(node, SequenceNode):
        items: list[object] = []
        done[key] = items
        items.extend(_built(item, loader, done, active) for item in node.value)
    else:
        mapping: dict[object, object] = {}
        done[key] = mapping
        for key_node, value_node in node.value:
            name = _built(key_node, loader, done, active)
            value = _built(value_node, loader, done, active)
            # As the constructors do: a list key becomes a tuple, other unhashable keys
            # are refused (TypeError: the round trip reports them), and of two keys that
            # are equal values (`1` and `true`) the first stays.
            mapping.setdefault(tuple(name) if isinstance(name, list) else name, value)
    active.discard(key)
    return done[key]


if CParser is not None:

    class _PlainLoader(CParser, SafeConstructor, VersionedResolver):  # type: ignore[misc]
        """libyaml's scanner, parser and composer; ruamel's YAML 1.2 resolver and safe
        constructor (what `YAML(typ="safe")` would assemble, had it found libyaml)."""

        def __init__(self, text: str) -> None:
            CParser.__init__(self, text)
            self._parser = self._composer = self
            SafeConstructor.__init__(self, loader=self)
            self.allow_duplicate_keys = True  # found on the node tree, as `read_yaml` does
            VersionedResolver.__init__(self, version=None, loadumper=self)
            self._rules: dict[str | None, list[tuple[str, Any]]] | None = None

        # ruamel looks the version up for every scalar; a text without directives is
        # read by the YAML 1.2 rules, as the round trip reads it.
        processing_version = (1, 2)

        def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
            """`VersionedResolver.resolve` for one fixed version and no path resolvers:
            libyaml calls it for every node, and the general one looks its rules up
            anew each time."""
            if kind is ScalarNode and implicit[0]:
                rules = self._rules
                if rules is None:
                    found = self.versioned_resolver
                    anywhere = found.get(None, [])
                    # The patterns' own `match` (ruamel wraps each in a lazy proxy).
                    rules = self._rules = {
                        first: [(tag, pattern.match) for tag, pattern in [*r, *anywhere]]
                        for first, r in found.items()
                    }
                    rules[None] = [(tag, pattern.match) for tag, pattern in anywhere]
                for tag, match in rules.get(value[:1], rules[None]):
                    if match(value):
                        return Tag(suffix=tag)
            return super().resolve(kind, value, (False, False))


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
