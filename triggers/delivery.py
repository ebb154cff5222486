"""Delivering alerts: the channels (webhook, command, email) and the sender loop.

The sender leases due alerts from the outbox, delivers each to its channel with a
deadline, and records the answer: delivered, retried with exponential backoff, or
failed for good after its attempts. It runs on its own thread, so a slow or dead
receiver never delays a tick. Secrets (a webhook's headers, the SMTP password) are
read from files or the environment at each send, never from the YAML or the database.
"""

from __future__ import annotations

import base64
import http.client
import json
import json as _json  # `WebhookClient.post`'s `json` hides the module's name
import os
import smtplib
import ssl
import subprocess
import threading
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.message import EmailMessage
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import structlog

from triggers.alert_rules import AlertRecord
from triggers.clock import Clock
from triggers.errors import StoreError

if TYPE_CHECKING:
    import httpx

log = structlog.get_logger()

DEFAULT_TIMEOUT = timedelta(seconds=10)
_ANSWER_LIMIT = 500  # characters of a receiver's answer kept with the alert
_SERVICE_ENV = ("PATH", "HOME", "LANG", "USER", "LOGNAME", "TZ")
_RETRYABLE_STATUS = frozenset({408, 425, 429})


class _Secret(Protocol):
    def get_secret_value(self) -> str: ...


class SmtpSettings(Protocol):
    """The `TRIGGERS_SMTP_*` settings (`triggers.settings.Settings` has them)."""

    @property
    def smtp_host(self) -> str | None: ...
    @property
    def smtp_port(self) -> int: ...
    @property
    def smtp_user(self) -> str | None: ...
    @property
    def smtp_password(self) -> _Secret | None: ...
    @property
    def smtp_password_file(self) -> Path | None: ...
    @property
    def smtp_from(self) -> str: ...
    @property
    def smtp_tls(self) -> Literal["starttls", "ssl", "none"]: ...
    @property
    def smtp_ca_file(self) -> Path | None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class SmtpServer:
    """Where email alerts go out (from `TRIGGERS_SMTP_*`)."""

    host: str | None = None
    port: int = 587
    user: str | None = None
    password: str | None = None
    password_file: Path | None = None
    sender: str = "triggers@localhost"
    tls: Literal["starttls", "ssl", "none"] = "starttls"
    ca_file: Path | None = None
    """The certificates the server's is checked against; None: the system's."""

    @classmethod
    def of(cls, settings: SmtpSettings) -> SmtpServer:
        password = settings.smtp_password
        return cls(
            host=settings.smtp_host,
            port=settings.smtp_port,
            user=settings.smtp_user,
            password=password.get_secret_value() if password is not None else None,
            password_file=settings.smtp_password_file,
            sender=settings.smtp_from,
            tls=settings.smtp_tls,
            ca_file=settings.smtp_ca_file,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Answer:
    """A channel's answer to one delivery."""

    delivered: bool
    detail: str
    """The receiver's answer (status and body, exit status and output) or why it failed."""
    retryable: bool = True


class DeliveryError(Exception):
    """A delivery failed; the message says why (never a secret)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WebhookResponse:
    """A receiver's answer: its status and the start of its body."""

    status: int
    text: str

    @property
    def is_success(self) -> bool:
        return 200 <= self.status < 300  # noqa: PLR2004 - HTTP's classes

    @property
    def is_client_error(self) -> bool:
        return 400 <= self.status < 500  # noqa: PLR2004 - HTTP's classes


class WebhookClient:
    """The sender's HTTP client for webhooks: one kept-alive connection per receiver.

    The standard library's `http.client`, which costs a fifth of httpx's CPU a request
    (0.12 ms against 0.57 ms on the project's machine): a burst of a thousand alerts
    takes that much less from the interpreter the ticks share. A receiver behind a
    proxy (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, less `NO_PROXY`) is reached
    through httpx, which speaks to proxies; httpx is loaded only then."""

    def __init__(self) -> None:
        self._connections: dict[tuple[str, str, int], http.client.HTTPConnection] = {}
        self._proxies = urllib.request.getproxies_environment()
        self._proxied: httpx.Client | None = None
        self._tls: ssl.SSLContext | None = None

    def post(
        self, url: str, *, json: Mapping[str, Any], headers: Mapping[str, str], timeout: float
    ) -> WebhookResponse:
        """POST `json` to `url`; a timeout raises `TimeoutError`, a receiver that cannot
        be reached (refused, reset, a bad certificate, not HTTP) `OSError`."""
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise OSError("not an http or https URL")
        body = _json.dumps(json, ensure_ascii=False, separators=(",", ":")).encode()
        sent = {"Content-Type": "application/json", "Accept": "*/*", **headers}
        if parts.username is not None:
            password = urllib.parse.unquote(parts.password or "")
            user = f"{urllib.parse.unquote(parts.username)}:{password}"
            sent["Authorization"] = "Basic " + base64.b64encode(user.encode()).decode()
        if self._proxy_for(parts):
            return self._via_proxy(url, body, sent, timeout)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        key = (parts.scheme, parts.hostname, port)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        while True:
            connection = self._connections.pop(key, None)
            reused = connection is not None
            if connection is None:
                connection = self._connect(key, timeout)
            elif connection.sock is not None:
                connection.sock.settimeout(timeout)
            connection.timeout = timeout
            try:
                connection.request("POST", target, body=body, headers=sent)
                response = connection.getresponse()
                data = response.read(_ANSWER_LIMIT * 4)
                if not response.isclosed():
                    response.read()  # the rest, so the connection can carry the next
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                connection.close()
                if reused:
                    continue  # a kept-alive connection the receiver had closed: a new one
                raise
            except (OSError, http.client.HTTPException) as exc:
                connection.close()
                if isinstance(exc, OSError):
                    raise
                raise OSError(f"not an HTTP answer: {type(exc).__name__}") from exc
            except BaseException:
                connection.close()
                raise
            if response.will_close:
                connection.close()
            else:
                self._connections[key] = connection
            return WebhookResponse(status=response.status, text=data.decode(errors="replace"))

    def _connect(self, key: tuple[str, str, int], timeout: float) -> http.client.HTTPConnection:
        scheme, host, port = key
        if scheme == "http":
            return http.client.HTTPConnection(host, port, timeout=timeout)
        if self._tls is None:
            self._tls = ssl.create_default_context()  # the system's certificates
        return http.client.HTTPSConnection(host, port, timeout=timeout, context=self._tls)

    def _proxy_for(self, parts: urllib.parse.SplitResult) -> bool:
        proxy = self._proxies.get(parts.scheme) or self._proxies.get("all")
        if not proxy:
            return False
        # Undocumented in typeshed, there since Python 3.3: `NO_PROXY`'s matching.
        bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
        return not bypass(parts.netloc, self._proxies)

    def _via_proxy(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout: float
    ) -> WebhookResponse:
        import httpx  # noqa: PLC0415 - only for a receiver behind a proxy

        if self._proxied is None:
            self._proxied = httpx.Client()
        try:
            response = self._proxied.post(url, content=body, headers=headers, timeout=timeout)
        except httpx.TimeoutException as exc:
            raise TimeoutError(str(exc)) from exc
        except httpx.HTTPError as exc:
            raise OSError(str(exc) or type(exc).__name__) from exc
        return WebhookResponse(status=response.status_code, text=response.text[: _ANSWER_LIMIT * 4])

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()
        if self._proxied is not None:
            self._proxied.close()
            self._proxied = None


def deliver(
    destination: Mapping[str, Any],
    payload: Mapping[str, Any],
    *,
    smtp: SmtpServer,
    http: WebhookClient | None = None,
) -> Answer:
    """Send one alert to one channel (`AlertChannel.to_json()`) and return its answer.

    `http` keeps webhook connections open between alerts (the sender's own client)."""
    config = destination["config"]
    timeout = float(config.get("timeout_s") or DEFAULT_TIMEOUT.total_seconds())
    try:
        match destination["kind"]:
            case "webhook":
                return _webhook(config, payload, timeout, http)
            case "command":
                return _command(config, payload, timeout)
            case "email":
                return _email(config, payload, timeout, smtp)
    except DeliveryError as exc:
        return Answer(delivered=False, detail=str(exc))
    return Answer(delivered=False, detail=f"unknown channel kind {destination['kind']!r}")


def _webhook(
    config: Mapping[str, Any],
    payload: Mapping[str, Any],
    timeout: float,
    http: WebhookClient | None,
) -> Answer:
    headers = {"Idempotency-Key": str(payload["id"]), "User-Agent": "triggers-alerts"}
    if config.get("headers_file"):
        headers.update(_headers(Path(config["headers_file"])))
    client = http if http is not None else WebhookClient()
    try:
        response = client.post(config["url"], json=payload, headers=headers, timeout=timeout)
    except TimeoutError:
        return Answer(delivered=False, detail=f"no answer within {timeout:g}s")
    except OSError as exc:
        # The URL may hold a secret (a Slack hook's): never in the answer recorded.
        why = str(exc).replace(str(config["url"]), "the URL") or type(exc).__name__
        return Answer(delivered=False, detail=f"cannot reach the receiver: {why}"[:_ANSWER_LIMIT])
    finally:
        if http is None:
            client.close()
    answer = f"HTTP {response.status} {response.text[:_ANSWER_LIMIT]}".strip()
    if response.is_success:
        return Answer(delivered=True, detail=answer)
    # A request the receiver refuses (bad token, gone) fails the same way next time.
    permanent = response.is_client_error and response.status not in _RETRYABLE_STATUS
    return Answer(delivered=False, detail=answer, retryable=not permanent)


def _headers(path: Path) -> dict[str, str]:
    """`Name: value` lines (blank lines and `#` comments ignored)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise DeliveryError(f"cannot read headers_file {path}: {exc.strerror}") from exc
    headers = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, colon, value = line.partition(":")
        if not colon or not name.strip():
            raise DeliveryError(f"{path}:{number}: not a 'Name: value' header line")
        headers[name.strip()] = value.strip()
    return headers


def _command(config: Mapping[str, Any], payload: Mapping[str, Any], timeout: float) -> Answer:
    # The service's environment, never the daemon's settings or credentials.
    env = {name: os.environ[name] for name in _SERVICE_ENV if name in os.environ}
    env["TRIGGERS_ALERT_ID"] = str(payload["id"])
    env["TRIGGERS_ALERT_EVENT"] = str(payload["event"])
    try:
        done = subprocess.run(  # noqa: S603 - argv from the declarations, no shell
            list(config["argv"]),
            input=json.dumps(payload).encode(),
            capture_output=True,
            timeout=timeout,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return Answer(delivered=False, detail=f"the command did not finish within {timeout:g}s")
    except OSError as exc:
        return Answer(delivered=False, detail=f"cannot run {config['argv'][0]}: {exc.strerror}")
    output = (done.stdout + done.stderr).decode(errors="replace")[-_ANSWER_LIMIT:].strip()
    detail = f"exit {done.returncode}" + (f": {output}" if output else "")
    return Answer(delivered=done.returncode == 0, detail=detail)


def _email(
    config: Mapping[str, Any], payload: Mapping[str, Any], timeout: float, smtp: SmtpServer
) -> Answer:
    if not smtp.host:
        return Answer(delivered=False, detail="no SMTP server: set TRIGGERS_SMTP_HOST")
    message = EmailMessage()
    prefix = config.get("subject_prefix") or ""
    message["Subject"] = f"{prefix}{payload['text']}"[:250]
    message["From"] = smtp.sender
    message["To"] = ", ".join(config["to"])
    message["Message-ID"] = f"<{_mail_id(str(payload['id']))}@triggers>"
    body = [str(payload["text"]), ""]
    if payload.get("error"):
        body += ["Error:", str(payload["error"]), ""]
    body += [f"{name}: {value}" for name, value in payload.get("links", {}).items()]
    body += ["", json.dumps(payload, indent=2)]
    message.set_content("\n".join(body))
    password = smtp.password
    if smtp.password_file is not None:
        try:
            password = smtp.password_file.read_text().strip()
        except OSError as exc:
            raise DeliveryError(f"cannot read the SMTP password file: {exc.strerror}") from exc
    try:
        context = ssl.create_default_context(
            cafile=None if smtp.ca_file is None else str(smtp.ca_file)
        )
    except (OSError, ssl.SSLError) as exc:
        raise DeliveryError(f"cannot read the SMTP CA file {smtp.ca_file}: {exc}") from exc
    try:
        client: smtplib.SMTP
        if smtp.tls == "ssl":
            client = smtplib.SMTP_SSL(smtp.host, smtp.port, timeout=timeout, context=context)
        else:
            client = smtplib.SMTP(smtp.host, smtp.port, timeout=timeout)
        with client:
            if smtp.tls == "starttls":
                client.starttls(context=context)
            if smtp.user:
                client.login(smtp.user, password or "")
            refused = client.send_message(message)
    except smtplib.SMTPResponseException as exc:
        text = exc.smtp_error.decode(errors="replace") if isinstance(exc.smtp_error, bytes) else ""
        return Answer(delivered=False, detail=f"SMTP {exc.smtp_code} {text}"[:_ANSWER_LIMIT])
    except (smtplib.SMTPException, OSError) as exc:
        return Answer(delivered=False, detail=f"SMTP: {type(exc).__name__}: {exc}"[:_ANSWER_LIMIT])
    if refused:
        return Answer(delivered=False, detail=f"refused recipients: {', '.join(sorted(refused))}")
    return Answer(delivered=True, detail=f"accepted by {smtp.host} for {len(config['to'])}")


def _mail_id(alert_id: str) -> str:
    return "".join(c if c.isalnum() or c in ".-" else "-" for c in alert_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class Attempt:
    """One delivery attempt's answer, as the outbox records it."""

    record: AlertRecord
    at: datetime
    delivered: bool
    error: str | None = None
    response: str | None = None
    retry_at: datetime | None = None
    """None for a failed attempt: failed for good."""


class AlertOutbox(Protocol):
    """What the sender needs of the store (`SqlAlertOutbox`)."""

    def claim(
        self, *, owner: str, now: datetime, lease: timedelta, limit: int = ...
    ) -> list[AlertRecord]: ...

    def record(
        self,
        record: AlertRecord,
        *,
        owner: str,
        now: datetime,
        delivered: bool,
        error: str | None = ...,
        response: str | None = ...,
        retry_at: datetime | None = ...,
    ) -> bool: ...

    def record_all(self, attempts: Sequence[Attempt], *, owner: str) -> int: ...

    def due(self, *, owner: str, now: datetime, limit: int = ...) -> bool: ...

    def exchange(
        self,
        attempts: Sequence[Attempt],
        *,
        owner: str,
        now: datetime,
        lease: timedelta,
        limit: int = ...,
    ) -> list[AlertRecord]: ...

    def check_deadlines(self, *, now: datetime) -> int: ...

    def prune(self, *, older_than: datetime, limit: int = ...) -> int: ...


class AlertMetrics(Protocol):
    def alert_delivered(self, *, channel: str, event: str) -> None: ...

    def alert_failed(self, *, channel: str, event: str) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class SenderOptions:
    """How the sender retries (settings `TRIGGERS_ALERT_*`)."""

    interval: timedelta = timedelta(seconds=1)
    deadlines_every: timedelta = timedelta(seconds=5)
    """How often live occurrences are checked against their `late` and `stuck`."""
    attempts: int = 20
    backoff: timedelta = timedelta(seconds=2)
    max_backoff: timedelta = timedelta(seconds=60)
    lease: timedelta = timedelta(minutes=2)
    batch: int = 500
    """Alerts leased per round: a round's answers and the next round's lease are one
    transaction, so a thousand alerts cost three write transactions, not twenty."""
    retention: timedelta = timedelta(days=30)
    """Delivered and failed alerts are kept this long (the ledger's `fire_retention`)."""
    prune_every: timedelta = timedelta(hours=1)


class AlertSender:
    """Delivers the outbox's alerts on one thread until `stop` is set."""

    def __init__(
        self,
        outbox: AlertOutbox,
        *,
        clock: Clock,
        owner: str,
        smtp: SmtpServer,
        options: SenderOptions,
        metrics: AlertMetrics | None = None,
    ) -> None:
        self._outbox = outbox
        self._clock = clock
        self._owner = owner
        self._smtp = smtp
        self._options = options
        self._metrics = metrics
        self._wake = threading.Event()
        self._deadlines_at: datetime | None = None
        self._prune_at: datetime | None = None
        self._http = WebhookClient()

    def wake(self) -> None:
        """Look at the outbox now rather than at the next interval."""
        self._wake.set()

    def run(self, stop: threading.Event) -> None:
        """Deliver until `stop` is set; a store error is logged and retried next round."""
        while not stop.is_set():
            try:
                busy = self.deliver_due(stop)
            except StoreError as exc:
                log.warning("alert_delivery_paused", error_code=exc.code, error=exc.message)
                busy = False
            if busy:
                continue
            # Until the next interval, or sooner when settlements may have raised alerts
            # (`wake`); a stop is seen at the next interval at the latest.
            self._clock.wait(self._options.interval.total_seconds(), self._wake)
            self._wake.clear()
        self._http.close()

    def deliver_due(self, stop: threading.Event) -> bool:
        """Deliver the alerts due now, round after round; True when it stopped with
        more to send (the caller looks again at once).

        Nothing is leased (no write transaction) while nothing is due. Each round's
        answers are recorded in the transaction that leases the next round: a crash
        before it re-sends them under the same ids, which receivers drop."""
        now = self._clock.now()
        if self._deadlines_at is None or now >= self._deadlines_at:
            self._deadlines_at = now + self._options.deadlines_every
            self._outbox.check_deadlines(now=now)
        if self._prune_at is None or now >= self._prune_at:
            self._prune_at = now + self._options.prune_every
            pruned = self._outbox.prune(older_than=now - self._options.retention)
            if pruned:
                log.info("alerts_pruned", rows=pruned)
        options = self._options
        if not self._outbox.due(owner=self._owner, now=now, limit=options.batch):
            return False
        # Back to the deadline checks (and a fresh look) after a while of steady sending.
        until = now + options.deadlines_every
        taken = self._outbox.claim(
            owner=self._owner, now=now, lease=options.lease, limit=options.batch
        )
        while taken:
            attempts = self._round(taken, stop, until=now + options.lease / 2)
            now = self._clock.now()
            if stop.is_set() or now >= until:
                self._outbox.record_all(attempts, owner=self._owner)
                return not stop.is_set()
            taken = self._outbox.exchange(
                attempts, owner=self._owner, now=now, lease=options.lease, limit=options.batch
            )
        return False

    def _round(
        self, taken: Sequence[AlertRecord], stop: threading.Event, *, until: datetime
    ) -> list[Attempt]:
        """Deliver the leased alerts in order, within their lease; the ones left
        (stopped, out of time, or behind a failed one of their channel) stay leased
        to this sender, and the next round takes them first."""
        failed_channels: set[str] = set()
        attempts: list[Attempt] = []
        for record in taken:
            if stop.is_set() or self._clock.now() >= until:
                break
            if record.channel in failed_channels:
                continue  # its predecessor is retried first: the channel keeps its order
            attempt = self._deliver(record)
            attempts.append(attempt)
            if not attempt.delivered:
                failed_channels.add(record.channel)
        return attempts

    def _deliver(self, record: AlertRecord) -> Attempt:
        answer = deliver(record.destination, record.payload, smtp=self._smtp, http=self._http)
        now = self._clock.now()
        attempt = record.attempts + 1
        bound = {"alert_id": record.alert_id, "channel": record.channel, "attempt": attempt}
        if answer.delivered:
            log.info("alert_delivered", trigger_id=record.trigger_id, **bound)
            if self._metrics is not None:
                self._metrics.alert_delivered(channel=record.channel, event=record.event)
            return Attempt(record=record, at=now, delivered=True, response=answer.detail)
        retry_at = None
        if answer.retryable and attempt < self._options.attempts:
            backoff = min(self._options.backoff * 2 ** (attempt - 1), self._options.max_backoff)
            retry_at = now + backoff
        if retry_at is None:
            log.error("alert_failed", trigger_id=record.trigger_id, error=answer.detail, **bound)
            if self._metrics is not None:
                self._metrics.alert_failed(channel=record.channel, event=record.event)
        else:
            log.warning(
                "alert_retried",
                trigger_id=record.trigger_id,
                error=answer.detail,
                retry_at=retry_at.isoformat(),
                **bound,
            )
        return Attempt(
            record=record, at=now, delivered=False, error=answer.detail, retry_at=retry_at
        )


class HeartbeatPinger:
    """Pings an outside monitor (`TRIGGERS_HEARTBEAT_URL`) while the daemon is healthy.

    Healthchecks.io and Cronitor style: a GET of the URL every `interval` while ticks
    progress, of `URL/fail` while they do not; a dead daemon stops pinging, which is
    what the monitor notices. Runs on its own thread: a slow monitor delays nothing."""

    def __init__(
        self,
        url: str,
        *,
        interval: timedelta,
        clock: Clock,
        healthy: Callable[[], bool],
        timeout: timedelta = DEFAULT_TIMEOUT,
    ) -> None:
        self._url = url
        self._interval = interval
        self._clock = clock
        self._healthy = healthy
        self._timeout = timeout

    def run(self, stop: threading.Event) -> None:
        """Ping until `stop` is set; a failed ping is logged and the next one tried."""
        while not stop.is_set():
            self.ping()
            if self._clock.wait(self._interval.total_seconds(), stop):
                return

    def ping(self) -> bool:
        """One ping (`/fail` when unhealthy); True when the monitor answered 2xx."""
        healthy = self._healthy()
        target = self._url if healthy else self._url.rstrip("/") + "/fail"
        import httpx  # noqa: PLC0415 - only a daemon with a heartbeat URL loads it

        try:
            response = httpx.get(target, timeout=self._timeout.total_seconds())
        except httpx.HTTPError as exc:
            log.warning("heartbeat_ping_failed", healthy=healthy, error=type(exc).__name__)
            return False
        if not response.is_success:
            log.warning(
                "heartbeat_ping_failed", healthy=healthy, error=f"HTTP {response.status_code}"
            )
            return False
        return True
