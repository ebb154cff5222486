"""The metrics an operator alerts on, scraped from a real daemon's endpoint."""

from __future__ import annotations

import signal
import socket
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.catalogue import catalogued_metrics
from tests.e2e.conftest import Cli, stop, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

CONFIG = textwrap.dedent(
    """\
    version: 1
    flows:
      noop: {steps: []}
      broken:
        steps:
          - {id: fail, run: [sh, -c, 'exit 3']}
      slow:
        steps:
          - {id: nap, run: [sleep, '3']}
    triggers:
      - {id: good, flow: noop, every: 1s}
      - {id: bad, flow: broken, every: 1s}
      - {id: busy, flow: slow, every: 1s, overlap: skip}
      - {id: resting, flow: noop, every: 1h}
    """
)

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _scrape(port: int) -> tuple[Samples, set[str]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    samples: Samples = {}
    names = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples, names


def _value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def test_a_daemon_exposes_what_an_operator_alerts_on(cli: Cli, tmp_path: Path) -> None:
    port = _free_port()
    config = tmp_path / "t.yaml"
    config.write_text(CONFIG)
    cli.env["TRIGGERS_METRICS_ADDRESS"] = f"127.0.0.1:{port}"
    daemon = cli.daemon(config, tmp_path / "d.log")
    try:
        wait_for(lambda: cli.run("list", check=False).returncode == 0, timeout=30, what="apply")
        cli.run("pause", "resting", "--note", "maintenance")

        def settled() -> tuple[Samples, set[str]] | None:
            samples, names = _scrape(port)
            wanted = [
                _value(
                    samples, "triggers_trigger_last_success_timestamp_seconds", trigger_id="good"
                ),
                _value(
                    samples, "triggers_trigger_last_failure_timestamp_seconds", trigger_id="bad"
                ),
                _value(samples, "triggers_fires_total", outcome="skipped", reason="overlap"),
                _value(samples, "triggers_trigger_paused", trigger_id="resting"),
            ]
            return (samples, names) if all(v is not None for v in wanted) else None

        samples, names = wait_for(settled, timeout=60, what="successes, failures and skips")
        now = time.time()

        last_success = _value(
            samples, "triggers_trigger_last_success_timestamp_seconds", trigger_id="good"
        )
        assert last_success is not None and now - 60 < last_success <= now
        assert _value(samples, "triggers_fires_total", outcome="completed", reason="") >= 1  # type: ignore[operator]
        assert _value(samples, "triggers_fires_total", outcome="failed", reason="") >= 1  # type: ignore[operator]
        next_fire = _value(
            samples, "triggers_trigger_next_fire_timestamp_seconds", trigger_id="good"
        )
        assert next_fire is not None and now - 5 < next_fire < now + 5
        assert (
            _value(samples, "triggers_trigger_next_fire_timestamp_seconds", trigger_id="resting")
            is None
        ), "a paused trigger has no next fire"
        assert _value(samples, "triggers_triggers", state="paused") == 1
        assert _value(samples, "triggers_triggers", state="enabled") == 3
        assert _value(samples, "triggers_triggers_blocked") == 0
        assert _value(samples, "triggers_runs_parked") == 0
        assert _value(samples, "triggers_reloads_total", result="applied") == 1
        assert _value(samples, "triggers_last_reload_successful") == 1
        [build] = [k for k in samples if k[0] == "triggers_build_info"]
        assert dict(build[1])["version"]
        assert _value(samples, "process_resident_memory_bytes")
        assert _value(samples, "process_cpu_seconds_total") is not None
        assert _value(samples, "triggers_tick_duration_seconds_count")
        assert _value(samples, "triggers_launch_duration_seconds_count")
        assert _value(samples, "triggers_fire_latency_seconds_count")
        assert "triggers_store_errors" in names
        last_tick = _value(samples, "triggers_last_tick_timestamp_seconds")
        assert last_tick is not None and now - 10 < last_tick <= now

        config.write_text(CONFIG.replace("every: 1h", "every: never"))
        daemon.send_signal(signal.SIGHUP)
        refused = wait_for(
            lambda: _value(_scrape(port)[0], "triggers_reloads_total", result="refused"),
            timeout=30,
            what="the refused reload",
        )
        assert refused == 1
        assert _value(_scrape(port)[0], "triggers_last_reload_successful") == 0
    finally:
        assert stop(daemon) == 0

    assert names <= catalogued_metrics(), "every metric a daemon serves is in the catalogue"
