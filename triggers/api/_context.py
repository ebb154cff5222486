"""What every endpoint works on (the daemon's store, audit log and runtime), and who calls it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated

import structlog
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from triggers.alert_rules import AlertRecord
from triggers.api._access import ApiConfig, Caller
from triggers.clock import Clock
from triggers.errors import ForbiddenError, UnauthenticatedError
from triggers.probes import Probes
from triggers.runner.runs import RunControls
from triggers.store.audit_log import AuditLog
from triggers.store.protocol import TriggerStore

log = structlog.get_logger()


def _nothing() -> None:
    return None


def _unknown(_count: int) -> list[tuple[datetime, str]] | None:
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiServices:
    """The daemon's own store, audit log and (started) runtime's runs, as the API uses them."""

    store: TriggerStore
    audit: AuditLog
    runs: RunControls
    """The runtime's runs, behind the one error door (`triggers.runner.runs`)."""
    clock: Clock
    host: str
    """This daemon's host: the ledger records it for the API's fires."""
    owner: str
    """The owner of the API's claims (`api:{daemon owner}`)."""
    wake: Callable[[], None] = _nothing
    """Launch what was just claimed now, not at the next poll (the scheduler's pending pass)."""
    soonest: Callable[[int], list[tuple[datetime, str]] | None] = _unknown
    """The next N fires the scheduler will claim (due time, trigger id), soonest first,
    as its timetable holds them; None: no scheduler in this process."""
    poll_interval: timedelta = timedelta(seconds=5)
    """The daemons' poll interval: a daemon silent for three is stale (`status`)."""
    database: str | None = None
    """Where the database is, its password redacted (`status`)."""
    alerts: Callable[..., list[AlertRecord]] | None = None
    """The alert outbox's listing (`SqlAlertOutbox.list`); None: no outbox."""
    probes: Probes | None = None
    """`/healthz` and `/readyz` (`triggers.probes`); None: no scheduler, both answer 503."""


def _services(request: Request) -> ApiServices:
    services: ApiServices = request.app.state.services
    return services


Services = Annotated[ApiServices, Depends(_services)]

bearer = HTTPBearer(
    auto_error=False,
    description="A token of the file named by TRIGGERS_API_TOKEN_FILE (writes: "
    "TRIGGERS_API_WRITE_TOKEN_FILE, when it is set).",
)
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


def _caller(
    request: Request, credentials: HTTPAuthorizationCredentials | None, *, write: bool
) -> Caller:
    config: ApiConfig = request.app.state.config
    address = request.client.host if request.client else "unknown"
    if config.tokens is None:
        return Caller(name=None, may_write=True, address=address)
    if credentials is None:
        _refused(request, address, "no bearer token")
        raise UnauthenticatedError(
            "this request needs a bearer token (Authorization: Bearer TOKEN), one of "
            "TRIGGERS_API_TOKEN_FILE"
        )
    token = config.tokens.match(credentials.credentials)
    if token is None:
        _refused(request, address, "unknown token")
        raise UnauthenticatedError("the bearer token is not one of TRIGGERS_API_TOKEN_FILE")
    if write and not token.may_write:
        _refused(request, address, "read-only token", name=token.name)
        raise ForbiddenError(
            "this token may only read; a change needs a token of TRIGGERS_API_WRITE_TOKEN_FILE"
        )
    return Caller(name=token.name, may_write=token.may_write, address=address)


def _refused(request: Request, address: str, reason: str, *, name: str | None = None) -> None:
    # Never the token itself: only why it was refused, and a token's name when known.
    log.info(
        "api_request_refused",
        client=address,
        method=request.method,
        path=request.url.path,
        reason=reason,
        token=name,
    )


def _reader(request: Request, credentials: Credentials) -> Caller:
    return _caller(request, credentials, write=False)


def _writer(request: Request, credentials: Credentials) -> Caller:
    return _caller(request, credentials, write=True)


Reader = Annotated[Caller, Depends(_reader)]
"""A caller whose token may read (every request needs one)."""
Writer = Annotated[Caller, Depends(_writer)]
"""A caller whose token may also change things."""
