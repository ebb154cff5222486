"""Fault tests: each module runs its scenario once and asserts each invariant apart.

A scenario takes tens of seconds of real daemons, so its report is a module-scoped
fixture and every promise is its own test (one broken promise does not hide
another). The report is written to `$TRIGGERS_TEST_FAULTS_REPORT_DIR/<scenario>.json`
when that variable is set, and its headline is printed (shown with `-s` or `-rA`).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.faults.observations import Json
from tests.faults.report import evidence, headline
from tests.faults.scenarios import SCENARIOS

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def run_scenario(name: str, **params: Any) -> Json:
    """Run scenario `name` with CI-sized `params`; `TRIGGERS_TEST_FAULTS_SEED` fixes its seed."""
    seed = os.environ.get("TRIGGERS_TEST_FAULTS_SEED")
    if seed is not None and name in {"kill9", "sigterm", "three_daemons"}:
        params.setdefault("seed", int(seed))
    report = SCENARIOS[name](**params)
    directory = os.environ.get("TRIGGERS_TEST_FAULTS_REPORT_DIR")
    if directory:
        Path(directory).mkdir(parents=True, exist_ok=True)
        (Path(directory) / f"{name}.json").write_text(json.dumps(report, indent=2))
    sys.stdout.write(json.dumps(headline(report)) + "\n")
    return report


def holds(report: Json, name: str) -> None:
    """Assert invariant `name` of the report, with its evidence; skip if it could not run."""
    item = report["invariants"][name]
    if item["ok"] is None:
        pytest.skip(f"{name}: {item['detail']}")
    assert item["ok"], (
        f"{report['scenario']}: {name}: {item['detail']}\n"
        + json.dumps(evidence(report, name), indent=1)[:6000]
    )
