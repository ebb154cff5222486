"""Every example of the docs runs: console sessions as shown, YAML through `validate`.

The conventions are in `tests/doc_examples.py` (and docs/README.md for writers).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from tests.conftest import create_pg_database, drop_pg_database
from tests.doc_examples import ROOT, Block, blocks, documents, run_console, stop_background
from tests.e2e.conftest import TRIGGERS

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

NOT_RUN = {"", "sh", "ini", "promql", "text", "python"}
"""Procedures for a host, unit-file excerpts, queries for Prometheus: shown, not run."""


def _environment(workdir: Path, doc: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRIGGERS_", "PG"))}
    env.update(
        {
            "PATH": f"{Path(TRIGGERS).parent}{os.pathsep}{env.get('PATH', '')}",
            "HOME": str(workdir / "home"),
            "XDG_DATA_HOME": str(workdir / "home" / ".local" / "share"),
            "TZ": "UTC",
            "COLUMNS": "200",
            "TRIGGERS_POLL_INTERVAL": "1s",
            # A host's /etc/triggers/triggers.env must not decide the pages' database.
            "TRIGGERS_ENV_FILE": "",
        }
    )
    if doc.name == "api.md":
        # The page's daemon serves the API on a port of its own, free on this machine.
        env["TRIGGERS_API_ADDRESS"] = f"127.0.0.1:{_free_port()}"
    return env


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _validate(block: Block, workdir: Path, env: dict[str, str]) -> None:
    name = block.attrs.get("file") or f"example-{block.line}.yaml"
    path = workdir / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(block.text)
    result = subprocess.run(
        [TRIGGERS, "validate", str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    expected = 2 if "invalid" in block.attrs else 0
    assert result.returncode == expected, f"{block.where}: validate said\n{result.stderr}"
    if "file" not in block.attrs:
        path.unlink()


def _run_with_postgres(
    block: Block, workdir: Path, env: dict[str, str], request: pytest.FixtureRequest
) -> None:
    admin: sa.Engine = request.getfixturevalue("pg_admin")
    url = create_pg_database(admin)
    parts = make_url(url)
    name = str(parts.database)
    pg_env = {
        **env,
        "PGHOST": str(parts.host or "127.0.0.1"),
        "PGPORT": str(parts.port or 5432),
        "PGUSER": str(parts.username or "postgres"),
        "PGDATABASE": name,
        "TRIGGERS_DATABASE_URL": url,
    }
    try:
        run_console(block, workdir, pg_env)
    finally:
        with admin.connect() as conn:
            made = conn.execute(
                sa.text("SELECT datname FROM pg_database WHERE datname LIKE :prefix"),
                {"prefix": f"{name}_%"},
            ).scalars()
            for other in list(made):
                conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{other}" WITH (FORCE)'))
        drop_pg_database(admin, url)


@pytest.mark.parametrize("doc", documents(), ids=lambda path: path.name)
def test_every_example_of_the_document_runs(
    doc: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    env = _environment(tmp_path, doc)
    try:
        for block in blocks(doc):
            if block.lang == "yaml":
                _validate(block, tmp_path, env)
            elif block.lang == "console" and "postgres" in block.attrs:
                _run_with_postgres(block, tmp_path, env, request)
            elif block.lang == "console":
                run_console(block, tmp_path, env)
            else:
                assert block.lang in NOT_RUN, f"{block.where}: no test runs a {block.lang!r} block"
    finally:
        stop_background(tmp_path)


def test_the_docs_link_to_files_that_exist() -> None:
    for doc in documents():
        for target in _links(doc.read_text()):
            path = (doc.parent / target.split("#")[0]).resolve()
            assert path.exists(), f"{doc.relative_to(ROOT)} links to {target}, which is missing"


def _links(text: str) -> list[str]:
    return [
        target
        for target in re.findall(r"\]\(([^)\s]+)\)", text)
        if not target.startswith(("http://", "https://", "#", "mailto:"))
    ]
