"""Alerts of three daemons on one PostgreSQL: `blocked`, `skipped` and `recovered`, each
raised once (not once per daemon) and delivered once to a real local HTTP receiver."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Cli, on_host, stop, wait_for
from tests.e2e.test_alerts import Receiver, serve

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.timeout(240)]

STEPS = '''\
import os


def die(_input):
    """Crash the worker process: the step is ambiguous, and not idempotent, so its run parks."""
    os._exit(3)
'''


def _config(port: int, flag: Path) -> str:
    return textwrap.dedent(
        f"""\
        version: 1
        alerts:
          channels:
            hook: {{webhook: {{url: "http://127.0.0.1:{port}/hook"}}}}
        flows:
          dies: {{steps: [{{id: crash, python: "alert_steps:die"}}]}}
          slow: {{steps: [{{id: wait, run: [sleep, "2.5"]}}]}}
          flag: {{steps: [{{id: check, run: [test, -e, "{flag}"]}}]}}
        triggers:
          - {{id: parks, flow: dies, every: 1s, alert: {{to: [hook], on: [blocked]}}}}
          - {{id: overlaps, flow: slow, every: 1s, alert: {{to: [hook], on: [skipped]}}}}
          - {{id: flaps, flow: flag, every: 1s, alert: {{to: [hook], on: [failed, recovered]}}}}
        """
    )


def _history(cli: Cli, trigger_id: str) -> list[dict[str, Any]]:
    found = cli.run("history", trigger_id, "--limit", "1000", "--json", check=False)
    return json.loads(found.stdout) if found.returncode == 0 else []


def test_blocked_skipped_and_recovered_are_one_alert_each_from_three_daemons(
    pg_database_url: str, tmp_path: Path
) -> None:
    receiver = Receiver()
    server = serve(receiver)
    (tmp_path / "alert_steps.py").write_text(STEPS)
    flag = tmp_path / "healthy"
    config = tmp_path / "triggers.yaml"
    config.write_text(_config(receiver.port, flag))
    # `on_host` starts from a fresh environment: each host gets the steps' module path.
    clis = [on_host(Cli(pg_database_url, tmp_path), f"host-{n}") for n in range(3)]
    for cli in clis:
        cli.env.update({"PYTHONPATH": str(tmp_path), "TRIGGERS_WORKER_PROCESSES": "1"})
    cli = clis[0]
    daemons = [c.daemon(config, tmp_path / f"daemon-{n}.log") for n, c in enumerate(clis)]
    try:
        wait_for(lambda: receiver.accepted("blocked"), timeout=90, what="the blocked alert")
        wait_for(lambda: receiver.accepted("failed"), timeout=60, what="the failed alert")
        wait_for(lambda: len(receiver.accepted("skipped")) >= 3, timeout=60, what="three skips")
        # More occurrences skip behind the parked run, and fail, while every daemon
        # looks: still one alert of each.
        wait_for(
            lambda: sum(r["reason"] == "blocked" for r in _history(cli, "parks")) >= 4,
            timeout=60,
            what="four occurrences blocked",
        )
        wait_for(
            lambda: sum(r["outcome"] == "failed" for r in _history(cli, "flaps")) >= 3,
            timeout=60,
            what="three failures",
        )
        flag.touch()
        wait_for(lambda: receiver.accepted("recovered"), timeout=60, what="the recovered alert")
        wait_for(
            lambda: sum(r["outcome"] == "completed" for r in _history(cli, "flaps")) >= 3,
            timeout=60,
            what="three completions after the recovery",
        )
    finally:
        codes = [stop(daemon) for daemon in daemons]
        server.shutdown()
        server.server_close()
    assert codes == [0, 0, 0]
    # Unhealthy (a run is parked), so `status` exits 1; its document says why.
    status = json.loads(cli.run("status", "--json", check=False).stdout)
    assert {d["host"] for d in status["daemons"]} == {"host-0", "host-1", "host-2"}

    # Every request was answered 200 and carried an id no other request did.
    keys = [key for key, _, _ in receiver.requests]
    assert len(keys) == len(set(keys))

    [(_, blocked)] = receiver.accepted("blocked")
    assert [run["run_id"] for run in status["parked_runs"]] == [blocked["blocked_by"]]
    behind = [r for r in _history(cli, "parks") if r["reason"] == "blocked"]
    assert len(behind) >= 4
    assert {r["blocked_by"] for r in behind} == {blocked["blocked_by"]}

    [(_, failed)] = receiver.accepted("failed")
    [(_, recovered)] = receiver.accepted("recovered")
    assert failed["trigger_id"] == recovered["trigger_id"] == "flaps"
    assert recovered["at"] > failed["at"]

    # One alert per skipped occurrence, whichever daemon skipped it: the outbox holds
    # exactly the ledger's skips, and what was delivered arrived once.
    skips = {r["occurrence"] for r in _history(cli, "overlaps") if r["outcome"] == "skipped"}
    outbox = cli.json("alerts", "list", "--trigger", "overlaps", "--limit", "1000")
    assert sorted(a["occurrence"] for a in outbox) == sorted(skips)
    delivered = {a["occurrence"] for a in outbox if a["status"] == "delivered"}
    arrived = [body["occurrence"] for _, body in receiver.accepted("skipped")]
    assert sorted(arrived) == sorted(delivered)
    assert len(arrived) >= 3
