"""What a command step's environment holds, read by the step itself under the daemon.

A step once inherited the daemon's whole environment: `env` in a step recorded
`TRIGGERS_DATABASE_URL` with its password and the paths of the API token files.
"""

from __future__ import annotations

import json
import os
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


SECRETS = textwrap.dedent(
    """\
    version: 1
    flows:
      deploy:
        steps:
          - id: use
            run: [sh, -c, 'echo "db=$PGPASSWORD token=$TOKEN host=$PGHOST"; echo "$TOKEN" >&2']
            env_inherit: [PGHOST]
            secrets:
              PGPASSWORD: {file: SECRET_FILE}
              TOKEN: {credential: api-token}
    triggers:
      - {id: deploy, flow: deploy, every: 1d}
    """
)


def test_secrets_reach_the_step_and_are_redacted_from_what_is_recorded(
    cli: Cli, tmp_path: Path
) -> None:
    secret_file = tmp_path / "pg-password"
    secret_file.write_text("correct-horse-battery\n")
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    (credentials / "api-token").write_text("tok-0123456789")
    config = tmp_path / "secrets.yaml"
    config.write_text(SECRETS.replace("SECRET_FILE", str(secret_file)))
    cli.env.update({"CREDENTIALS_DIRECTORY": str(credentials), "PGHOST": "db.internal"})
    cli.run("apply", str(config))
    log = tmp_path / "d.log"
    daemon = cli.daemon(config, log)
    try:
        cli.run("fire", "deploy")

        def attempt() -> dict[str, str] | None:
            rows = [r for r in cli.json("history", "deploy") if r["outcome"] == "completed"]
            return cli.json("runs", "logs", rows[0]["run_id"], "use")[0] if rows else None

        found = wait_for(attempt, timeout=60, what="the step's output")
    finally:
        assert stop(daemon) == 0
    assert found["stdout"] == (
        "db=[secret PGPASSWORD] token=[secret TOKEN] host=db.internal\n"
    )  # the step got both values, and PGHOST by env_inherit
    assert found["stderr"] == "[secret TOKEN]\n"
    for path in [log, *tmp_path.glob("triggers.sqlite*")]:
        data = path.read_bytes()
        assert b"correct-horse-battery" not in data, path
        assert b"tok-0123456789" not in data, path


PEEK_SCRIPT = (
    'for p in $(pgrep -f "triggers run --config"); do echo "pid $p"; '
    'tr "\\0" "\\n" < /proc/$p/environ; done; true'
)


def test_a_step_of_the_daemons_own_user_cannot_read_the_daemons_environment(
    cli: Cli, tmp_path: Path
) -> None:
    # A step runs as the daemon's user: /proc/DAEMON/environ is that user's to read
    # unless the daemon forbids it.
    if os.geteuid() == 0:
        pytest.skip(
            "root reads every process's /proc files: tests/integration/test_undumpable.py "
            "checks the daemon's and the supervisor's code as nobody"
        )
    argv = ["sh", "-c", PEEK_SCRIPT]
    config = tmp_path / "peek.yaml"
    config.write_text(
        "version: 1\n"
        f"flows: {{peek: {{steps: [{{id: peek, run: {json.dumps(argv)}}}]}}}}\n"
        "triggers: [{id: peek, flow: peek, every: 1d}]\n"
    )
    cli.env["PGPASSWORD"] = "the-daemons-database-password"
    cli.run("apply", str(config))
    log = tmp_path / "d.log"
    daemon = cli.daemon(config, log)
    try:
        cli.run("fire", "peek")

        def output() -> str | None:
            rows = [r for r in cli.json("history", "peek") if r["outcome"] == "completed"]
            if not rows:
                return None
            [attempt] = cli.json("runs", "logs", rows[0]["run_id"], "peek")
            return f"{attempt['stdout']}{attempt['stderr']}"

        seen = wait_for(output, timeout=60, what="the step's output")
    finally:
        assert stop(daemon) == 0
    assert f"pid {daemon.pid}" in seen, seen  # it found the daemon and tried
    assert "the-daemons-database-password" not in seen
    assert "TRIGGERS_DATABASE_URL" not in seen
    assert "Permission denied" in seen or "Operation not permitted" in seen, seen
