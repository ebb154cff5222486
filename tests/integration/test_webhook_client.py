"""The webhook channel's HTTP client against real local receivers: kept-alive
connections, a receiver that closes them, timeouts, refusals, answers, a proxy."""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from triggers.delivery import SmtpServer, WebhookClient, deliver

PAYLOAD = {"id": "t:2026-01-01T00:00:00Z:failed", "event": "failed", "text": "[triggers] t failed"}


class Seen:
    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        self.connections = 0


@contextmanager
def receiver(
    *, status: int = 200, delay: float = 0.0, close: bool = False, drop_idle: bool = False
) -> Iterator[tuple[str, Seen]]:
    """A receiver on a thread: HTTP/1.1 kept alive, or closing after each answer
    (`close`: saying so; `drop_idle`: without saying, as an idle timeout does)."""
    seen = Seen()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def setup(self) -> None:
            super().setup()
            seen.connections += 1

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.requests.append((self.path, dict(self.headers), body))
            time.sleep(delay)
            self.send_response(status)
            self.send_header("Content-Length", "6")
            if close:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b"thanks")
            if drop_idle:
                self.close_connection = True

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base's name
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def _send(url: str, client: WebhookClient | None = None, **config: Any) -> Any:
    destination = {"name": "hook", "kind": "webhook", "config": {"url": url, **config}}
    return deliver(destination, PAYLOAD, smtp=SmtpServer(), http=client)


def test_alerts_share_one_kept_alive_connection_and_carry_their_id() -> None:
    client = WebhookClient()
    with receiver() as (base, seen):
        answers = [_send(f"{base}/hook?x=1", client) for _ in range(3)]
    client.close()
    assert [a.delivered for a in answers] == [True, True, True]
    assert answers[0].detail == "HTTP 200 thanks"
    assert seen.connections == 1
    path, headers, body = seen.requests[0]
    assert path == "/hook?x=1"
    assert headers["Idempotency-Key"] == PAYLOAD["id"]
    assert headers["Content-Type"] == "application/json"
    assert headers["User-Agent"] == "triggers-alerts"
    assert body == PAYLOAD


@pytest.mark.parametrize("how", ["close", "drop_idle"])
def test_a_receiver_that_closes_its_connections_gets_each_alert_once(how: str) -> None:
    client = WebhookClient()
    with receiver(**{how: True}) as (base, seen):
        answers = []
        for _ in range(3):
            answers.append(_send(base, client))
            time.sleep(0.05)  # the receiver's side of the connection is closed by now
    client.close()
    assert [a.delivered for a in answers] == [True, True, True]
    assert len(seen.requests) == 3
    assert seen.connections == 3


def test_a_slow_receiver_is_no_answer_within_the_timeout_and_the_next_alert_goes_through() -> None:
    client = WebhookClient()
    with receiver(delay=1.0) as (base, _):
        answer = _send(base, client, timeout_s=0.2)
    assert (answer.delivered, answer.detail, answer.retryable) == (
        False,
        "no answer within 0.2s",
        True,
    )
    with receiver() as (base, _):
        assert _send(base, client).delivered
    client.close()


def test_a_refused_connection_is_retryable_and_names_no_url() -> None:
    with socket.socket() as bound:  # bound, not listening: connections are refused
        bound.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{bound.getsockname()[1]}/secret-token"
        answer = _send(url)
    assert not answer.delivered
    assert answer.retryable
    assert answer.detail.startswith("cannot reach the receiver: ")
    assert "refused" in answer.detail.lower()
    assert "secret-token" not in answer.detail


@pytest.mark.parametrize(("status", "retryable"), [(500, True), (429, True), (401, False)])
def test_an_error_answer_is_recorded_and_retried_unless_it_is_a_refusal(
    status: int, retryable: bool
) -> None:
    with receiver(status=status) as (base, _):
        answer = _send(base)
    assert not answer.delivered
    assert answer.detail == f"HTTP {status} thanks"
    assert answer.retryable is retryable


def test_a_receiver_behind_a_proxy_is_reached_through_it(monkeypatch: pytest.MonkeyPatch) -> None:
    with receiver() as (proxy, seen):
        monkeypatch.setenv("HTTP_PROXY", proxy)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        answer = _send("http://hooks.example/abc")
    assert answer.delivered
    [(path, headers, body)] = seen.requests
    assert path == "http://hooks.example/abc"  # the proxy is asked for the whole URL
    assert headers["Idempotency-Key"] == PAYLOAD["id"]
    assert body == PAYLOAD


def test_a_url_with_a_user_and_password_is_sent_as_basic_auth() -> None:
    with receiver() as (base, seen):
        answer = _send(base.replace("http://", "http://ops:p%40ss@") + "/hook")
    assert answer.delivered
    [(path, headers, _)] = seen.requests
    assert path == "/hook"
    assert headers["Authorization"] == "Basic " + base64.b64encode(b"ops:p@ss").decode()
