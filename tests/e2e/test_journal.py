"""The daemon's lines as journald reads them: priorities, and the trigger on runtime lines."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Cli, stop, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

CONFIG = textwrap.dedent(
    """\
    version: 1
    flows:
      broken:
        steps:
          - {id: fail, run: [sh, -c, 'exit 3']}
    triggers:
      - {id: nightly, flow: broken, every: 1s}
    """
)


def _journal_lines(path: Path) -> list[tuple[int, dict[str, Any]]]:
    lines = []
    for line in path.read_text().splitlines():
        assert line[:1] == "<" and line[2:3] == ">", f"no priority prefix: {line!r}"
        lines.append((int(line[1]), json.loads(line[3:])))
    return lines


def test_a_failing_job_shows_in_journalctl_p_warning_with_its_trigger(
    cli: Cli, tmp_path: Path
) -> None:
    config = tmp_path / "t.yaml"
    config.write_text(CONFIG)
    journal = tmp_path / "journal"
    journal.touch()
    stat = journal.stat()
    cli.env["JOURNAL_STREAM"] = f"{stat.st_dev}:{stat.st_ino}"
    cli.env["TRIGGERS_LOG_LEVEL"] = "debug"
    daemon = cli.daemon(config, journal)
    try:
        wait_for(
            lambda: (
                cli.run("list", check=False).returncode == 0
                and cli.json("history", "nightly", "--outcome", "failed")
            ),
            timeout=60,
            what="a failed run",
        )
    finally:
        assert stop(daemon) == 0

    lines = _journal_lines(journal)
    priorities = {(event["event"], event.get("outcome")): p for p, event in lines}
    assert priorities[("run_finished", "failed")] == 3  # err: journalctl -p err shows it
    assert priorities[("effect_failed", None)] == 4  # warning
    assert priorities[("run_launched", None)] == 6  # info
    assert priorities[("effect_dispatched", None)] == 7  # debug

    runtime_lines = [e for _, e in lines if e.get("run_id") and e["event"] != "run_finished"]
    assert {"effect_dispatched", "effect_failed", "run_settled"} <= {
        e["event"] for e in runtime_lines
    }
    assert {e.get("trigger_id") for e in runtime_lines} == {"nightly"}
