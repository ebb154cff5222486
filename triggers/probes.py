"""The daemon's probes, `/healthz` and `/readyz`, and the metrics listener that serves them.

`/healthz` says the daemon is alive: its scheduler keeps ticking (the instant of the
last tick is the one `triggers_last_tick_timestamp_seconds` shows). `/readyz` says it
is ready: the store answers a cheap query within a short timeout, and the last apply
of the declarations file succeeded (`triggers_last_reload_successful`). Each answers
200 with `{"status": "ok", ...}` or 503 naming what fails. Both answer without a
token and show nothing secret: no database URL, no driver message (the log has it).
The API serves them too (`triggers.api`); the metrics listener, `MetricsServer`,
serves them beside `/metrics`.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import structlog
from prometheus_client.exposition import MetricsHandler
from prometheus_client.registry import CollectorRegistry

from triggers.addresses import ListenAddress
from triggers.clock import Clock
from triggers.errors import ConfigError, TriggersError

log = structlog.get_logger()

MIN_TICK_LIMIT = timedelta(seconds=30)
"""A tick older than this (or three poll intervals, if longer) fails `/healthz`."""
STORE_TIMEOUT = timedelta(seconds=2)
"""The store must answer `/readyz`'s query within this."""
_APPLIED = ("applied", "unchanged")
"""The results of an apply that leave the file's declarations in force."""


def tick_limit(poll_interval: timedelta) -> timedelta:
    """How old the last tick may be while the daemon counts as alive: an idle loop
    ticks at least every poll interval, so three missed ones (at least 30 s) mean it
    no longer does."""
    return max(3 * poll_interval, MIN_TICK_LIMIT)


@dataclass(frozen=True, slots=True)
class ProbeAnswer:
    """What a probe answers: its HTTP status and JSON document."""

    ok: bool
    document: dict[str, Any]

    @property
    def status(self) -> int:
        return 200 if self.ok else 503


def _instant(at: datetime) -> str:
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(slots=True)
class _Ping:
    """One store query in flight, and its outcome once it is back."""

    done: threading.Event = field(default_factory=threading.Event)
    failure: str | None = None


class Probes:
    """The answers of `/healthz` and `/readyz`, from the daemon's own signals.

    `last_tick` answers when the scheduler last finished a tick (None: not yet);
    `last_apply` the result of the last apply (`applied`, `unchanged`, `refused`,
    `failed`; None: no declarations file); `ping_store` runs a cheap query and raises
    a `TriggersError` when the store does not answer. At most one query is in flight:
    probes that come while one hangs wait on that one, never start more.
    """

    def __init__(
        self,
        *,
        clock: Clock,
        poll_interval: timedelta,
        last_tick: Callable[[], datetime | None],
        last_apply: Callable[[], str | None],
        ping_store: Callable[[], object],
        store_timeout: timedelta = STORE_TIMEOUT,
    ) -> None:
        self._clock = clock
        self._limit = tick_limit(poll_interval)
        self._last_tick = last_tick
        self._last_apply = last_apply
        self._ping_store = ping_store
        self._store_timeout = store_timeout
        self._started_at = clock.now()
        self._lock = threading.Lock()
        self._ping: _Ping | None = None

    def health(self) -> ProbeAnswer:
        """Alive: the last tick (or the start, before the first) is recent enough."""
        now = self._clock.now()
        last = self._last_tick()
        age = (now - (last or self._started_at)).total_seconds()
        limit = self._limit.total_seconds()
        document: dict[str, Any] = {
            "last_tick_at": None if last is None else _instant(last),
            "tick_age_s": round(max(age, 0.0), 3),
            "limit_s": limit,
        }
        if age <= limit:
            return ProbeAnswer(True, {"status": "ok", **document})
        if last is None:
            reason = f"no tick in the {age:.1f} s since the start (limit {limit:g} s)"
        else:
            reason = f"the last tick was {age:.1f} s ago (limit {limit:g} s)"
        return ProbeAnswer(
            False, {"status": "failing", "failing": ["ticks"], "reason": reason, **document}
        )

    def readiness(self) -> ProbeAnswer:
        """Ready: the store answers, and the declarations file's last apply succeeded."""
        checks = {"store": self._store_check(), "declarations": self._declarations_check()}
        failing = [name for name, check in checks.items() if not check["ok"]]
        if not failing:
            return ProbeAnswer(True, {"status": "ok", "checks": checks})
        return ProbeAnswer(False, {"status": "failing", "failing": failing, "checks": checks})

    def _declarations_check(self) -> dict[str, Any]:
        result = self._last_apply()
        if result is None:
            return {"ok": True, "result": None}
        if result in _APPLIED:
            return {"ok": True, "result": result}
        why = "was refused (invalid)" if result == "refused" else "failed"
        return {
            "ok": False,
            "result": result,
            "reason": f"the last apply of the declarations file {why}; the daemon "
            "keeps the last good declarations (see the log)",
        }

    def _store_check(self) -> dict[str, Any]:
        with self._lock:
            ping = self._ping
            if ping is None or ping.done.is_set():
                ping = self._ping = _Ping()
                threading.Thread(target=self._run, args=(ping,), name="probe", daemon=True).start()
        timeout = self._store_timeout.total_seconds()
        if not self._clock.wait(timeout, ping.done):
            return {"ok": False, "reason": f"the store did not answer within {timeout:g} s"}
        if ping.failure is not None:
            return {"ok": False, "reason": ping.failure}
        return {"ok": True}

    def _run(self, ping: _Ping) -> None:
        try:
            self._ping_store()
        except TriggersError as exc:
            ping.failure = f"the store did not answer ({exc.code})"
            log.warning("probe_failed", check="store", error_code=exc.code, error=str(exc))
        except Exception as exc:  # noqa: BLE001 (a probe thread's boundary: the answer says it failed)
            ping.failure = "the store query failed"
            log.warning("probe_failed", check="store", error=str(exc))
        finally:
            ping.done.set()


PROBE_PATHS = ("/healthz", "/readyz")
_MAX_REQUESTS = 16
"""Requests the metrics listener serves at once."""
_REQUEST_TIMEOUT_S = 10.0
"""A client silent this long mid-request is dropped."""


def answer(probes: Probes, path: str) -> ProbeAnswer:
    """The answer of the probe at `path` (one of `PROBE_PATHS`)."""
    return probes.health() if path == "/healthz" else probes.readiness()


class MetricsServer:
    """`TRIGGERS_METRICS_ADDRESS`: Prometheus metrics at `/metrics` (and, as before,
    at any other path) and the probes at `/healthz` and `/readyz`, on a socket bound
    at construction, served by a thread of its own."""

    def __init__(self, address: ListenAddress, *, registry: CollectorRegistry) -> None:
        self._probes: Probes | None = None
        server_self = self

        class Handler(MetricsHandler):
            timeout = _REQUEST_TIMEOUT_S

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                self._answer(body_too=True)

            def do_HEAD(self) -> None:  # noqa: N802 (http.server's name)
                """A probe's status without its body (health checkers that send HEAD)."""
                if urlsplit(self.path).path not in PROBE_PATHS:
                    self.send_error(405)
                    return
                self._answer(body_too=False)

            def _answer(self, *, body_too: bool) -> None:
                path = urlsplit(self.path).path
                probes = server_self._probes
                if path not in PROBE_PATHS or probes is None:
                    super().do_GET()
                    return
                found = answer(probes, path)
                body = json.dumps(found.document, separators=(",", ":")).encode()
                self.send_response(found.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                if body_too:
                    self.wfile.write(body)

        Handler.registry = registry
        try:
            self._server = _Server((address.host, address.port), Handler)
        except OSError as exc:
            raise ConfigError(
                f"cannot serve metrics on TRIGGERS_METRICS_ADDRESS={address}: {exc.strerror}",
                variable="TRIGGERS_METRICS_ADDRESS",
            ) from None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        """`host:port` as bound (the port the kernel chose for port 0)."""
        host, port = self._server.server_address[:2]
        return str(ListenAddress(str(host), int(port)))

    def start(self, probes: Probes) -> None:
        self._probes = probes
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="metrics", daemon=True
        )
        self._thread.start()
        log.info("metrics_started", address=self.address)

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()


class _Server(ThreadingHTTPServer):
    """A thread per request, at most `_MAX_REQUESTS` at once: a connection past them is
    closed at once, never queued behind a hung one."""

    daemon_threads = True

    def __init__(self, where: tuple[str, int], handler: type[MetricsHandler]) -> None:
        if ":" in where[0]:
            self.address_family = socket.AF_INET6  # an IPv6 address binds an IPv6 socket
        self._slots = threading.BoundedSemaphore(_MAX_REQUESTS)
        super().__init__(where, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()
