"""The API's server: uvicorn on a socket bound at start, in a thread of the daemon.

The socket is bound before anything is served, so an address in use stops the daemon
at start with a configuration error (exit 78), as the metrics' does; the framework
loads only when serving starts, after the scheduler's first tick has begun. The
server stops before the runtime closes: no request meets a closed runtime.
"""

from __future__ import annotations

import socket
import threading
from typing import TYPE_CHECKING

import structlog

from triggers.api._access import ApiConfig, api_config
from triggers.errors import ConfigError
from triggers.settings import Settings

if TYPE_CHECKING:
    import uvicorn

    from triggers.api._context import ApiServices

log = structlog.get_logger()
_MAX_CONNECTIONS = 64
"""Connections served at once; more are answered 503 by uvicorn."""
_STOP_WAIT_S = 10.0


class ApiServer:
    """One listening socket and the uvicorn server that answers on it."""

    def __init__(self, config: ApiConfig) -> None:
        self._config = config
        self._socket: socket.socket | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @classmethod
    def bound(cls, settings: Settings) -> ApiServer | None:
        """The server `settings` configure, its tokens read and its socket bound (None:
        `TRIGGERS_API_ADDRESS` is not set).

        Raises:
            ConfigError: a token file is unreadable or malformed, the address is beyond
                loopback without a token, or it cannot be bound.
        """
        config = api_config(settings)
        if config is None:
            return None
        server = cls(config)
        server.bind()
        return server

    @property
    def url(self) -> str:
        """`http://host:port/api/v1` as bound (the port the kernel chose for port 0)."""
        if self._socket is None:
            raise RuntimeError("the API is not bound")
        host, port = self._socket.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}/api/v1"

    def bind(self) -> None:
        """Take the address. Raises ConfigError (in use, not an address of this host)."""
        address = self._config.address
        try:
            family, kind, proto, _, where = socket.getaddrinfo(
                address.host, address.port, type=socket.SOCK_STREAM
            )[0]
            sock = socket.socket(family, kind, proto)
        except OSError as exc:
            raise ConfigError(
                f"cannot serve the API on TRIGGERS_API_ADDRESS={address}: {exc}",
                variable="TRIGGERS_API_ADDRESS",
            ) from None
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(where)
        except OSError as exc:
            sock.close()
            raise ConfigError(
                f"cannot serve the API on TRIGGERS_API_ADDRESS={address}: {exc.strerror}",
                variable="TRIGGERS_API_ADDRESS",
            ) from None
        self._socket = sock

    def start(self, services: ApiServices) -> None:
        """Serve on the bound socket, in a thread of its own."""
        # The web framework loads here, not with the socket: a daemon binds at start,
        # then claims what is due, then pays for the import.
        import uvicorn  # noqa: PLC0415

        from triggers.api._app import build_app  # noqa: PLC0415

        if self._socket is None:
            self.bind()
        assert self._socket is not None  # noqa: S101 (bind sets it or raises)
        config = uvicorn.Config(
            build_app(services, self._config),
            log_config=None,  # the daemon's logging renders uvicorn's few lines
            log_level="warning",
            access_log=False,
            lifespan="off",
            http="h11",
            ws="none",
            loop="asyncio",
            interface="asgi3",
            # The peer's own address goes into the audit log, never a header's claim.
            proxy_headers=False,
            server_header=False,
            limit_concurrency=_MAX_CONNECTIONS,
            timeout_graceful_shutdown=5,
        )
        server = uvicorn.Server(config)
        sockets = [self._socket]
        self._server = server
        self._thread = threading.Thread(
            target=self._serve, args=(server, sockets), name="api", daemon=True
        )
        self._thread.start()
        tokens = self._config.tokens
        log.info("api_started", url=self.url, tokens=tokens.count if tokens else 0)
        if tokens is None:
            log.warning("api_started_without_token", url=self.url)

    def _serve(self, server: uvicorn.Server, sockets: list[socket.socket]) -> None:
        try:
            server.run(sockets=sockets)
        except Exception as exc:  # the server's thread boundary: the daemon goes on
            log.error("api_server_failed", error=str(exc), exc_info=exc)

    def reload_tokens(self) -> None:
        """Read the token files again (SIGHUP); a file that fails keeps the old tokens."""
        tokens = self._config.tokens
        if tokens is None:
            return
        try:
            count = tokens.reload()
        except ConfigError as exc:
            log.error("api_tokens_not_reloaded", error=str(exc))
            return
        log.info("api_tokens_reloaded", tokens=count)

    def stop(self) -> None:
        """Stop answering (requests in flight get a few seconds) and close the socket."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=_STOP_WAIT_S)
        if self._socket is not None:
            self._socket.close()
            log.info("api_stopped")
        self._server = self._thread = self._socket = None
