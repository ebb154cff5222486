"""Read `docs/catalogue.md` and the code it describes, for the tests that keep them equal.

The catalogue lists every log event (with its level), every metric and every error
code; the code is scanned for the log calls (`log.info("event", ...)`) it makes.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CATALOGUE = ROOT / "docs" / "catalogue.md"
_LEVELS = {"debug", "info", "warning", "error", "exception", "critical"}


def section(title: str) -> str:
    """The text of the catalogue's `## title` section."""
    text = CATALOGUE.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def table_rows(text: str) -> list[list[str]]:
    """The body rows of every markdown table in `text`, cells without backticks."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("|") or re.fullmatch(r"\|[\s:|-]+\|", line):
            continue
        cells = [cell.strip().strip("`") for cell in line.strip("|").split("|")]
        rows.append(cells)
    # Each table's first row is its header.
    return [row for row in rows if row[0] not in ("event", "metric", "code")]


def catalogued_events() -> dict[str, str]:
    """Event name -> the level cell of its row."""
    return {row[0]: row[1] for row in table_rows(section("Log events"))}


def catalogued_metrics() -> set[str]:
    """Metric family names as a scrape names them (`_total` of counters dropped)."""
    names = set()
    for row in table_rows(section("Metrics")):
        names.add(row[0])
        names.add(row[0].removesuffix("_total"))
    return names


def catalogued_codes() -> dict[str, str]:
    """Error code -> the class name of its row."""
    return {row[0]: row[1] for row in table_rows(section("Error codes"))}


def logged_events() -> dict[str, set[str]]:
    """Every event the code logs -> the levels it logs it at (`log(...)`: `varies`)."""
    found: dict[str, set[str]] = defaultdict(set)
    for package in ("triggers", "looms_runtime"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                event = _log_call(node)
                if event is not None:
                    found[event[0]].add(event[1])
    return dict(found)


def _log_call(node: ast.AST) -> tuple[str, str] | None:
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return None
    target = node.func.value
    named = isinstance(target, ast.Name) and target.id == "log"
    fresh = (  # structlog.get_logger().error(...)
        isinstance(target, ast.Call)
        and isinstance(target.func, ast.Attribute)
        and target.func.attr == "get_logger"
    )
    if not (named or fresh):
        return None
    method = node.func.attr
    args = node.args
    if method in _LEVELS and args and isinstance(args[0], ast.Constant):
        level = "error" if method == "exception" else method
        return str(args[0].value), level
    if method == "log" and len(args) >= 2 and isinstance(args[1], ast.Constant):
        return str(args[1].value), "varies"
    return None
