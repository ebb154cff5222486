"""The package's exports resolve on first use: importing it loads none of the engine."""

from __future__ import annotations

import importlib
import subprocess
import sys

import looms_runtime


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
