"""`/healthz` and `/readyz`'s answers (`triggers.probes`) on a clock the test moves, and
the metrics listener that serves them beside `/metrics`."""

from __future__ import annotations

import json
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Gauge

from tests.clocks import FakeClock
from triggers.addresses import ListenAddress
from triggers.errors import StoreUnavailableError
from triggers.probes import MetricsServer, Probes, tick_limit

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class WaitingClock(FakeClock):
    """Time moves only when the test says, but a wait for an event really waits (a
    store query answers on another thread)."""

    def wait(self, seconds: float, stop: threading.Event) -> bool:
        return stop.wait(seconds)


class Signals:
    """What the daemon tells the probes, set by the test."""

    def __init__(self) -> None:
        self.last_tick: datetime | None = None
        self.last_apply: str | None = "applied"
        self.store_error: Exception | None = None
        self.store_gate: threading.Event | None = None
        self.queries = 0

    def ping(self) -> str | None:
        self.queries += 1
        if self.store_gate is not None:
            self.store_gate.wait(30)
        if self.store_error is not None:
            raise self.store_error
        return None


def _probes(clock: FakeClock, signals: Signals, poll: timedelta = timedelta(seconds=5)) -> Probes:
    return Probes(
        clock=clock,
        poll_interval=poll,
        last_tick=lambda: signals.last_tick,
        last_apply=lambda: signals.last_apply,
        ping_store=signals.ping,
        store_timeout=timedelta(seconds=0.2),
    )


def test_tick_limit_is_three_poll_intervals_at_least_30_s() -> None:
    assert tick_limit(timedelta(seconds=1)) == timedelta(seconds=30)
    assert tick_limit(timedelta(seconds=20)) == timedelta(seconds=60)


def test_healthz_is_ok_while_ticks_are_recent_and_fails_once_they_stall() -> None:
    clock, signals = WaitingClock(START), Signals()
    probes = _probes(clock, signals, poll=timedelta(seconds=20))
    signals.last_tick = clock.now()
    clock.advance(timedelta(seconds=59))
    found = probes.health()
    assert (found.status, found.document["status"]) == (200, "ok")
    assert found.document["last_tick_at"] == "2026-03-01T12:00:00.000Z"
    assert found.document["limit_s"] == 60.0
    clock.advance(timedelta(seconds=2))
    found = probes.health()
    assert (found.status, found.document["failing"]) == (503, ["ticks"])
    assert "61.0 s ago" in found.document["reason"]
    signals.last_tick = clock.now()
    assert probes.health().status == 200


def test_healthz_counts_from_the_start_before_the_first_tick() -> None:
    clock, signals = WaitingClock(START), Signals()
    probes = _probes(clock, signals)
    assert probes.health().status == 200
    clock.advance(timedelta(seconds=31))
    found = probes.health()
    assert found.status == 503
    assert found.document["last_tick_at"] is None
    assert "since the start" in found.document["reason"]


def test_readyz_is_ok_with_a_store_that_answers_and_the_declarations_applied() -> None:
    clock, signals = WaitingClock(START), Signals()
    for result in ("applied", "unchanged", None):
        signals.last_apply = result
        found = _probes(clock, signals).readiness()
        assert (found.status, found.document["status"]) == (200, "ok"), result
        assert found.document["checks"]["declarations"] == {"ok": True, "result": result}


@pytest.mark.parametrize("result", ["refused", "failed"])
def test_readyz_fails_on_declarations_not_applied(result: str) -> None:
    clock, signals = WaitingClock(START), Signals()
    signals.last_apply = result
    found = _probes(clock, signals).readiness()
    assert (found.status, found.document["failing"]) == (503, ["declarations"])
    assert found.document["checks"]["declarations"]["result"] == result
    assert found.document["checks"]["store"] == {"ok": True}


def test_readyz_fails_on_a_store_error_without_its_message() -> None:
    clock, signals = WaitingClock(START), Signals()
    signals.store_error = StoreUnavailableError("postgresql://app:hunter2@db/x refused")
    found = _probes(clock, signals).readiness()
    assert (found.status, found.document["failing"]) == (503, ["store"])
    assert "TRG-301" in found.document["checks"]["store"]["reason"]
    assert "hunter2" not in json.dumps(found.document)


def test_readyz_fails_on_a_store_that_hangs_and_sends_one_query_at_a_time() -> None:
    clock, signals = WaitingClock(START), Signals()
    signals.store_gate = threading.Event()
    probes = _probes(clock, signals)
    try:
        for _ in range(3):
            found = probes.readiness()
            assert (found.status, found.document["failing"]) == (503, ["store"])
            assert "within 0.2 s" in found.document["checks"]["store"]["reason"]
        assert signals.queries == 1
    finally:
        signals.store_gate.set()
    # The hung query comes back: the next probes take its answer or ask again.
    signals.store_gate = None
    assert _wait_ready(probes)
    assert signals.queries in (1, 2)


def _wait_ready(probes: Probes) -> bool:
    return any(probes.readiness().ok for _ in range(100))


@pytest.fixture
def served() -> Iterator[tuple[MetricsServer, Signals, FakeClock]]:
    clock, signals = WaitingClock(START), Signals()
    registry = CollectorRegistry()
    Gauge("triggers_last_tick_timestamp_seconds", "x", registry=registry).set(1.0)
    server = MetricsServer(ListenAddress("127.0.0.1", 0), registry=registry)
    server.start(_probes(clock, signals))
    yield server, signals, clock
    server.stop()


def _get(server: MetricsServer, path: str, method: str = "GET") -> tuple[int, str, Any]:
    request = urllib.request.Request(f"http://{server.address}{path}", method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:  # noqa: S310 - http, local
            return reply.status, reply.headers["Content-Type"], reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


def test_the_metrics_listener_serves_metrics_and_both_probes(
    served: tuple[MetricsServer, Signals, FakeClock],
) -> None:
    server, signals, clock = served
    status, kind, text = _get(server, "/metrics")
    assert status == 200
    assert kind.startswith("text/plain")
    assert "triggers_last_tick_timestamp_seconds 1.0" in text
    signals.last_tick = clock.now()
    for path in ("/healthz", "/readyz"):
        status, kind, text = _get(server, path)
        assert (status, kind, json.loads(text)["status"]) == (200, "application/json", "ok")
    clock.advance(timedelta(minutes=5))
    signals.last_apply = "refused"
    for path, failing in (("/healthz", ["ticks"]), ("/readyz", ["declarations"])):
        status, _, text = _get(server, path)
        assert (status, json.loads(text)["failing"]) == (503, failing)
        assert _get(server, path, "HEAD")[::2] == (503, "")  # the status, no body
    signals.last_apply = "applied"
    assert _get(server, "/readyz", "HEAD")[::2] == (200, "")
    assert _get(server, "/metrics", "HEAD")[0] == 405


def test_the_metrics_listener_serves_16_requests_at_once_and_closes_more(
    served: tuple[MetricsServer, Signals, FakeClock],
) -> None:
    server = served[0]
    host, port = server.address.rsplit(":", 1)
    silent = [socket.create_connection((host, int(port)), timeout=10) for _ in range(16)]
    try:
        with socket.create_connection((host, int(port)), timeout=10) as extra:
            assert extra.recv(1024) == b""  # closed at once, not queued behind the silent ones
    finally:
        for connection in silent:
            connection.close()
    # Their threads end as they close: a request is served again.
    for _ in range(100):
        try:
            if _get(server, "/healthz")[0] == 200:
                break
        except OSError:
            threading.Event().wait(0.05)
    else:
        raise AssertionError("no request served after the silent connections closed")
