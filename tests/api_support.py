"""The HTTP API served for real (uvicorn on a free loopback port) over a daemon's backend."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx

from triggers import actions
from triggers.addresses import ListenAddress
from triggers.api import ApiConfig, ApiServer, ApiServices, Tokens
from triggers.clock import SystemClock
from triggers.daemon import Backend, open_backend
from triggers.declarations import Declarations, parse_declarations
from triggers.probes import Probes
from triggers.runner.runs import RunControls
from triggers.settings import Settings
from triggers.store.audit_log import Actor
from triggers.store.sql_alerts import SqlAlertOutbox
from triggers.store.sql_audit import SqlAuditLog

READ_TOKEN = "read-" + "r" * 27
WRITE_TOKEN = "write-" + "w" * 26
DECLARATIONS = textwrap.dedent(
    """\
    version: 1
    flows:
      noop: {steps: []}
      gated:
        steps:
          - {id: gate, wait_signal: {name: go}}
          - {id: after, run: [sh, -c, "echo resumed"]}
    triggers:
      - id: nightly
        flow: noop
        cron: "30 2 * * *"
        timezone: Europe/Berlin
        description: Nightly database backup
      - {id: gated, flow: gated, every: 1d}
    """
)


@dataclass(slots=True)
class Api:
    """A served API, clients with each kind of token, and what it serves."""

    url: str
    backend: Backend
    declarations: Declarations
    reader: httpx.Client
    writer: httpx.Client
    anonymous: httpx.Client
    tokens: Tokens | None = None
    """The tokens in force (what SIGHUP reloads)."""

    def get(self, path: str, **params: Any) -> Any:
        """GET with the read token; the answer's JSON, which must be a 200."""
        response = self.reader.get(path, params=params)
        assert response.status_code == 200, response.text
        return response.json()

    def post(self, path: str, body: Any = None) -> Any:
        """POST with the write token; the answer's JSON, which must be a 200."""
        response = self.writer.post(path, json=body)
        assert response.status_code == 200, response.text
        return response.json()


def write_tokens(directory: Path) -> tuple[Path, Path]:
    read, write = directory / "api-read-token", directory / "api-write-token"
    read.write_text(f"# tokens that read\n{READ_TOKEN}\n")
    write.write_text(f"ci {WRITE_TOKEN}\n")
    return read, write


@contextmanager
def served_api(
    database_url: str, directory: Path, *, tokens: bool = True, text: str = DECLARATIONS
) -> Iterator[Api]:
    """The API over a backend on `database_url`, its runtime started, `text` applied."""
    settings = Settings(database_url=database_url, state_directory=directory)
    backend = open_backend(settings, owner="api-test")
    clock = SystemClock()
    audit = SqlAuditLog(backend.db)
    declarations = parse_declarations(text, source="triggers.yaml")
    actions.apply(
        backend.store,
        audit,
        backend.runtime.register_flow,
        declarations,
        now=clock.now(),
        actor=Actor(host="test-host", user="tester"),
    )
    backend.runtime.start()
    config = ApiConfig(
        address=ListenAddress("127.0.0.1", 0),
        tokens=Tokens(*write_tokens(directory)) if tokens else None,
    )
    server = ApiServer(config)
    server.start(
        ApiServices(
            store=backend.store,
            audit=audit,
            runs=RunControls(backend.runtime),
            clock=clock,
            host="test-host",
            owner="api:test",
            alerts=SqlAlertOutbox(backend.db).list,
            probes=Probes(
                clock=clock,
                poll_interval=timedelta(seconds=1),
                last_tick=clock.now,
                last_apply=lambda: "applied",
                ping_store=backend.store.applied_digest,
            ),
        )
    )
    clients = [
        httpx.Client(base_url=server.url, headers=headers, timeout=30)
        for headers in (
            {"Authorization": f"Bearer {READ_TOKEN}"},
            {"Authorization": f"Bearer {WRITE_TOKEN}"},
            {},
        )
    ]
    try:
        reader, writer, anonymous = clients
        yield Api(server.url, backend, declarations, reader, writer, anonymous, config.tokens)
    finally:
        for client in clients:
            client.close()
        server.stop()
        backend.runtime.close(timeout=5)
        backend.close()
