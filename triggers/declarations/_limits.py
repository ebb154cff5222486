"""The bounds of a declarations file (docs/yaml.md "Limits").

Every limit is far above what any real declarations file needs; `_events` checks them
on the parser's event stream before any tree is built. Standard library only: the
daemon checks a file's size before it loads the parser.
"""

from __future__ import annotations

from dataclasses import dataclass

from triggers.declarations._messages import declaration_error, problem


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """The bounds of one declarations file (docs/yaml.md "Limits")."""

    file_bytes: int = 64 * 1024 * 1024
    """The file's size in bytes."""
    depth: int = 64
    """How deeply lists and mappings nest (the top mapping is depth 1)."""
    string_chars: int = 1024 * 1024
    """The length of one string (a key or a value), in characters."""
    entries: int = 10_000
    """Items of one list, or keys of one mapping, below the top level."""
    top_entries: int = 1_000_000
    """Items or keys of a collection at the top level (`flows`, `triggers`)."""
    nodes: int = 10_000_000
    """Values in the whole document, each alias counted as the values it repeats."""
    alias_nodes: int = 1_000_000
    """Values that aliases repeat, in all."""


LIMITS = Limits()


def check_size(size: int, source: str, limits: Limits = LIMITS) -> None:
    """Refuse a file larger than `limits.file_bytes`.

    Raises:
        DeclarationError: the file is too large.
    """
    if size > limits.file_bytes:
        message = f"the file is {size:,} bytes, over the limit of {limits.file_bytes:,} bytes"
        raise declaration_error([problem(source, 0, 0, "", message)])


__all__ = ["LIMITS", "Limits", "check_size"]
