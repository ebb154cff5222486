"""What commands print: a table, one JSON document, or JSON lines, and nothing else on stdout.

`--output table` (the default) is for people; `--output json` (or `--json`) prints
one document (a list for collections); `--output jsonl` prints one compact object
per line, for `jq -c`, `grep` and streaming. Notes for people (a list cut at
`--limit`) go to stderr and only with tables, so JSON stays a pure document.
"""

from __future__ import annotations

import enum
import json
import sys
from collections.abc import Callable, Sequence
from typing import Annotated, Any

import typer


class Output(enum.StrEnum):
    """The output formats every showing command has."""

    TABLE = "table"
    JSON = "json"
    JSONL = "jsonl"

    @property
    def machine(self) -> bool:
        return self is not Output.TABLE


JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print one JSON document on stdout (--output json).")
]
OutputOpt = Annotated[
    Output | None,
    typer.Option("--output", "-o", help="table (default), json or jsonl.", show_default=False),
]


def value_text(value: Any) -> str:
    """A declaration value as YAML shows it: text as is, the rest as JSON (`null`, `true`)."""
    return value if isinstance(value, str) else json.dumps(value)


def emit(document: Any, output: Output = Output.JSON) -> None:
    """Print `document` as JSON (`json`) or JSON lines (`jsonl`: a list, one item a line)."""
    if output is Output.JSONL:
        items = document if isinstance(document, list) else [document]
        for item in items:
            sys.stdout.write(json.dumps(item, default=str, separators=(",", ":")) + "\n")
        return
    sys.stdout.write(json.dumps(document, indent=2, default=str) + "\n")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any] | str]) -> None:
    """Aligned columns under upper-case headers; None shows as an empty cell. A row that
    is a string is a line of its own among the rows, outside the columns."""
    cells = [
        row if isinstance(row, str) else [("" if v is None else str(v)) for v in row]
        for row in rows
    ]
    widths = [
        max([len(h)] + [len(r[i]) for r in cells if not isinstance(r, str)])
        for i, h in enumerate(headers)
    ]
    line = "  ".join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True))
    sys.stdout.write(line.rstrip() + "\n")
    for row in cells:
        if isinstance(row, str):
            sys.stdout.write(row + "\n")
            continue
        sys.stdout.write(
            "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() + "\n"
        )


def listing(
    items: Sequence[Any],
    output: Output,
    *,
    limit: int,
    to_json: Callable[[Any], Any],
    to_table: Callable[[Sequence[Any]], None],
    what: str,
) -> None:
    """Show a collection fetched with `limit + 1` rows: at most `limit`, and a note
    on stderr under a table when there were more."""
    shown = list(items[:limit])
    if output.machine:
        emit([to_json(item) for item in shown], output)
        return
    to_table(shown)
    if len(items) > limit:
        sys.stdout.flush()  # the note follows the table in a terminal
        sys.stderr.write(f"-- {limit} {what} shown, more not shown; raise --limit to see them --\n")
