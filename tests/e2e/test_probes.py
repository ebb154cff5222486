"""`/healthz` and `/readyz` of a real daemon, on its metrics listener and its API: 200
while healthy, 503 naming the check once the declarations are refused, the
PostgreSQL database is gone, or the scheduler's ticks stall."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tests.conftest import drop_pg_database
from tests.e2e.conftest import Cli, stop, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

CONFIG = textwrap.dedent(
    """\
    version: 1
    flows:
      noop: {steps: []}
    triggers:
      - {id: beat, flow: noop, every: 1s}
    """
)
TOKEN = "probe-" + "t" * 26


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _get(url: str, **headers: str) -> tuple[int, Any]:
    request = urllib.request.Request(url, headers=headers)  # noqa: S310 (a loopback test URL)
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:  # noqa: S310
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


class Listeners:
    """The daemon's two listeners, as a probe sees them."""

    def __init__(self, cli: Cli, tmp_path: Path) -> None:
        self.metrics = f"http://127.0.0.1:{_free_port()}"
        self.api = f"http://127.0.0.1:{_free_port()}"
        tokens = tmp_path / "api-token"
        tokens.write_text(f"{TOKEN}\n")
        cli.env["TRIGGERS_METRICS_ADDRESS"] = self.metrics.removeprefix("http://")
        cli.env["TRIGGERS_API_ADDRESS"] = self.api.removeprefix("http://")
        cli.env["TRIGGERS_API_TOKEN_FILE"] = str(tokens)

    def probe(self, path: str) -> list[tuple[int, Any]]:
        """The answers of both listeners at `path`, without a token."""
        return [_get(f"{base}{path}") for base in (self.metrics, self.api)]

    def wait(self, path: str, status: int, *, timeout: float = 60) -> list[tuple[int, Any]]:
        def both() -> list[tuple[int, Any]] | None:
            try:
                found = self.probe(path)
            except OSError:
                return None  # not listening yet
            return found if all(code == status for code, _ in found) else None

        return wait_for(both, timeout=timeout, what=f"{path} answering {status} on both")


def _start(cli: Cli, tmp_path: Path, *, text: str = CONFIG) -> tuple[Listeners, Path]:
    config = tmp_path / "t.yaml"
    config.write_text(text)
    return Listeners(cli, tmp_path), config


@pytest.mark.parametrize("engine", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_probes_answer_200_on_both_listeners_without_a_token(
    engine: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = str(request.getfixturevalue(f"{engine}_url"))
    cli = Cli(url, tmp_path)
    listeners, config = _start(cli, tmp_path)
    daemon = cli.daemon(config, tmp_path / "d.log")
    try:
        for _, document in listeners.wait("/healthz", 200):
            assert document["status"] == "ok"
            assert document["tick_age_s"] <= document["limit_s"] == 30.0
        for _, document in listeners.wait("/readyz", 200):
            assert document == {
                "status": "ok",
                "checks": {
                    "store": {"ok": True},
                    "declarations": {"ok": True, "result": "applied"},
                },
            }
        # The token is required everywhere else on the API.
        assert _get(f"{listeners.api}/api/v1/triggers")[0] == 401
        assert _get(f"{listeners.api}/api/v1/triggers", Authorization=f"Bearer {TOKEN}")[0] == 200
    finally:
        assert stop(daemon) == 0


def test_readyz_fails_while_the_declarations_file_is_refused(cli: Cli, tmp_path: Path) -> None:
    listeners, config = _start(cli, tmp_path)
    daemon = cli.daemon(config, tmp_path / "d.log")
    try:
        listeners.wait("/readyz", 200)
        config.write_text(CONFIG + "  - {id: Bad Id, flow: missing, every: 1s}\n")
        daemon.send_signal(signal.SIGHUP)
        for _, document in listeners.wait("/readyz", 503):
            assert document["failing"] == ["declarations"]
            declarations = document["checks"]["declarations"]
            assert (declarations["ok"], declarations["result"]) == (False, "refused")
            assert document["checks"]["store"] == {"ok": True}
        # Alive all the while: the last good declarations keep firing.
        assert [code for code, _ in listeners.probe("/healthz")] == [200, 200]
        config.write_text(CONFIG)
        daemon.send_signal(signal.SIGHUP)
        listeners.wait("/readyz", 200)
    finally:
        assert stop(daemon) == 0


def test_readyz_fails_when_the_daemon_starts_on_a_refused_file(cli: Cli, tmp_path: Path) -> None:
    listeners, config = _start(cli, tmp_path)
    daemon = cli.daemon(config, tmp_path / "d.log")
    try:
        listeners.wait("/readyz", 200)
    finally:
        assert stop(daemon) == 0
    # Restarted on a file broken meanwhile: it runs the declarations the store holds.
    config.write_text(CONFIG.replace("every: 1s", "every: soon"))
    daemon = cli.daemon(config, tmp_path / "d.log")
    try:
        for _, document in listeners.wait("/readyz", 503):
            assert document["failing"] == ["declarations"]
            assert document["checks"]["declarations"]["result"] == "refused"
        assert [code for code, _ in listeners.probe("/healthz")] == [200, 200]
    finally:
        assert stop(daemon) == 0


@pytest.mark.postgres
def test_readyz_fails_once_the_postgresql_database_is_dropped(
    postgres_url: str, pg_admin: sa.Engine, tmp_path: Path
) -> None:
    cli = Cli(postgres_url, tmp_path)
    listeners, config = _start(cli, tmp_path)
    daemon = cli.daemon(config, tmp_path / "d.log")
    try:
        listeners.wait("/readyz", 200)
        drop_pg_database(pg_admin, postgres_url)
        for _, document in listeners.wait("/readyz", 503):
            assert "store" in document["failing"]
            assert document["checks"]["store"]["ok"] is False
            assert document["checks"]["store"]["reason"].startswith("the store did not answer")
            # Nothing of where the database is.
            text = json.dumps(document)
            assert str(sa.make_url(postgres_url).database) not in text
            assert "127.0.0.1:5432" not in text and "postgresql" not in text
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)


def test_healthz_fails_while_the_ticks_stall(cli: Cli, tmp_path: Path) -> None:
    listeners, config = _start(cli, tmp_path)
    gate = tmp_path / "stall"
    cli.env["STALL_FILE"] = str(gate)
    cli.env["STALL_SKIP_S"] = "28"  # the daemon's clock steps over most of the 30 s
    with (tmp_path / "d.log").open("a") as stderr:
        daemon = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).with_name("stalling_daemon.py")),
                "run",
                "--config",
                str(config),
            ],
            env=cli.env,
            cwd=cli.workdir,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            text=True,
        )
    try:
        listeners.wait("/healthz", 200)
        gate.touch()  # the next tick blocks
        # Three poll intervals, at least 30 s, after the last tick (28 of them skipped).
        for _, document in listeners.wait("/healthz", 503, timeout=90):
            assert document["failing"] == ["ticks"]
            assert document["tick_age_s"] > document["limit_s"] == 30.0
            assert document["reason"].startswith("the last tick was ")
        # Stalled, not unready: the store answers and the declarations are applied.
        assert [code for code, _ in listeners.probe("/readyz")] == [200, 200]
        gate.unlink()
        listeners.wait("/healthz", 200)
    finally:
        gate.unlink(missing_ok=True)
        assert stop(daemon) == 0


def test_a_metrics_address_in_use_stops_the_start_with_exit_78(cli: Cli, tmp_path: Path) -> None:
    config = tmp_path / "t.yaml"
    config.write_text(CONFIG)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        cli.env["TRIGGERS_METRICS_ADDRESS"] = f"127.0.0.1:{port}"
        daemon = cli.daemon(config, tmp_path / "d.log")
        assert daemon.wait(timeout=60) == 78
    text = (tmp_path / "d.log").read_text()
    assert f"cannot serve metrics on TRIGGERS_METRICS_ADDRESS=127.0.0.1:{port}" in text
    assert "Traceback" not in text
    # Refused before the database: nothing was applied.
    assert not (tmp_path / "triggers.sqlite").exists()
