"""Daemon and CLI settings: environment (`TRIGGERS_*`), then CLI flags on top.

Built only by the composition roots (`cli.py`, `daemon.py`); code below them
takes keyword parameters. Invalid values raise ConfigError (exit 78), so systemd
does not restart-loop on a typo in the environment file.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

import platformdirs
from pydantic import (
    AfterValidator,
    BeforeValidator,
    ByteSize,
    Field,
    SecretStr,
    ValidationError,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from triggers.addresses import parse_address
from triggers.durations import parse_duration
from triggers.errors import ConfigError
from triggers.locations import DatabaseLocation, Environment, locate_database
from triggers.scheduler.options import SchedulerOptions


def _duration(value: Any) -> Any:
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return parse_duration(value)
    return value


Duration = Annotated[timedelta, BeforeValidator(_duration)]
"""A duration setting: `90s`, `5m`, `1h30m`, ... (the grammar of `triggers.durations`)."""


def _unset_if_empty(value: Any) -> Any:
    # `TRIGGERS_API_ADDRESS=` in an environment file means off, as if it were absent.
    return None if isinstance(value, str) and not value.strip() else value


def _address(value: str | None) -> str | None:
    if value is not None:
        parse_address(value)  # raises ValueError, which names the expected form
    return value


Address = Annotated[str | None, BeforeValidator(_unset_if_empty), AfterValidator(_address)]
"""`host:port` to listen on, or `:port` for loopback (`triggers.addresses`); empty: off."""
OptionalPath = Annotated[Path | None, BeforeValidator(_unset_if_empty)]

_SCHEDULER_DEFAULTS = {field.name: field.default for field in dataclasses.fields(SchedulerOptions)}


def _scheduler_default(name: str) -> Any:
    """The scheduler's own default for the setting of the same name."""
    return _SCHEDULER_DEFAULTS[name]


class Settings(BaseSettings):
    """Every setting, with its `TRIGGERS_` environment variable."""

    model_config = SettingsConfigDict(
        env_prefix="TRIGGERS_", env_nested_delimiter="__", extra="ignore", frozen=True
    )

    database_url: SecretStr | None = None
    """None: the embedded SQLite file `triggers.sqlite` in the state directory."""
    config: Path | None = None
    """The declarations file the daemon applies at start and on SIGHUP."""
    state_directory: Path | None = None
    """Where the embedded database lives; default `$STATE_DIRECTORY` or a per-user dir."""
    log_format: Literal["json", "console"] | None = None
    """None: JSON lines unless stderr is a terminal."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    host: str = Field(default_factory=socket.gethostname, min_length=1, max_length=200)
    concurrency: int = Field(default=_scheduler_default("concurrency"), ge=1, le=256)
    """Launch and inspection calls in flight at once."""
    workers: int = Field(default=16, ge=1, le=1024)
    """Runtime worker threads (the threads that drive runs)."""
    worker_processes: int = Field(default_factory=lambda: os.cpu_count() or 1, ge=0, le=256)
    """Worker processes Python steps and Python flows run in; 0: the daemon's own threads."""
    worker_max_rss: ByteSize | None = None
    """A worker process whose resident memory passed this after a task is replaced."""
    worker_max_tasks: int | None = Field(default=None, ge=1)
    """A worker process that ran this many tasks (steps, flow sessions) is replaced."""
    poll_interval: Duration = _scheduler_default("poll_interval")
    """Longest sleep between ticks, to see other daemons' and operators' changes."""
    fire_retention: Duration = _scheduler_default("fire_retention")
    heartbeat_retention: Duration = _scheduler_default("heartbeat_retention")
    """Daemons silent for this long are dropped from `status` (their heartbeat deleted)."""
    lease: Duration = _scheduler_default("lease")
    """How long a claimed launch stays reserved before another daemon may retry it."""
    start_timeout: Duration = _scheduler_default("start_timeout")
    inspect_timeout: Duration = _scheduler_default("inspect_timeout")
    cancel_timeout: Duration = _scheduler_default("cancel_timeout")
    run_poll_interval: Duration = _scheduler_default("run_poll_interval")
    """How often active runs are inspected when the runtime does not report first."""
    shutdown_grace: Duration = _scheduler_default("shutdown_grace")
    owner_lease: Duration = _scheduler_default("owner_lease")
    """How long a daemon that stopped (on another host) keeps its runs and launch
    reservations before a live one takes them; on the same host, at once."""
    run_retention: Duration | None = timedelta(days=30)
    """Settled runs older than this are purged (their key stays taken); None: kept."""
    trim_events: bool = False
    """Delete a run's events behind its snapshots (`runs events` then starts later)."""
    metrics_address: Address = None
    """`host:port` (or `:port`, loopback) to serve Prometheus metrics on; None: off."""
    api_address: Address = None
    """`host:port` (or `:port`, loopback) to serve the HTTP API on; None: off."""
    api_token_file: OptionalPath = None
    """The bearer tokens every API request needs: one a line, optionally `NAME TOKEN`."""
    api_write_token_file: OptionalPath = None
    """Tokens that may also change things; with it, those of `api_token_file` only read."""
    sqlite_synchronous: Literal["FULL", "NORMAL"] = "FULL"
    smtp_host: str | None = None
    """The SMTP server email alerts go through; None: email channels fail to deliver."""
    smtp_port: int = Field(default=587, ge=1, le=65535)
    smtp_user: str | None = None
    smtp_password: SecretStr | None = None
    smtp_password_file: OptionalPath = None
    """A file holding the SMTP password (better than `TRIGGERS_SMTP_PASSWORD`)."""
    smtp_from: str = "triggers@localhost"
    smtp_tls: Literal["starttls", "ssl", "none"] = "starttls"
    smtp_ca_file: OptionalPath = None
    """The certificates (PEM) the SMTP server's is checked against; None: the system's."""
    alert_attempts: int = Field(default=20, ge=1, le=1000)
    """Delivery attempts of one alert before it is recorded `failed`."""
    alert_backoff: Duration = timedelta(seconds=2)
    """The wait after a first failed delivery; it doubles up to `alert_max_backoff`."""
    alert_max_backoff: Duration = timedelta(seconds=60)
    heartbeat_url: str | None = None
    """An outside monitor's ping URL (Healthchecks.io, Cronitor): GET while ticks
    progress, `/fail` appended while they do not; None: no pings."""
    heartbeat_url_interval: Duration = timedelta(seconds=60)
    """How often `TRIGGERS_HEARTBEAT_URL` is pinged."""

    def scheduler_options(self, *, owner: str, version: str) -> SchedulerOptions:
        """The scheduler's options: every setting that shares a name with one, by name."""
        values = {name: getattr(self, name) for name in SCHEDULER_SETTINGS}
        return SchedulerOptions(owner=owner, version=version, **values)

    def resolved_state_directory(self) -> Path:
        if self.state_directory is not None:
            return self.state_directory
        systemd_state = os.environ.get("STATE_DIRECTORY")
        if systemd_state:
            # systemd may pass several, colon-separated; the first is ours.
            return Path(systemd_state.split(":")[0])
        return Path(platformdirs.user_data_dir("triggers"))

    def database_location(self) -> DatabaseLocation:
        """The database these settings name, found as `triggers.locations` says.

        Raises:
            ConfigError: the URL is not one, or names an unsupported database.
        """
        url = self.database_url.get_secret_value() if self.database_url else None
        return locate_database(
            Environment.load(read_file=False),
            url=url,
            url_source="TRIGGERS_DATABASE_URL",
            state_directory=self.state_directory,
        )

    def resolved_database_url(self) -> str:
        """The database URL, creating the state directory for the embedded default."""
        location = self.database_location()
        if location.embedded and location.sqlite_path is not None:
            location.sqlite_path.parent.mkdir(parents=True, exist_ok=True)
        return location.url

    def redacted_database_url(self) -> str:
        """The URL with any password hidden, for logs and `status`."""
        return self.database_location().redacted


SCHEDULER_SETTINGS = tuple(name for name in _SCHEDULER_DEFAULTS if name in Settings.model_fields)
"""The settings that are scheduler options too (same name, same meaning, same default)."""


def load_settings(*, env_file: Path | None = None, **overrides: Any) -> Settings:
    """Settings from the environment with `overrides` (CLI flags) on top.

    `env_file` (the service's environment file) supplies the variables the
    environment does not set, as systemd's `EnvironmentFile=` does for the daemon.

    Raises:
        ConfigError: a value is invalid; the message names the variable.
    """
    given = {key: value for key, value in overrides.items() if value is not None}
    try:
        return Settings(**given, _env_file=env_file)
    except ValidationError as exc:
        problems = [
            f"TRIGGERS_{'__'.join(str(p) for p in error['loc']).upper()}: {error['msg']}"
            for error in exc.errors()
        ]
        raise ConfigError("invalid settings: " + "; ".join(problems), problems=problems) from exc


WITHHELD_PREFIXES = ("TRIGGERS_", "PG")
"""Variables steps never get from the daemon: its settings (the database URL, the
token files' paths) and libpq's, which reach the daemon's own database."""
WITHHELD_NAMES = frozenset(
    {
        "NOTIFY_SOCKET",  # a step must not report readiness or status as the daemon
        "WATCHDOG_USEC",
        "WATCHDOG_PID",
        "LISTEN_FDS",
        "LISTEN_PID",
        "LISTEN_FDNAMES",
        "CREDENTIALS_DIRECTORY",  # the daemon's credentials (`LoadCredential=`)
    }
)
"""Service-manager plumbing meant for the daemon alone, and its credentials."""


def step_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment command steps start from, and that the supervisor and the
    worker processes run with: the daemon's (PATH, HOME, LANG, USER, TZ, the unit's
    own `Environment=`) without its settings, credentials and service plumbing."""
    return {
        name: value
        for name, value in environ.items()
        if name not in WITHHELD_NAMES and not name.startswith(WITHHELD_PREFIXES)
    }
