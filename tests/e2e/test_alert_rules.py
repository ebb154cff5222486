"""The shipped Prometheus alert rules (`prometheus/triggers.rules.yml`): promtool accepts
them, evaluates every alert firing and not firing on sample series, and every metric
they name is one a real daemon serves, so the rules cannot rot."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import textwrap
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from ruamel.yaml import YAML

from tests.e2e.conftest import Cli, stop, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "prometheus" / "triggers.rules.yml"
CASES = ROOT / "tests" / "prometheus" / "triggers.rules.test.yml"
PROMETHEUS_OWN = {"up"}
"""Series Prometheus makes itself, not the daemon."""
TARGET_LABELS = {"job", "instance"}
"""Labels Prometheus adds to every scraped series."""


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        reason = "promtool is not installed (Debian: apt-get install prometheus)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return found


def _load(path: Path) -> Any:
    return YAML(typ="safe").load(path.read_text())


def _rules() -> list[dict[str, Any]]:
    document = _load(RULES)
    return [rule for group in document["groups"] for rule in group["rules"]]


def test_promtool_accepts_the_rules_file() -> None:
    result = subprocess.run(
        [_promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in result.stdout


def test_promtool_evaluates_every_alert_firing_and_quiet(tmp_path: Path) -> None:
    promtool = _promtool()
    # promtool compares annotations verbatim; the cases check expressions, labels and
    # `for`, on the rules as shipped less their annotations (checked above).
    document = _load(RULES)
    for group in document["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    with (tmp_path / RULES.name).open("w") as stripped:
        YAML(typ="safe").dump(document, stripped)
    shutil.copyfile(CASES, tmp_path / CASES.name)
    result = subprocess.run(
        [promtool, "test", "rules", CASES.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr

    # Every alert is seen firing in some case, and quiet in some case.
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in _load(CASES)["tests"]:
        for check in case["alert_rule_test"]:
            (firing if check["exp_alerts"] else quiet).add(check["alertname"])
    alerts = {rule["alert"] for rule in _rules()}
    assert firing == alerts
    assert quiet == alerts


def _names(expression: str) -> set[str]:
    """The series names an expression selects (not label names, functions, durations)."""
    without_labels = re.sub(r"\{[^}]*\}", "", expression)
    without_ranges = re.sub(r"\[[^\]]*\]", "", without_labels)
    without_groups = re.sub(r"\b(by|without)\s*\([^)]*\)", "", without_ranges)
    # A word before `(` is a function or an aggregation.
    words = set(re.findall(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()", without_groups))
    return words - {"and", "or", "unless", "offset", "bool", "on", "ignoring"}


def test_every_metric_the_rules_use_is_served_by_a_real_daemon(cli: Cli, tmp_path: Path) -> None:
    used = set().union(*(_names(rule["expr"]) for rule in _rules())) - PROMETHEUS_OWN
    assert "triggers_runs_parked" in used  # the parser finds names
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    config = tmp_path / "t.yaml"
    config.write_text(
        textwrap.dedent(
            """\
            version: 1
            flows:
              noop: {steps: []}
            triggers:
              - {id: beat, flow: noop, every: 1s}
            """
        )
    )
    cli.env["TRIGGERS_METRICS_ADDRESS"] = f"127.0.0.1:{port}"
    daemon = cli.daemon(config, tmp_path / "d.log")
    try:

        def served() -> str | None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                    text = r.read().decode()
            except OSError:
                return None
            return text if "triggers_trigger_next_fire_timestamp_seconds{" in text else None

        text = wait_for(served, timeout=60, what="the daemon's metrics")
    finally:
        assert stop(daemon) == 0
    # `# TYPE name kind` names each family as scraped (a counter with `_total`), samples
    # or not (a counter nothing has counted yet has none).
    names = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")}
    assert used - names == set(), f"the rules use metrics the daemon does not serve: {used - names}"

    # The labels they select on and group by are the daemon's too.
    labels: dict[str, set[tuple[str, str]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels.setdefault(sample.name, set()).update(sample.labels.items())
    label_names = {name for pairs in labels.values() for name, _ in pairs}
    for rule in _rules():
        expression = rule["expr"]
        for name, matchers in re.findall(r"\b(triggers_[a-z_]+)\{([^}]*)\}", expression):
            for label, value in re.findall(r'(\w+)\s*=\s*"([^"]*)"', matchers):
                if label not in TARGET_LABELS and name in labels:
                    assert (label, value) in labels[name], (rule["alert"], name, label, value)
        for grouping in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expression):
            for label in re.findall(r"\w+", grouping):
                assert label in label_names | TARGET_LABELS, (rule["alert"], label)
