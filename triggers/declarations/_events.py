"""A declarations text's bounds, checked on its event stream before any tree is built.

A YAML text a few hundred bytes long can describe a structure nested deeper than the
C stack can compose (a segfault, not an exception) or, through aliases, a tree of
billions of nodes (nine aliases of nine aliases of ...). Both the composers and the
validators build whole trees, so the bounds (`_limits.Limits`) are checked first, on
the parser's flat stream of events, which costs a stack of counters and stops at the
first bound passed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError
from ruamel.yaml.events import (
    AliasEvent,
    CollectionEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceStartEvent,
)

try:
    from ruamel.yaml.cyaml import CParser  # type: ignore[attr-defined] # re-exported from libyaml's build
except ImportError:  # no libyaml build for this platform: the pure-Python parser checks
    CParser = None

from triggers.declarations._limits import LIMITS, Limits, check_size
from triggers.declarations._messages import declaration_error, problem


class _Stack:
    """One open list or mapping: its entries so far, the key being read, its anchor."""

    __slots__ = ("anchor", "count", "is_mapping", "key", "start")

    def __init__(self, *, is_mapping: bool, anchor: str | None, start: int) -> None:
        self.is_mapping = is_mapping
        self.anchor = anchor
        self.start = start
        self.count = 0
        self.key: object = None


def check_limits(text: str, source: str, limits: Limits = LIMITS) -> None:
    """Refuse a text that passes a bound before anything is built from it.

    A text that is not YAML passes: the reader that follows reports where it breaks.

    Raises:
        DeclarationError: naming the line, the key and the bound passed.
    """
    # Characters never outnumber bytes, and UTF-8 spends at most four bytes on one.
    if len(text) * 4 > limits.file_bytes:
        check_size(len(text.encode()), source, limits)
    if CParser is not None:
        parser = CParser(text)
        try:
            _check(_c_events(parser), source, limits)
        except YAMLError:
            pass  # libyaml stopped where the pure parser might read on: check with it too
        else:
            return
        finally:
            parser.dispose()
    try:
        _check(iter(YAML(typ="rt").parse(text)), source, limits)
    except YAMLError:
        return  # not YAML: `read_yaml` says where


def _c_events(parser: Any) -> Iterator[Any]:
    get, check = parser.get_event, parser.check_event
    while check():
        yield get()


def _check(events: Iterator[Any], source: str, limits: Limits) -> None:
    stack: list[_Stack] = []
    anchors: dict[str, int] = {}
    total = repeated = 0
    for event in events:
        kind = type(event)
        if kind is ScalarEvent:
            _entry(event, stack, source, limits)
            total += 1
            if len(event.value) > limits.string_chars:
                what = f"a string of {len(event.value):,} characters"
                _refuse(event, stack, source, f"{what}, over the limit of {limits.string_chars:,}")
            if event.anchor is not None:
                anchors[event.anchor] = 1
        elif kind is AliasEvent:
            _entry(event, stack, source, limits)
            # An anchor still open (an alias inside itself) is reported by the reader.
            size = anchors.get(event.anchor, 1)
            total += size
            repeated += size
            if repeated > limits.alias_nodes:
                message = f"aliases repeat over {limits.alias_nodes:,} values in all"
                _refuse(event, stack, source, message)
        elif kind is MappingStartEvent or kind is SequenceStartEvent:
            _entry(event, stack, source, limits)
            total += 1
            is_mapping = kind is MappingStartEvent
            stack.append(_Stack(is_mapping=is_mapping, anchor=event.anchor, start=total))
            if len(stack) > limits.depth:
                _refuse(event, stack, source, f"nested over the limit of {limits.depth} levels")
        elif isinstance(event, CollectionEndEvent):
            closed = stack.pop()
            if closed.anchor is not None:
                anchors[closed.anchor] = total - closed.start + 1
            continue
        else:
            continue
        if total > limits.nodes:
            _refuse(event, stack, source, f"the document holds over {limits.nodes:,} values")


def _entry(event: Any, stack: list[_Stack], source: str, limits: Limits) -> None:
    """Count one more key, value or item in the collection that holds `event`."""
    if not stack:
        return
    top = stack[-1]
    top.count += 1
    if top.is_mapping:
        if top.count % 2:
            top.key = event.value if type(event) is ScalarEvent else "[key]"
            return
        entries, what = top.count // 2, "keys"
    else:
        entries, what = top.count, "items"
    bound = limits.top_entries if len(stack) <= 2 else limits.entries  # noqa: PLR2004 # the top mapping and its values
    if entries > bound:
        _refuse(
            event,
            stack,
            source,
            f"over {bound:,} {what} in one {'mapping' if top.is_mapping else 'list'}",
        )


def _refuse(event: Any, stack: list[_Stack], source: str, message: str) -> None:
    mark = event.start_mark
    raise declaration_error(
        [problem(source, mark.line + 1, mark.column + 1, _path(stack), message)]
    ) from None


def _path(stack: list[_Stack]) -> str:
    """The key path to the collection being read: `triggers[3].cron`."""
    text = ""
    for index, frame in enumerate(stack):
        if not frame.count:
            break  # a collection just opened: the path is to where it opened
        if frame.is_mapping:
            if index == len(stack) - 1 and frame.count % 2:
                break  # at a key of the innermost mapping: the path is to the mapping
            text += f".{frame.key}" if text else str(frame.key)
        else:
            text += f"[{frame.count - 1}]"
    return text


__all__ = ["check_limits"]
