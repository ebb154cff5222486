"""The CLI starts fast because commands import only what they use (bench/cli_startup.py
measures the time; this checks the imports, which do not depend on the machine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import Cli

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

PROBE = """
import json, sys
from triggers.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
sys.stderr.write(json.dumps(sorted(sys.modules)) + "\\n")
"""
HEAVY = {
    "alembic",
    "apscheduler",
    "croniter",
    "fastapi",
    "matplotlib",
    "looms_runtime.runtime",
    "prometheus_client",
    "pydantic",
    "pydantic_settings",
    "rich",
    "ruamel",
    "starlette",
    "structlog",
    "triggers.api",
    "triggers.daemon",
    "triggers.declarations",
    "triggers.scheduler",
    "uvicorn",
}


def loaded(cli: Cli, *args: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        env=cli.env,
        cwd=cli.workdir,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def heavy(modules: set[str]) -> set[str]:
    return {name for name in HEAVY if name in modules}


# What a command that only reads never needs: the runtime's engine (its workers,
# effects and planner), the store's writes, the settings model, migrations, logging,
# and on SQLite (the fixture's database) the PostgreSQL dialect.
NOT_FOR_READS = (
    "alembic",
    "sqlalchemy.dialects.postgresql",
    "looms_runtime._effects",
    "looms_runtime._engine",
    "looms_runtime._history.planner",
    "looms_runtime._workers",
    "looms_runtime.runtime",
    "pydantic",
    "pydantic_settings",
    "structlog",
    "triggers.settings",
    "triggers.store._apply",
    "triggers.store._claims",
    "triggers.store.sql",
)


def writers(modules: set[str]) -> set[str]:
    """The modules of `NOT_FOR_READS`, and those inside them, that were loaded."""
    return {
        name
        for name in modules
        if name in NOT_FOR_READS or name.startswith(tuple(f"{n}." for n in NOT_FOR_READS))
    }


def test_help_and_version_load_neither_the_database_nor_the_runtime(cli: Cli) -> None:
    for args in (["--help"], ["--version"], ["list", "--help"], ["timeline", "--help"]):
        modules = loaded(cli, *args)
        assert heavy(modules) == set(), args
        assert "sqlalchemy" not in modules, args


def test_shell_completion_loads_neither_the_database_nor_the_runtime(cli: Cli) -> None:
    cli.env.update({"_TRIGGERS_COMPLETE": "complete_bash", "COMP_WORDS": "triggers li"})
    cli.env["COMP_CWORD"] = "1"
    modules = loaded(cli)
    assert heavy(modules) == set()
    assert "sqlalchemy" not in modules


def test_queries_on_an_empty_database_load_only_the_store(cli: Cli, tmp_path: Path) -> None:
    cli.run("db", "upgrade")
    for args in (["list"], ["history", "--json"], ["list", "--output", "jsonl"]):
        modules = loaded(cli, *args)
        assert heavy(modules) == set(), args
        assert "sqlalchemy.orm" not in modules and "sqlalchemy.dialects.postgresql" not in modules


def test_status_and_the_run_queries_load_neither_the_engine_nor_the_settings(
    cli: Cli, tmp_path: Path
) -> None:
    declarations = tmp_path / "t.yaml"
    declarations.write_text(
        "version: 1\nflows:\n  noop: {steps: []}\ntriggers:\n  - {id: t, flow: noop, every: 1h}\n"
    )
    cli.run("apply", str(declarations))  # rows to read: a trigger, a flow, an audit entry
    for args in (
        ["status"],
        ["status", "--json"],
        ["runs", "list"],
        ["runs", "events", "no-such-run"],
        ["history", "t"],
        ["describe", "t"],
        ["audit-log"],
    ):
        modules = loaded(cli, *args)
        assert writers(modules) == set(), args
        assert "sqlalchemy.orm" not in modules, args


def test_the_query_commands_on_sqlite_load_no_sqlalchemy(cli: Cli, tmp_path: Path) -> None:
    # They read through sqlite3 (looms_runtime.dbapi): SQLAlchemy's import alone is
    # more than half of a command's start-up.
    declarations = tmp_path / "t.yaml"
    declarations.write_text(
        "version: 1\nflows:\n  noop: {steps: []}\ntriggers:\n"
        "  - {id: t, flow: noop, every: 1h}\n"
        "  - {id: nightly, flow: noop, cron: '0 2 * * *', alert: {to: []}}\n"
    )
    cli.run("apply", str(declarations))
    for args in (
        ["list"],
        ["list", "--json"],
        ["history"],
        ["history", "t"],
        ["next", "nightly"],
        ["describe", "t"],
        ["describe", "nightly", "--json"],
        ["status"],
        ["status", "--json"],
        ["runs", "list"],
    ):
        modules = loaded(cli, *args)
        assert not {name for name in modules if name.split(".")[0] in ("sqlalchemy", "alembic")}, (
            args
        )
        assert writers(modules) == set(), args


def test_queries_on_an_empty_database_load_no_writes_and_no_engine(cli: Cli) -> None:
    cli.run("db", "upgrade")
    for args in (["list"], ["history"], ["status"], ["runs", "list"], ["next", "t"]):
        assert writers(loaded(cli, *args)) == set(), args


def test_the_daemon_loads_the_web_framework_only_to_serve_the_api() -> None:
    probe = "import json, sys, triggers.daemon; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    modules = set(json.loads(done.stdout))
    assert "triggers.daemon" in modules
    assert not {"fastapi", "starlette", "uvicorn", "triggers.api"} & modules


def test_the_daemon_binds_the_api_before_the_web_framework_loads(tmp_path: Path) -> None:
    # Binding happens before the database opens, the framework's import (a third of a
    # second, seconds under load) after the scheduler has started its first tick.
    probe = (
        "import json, sys\n"
        "from triggers.daemon import Daemon\n"
        "from triggers.settings import Settings\n"
        "settings = Settings(api_address='127.0.0.1:0', database_url='sqlite://')\n"
        "listeners = Daemon(settings)._bind()\n"
        "print(json.dumps([listeners.api is not None, sorted(sys.modules)]))\n"
        "listeners.stop()\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIGGERS_")}
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        cwd=tmp_path,
        env={**env, "TRIGGERS_ENV_FILE": ""},
    )
    bound, modules = json.loads(done.stdout.splitlines()[0])
    assert bound
    assert not {"fastapi", "starlette", "uvicorn", "triggers.api._app"} & set(modules)


def test_only_a_picture_file_loads_the_plotting_library(cli: Cli, tmp_path: Path) -> None:
    cli.run("db", "upgrade")
    for args in (["timeline"], ["timeline", "--json"]):
        assert "matplotlib" not in loaded(cli, *args), args
    assert "matplotlib" in loaded(cli, "timeline", "-o", str(tmp_path / "t.svg"))
