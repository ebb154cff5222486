"""What a command step's environment holds, read by the step itself under the daemon.

A step once inherited the daemon's whole environment: `env` in a step recorded
`TRIGGERS_DATABASE_URL` with its password and the paths of the API token files.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.e2e.conftest import Cli, stop, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

STEPS = textwrap.dedent(
    """\
    version: 1
    flows:
      show:
        steps:
          - id: env
            run: [sh, -c, 'env; echo "-- supervisor"; tr "\\0" "\\n" < /proc/$PPID/environ']
            env: {DECLARED: from-the-step}
    triggers:
      - {id: show, flow: show, every: 1d}
    """
)


def _stdout(cli: Cli) -> str | None:
    rows = [r for r in cli.json("history", "show") if r["outcome"] == "completed"]
    if not rows:
        return None
    [attempt] = cli.json("runs", "logs", rows[0]["run_id"], "env")
    return str(attempt["stdout"])


def test_a_command_step_gets_the_basics_and_never_the_daemons_settings(
    cli: Cli, tmp_path: Path
) -> None:
    config = tmp_path / "steps.yaml"
    config.write_text(STEPS)
    tokens = tmp_path / "tokens"
    tokens.write_text("reader-token-0123456789abcdef\n")
    cli.env.update(
        {
            "TRIGGERS_API_TOKEN_FILE": str(tokens),
            "PGPASSWORD": "the-daemons-database-password",
            "UNIT_OWN": "from-the-unit",
            "LANG": "C.UTF-8",
        }
    )
    cli.run("apply", str(config))
    daemon = cli.daemon(config, tmp_path / "d.log")
    try:
        cli.run("fire", "show")
        output = wait_for(lambda: _stdout(cli), timeout=60, what="the step's output")
    finally:
        assert stop(daemon) == 0
    step, supervisor = output.split("-- supervisor\n")
    variables = dict(line.split("=", 1) for line in step.splitlines() if "=" in line)
    assert variables["DECLARED"] == "from-the-step"
    assert variables["UNIT_OWN"] == "from-the-unit"
    assert variables["LANG"] == "C.UTF-8"
    assert {"PATH", "HOME", "TRIGGERS_RUN_ID", "TRIGGERS_TRIGGER_ID"} <= set(variables)
    for withheld in ("TRIGGERS_DATABASE_URL", "TRIGGERS_API_TOKEN_FILE", "PGPASSWORD"):
        assert withheld not in variables
        assert withheld not in supervisor, "the supervisor holds no daemon setting either"
    assert str(tokens) not in output
