"""The installed CLI in pipes and scripts: exit codes, JSON, global options, times, pipes."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.e2e.conftest import TRIGGERS, Cli

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

SECRET = "s3cr3t-token-value"  # noqa: S105 (a fake secret the output must never show)


def _declarations(path: Path, count: int) -> Path:
    lines = ["version: 1", "flows:", "  noop: {steps: []}", "triggers:"]
    lines += [
        f"  - {{id: job-{n:04d}, flow: noop, every: 1h, input: {{token: {SECRET}}}}}"
        for n in range(count)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_reader_that_goes_away_ends_the_command_quietly(cli: Cli, tmp_path: Path) -> None:
    cli.run("apply", str(_declarations(tmp_path / "many.yaml", 300)))
    # More than a pipe holds, so the command is still writing when `head` has gone.
    with subprocess.Popen(
        [TRIGGERS, "list", "--json"],
        env=cli.env,
        cwd=cli.workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        first = process.stdout.readline()
        process.stdout.close()
        code = process.wait(timeout=60)
        err = process.stderr.read()
    assert first.strip() == b"["
    assert (code, err) == (0, b"")


def test_configuration_errors_exit_78_in_one_line_without_the_password(
    cli: Cli, tmp_path: Path
) -> None:
    cases = {
        "notaurl": "is not a database URL",
        f"mysql://app:{SECRET}@db.internal/app": "unsupported database ('mysql')",
        f"sqlite:///{tmp_path}/no/such/dir/t.sqlite": "no database at",
        f"postgresql+psycopg://postgres:{SECRET}@127.0.0.1:5432/triggers_never_created": (
            "does not exist"
        ),
    }
    for url, message in cases.items():
        cli.env["TRIGGERS_DATABASE_URL"] = url
        for args in (["list"], ["history", "--json"], ["status"]):
            result = cli.run(*args, check=False)
            assert result.returncode == 78, (url, args, result.stderr)
            assert result.stdout == ""
            assert message in result.stderr, (url, result.stderr)
            assert SECRET not in result.stderr and "Traceback" not in result.stderr
            assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    cli.env["TRIGGERS_DATABASE_URL"] = f"sqlite:///{tmp_path}/no/such/dir/t.sqlite"
    daemon = cli.run("run", check=False)
    assert daemon.returncode == 78 and "does not exist" in daemon.stderr
    assert "Traceback" not in daemon.stderr


def test_an_unreachable_database_exits_75_without_the_password(cli: Cli) -> None:
    cli.env["TRIGGERS_DATABASE_URL"] = f"postgresql+psycopg://app:{SECRET}@127.0.0.1:1/app"
    result = cli.run("list", "--json", check=False)
    assert result.returncode == 75
    error = json.loads(result.stderr)["error"]
    assert error["code"] == "TRG-301" and SECRET not in result.stderr


def test_usage_errors_are_json_under_json_and_exit_2(cli: Cli) -> None:
    for args in (
        ["list", "--no-such-option", "--json"],
        ["--output", "json", "history", "--limit", "many"],
        ["runs", "logs", "--json"],
    ):
        result = cli.run(*args, check=False)
        assert result.returncode == 2, args
        assert result.stdout == ""
        error = json.loads(result.stderr)["error"]
        assert error["code"] == "TRG-116" and error["message"], args
    plain = cli.run("list", "--no-such-option", check=False)
    assert plain.returncode == 2 and "No such option" in plain.stderr


def test_version_help_and_shell_completion(cli: Cli) -> None:
    version = cli.run("--version")
    assert version.stdout.startswith("triggers ") and version.stdout.strip() != "triggers"
    assert "Global options may be given before or after the command" in cli.run("--help").stdout
    script = cli.run("--show-completion", "bash").stdout
    assert "_TRIGGERS_COMPLETE" in script
    cli.env.update(
        {"_TRIGGERS_COMPLETE": "complete_bash", "COMP_WORDS": "triggers hist", "COMP_CWORD": "1"}
    )
    assert "history" in cli.run().stdout.split()


def test_a_named_shell_gets_its_completion_script_whatever_shell_runs_the_command(
    cli: Cli,
) -> None:
    # Run by `sh` (a provisioning script, a service): the nearest shell is one that
    # completion does not support, and the script asked for is still bash's or zsh's.
    for shell, marker in (("bash", "complete -o default -F"), ("zsh", "#compdef triggers")):
        found = subprocess.run(
            ["sh", "-c", f'"$0" --show-completion {shell}', TRIGGERS],
            env=cli.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert (found.returncode, found.stderr) == (0, "")
        assert marker in found.stdout


def test_global_options_work_before_and_after_the_command(cli: Cli, tmp_path: Path) -> None:
    cli.run("apply", str(_declarations(tmp_path / "t.yaml", 2)))
    url = cli.env.pop("TRIGGERS_DATABASE_URL")
    after = cli.run("list", "--database-url", url, "--json")
    before = cli.run("--database-url", url, "--json", "list")
    nested = cli.run("runs", "list", "--database-url", url, "--output", "json")
    assert json.loads(after.stdout) == json.loads(before.stdout)
    assert [row["id"] for row in json.loads(after.stdout)] == ["job-0000", "job-0001"]
    assert json.loads(nested.stdout) == []


def test_outputs_table_json_and_jsonl_and_a_footer_when_cut(cli: Cli, tmp_path: Path) -> None:
    cli.run("apply", str(_declarations(tmp_path / "t.yaml", 2)))
    cli.run("fire", "job-0000", "--key", "a")
    cli.run("fire", "job-0001", "--key", "b")
    cut = cli.run("history", "--limit", "1")
    assert len(cut.stdout.strip().splitlines()) == 2  # the header and one row
    assert "1 ledger rows shown, more not shown" in cut.stderr
    as_json = cli.run("history", "--limit", "1", "--json")
    assert len(json.loads(as_json.stdout)) == 1 and as_json.stderr == ""
    lines = cli.run("history", "-o", "jsonl").stdout.splitlines()
    assert sorted(json.loads(line)["manual_key"] for line in lines) == ["a", "b"]
    whole = cli.run("history", "--limit", "2")
    assert whole.stderr == ""


def test_times_read_relative_forms_and_show_in_local_time(cli: Cli, tmp_path: Path) -> None:
    cli.run("apply", str(_declarations(tmp_path / "t.yaml", 1)))
    cli.run("fire", "job-0000", "--key", "k")
    for since in ("2h ago", "-2h", "today", "yesterday"):
        assert len(cli.json("history", "--since", since)) == 1, since
    for since in ("+1h", "in 1h", "tomorrow"):
        assert cli.json("history", "--since", since) == [], since
    cli.env["TZ"] = "Asia/Tokyo"
    local = cli.run("history", "--local").stdout.splitlines()[1]
    utc = cli.run("history").stdout.splitlines()[1]
    assert "+09:00" in local and "Z" in utc.split()[0]
    assert cli.json("history", "--local")[0]["occurrence"].endswith("Z")  # JSON stays UTC


def test_failures_never_print_tracebacks_with_locals(cli: Cli, tmp_path: Path) -> None:
    cli.run("apply", str(_declarations(tmp_path / "t.yaml", 1)))
    outputs = [
        cli.run("fire", "job-0000", "--overlap", "bogus", check=False),
        cli.run("describe", "ghost", check=False),
        cli.run("history", "--since", "whenever", "--json", check=False),
    ]
    for result in outputs:
        assert result.returncode == 2
        assert SECRET not in result.stderr and "Traceback" not in result.stderr


def test_runtime_errors_reach_the_cli_as_triggers_errors_with_their_exit_codes(
    cli: Cli, tmp_path: Path
) -> None:
    cli.run("apply", str(_declarations(tmp_path / "t.yaml", 1)))
    shown = cli.run("runs", "show", "ghost", "--json", check=False)
    cancelled = cli.run("runs", "cancel", "ghost", "--json", check=False)
    listed = cli.run("runs", "list", "--status", "asleep", "--json", check=False)

    for result, code in ((shown, "TRG-115"), (cancelled, "TRG-115"), (listed, "TRG-118")):
        assert result.returncode == 2, result.stderr
        error = json.loads(result.stderr.splitlines()[-1])["error"]
        assert error["code"] == code
        assert error["details"]["runtime_code"].startswith("LMS-")
        assert result.stdout == ""


def test_read_only_commands_never_create_a_database(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "fresh" / "t.sqlite"
    path.parent.mkdir()
    cli.env["TRIGGERS_DATABASE_URL"] = f"sqlite:///{path}"
    for args in (
        ["list"],
        ["history"],
        ["status"],
        ["describe", "x"],
        ["audit-log"],
        ["runs", "list"],
        ["runs", "show", "r"],
        ["runs", "logs", "r"],
        ["next", "x"],
        ["pause", "x"],
    ):
        result = cli.run(*args, check=False)
        assert result.returncode == 78, (args, result.stderr)
        assert "no daemon has used it yet" in result.stderr
    dry = cli.run("apply", "--dry-run", str(_declarations(tmp_path / "t.yaml", 1)))
    assert "created: 1 (job-0000)" in dry.stdout and "nothing written" in dry.stdout
    assert list(path.parent.iterdir()) == []


@pytest.mark.postgres
def test_an_empty_postgresql_database_is_said_to_be_unused_and_left_empty(
    cli: Cli, pg_admin: object
) -> None:
    import sqlalchemy as sa

    from tests.conftest import create_pg_database, drop_pg_database

    url = create_pg_database(pg_admin)  # type: ignore[arg-type]
    try:
        cli.env["TRIGGERS_DATABASE_URL"] = url
        for args in (["list"], ["history", "--json"], ["runs", "list"]):
            result = cli.run(*args, check=False)
            assert result.returncode == 78, result.stderr
            assert "no daemon has used it yet" in result.stderr
        engine = sa.create_engine(url)
        with engine.connect() as conn:
            assert sa.inspect(conn).get_table_names() == []
        engine.dispose()
    finally:
        drop_pg_database(pg_admin, url)  # type: ignore[arg-type]


def test_the_service_environment_file_and_state_directory_are_found(
    cli: Cli, tmp_path: Path
) -> None:
    service = tmp_path / "var-lib-triggers"
    service.mkdir()
    cli.env.pop("TRIGGERS_DATABASE_URL")
    cli.env["HOME"] = str(tmp_path / "home")  # the per-user directory: empty
    cli.env["TRIGGERS_SERVICE_STATE_DIRECTORY"] = str(service)
    declarations = _declarations(tmp_path / "t.yaml", 1)
    assert cli.run("list", check=False).returncode == 78  # nothing anywhere yet

    env_file = tmp_path / "triggers.env"
    env_file.write_text(
        textwrap.dedent(
            f"""\
            # as /etc/triggers/triggers.env
            TRIGGERS_DATABASE_URL=sqlite:///{service}/triggers.sqlite
            TRIGGERS_CONFIG={declarations}
            """
        )
    )
    cli.env["TRIGGERS_ENV_FILE"] = str(env_file)
    cli.run("apply")  # FILE from TRIGGERS_CONFIG in the file
    status = json.loads(cli.run("status", "--json", check=False).stdout)
    assert status["database"] == f"sqlite:///{service}/triggers.sqlite"
    assert status["database_source"] == f"TRIGGERS_DATABASE_URL in {env_file}"

    cli.env["TRIGGERS_ENV_FILE"] = ""  # no file: the service's directory holds a database
    status = json.loads(cli.run("status", "--json", check=False).stdout)
    assert status["database_source"] == "the service's state directory"
    assert [row["id"] for row in cli.json("list")] == ["job-0000"]
