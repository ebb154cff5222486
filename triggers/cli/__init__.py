"""The `triggers` command line: parse, call one operation, render.

Every query takes `--json`: one JSON document on stdout and nothing else. On
failure stdout stays empty and stderr carries the error (a JSON object under
`--json`). Exit codes: 0 ok, 1 failed, 2 bad input, 75 retry later (database
unavailable), 78 configuration or schema.
"""

from triggers.cli import _audit, _commands, _runs  # noqa: F401 (importing registers the commands)
from triggers.cli._app import app, main
from triggers.cli._common import parse_time

__all__ = ["app", "main", "parse_time"]
