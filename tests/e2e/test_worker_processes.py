"""The real daemon runs Python flows in worker processes: a flow that spins holding the
GIL for ten seconds does not delay another trigger's claims, measured from the ledger.
"""

from __future__ import annotations

import json
import os
import textwrap
from datetime import UTC, datetime
from pathlib import Path
from statistics import median
from typing import Any

import pytest
import sqlalchemy as sa

from tests.e2e.conftest import Cli, log_events, stop, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

SPIN_S = 10
CLAIM_BOUND_S = 0.5
"""Generous: a claim takes milliseconds. In the daemon's own interpreter the flow's
calls hold the GIL the tick needs for a second each: with `TRIGGERS_WORKER_PROCESSES=0`
this test measured claims up to 35 s late (median 15 s); in workers, 68 ms at most."""

FLOWS = textwrap.dedent(
    '''\
    """Flows of the worker-process test, imported by the daemon's workers."""

    import os
    import time
    from pathlib import Path


    def spin(ctx, data):
        Path(data["pid_file"]).write_text(str(os.getpid()))
        end = time.monotonic() + data["seconds"]
        count = 0
        while time.monotonic() < end:
            # One call in C that never lets go of the GIL: about a second each.
            count += sum(range(50_000_000))
        return ctx.step("after", done, count)


    def done(count):
        return {"spun": count > 0, "pid": os.getpid()}


    def mark(_input):
        return os.getpid()
    '''
)

CONFIG = textwrap.dedent(
    """\
    version: 1
    flows:
      spinning:
        python: spin_flows:spin
      ticking:
        steps:
          - {{id: mark, python: "spin_flows:mark"}}
    triggers:
      - id: spin
        flow: spinning
        every: 1h
        input: {{pid_file: "{pid_file}", seconds: {seconds}}}
      - {{id: tick, flow: ticking, every: 1s, overlap: allow, max_active: 5}}
    """
)


def _ledger(url: str, trigger_id: str) -> list[dict[str, Any]]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT occurrence_at, claimed_at, outcome, run_id FROM fires "
                    "WHERE trigger_id = :id ORDER BY occurrence_at"
                ),
                {"id": trigger_id},
            ).mappings()
            return [dict(row) for row in rows]
    finally:
        engine.dispose()


def test_a_flow_spinning_for_ten_seconds_delays_no_other_triggers_claim(
    cli: Cli, tmp_path: Path
) -> None:
    (tmp_path / "spin_flows.py").write_text(FLOWS)
    pid_file = tmp_path / "spin.pid"
    config = tmp_path / "triggers.yaml"
    config.write_text(CONFIG.format(pid_file=pid_file, seconds=SPIN_S))
    cli.env["PYTHONPATH"] = str(tmp_path)
    cli.env["TRIGGERS_WORKER_PROCESSES"] = "2"
    log = tmp_path / "daemon.log"

    daemon = cli.daemon(config, log)
    try:
        wait_for(lambda: _ticked(cli), timeout=60, what="the daemon to tick")
        cli.run("fire", "spin")
        wait_for(pid_file.exists, timeout=60, what="the spinning flow to start")
        spin_from = pid_file.stat().st_mtime
        spin_pid = int(pid_file.read_text())
        assert spin_pid != daemon.pid
        wait_for(
            lambda: _settled(cli, "spin"), timeout=SPIN_S + 90, what="the spinning flow to end"
        )
        spin_until = datetime.now(UTC).timestamp()
    finally:
        assert stop(daemon) == 0

    rows = _ledger(cli.database_url, "tick")
    during = [row for row in rows if spin_from + 1 <= row["occurrence_at"] / 1000 <= spin_until - 1]
    assert len(during) >= SPIN_S - 4, "the ticking trigger fired every second meanwhile"
    delays = [(row["claimed_at"] - row["occurrence_at"]) / 1000 for row in during]
    assert max(delays) < CLAIM_BOUND_S, sorted(delays)[-5:]
    assert median(delays) < CLAIM_BOUND_S / 10
    assert all(row["outcome"] == "completed" for row in during[:-5])

    spin = cli.json("history", "spin")
    assert spin[0]["outcome"] == "completed", spin[0]
    events = log_events(log)
    assert all(e.get("level") != "error" for e in events)
    assert os.getpid() != spin_pid


def _ticked(cli: Cli) -> bool:
    result = cli.run("history", "tick", "--json", check=False)
    return result.returncode == 0 and bool(json.loads(result.stdout))


def _settled(cli: Cli, trigger_id: str) -> bool:
    result = cli.run("history", trigger_id, "--json", check=False)
    if result.returncode != 0:
        return False
    rows = json.loads(result.stdout)
    return bool(rows) and rows[0]["outcome"] in ("completed", "failed")
