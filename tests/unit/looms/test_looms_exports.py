"""The package's exports resolve on first use: importing it loads none of the engine, and
neither does reading runs without a runtime."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys

import looms_runtime
from looms_runtime._history.state import TERMINAL
from looms_runtime._operations import queries


def test_every_export_resolves_from_its_module() -> None:
    assert set(looms_runtime.__all__) == set(looms_runtime._EXPORTS)
    for name, module in looms_runtime._EXPORTS.items():
        assert getattr(looms_runtime, name) is getattr(importlib.import_module(module), name)


def test_importing_the_database_module_does_not_import_the_runtime() -> None:
    code = (
        "import sys, looms_runtime.db; "
        "print(sorted(m for m in sys.modules if m.startswith(('looms_runtime.', 'structlog'))))"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "['looms_runtime.db']"


def test_reading_runs_without_a_runtime_loads_neither_the_engine_nor_the_fold() -> None:
    code = (
        "import sys, looms_runtime.reads; "
        "print(sorted(m for m in sys.modules if m.startswith(('looms_runtime.', 'structlog'))))"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(ast.literal_eval(found.stdout.strip()))
    never = ("looms_runtime._engine", "looms_runtime._workers", "looms_runtime._effects")
    assert not {name for name in loaded if name.startswith(never)}
    assert not loaded & {"looms_runtime.runtime", "looms_runtime._history.fold", "structlog"}
    assert not loaded & {"looms_runtime._history.planner", "looms_runtime._store.loading"}


def test_listings_call_settled_what_the_fold_calls_terminal() -> None:
    assert queries._SETTLED == TERMINAL
