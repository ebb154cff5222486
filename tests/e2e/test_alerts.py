"""Alerts end to end: the real daemon, a real HTTP receiver and a real command channel."""

from __future__ import annotations

import json
import signal
import socket
import ssl
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Cli, stop, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


@dataclass
class Receiver:
    """A webhook receiver: answers 500 to its first `failures` requests, then 200; the
    first `slow` requests are answered after `delay` seconds."""

    failures: int = 0
    slow: int = 0
    delay: float = 0.0
    requests: list[tuple[str, dict[str, Any], int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    port: int = 0

    def answer(self, key: str, body: dict[str, Any]) -> tuple[int, float]:
        with self.lock:
            status = 500 if len(self.requests) < self.failures else 200
            delay = self.delay if len(self.requests) < self.slow else 0.0
            self.requests.append((key, body, status))
            return status, delay

    def accepted(self, event: str) -> list[tuple[str, dict[str, Any]]]:
        with self.lock:
            return [(k, b) for k, b, s in self.requests if s == 200 and b["event"] == event]


def serve(found: Receiver, port: int = 0) -> ThreadingHTTPServer:
    """Serve `found` on `port` (0: any free one) on a thread, until `shutdown()`."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            status, delay = found.answer(self.headers.get("Idempotency-Key", ""), body)
            time.sleep(delay)
            self.send_response(status)
            self.end_headers()
            self.wfile.write(b"thanks" if status == 200 else b"down")

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base's name
            return

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    found.port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver(failures=2)
    server = serve(found)
    yield found
    server.shutdown()
    server.server_close()


def _config(port: int, paged: Path, *, exit_code: int, timeout: str = "5s") -> str:
    return textwrap.dedent(
        f"""\
        version: 1
        alerts:
          channels:
            hook: {{webhook: {{url: "http://127.0.0.1:{port}/hook"}}, timeout: {timeout}}}
            page: {{command: [sh, -c, "cat >> {paged}; echo >> {paged}"]}}
        defaults:
          alert: {{to: [hook, page], on: [failed]}}
        flows:
          job:
            steps:
              - {{id: work, run: [sh, -c, "echo disk full >&2; exit {exit_code}"]}}
        triggers:
          - {{id: nightly, flow: job, every: 1s}}
        """
    )


@pytest.mark.parametrize("engine", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_failing_trigger_alerts_once_and_recovers_once_despite_a_receiver_answering_500(
    engine: str, receiver: Receiver, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    cli = Cli(str(request.getfixturevalue(f"{engine}_url")), tmp_path)
    cli.env["TRIGGERS_ALERT_BACKOFF"] = "1s"
    paged = tmp_path / "paged.jsonl"
    config = tmp_path / "triggers.yaml"
    config.write_text(_config(receiver.port, paged, exit_code=3))
    daemons = [
        cli.daemon(config, tmp_path / f"daemon-{n}.log")
        for n in range(3 if engine == "postgres" else 1)
    ]
    try:

        def failures() -> int:
            found = cli.run(
                *("history", "nightly", "--outcome", "failed", "--limit", "100", "--json"),
                check=False,
            )
            if found.returncode:  # not applied yet
                return 0
            rows = json.loads(found.stdout)
            return len(rows) if len(rows) >= 5 else 0

        wait_for(failures, timeout=60, what="five failed runs")
        failed = wait_for(
            lambda: receiver.accepted("failed"), timeout=60, what="the failed alert delivered"
        )
        config.write_text(_config(receiver.port, paged, exit_code=0))
        cli.run("apply", str(config))
        recovered = wait_for(
            lambda: receiver.accepted("recovered"), timeout=60, what="the recovered alert"
        )
        wait_for(lambda: len(paged.read_text().splitlines()) >= 2, timeout=30, what="two pages")
    finally:
        codes = [stop(daemon) for daemon in daemons]
    assert codes == [0] * len(daemons)
    assert len(failed) == 1
    assert len(recovered) == 1
    key, body = failed[0]
    assert key == body["id"]
    assert body["trigger_id"] == "nightly"
    assert "disk full" in body["error"]
    assert body["text"].startswith("[triggers] nightly failed")
    # The two 500s were for the failed alert, retried under the same id.
    assert [k for k, _, s in receiver.requests if s == 500] == [key, key]
    pages = [json.loads(line) for line in paged.read_text().splitlines() if line.strip()]
    assert [page["event"] for page in pages] == ["failed", "recovered"]
    listed = cli.json("alerts", "list")
    assert {(a["event"], a["channel"], a["status"]) for a in listed} == {
        ("failed", "hook", "delivered"),
        ("failed", "page", "delivered"),
        ("recovered", "hook", "delivered"),
        ("recovered", "page", "delivered"),
    }
    attempts = {(a["event"], a["channel"]): a["attempts"] for a in listed}
    assert attempts[("failed", "hook")] == 3
    described = cli.json("describe", "nightly")
    assert described["declaration"]["alert"]["to"] == ["hook", "page"]
    assert [(a["event"], a["channel"]) for a in described["alerts"]] == [
        (a["event"], a["channel"]) for a in listed
    ]  # the newest first, as `alerts list`
    text = cli.run("describe", "nightly").stdout
    assert "alerts (triggers alerts list --trigger ID for more):" in text
    assert "failed to hook: delivered after 3 attempts" in text


def _failed_alerts(cli: Cli, *, status: str) -> list[dict[str, Any]]:
    found = cli.run("alerts", "list", "--status", status, "--json", check=False)
    if found.returncode:
        return []
    return [a for a in json.loads(found.stdout) if a["channel"] == "hook"]


def test_a_receiver_down_for_a_while_gets_the_alerts_in_order_with_their_times(
    tmp_path: Path,
) -> None:
    found = Receiver()
    # The receiver's port, bound but not listening: every connection is refused.
    down = socket.socket()
    down.bind(("127.0.0.1", 0))
    port = down.getsockname()[1]
    cli = Cli(f"sqlite:///{tmp_path / 'triggers.sqlite'}", tmp_path)
    cli.env.update({"TRIGGERS_ALERT_BACKOFF": "500ms", "TRIGGERS_ALERT_MAX_BACKOFF": "1s"})
    config = tmp_path / "triggers.yaml"
    text = _config(port, tmp_path / "paged.jsonl", exit_code=3)
    config.write_text(
        text.replace("id: nightly,", "id: first,") + "  - {id: second, flow: job, every: 1s}\n"
    )
    daemon = cli.daemon(config, tmp_path / "daemon.log")
    server = None
    try:

        def refused_often() -> bool:
            pending = _failed_alerts(cli, status="pending")  # the newest first
            triggers = {a["trigger_id"] for a in pending}
            return triggers == {"first", "second"} and pending[-1]["attempts"] >= 3

        wait_for(refused_often, timeout=90, what="both alerts refused three times")
        # The oldest is retried; the other waits behind it (the channel keeps its order).
        newer, oldest = _failed_alerts(cli, status="pending")
        assert "refused" in (oldest["last_error"] or "").lower(), oldest
        assert newer["attempts"] == 0, newer
        back_at = time.time()
        down.close()
        server = serve(found, port)
        wait_for(lambda: len(found.accepted("failed")) >= 2, timeout=60, what="both delivered")
    finally:
        assert stop(daemon) == 0
        down.close()
        if server is not None:
            server.shutdown()
            server.server_close()
    arrived = found.accepted("failed")
    assert len(arrived) == 2
    assert {body["trigger_id"] for _, body in arrived} == {"first", "second"}
    # In the order they were raised, with the times they were raised at (before the
    # receiver came back), not the time of their delivery.
    times = [datetime.fromisoformat(body["at"]).timestamp() for _, body in arrived]
    assert times == sorted(times)
    assert max(times) < back_at
    delivered = _failed_alerts(cli, status="delivered")
    assert len(delivered) == 2
    assert max(a["attempts"] for a in delivered) >= 4


def test_a_slow_receiver_is_retried_under_the_same_id_without_delaying_the_ticks(
    tmp_path: Path,
) -> None:
    # The first request is answered 200 after 4 s: past the channel's 1 s timeout, so
    # the daemon retries, and the receiver answers 200 twice to the same id.
    found = Receiver(slow=1, delay=4.0)
    server = serve(found)
    cli = Cli(f"sqlite:///{tmp_path / 'triggers.sqlite'}", tmp_path)
    cli.env["TRIGGERS_ALERT_BACKOFF"] = "500ms"
    config = tmp_path / "triggers.yaml"
    config.write_text(_config(found.port, tmp_path / "paged.jsonl", exit_code=3, timeout="1s"))
    daemon = cli.daemon(config, tmp_path / "daemon.log")
    try:
        wait_for(lambda: len(found.requests) >= 2, timeout=60, what="the retry")
        slow_from = time.time()
        wait_for(lambda: _failed_alerts(cli, status="delivered"), timeout=60, what="delivered")
        time.sleep(4)  # the slow answer ends; nothing more is sent
    finally:
        assert stop(daemon) == 0
        server.shutdown()
        server.server_close()
    keys = [key for key, _, _ in found.requests]
    assert len(keys) == 2
    assert keys[0] == keys[1]  # one id: the receiver drops the repeat
    [alert] = _failed_alerts(cli, status="delivered")
    assert alert["attempts"] == 2
    # The ticks went on meanwhile: the every-second trigger fired through the slow answer.
    rows = cli.json("history", "nightly", "--limit", "100")
    fired = [datetime.fromisoformat(r["occurrence"]).timestamp() for r in rows]
    assert sum(1 for at in fired if slow_from - 3 <= at <= slow_from + 3) >= 4


def test_alerts_test_reports_the_receivers_answer(receiver: Receiver, tmp_path: Path) -> None:
    cli = Cli(f"sqlite:///{tmp_path / 'triggers.sqlite'}", tmp_path)
    config = tmp_path / "triggers.yaml"
    config.write_text(_config(receiver.port, tmp_path / "paged.jsonl", exit_code=0))
    refused = cli.run("--config", str(config), "alerts", "test", "hook", "--json", check=False)
    assert refused.returncode == 1
    assert json.loads(refused.stdout)["answer"].startswith("HTTP 500")
    receiver.failures = 0
    done = cli.run("--config", str(config), "alerts", "test", "page", "--json")
    assert json.loads(done.stdout) == {
        "channel": "page",
        "kind": "command",
        "delivered": True,
        "answer": "exit 0",
    }
    unknown = cli.run("--config", str(config), "alerts", "test", "nope", check=False)
    assert unknown.returncode == 2
    assert "no channel 'nope'" in unknown.stderr


@pytest.mark.parametrize("engine", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_an_outage_raises_one_missed_alert_for_the_range(
    engine: str, receiver: Receiver, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # On PostgreSQL three daemons come back from the outage: still one alert.
    receiver.failures = 0
    cli = Cli(str(request.getfixturevalue(f"{engine}_url")), tmp_path)
    config = tmp_path / "triggers.yaml"
    config.write_text(
        textwrap.dedent(
            f"""\
            version: 1
            alerts:
              channels:
                hook: {{webhook: {{url: "http://127.0.0.1:{receiver.port}/hook"}}}}
            flows:
              job: {{steps: []}}
            triggers:
              - id: every-second
                flow: job
                every: 1s
                catchup: {{policy: none, grace: 500ms}}
                alert: {{to: [hook], on: [missed]}}
            """
        )
    )
    log = tmp_path / "daemon.log"

    def completed() -> bool:
        found = cli.run("history", "every-second", "--json", check=False)
        return found.returncode == 0 and any(
            row["outcome"] == "completed" for row in json.loads(found.stdout)
        )

    first = cli.daemon(config, log)
    try:
        wait_for(completed, timeout=60, what="a completed fire")
    finally:
        assert stop(first) == 0
    time.sleep(3)  # the outage: three occurrences or so come due while no daemon runs
    back = [
        cli.daemon(config, tmp_path / f"daemon-{n}.log")
        for n in range(3 if engine == "postgres" else 1)
    ]
    try:
        missed = wait_for(lambda: receiver.accepted("missed"), timeout=60, what="the missed alert")
        time.sleep(2)  # more fires: the outage is over, nothing more to say
    finally:
        codes = [stop(daemon) for daemon in back]
    assert codes == [0] * len(back)
    assert len(receiver.accepted("missed")) == 1
    body = missed[0][1]
    assert body["reason"] == "catchup_policy"
    assert body["count"] >= 2
    assert body["text"].startswith("[triggers] every-second missed")


@pytest.fixture
def smtp_server() -> Iterator[tuple[int, list[Any]]]:
    from aiosmtpd.controller import Controller

    received: list[Any] = []

    class Handler:
        async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802 - aiosmtpd's name
            received.append(envelope)
            return "250 Message accepted for delivery"

    with socket.socket() as probe:  # the controller checks its port by connecting to it
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    controller = Controller(Handler(), hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield port, received
    finally:
        controller.stop()


def test_a_failure_is_mailed_through_a_real_smtp_server(
    smtp_server: tuple[int, list[Any]], tmp_path: Path
) -> None:
    port, received = smtp_server
    cli = Cli(f"sqlite:///{tmp_path / 'triggers.sqlite'}", tmp_path)
    cli.env.update(
        {
            "TRIGGERS_SMTP_HOST": "127.0.0.1",
            "TRIGGERS_SMTP_PORT": str(port),
            "TRIGGERS_SMTP_TLS": "none",
            "TRIGGERS_SMTP_FROM": "triggers@example.com",
        }
    )
    config = tmp_path / "triggers.yaml"
    config.write_text(
        textwrap.dedent(
            """\
            version: 1
            alerts:
              channels:
                mail: {email: {to: [oncall@example.com], subject_prefix: "[prod] "}}
            flows:
              job: {steps: [{id: work, run: [sh, -c, "echo no space left >&2; exit 1"]}]}
            triggers:
              - {id: backup, flow: job, every: 1s, alert: {to: [mail]}}
            """
        )
    )
    tested = cli.run("--config", str(config), "alerts", "test", "mail", "--json")
    assert json.loads(tested.stdout)["delivered"] is True
    daemon = cli.daemon(config, tmp_path / "daemon.log")
    try:
        wait_for(lambda: len(received) >= 2, timeout=60, what="the failure mailed")
        time.sleep(2)  # more failures: still one mail
    finally:
        assert stop(daemon) == 0
    assert len(received) == 2
    mail = received[1]
    assert mail.rcpt_tos == ["oncall@example.com"]
    assert mail.mail_from == "triggers@example.com"
    text = mail.content.decode()
    assert "Subject: [prod] [triggers] backup failed" in text
    assert "no space left" in text


@dataclass
class TlsSmtp:
    port: int
    ca_file: Path
    received: list[Any]
    logins: list[tuple[str, bool]]
    """(user, whether the password was right), one a login attempt."""


@pytest.fixture
def tls_smtp_server(tmp_path: Path) -> Iterator[TlsSmtp]:
    """A real SMTP server that requires STARTTLS and a login, with a certificate of its
    own authority (trustme's), for 127.0.0.1."""
    import trustme
    from aiosmtpd.controller import Controller
    from aiosmtpd.smtp import AuthResult, LoginPassword

    authority = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(context)
    ca_file = tmp_path / "smtp-ca.pem"
    authority.cert_pem.write_to_path(str(ca_file))
    found = TlsSmtp(port=0, ca_file=ca_file, received=[], logins=[])

    class Handler:
        async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802 - aiosmtpd's name
            found.received.append(envelope)
            return "250 Message accepted for delivery"

    def authenticate(
        server: Any, session: Any, envelope: Any, mechanism: str, data: Any
    ) -> AuthResult:
        assert isinstance(data, LoginPassword)
        good = data.login == b"alerts" and data.password == b"s3cret-pw"
        found.logins.append((data.login.decode(), good))
        return AuthResult(success=good, handled=False)  # aiosmtpd answers 535 itself

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        found.port = probe.getsockname()[1]
    controller = Controller(
        Handler(),
        hostname="127.0.0.1",
        port=found.port,
        tls_context=context,
        require_starttls=True,
        authenticator=authenticate,
        auth_required=True,
    )
    controller.start()
    try:
        yield found
    finally:
        controller.stop()


def test_mail_goes_through_starttls_and_a_login_with_the_password_from_a_file(
    tls_smtp_server: TlsSmtp, tmp_path: Path
) -> None:
    server = tls_smtp_server
    password_file = tmp_path / "smtp-password"
    password_file.write_text("s3cret-pw\n")
    cli = Cli(f"sqlite:///{tmp_path / 'triggers.sqlite'}", tmp_path)
    cli.env.update(
        {
            "TRIGGERS_SMTP_HOST": "127.0.0.1",
            "TRIGGERS_SMTP_PORT": str(server.port),
            "TRIGGERS_SMTP_USER": "alerts",
            "TRIGGERS_SMTP_PASSWORD_FILE": str(password_file),
            "TRIGGERS_SMTP_FROM": "triggers@example.com",
        }
    )
    config = tmp_path / "triggers.yaml"
    config.write_text(
        "version: 1\nalerts: {channels: {mail: {email: {to: [oncall@example.com]}}}}\n"
        "flows: {job: {steps: []}}\ntriggers: [{id: backup, flow: job, every: 1h}]\n"
    )
    # The server's certificate is of no authority the system trusts: refused, and why.
    untrusted = cli.run("--config", str(config), "alerts", "test", "mail", "--json", check=False)
    assert untrusted.returncode == 1
    assert "CERTIFICATE_VERIFY_FAILED" in json.loads(untrusted.stdout)["answer"]
    assert server.received == []

    cli.env["TRIGGERS_SMTP_CA_FILE"] = str(server.ca_file)
    password_file.write_text("wrong\n")
    refused = cli.run("--config", str(config), "alerts", "test", "mail", "--json", check=False)
    assert refused.returncode == 1
    assert json.loads(refused.stdout)["answer"].startswith("SMTP 535")
    assert "wrong" not in refused.stdout + refused.stderr

    password_file.write_text("s3cret-pw\n")
    sent = cli.run("--config", str(config), "alerts", "test", "mail", "--json")
    assert json.loads(sent.stdout)["delivered"] is True
    # smtplib tries each mechanism the server offers (PLAIN, LOGIN) with the wrong one.
    assert server.logins[-1] == ("alerts", True)
    assert {good for _, good in server.logins[:-1]} == {False}
    [mail] = server.received
    assert mail.rcpt_tos == ["oncall@example.com"]
    assert "s3cret-pw" not in mail.content.decode()


@pytest.mark.parametrize("engine", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_run_past_its_deadlines_is_late_once_and_stuck_once(
    engine: str, receiver: Receiver, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # On PostgreSQL three daemons check the deadlines: still one alert of each.
    receiver.failures = 0
    cli = Cli(str(request.getfixturevalue(f"{engine}_url")), tmp_path)
    config = tmp_path / "triggers.yaml"
    config.write_text(
        textwrap.dedent(
            f"""\
            version: 1
            alerts:
              channels:
                hook: {{webhook: {{url: "http://127.0.0.1:{receiver.port}/hook"}}}}
            flows:
              slow: {{steps: [{{id: wait, run: [sleep, "14"]}}]}}
            triggers:
              - id: report
                flow: slow
                every: 1d
                alert: {{to: [hook], on: [late, stuck], late: 1s, stuck: 2s}}
            """
        )
    )
    daemons = [
        cli.daemon(config, tmp_path / f"daemon-{n}.log")
        for n in range(3 if engine == "postgres" else 1)
    ]
    try:
        wait_for(
            lambda: cli.run("list", "--json", check=False).returncode == 0 and cli.json("list"),
            timeout=60,
            what="the trigger applied",
        )
        cli.run("fire", "report")
        wait_for(lambda: receiver.accepted("late"), timeout=60, what="the late alert")
        wait_for(lambda: receiver.accepted("stuck"), timeout=60, what="the stuck alert")
        time.sleep(6)  # another round of every daemon's deadline check: nothing new to say
    finally:
        codes = [stop(daemon) for daemon in daemons]
    assert codes == [0] * len(daemons)
    late, stuck = receiver.accepted("late"), receiver.accepted("stuck")
    assert len(late) == 1
    assert len(stuck) == 1
    assert stuck[0][1]["run_id"]
    assert "still running" in stuck[0][1]["text"]


def test_alerts_pending_at_a_kill_are_delivered_once_after_the_restart(
    receiver: Receiver, tmp_path: Path
) -> None:
    receiver.failures = 10_000  # down: every attempt answered 500 until it comes back
    cli = Cli(f"sqlite:///{tmp_path / 'triggers.sqlite'}", tmp_path)
    cli.env["TRIGGERS_ALERT_BACKOFF"] = "1s"
    config = tmp_path / "triggers.yaml"
    config.write_text(_config(receiver.port, tmp_path / "paged.jsonl", exit_code=3))
    log = tmp_path / "daemon.log"
    first = cli.daemon(config, log)
    try:

        def tried() -> bool:
            found = cli.run("alerts", "list", "--status", "pending", "--json", check=False)
            return found.returncode == 0 and any(
                a["channel"] == "hook" and a["attempts"] >= 1 for a in json.loads(found.stdout)
            )

        wait_for(tried, timeout=60, what="a failed delivery attempt")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    receiver.failures = 0
    with receiver.lock:
        receiver.requests.clear()
    second = cli.daemon(config, log)
    try:
        wait_for(lambda: receiver.accepted("failed"), timeout=120, what="the delivery")
        time.sleep(3)
    finally:
        assert stop(second) == 0
    assert len(receiver.accepted("failed")) == 1
    listed = cli.json("alerts", "list", "--trigger", "nightly")
    assert [(a["event"], a["status"]) for a in listed if a["channel"] == "hook"] == [
        ("failed", "delivered")
    ]


def test_the_heartbeat_url_is_pinged_while_ticks_progress(tmp_path: Path) -> None:
    pings: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            pings.append(self.path)
            self.send_response(200)
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base's name
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    cli = Cli(f"sqlite:///{tmp_path / 'triggers.sqlite'}", tmp_path)
    cli.env["TRIGGERS_HEARTBEAT_URL"] = f"http://127.0.0.1:{server.server_address[1]}/ping/abc"
    cli.env["TRIGGERS_HEARTBEAT_URL_INTERVAL"] = "1s"
    config = tmp_path / "triggers.yaml"
    config.write_text(
        "version: 1\nflows: {f: {steps: []}}\ntriggers: [{id: t, flow: f, every: 1s}]\n"
    )
    daemon = cli.daemon(config, tmp_path / "daemon.log")
    try:
        wait_for(lambda: len(pings) >= 3, timeout=60, what="three pings")
    finally:
        assert stop(daemon) == 0
        server.shutdown()
        server.server_close()
    assert set(pings) == {"/ping/abc"}
