"""The `triggers` command line: parse, call one operation, render.

Every command that shows something takes `--output table|json|jsonl` (`--json` is
`--output json`): one JSON document on stdout and nothing else. On failure stdout
stays empty and stderr carries the error (a JSON object under `--json`). Exit
codes: 0 ok, 1 failed, 2 bad input, 3 `status` needs attention, 75 retry later
(database unavailable), 78 configuration or schema. The command reference is
docs/cli.md.
"""

from triggers.cli import (  # noqa: F401 (importing registers the commands)
    _alerts,
    _apply,
    _audit,
    _commands,
    _fires,
    _foresight,
    _runs,
    _status,
    _timeline,
    _triggers,
)
from triggers.cli._app import app, main
from triggers.times import parse_time

__all__ = ["app", "main", "parse_time"]
